"""The `assure` command line: parse, call the library once, render. Nothing else lives here.

One module per command group; `output` prints, `common` holds what the groups share, `root`
the root `app` (the console script `assure = assure.cli:app`), whose group (`listing`) imports a
command's module only when that command is used: `--version` and `--help` import none."""

from __future__ import annotations

from typing import Any

from assure.cli.listing import escape_markup
from assure.cli.root import app

__all__ = [
    "DEFAULT_SPEC",
    "EXIT",
    "EXIT_HARNESS",
    "EXIT_UNEXPECTED",
    "FOLD_ROOM",
    "app",
    "escape_markup",
    "main",
]


def __getattr__(name: str) -> Any:
    """The constants callers take from here, from the modules that hold them, on first use."""
    if name in ("DEFAULT_SPEC", "EXIT", "EXIT_HARNESS", "EXIT_UNEXPECTED"):
        from assure.cli import common

        return getattr(common, name)
    if name == "FOLD_ROOM":
        from assure.cli.output import FOLD_ROOM

        return FOLD_ROOM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:  # pragma: no cover - console entry point
    app()
