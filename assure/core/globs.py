"""Workspace glob patterns, one meaning everywhere (gateway, verifier, docs).

`*` and `?` stay inside one path segment; `**` spans segments (`src/**` is everything
under `src`, `**/*.py` is every Python file). Paths are workspace-relative with `/`.
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
