"""`assure --help` from a copy of what typer printed for it before, without importing typer or
rich (issue 25: `--help` <= 0.15 s, and typer and rich alone are about 0.1 s).

The copy is keyed on everything that output can depend on: the argv, the python, the
stdout encoding, the kind and size of each standard stream, the environment variables rich,
typer and click read, and the size, time and inode of every source file of assure.cli, typer
and rich. Any change is another key, so a miss (typer prints, and its output is kept), never
a stale help. A copy is checked against its whole key before it is used."""

from __future__ import annotations

import os
import sys
import zlib
from typing import Any

# what rich, typer and click read from the environment (a completion request is `_..._COMPLETE`)
_NAMES = {"COLUMNS", "LINES", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "PY_COLORS", "LANG"}
_NAMES |= {"GITHUB_ACTIONS", "DATABRICKS_RUNTIME_VERSION", "UNICODE_VERSION", "LANGUAGE"}
_PREFIXES = ("_", "TERM", "CLICOLOR", "TTY_", "JUPYTER_", "TYPER_", "PYTHON", "LC_", "COMP_")


def _cache() -> str:
    # as images.CACHE (not imported: it imports what this module is here to avoid)
    root = os.environ.get("ASSURE_CACHE") or os.path.expanduser("~/.cache/assure")
    return os.path.join(root, "help")


def _sources() -> list[str]:
    """The folders whose .py files make the help: assure.cli's and assure's, and typer's,
    click's and rich's as this python finds them (none when one is not found: no copy then)."""
    import importlib.machinery

    here = os.path.dirname(os.path.abspath(__file__))
    found = [here, os.path.dirname(here)]
    for package in ("typer", "rich"):
        spec = importlib.machinery.PathFinder.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            return []
        found.append(next(iter(spec.submodule_search_locations)))
    found.append(os.path.join(found[-2], "_click"))
    return found


def key(args: list[str]) -> str | None:
    """Everything the output of `assure ARGS` may depend on, as one line; None if unknown."""
    folders = _sources()
    if not folders:
        return None
    parts: list[Any] = [sys.argv[0], args, sys.executable, sys.version, sys.flags.utf8_mode]
    parts += [getattr(sys.stdout, "encoding", None), getattr(sys.stdout, "errors", None)]
    for fd in (0, 1, 2):
        try:
            parts.append(os.get_terminal_size(fd) if os.isatty(fd) else os.isatty(fd))
        except OSError as exc:
            parts.append(exc.errno)
    env = os.environ
    # `_` is the shell's last argument: no reader's
    named = (n for n in env if n != "_" and (n in _NAMES or n.startswith(_PREFIXES)))
    parts.append(sorted((n, env[n]) for n in named))
    for folder in folders:
        try:
            files = sorted(
                (e for e in os.scandir(folder) if e.name.endswith(".py")), key=lambda e: e.name
            )
        except OSError:
            return None
        for e in files:
            st = e.stat()
            parts.append((e.path, st.st_size, st.st_mtime_ns, st.st_ino))
    return repr(parts).replace("\n", "\\n")


def _file(line: str) -> str:
    name = f"{zlib.crc32(line.encode()):08x}-{zlib.adler32(line.encode()):08x}.txt"
    return os.path.join(_cache(), name)


def answer(line: str) -> bool:
    """Print the kept help for `line`, if there is one that was kept under this very key."""
    try:
        with open(_file(line), encoding="utf-8", newline="") as f:
            kept = f.read()
    except (OSError, UnicodeError):
        return False
    stored, sep, text = kept.partition("\n")
    if not sep or stored != line:
        return False
    sys.stdout.write(text)
    sys.stdout.flush()
    return True


class Tee:
    """sys.stdout as it is, keeping a copy of the text written to it; `whole` is False once
    anything could have written past the copy (through its binary buffer)."""

    def __init__(self, real: Any) -> None:
        self.real, self.whole = real, True
        self.written: list[str] = []

    def write(self, text: str) -> int:
        done = int(self.real.write(text))  # click probes with b"": refused there, as before
        self.written.append(text)
        return done

    def __getattr__(self, name: str) -> Any:
        if name == "buffer":
            self.whole = False
        return getattr(self.real, name)


def keep(line: str, text: str) -> None:
    """Keep `text` under `line`, written whole or not at all; a cache that cannot be written is
    no error (the next --help is typer's again)."""
    target = _file(line)
    part = f"{target}.{os.getpid()}.part"
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(part, "w", encoding="utf-8", newline="") as f:
            f.write(f"{line}\n{text}")
        os.replace(part, target)
    except (OSError, UnicodeError):
        pass


def record(line: str | None, app: Any) -> None:
    """`app` as the console script runs it, its help kept under `line` when it exits 0 having
    written it."""
    tee = Tee(sys.stdout)
    sys.stdout = tee
    try:
        app()
    except SystemExit as exc:
        if line is not None and exc.code in (0, None) and tee.written and tee.whole:
            keep(line, "".join(tee.written))
        raise
    finally:
        sys.stdout = tee.real
