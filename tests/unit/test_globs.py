import pytest

from assure.core.globs import match


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("out/**", "out/a.txt", True),
        ("out/**", "out/deep/er/a.txt", True),
        ("out/**", "outside.txt", False),
        ("*.md", "README.md", True),
        ("*.md", "docs/README.md", False),
        ("**/*.md", "docs/README.md", True),
        ("**/*.md", "README.md", True),
        ("src/?.py", "src/a.py", True),
        ("src/?.py", "src/ab.py", False),
        ("tests/**", "tests", False),
        ("a.b", "aXb", False),
        ("out/**", "out/new\nline", True),
    ],
)
def test_match(pattern, path, expected):
    assert match(pattern, path) is expected
