"""display(): hostile names become printable, unambiguous text."""

from __future__ import annotations

import os
import random
import re

import pytest

from assure.textsafe import display


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("plain/path.txt", "plain/path.txt"),
        ("héllo wörld/日本語/Ελληνικά", "héllo wörld/日本語/Ελληνικά"),
        ("back\\slash", "back\\\\slash"),
        ("line\nbreak\ttab\rcr", "line\\nbreak\\ttab\\x0dcr"),
        ("\x00nul\x7fdel", "\\x00nul\\x7fdel"),
        ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
        ("\x9b2J csi \x85 nel", "\\u009b2J csi \\u0085 nel"),
        ("a\u2028b\u2029c", "a\\u2028b\\u2029c"),
        ("evil\u202etxt.exe", "evil\\u202etxt.exe"),
        ("\u202a\u202b\u202c\u202d", "\\u202a\\u202b\\u202c\\u202d"),
        ("\u2066\u2067\u2068\u2069", "\\u2066\\u2067\\u2068\\u2069"),
        ("zero\u200bwidth\u200f", "zero\\u200bwidth\\u200f"),
        ("tag\U000e0041", "tag\\U000e0041"),
        ("lone\ud800", "lone\\ud800"),
        (os.fsdecode(b"bad\xff\x80utf8"), "bad\\xff\\x80utf8"),
        ("", ""),
    ],
)
def test_display_escapes_exactly(name: str, shown: str) -> None:
    assert display(name) == shown


def test_output_has_no_unprintable_character() -> None:
    every_bmp = "".join(chr(code) for code in range(0x10000))
    assert display(every_bmp).isprintable()


def test_surrogate_escaped_byte_and_c1_character_stay_apart() -> None:
    raw_byte = os.fsdecode(b"\x9b")  # U+DC9B
    c1_char = "\x9b"  # U+009B, UTF-8 b"\xc2\x9b"
    assert (display(raw_byte), display(c1_char)) == ("\\x9b", "\\u009b")


_ESCAPE = re.compile(r"\\(?:(\\)|(n)|(t)|x([0-9a-f]{2})|u([0-9a-f]{4})|U([0-9a-f]{8}))")


def _undisplay(shown: str) -> str:
    """Reader of display()'s grammar, kept here to prove that the grammar is unambiguous."""

    def one(match: re.Match[str]) -> str:
        backslash, newline, tab, byte, bmp, astral = match.groups()
        if byte is not None:
            code = int(byte, 16)
            return chr(code) if code < 0x80 else chr(0xDC00 + code)
        if bmp or astral:
            return chr(int(bmp or astral, 16))
        return "\\" if backslash else "\n" if newline else "\t"

    return _ESCAPE.sub(one, shown)


def test_display_is_reversible() -> None:
    rng = random.Random(7)
    alphabet = (
        "ab\\nxu\n\t\x1b\x7f\x85\x9b\u2028\u202e\u2066é日\U000e0041\U0001f600\ud800\udc9b\udcff"
    )
    names = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(12))) for _ in range(2000)]
    assert [_undisplay(display(name)) for name in names] == names
