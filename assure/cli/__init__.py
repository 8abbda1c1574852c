"""The `assure` command line: parse, call the library once, render. Nothing else lives here.

One module per command group; `output` prints, `common` holds what the groups share, `root`
the root `app`, whose group (`listing`) imports a command's module only when that command is
used. The console script is `main`: it answers a bare `assure --version` before typer is
imported (issue 25); `app` itself is imported on first use, so `import assure.cli` is light."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    "version_line",
]


def __getattr__(name: str) -> Any:
    """The names callers take from here, from the modules that hold them, on first use."""
    if name == "app":
        from assure.cli.root import app

        return app
    if name == "escape_markup":
        from assure.cli.listing import escape_markup

        return escape_markup
    if name in ("DEFAULT_SPEC", "EXIT", "EXIT_HARNESS", "EXIT_UNEXPECTED"):
        from assure.cli import common

        return getattr(common, name)
    if name == "FOLD_ROOM":
        from assure.cli.output import FOLD_ROOM

        return FOLD_ROOM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def version_line() -> str:
    """What `assure --version` prints, here and in root's --version option."""
    from assure import __version__  # pyproject.toml's version is read from it

    return f"assure {__version__}\n"


def main() -> None:
    """The console script. `assure --version` alone prints what root's --version prints, and
    `assure --help` what typer printed for it last in the same setting, without typer (about
    half of those starts, issue 25); anything else is `app`'s."""
    args = sys.argv[1:]
    if args == ["--version"]:
        sys.stdout.write(version_line())
        return
    if args in (["--help"], ["-h"]):  # typer's own help, kept from its last print (fasthelp)
        from assure.cli import fasthelp

        line = fasthelp.key(args)
        if line is not None and fasthelp.answer(line):
            return
        from assure.cli.root import app

        fasthelp.record(line, app)
        return
    from assure.cli.root import app

    app()
