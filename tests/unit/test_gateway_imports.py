"""The agent and gateway images carry a few of the package's files and no pip packages beyond
their pinned requirements: each shipped module imports only the standard library, the
image's requirements, and the other modules shipped in the same image (images.IMAGE_SOURCES)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from assure.sandbox.docker.images import IMAGE_DIRS, IMAGE_SOURCES, PACKAGE_DIR


def shipped(role: str) -> list[Path]:
    return sorted({path for pattern in IMAGE_SOURCES[role] for path in PACKAGE_DIR.glob(pattern)})


def module_name(path: Path) -> str:
    parts = ("assure",) + path.relative_to(PACKAGE_DIR).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def requirements(role: str) -> set[str]:
    file = IMAGE_DIRS[role] / "requirements.txt"
    lines = file.read_text().splitlines() if file.is_file() else []
    return {m[1].lower() for line in lines if (m := re.match(r"^([A-Za-z0-9_.-]+)==", line))}


def imported_modules(path: Path) -> set[str]:
    package = (
        module_name(path) if path.name == "__init__.py" else module_name(path).rsplit(".", 1)[0]
    )
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            names.add(base)
            names.update(
                f"{base}.{alias.name}"
                for alias in node.names
                if f"{base}.{alias.name}" in ALL_SHIPPED
            )
    return names


ALL_SHIPPED = {module_name(p) for role in IMAGE_SOURCES for p in shipped(role)}
CASES = [(role, path) for role in IMAGE_SOURCES for path in shipped(role)]


@pytest.mark.parametrize(
    ("role", "path"), CASES, ids=[f"{r}:{p.relative_to(PACKAGE_DIR)}" for r, p in CASES]
)
def test_a_shipped_module_imports_only_what_its_image_carries(role: str, path: Path) -> None:
    own = {module_name(p) for p in shipped(role)}
    third_party = requirements(role)
    for name in imported_modules(path):
        top = name.split(".")[0]
        allowed = (
            top == "__future__"
            or top in sys.stdlib_module_names
            or name in own
            or top.lower() in third_party
        )
        assert allowed, (
            f"{path.relative_to(PACKAGE_DIR)} (shipped in the {role} image) imports {name}, which"
            " that image does not carry"
        )


def test_every_image_ships_the_package_root_and_the_gateway_ships_the_core() -> None:
    gateway = {module_name(p) for p in shipped("gateway")}
    assert {
        "assure",
        "assure.core",
        "assure.core.gate",
        "assure.core.chain",
        "assure.gateway.server",
    } <= gateway
    assert "assure.client" in {module_name(p) for p in shipped("agent")}
