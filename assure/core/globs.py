"""Workspace glob patterns, one meaning everywhere (gateway, verifier, docs).

`*` and `?` stay inside one path segment; `**` spans segments (`src/**` is everything
under `src`, `**/*.py` is every Python file). Paths are workspace-relative with `/`.
`names_folder` says which folders a pattern needs to exist: an allowance for creating them,
which only the granting side (writable, a contract's scope) uses, never `protected`.
Standard library only: this module runs inside the gateway image.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable


@functools.lru_cache(maxsize=512)
def _compile(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out), re.DOTALL)


def match(pattern: str, path: str) -> bool:
    return _compile(pattern).fullmatch(path) is not None


def match_any(patterns: Iterable[str], path: str) -> bool:
    return any(match(p, path) for p in patterns)


def names_folder(pattern: str, path: str) -> bool:
    """Whether `path` is a folder the pattern's leading segments name, up to its first `**`:
    one that must exist for anything the pattern matches (`out/sub/**` names `out` and
    `out/sub`, `out/*.txt` names `out`, `**/x` and `*.py` name none). Callers apply it to
    folders only: a file or a link at that path is not covered."""
    parts = pattern.split("/")
    for end in range(1, len(parts)):
        if "**" in parts[end - 1] or not parts[end - 1]:
            return False
        if match("/".join(parts[:end]), path):
            return True
    return False
