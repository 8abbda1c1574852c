"""The gateway and the client are copied into images with no pip packages: stdlib only."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "assure"
ALLOWED_OWN = {"assure", "assure.chain", "assure.control", "assure.gate", "assure.globs"}
FILES = sorted(PACKAGE.glob("gateway/*.py")) + [PACKAGE / "client.py"]


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                names.add(node.module or "")
            elif path.parent.name == "gateway" and node.level == 1:
                modules = [node.module] if node.module else [alias.name for alias in node.names]
                names.update(f"assure.gateway.{module}" for module in modules)
            else:
                names.add(f"<relative level {node.level}>")
    return names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_imports_only_the_standard_library_and_the_shared_modules(path: Path) -> None:
    for name in imported_modules(path):
        top = name.split(".")[0]
        allowed = top == "__future__" or top in sys.stdlib_module_names or name in ALLOWED_OWN or name.startswith("assure.gateway.")
        allowed = allowed or (path.name == "db.py" and top == "apsw")  # the one package the gateway image installs
        assert allowed, f"{path.name} imports {name}"
