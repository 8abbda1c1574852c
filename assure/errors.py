"""One error tree. Each error can explain itself to a user: what went wrong, where, how to fix.

Only the CLI turns these into exit codes and colours; library code raises them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from assure.textsafe import display


class AssureError(Exception):
    """Base of every error assure raises on purpose."""

    def __init__(self, message: str, *, where: str | None = None, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where
        self.fix = fix

    def explain(self) -> str:
        lines = [f"{self.where}: {self.message}" if self.where else self.message]
        if self.fix:
            lines.append(f"fix: {self.fix}")
        return "\n".join(lines)


class SpecError(AssureError):
    """A spec file is unreadable or does not match specs/spec.schema.json."""

    def __init__(self, problems: list[str], *, fix: str | None = None):
        super().__init__("\n".join(problems), fix=fix)
        self.problems = problems


class SandboxError(AssureError):
    """Docker refused or failed an operation; the cause is kept as __cause__."""


class ImageError(AssureError):
    """A base, agent or gateway image is missing or could not be built."""


class RunDirError(AssureError):
    """A run directory is missing, incomplete or was changed after the run."""


def describe(exc: Exception) -> str:
    """One line for a failure that reaches a verdict: ours say what went wrong; anything else
    is a bug, named by its type (its text may carry agent-controlled names: escaped and cut)."""
    if isinstance(exc, AssureError):
        return exc.message
    return f"{type(exc).__name__}: {display(str(exc))[:2000]}"


def unreadable(exc: OSError | UnicodeDecodeError) -> str:
    """Why a file could not be read, in words (never a Python repr of the error)."""
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
    if isinstance(exc, IsADirectoryError):
        return "is a folder, not a file"
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, NotADirectoryError):
        return "a part of the path is not a folder"
    if isinstance(exc, PermissionError):
        return "permission denied"
    return exc.strerror or type(exc).__name__


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise RunDirError(
            f"missing {path.name}",
            where=str(path),
            fix="is this a run directory made by `assure run`?",
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise RunDirError(f"unreadable {path.name}: {unreadable(exc)}", where=str(path)) from exc
    except ValueError as exc:
        raise RunDirError(f"unreadable {path.name}: not JSON ({exc})", where=str(path)) from exc
    except RecursionError:  # `[[[[...` nested deeper than the parser goes: hostile, never a crash
        raise RunDirError(f"unreadable {path.name}: nested too deeply", where=str(path)) from None
