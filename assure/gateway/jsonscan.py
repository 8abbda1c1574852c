"""A cheap pre-scan of a JSON body: refuse deep nesting and huge element counts unparsed.

`json.loads` turns 8 MB of `[{},{},...]` into ~200 MB of Python objects, enough to get the
gateway OOM-killed between an effect and its journal line. The scan drops string contents
with bytes operations (escaped backslashes, then escaped quotes, then everything between
quotes), counts the structural bytes that are left (each `[`, `{` and `,` is one element),
and walks the brackets for the depth only once the count is within bounds: a few passes
in C over the body, and a Python loop over at most 2 x max_items brackets.
Standard library only: this module runs inside the gateway image.
"""

from __future__ import annotations

_NOT_BRACKETS = bytes(range(256)).translate(
    None, b"[]{}"
)  # deleted, so that only brackets are left


def too_complex(body: bytes, max_depth: int, max_items: int) -> str | None:
    """Why `body` would be too costly to parse, or None. Malformed JSON passes (the parser refuses
    it)."""
    # In valid JSON a backslash only appears inside a string and starts a two-byte escape, so
    # removing `\\` pairs and then `\"` leaves every remaining quote a string delimiter.
    unescaped = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    structure = b"".join(unescaped.split(b'"')[::2])  # outside strings only
    items = structure.count(b",") + structure.count(b"[") + structure.count(b"{")
    if items > max_items:
        return f"JSON has more than {max_items} elements"
    brackets = structure.translate(None, _NOT_BRACKETS)
    if len(brackets) > 2 * max_items:  # valid JSON closes only what it opened (counted above)
        return f"JSON has more than {max_items} elements"
    depth = 0
    for char in brackets:
        depth += 1 if char in b"[{" else -1
        if depth > max_depth:
            return f"JSON nests deeper than {max_depth} levels"
    return None
