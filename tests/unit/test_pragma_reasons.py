"""No `# type: ignore` or `# noqa` without its reason (issue 23 item 6): beside it on its line, or
in the comment line right above it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRAGMA = re.compile(r"#\s*(type:\s*ignore(\[[^\]]*\])?|noqa(:\s*[A-Z0-9, ]+)?)")


def unexplained(text: str) -> list[int]:
    """The lines of `text` whose pragma has no reason beside it or in the comment above it."""
    lines = text.splitlines()
    out = []
    for n, line in enumerate(lines):
        found = PRAGMA.search(line)
        if found is None:
            continue
        beside = line[found.end() :].strip(" -#:()")
        above = lines[n - 1].strip() if n else ""
        if not beside and not (above.startswith("#") and not PRAGMA.search(above)):
            out.append(n + 1)
    return out


def test_every_pragma_of_the_project_says_why() -> None:
    missing = [
        f"{path.relative_to(ROOT)}:{n}"
        for top in ("assure", "tests", "bench")
        for path in sorted((ROOT / top).rglob("*.py"))
        for n in unexplained(path.read_text(encoding="utf-8"))
    ]
    assert missing == []


def test_the_check_finds_a_pragma_without_a_reason() -> None:
    assert unexplained("x = 1  # type: ignore[misc]\n") == [1]
    assert unexplained("y = 2  # noqa: E501\n") == [1]
    assert unexplained("x = 1  # type: ignore[misc]  -- frozen on purpose\n") == []
    assert unexplained("# the stubs lack it\nx = 1  # type: ignore[attr-defined]\n") == []
