r"""Make a hostile file name safe to print in a terminal, a JSON document or an HTML page.

`display` escapes every character that could move the cursor, reorder text, hide text or
break a line, and leaves printable text (including non-ASCII letters) as it is. The escapes
form an unambiguous grammar, since every backslash in the output starts one of them:

    \\          a backslash
    \n  \t      newline, tab
    \xNN        NN < 80: that C0 control character or DEL;
                NN >= 80: the raw byte NN of an invalid UTF-8 name (os.fsdecode's
                surrogateescape turned it into U+DC80..U+DCFF; os.fsencode gives it back)
    \uXXXX      any other non-printable BMP character: C1 controls (incl. CSI U+009B),
                line/paragraph separators, bidi controls and marks, zero-width and other
                format characters, unpaired surrogates, unassigned and private-use code points
    \UXXXXXXXX  the same outside the BMP (e.g. the invisible tag characters U+E0000..)

"Printable" is `str.isprintable()`: letters, marks, digits, punctuation, symbols and the
ASCII space. HTML escaping of < > & is the renderer's job.
"""

from __future__ import annotations

_NAMED = {"\\": "\\\\", "\n": "\\n", "\t": "\\t"}
_SURROGATE_ESCAPE_FIRST, _SURROGATE_ESCAPE_LAST = 0xDC80, 0xDCFF


def display(name: str) -> str:
    """Return `name` with every unsafe character escaped (see the module docstring)."""
    if name.isprintable() and "\\" not in name:
        return name
    return "".join(c if c.isprintable() and c != "\\" else _escape(c) for c in name)


def _escape(c: str) -> str:
    named = _NAMED.get(c)
    if named is not None:
        return named
    code = ord(c)
    if code < 0x80:
        return f"\\x{code:02x}"
    if _SURROGATE_ESCAPE_FIRST <= code <= _SURROGATE_ESCAPE_LAST:
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


AGENT_QUOTE_CHARS = 60  # characters of one agent-supplied string a one-line headline quotes


def agent_quoted(text: str, *, shown: bool = False) -> str:
    """An agent-supplied string as a headline carries it: escaped (`display`, unless `shown`
    says it already is), cut to AGENT_QUOTE_CHARS, in double quotes and marked `agent:`, so
    that no reader takes the agent's words for the harness's own."""
    text = text if shown else display(text)
    cut = text if len(text) <= AGENT_QUOTE_CHARS else text[: AGENT_QUOTE_CHARS - 1] + "…"
    return 'agent:"' + cut.replace('"', '\\"') + '"'
