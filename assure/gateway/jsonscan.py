"""A cheap pre-scan of a JSON body: refuse deep nesting and huge element counts unparsed.

`json.loads` turns 8 MB of `[{},{},...]` into ~200 MB of Python objects, enough to get the
gateway OOM-killed between an effect and its journal line. The scan walks the body's
structural characters only (a string is skipped as one regex match, in C), keeps a depth
and a count of elements (every value inside an array or object), and stops at the first
limit crossed, so its cost is bounded by the limits rather than by the body.
Standard library only: this module runs inside the gateway image.
"""

from __future__ import annotations

import re

# A string (escapes included, unrolled so that long strings match fast), or one structural byte.
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]')


def too_complex(body: bytes, max_depth: int, max_items: int) -> str | None:
    """Why `body` would be too costly to parse, or None. Malformed JSON passes (the parser refuses it)."""
    depth = items = 0
    for match in _TOKENS.finditer(body):
        char = match.group()[:1]
        if char in (b"[", b"{"):
            depth += 1
            items += 1
            if depth > max_depth:
                return f"JSON nests deeper than {max_depth} levels"
        elif char in (b"]", b"}"):
            depth -= 1
        elif char == b",":
            items += 1
        if items > max_items:
            return f"JSON has more than {max_items} elements"
    return None
