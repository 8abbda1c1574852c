"""The HTML page of an attempt's changes: hostile names come out as text, never as markup."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from assure.records.report import render_changes_html

EVIL = "<script>alert(1)</script>\n\x1b[31m\u202e\udcff"


def verdict() -> dict:
    return {
        "verdict": "breach",
        "changes": [
            {"path": EVIL, "kind": "added", "fields": []},
            {"path": "src/calc.py", "kind": "modified", "fields": ["content", "mode"]},
        ],
        "findings": [
            {
                "kind": "unattributed",
                "severity": "breach",
                "subject": EVIL,
                "message": f"added file {EVIL}",
                "attribution": None,
            },
            {
                "kind": "attributed",
                "severity": "info",
                "subject": "src/calc.py",
                "message": "modified",
                "attribution": 'gateway:"a1"',
            },
        ],
    }


class Cells(HTMLParser):
    """Every tag and every table cell's text, as a browser would parse them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.cells: list[str] = []
        self.inside = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        self.inside = tag == "td"
        if self.inside:
            self.cells.append("")

    def handle_endtag(self, tag: str) -> None:
        self.inside = self.inside and tag != "td"

    def handle_data(self, data: str) -> None:
        if self.inside:
            self.cells[-1] += data


def test_hostile_names_are_cell_text_escaped_for_the_eye() -> None:
    page = render_changes_html("run <1>", verdict())
    parsed = Cells()
    parsed.feed(page)

    assert "script" not in parsed.tags and "<title>run &lt;1&gt;</title>" in page
    shown = "<script>alert(1)</script>\\n\\x1b[31m\\u202e\\xff"
    assert parsed.cells[:4] == ["added", shown, "", "unattributed"]
    assert parsed.cells[4:8] == ["modified", "src/calc.py", "content, mode", 'gateway:"a1"']
    assert f"added file {shown}" in parsed.cells
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\ud800-\udfff]", page)


def test_an_attempt_without_changes_says_none() -> None:
    page = render_changes_html("r", {"verdict": "pass", "changes": [], "findings": []})
    assert page.count("<p>none</p>") == 2 and 'class="ok">pass<' in page
