import pytest

from assure.core.globs import match, names_folder


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


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("out/**", "out", True),
        ("out/sub/**", "out", True),
        ("out/sub/**", "out/sub", True),
        ("out/sub/**", "out/other", False),
        ("out/*.txt", "out", True),
        ("src/*/gen/**", "src/pkg", True),
        ("**/x", "anything", False),  # no literal prefix: names no folder
        ("a/**/b/**", "a/c", False),  # not past the first **
        ("*.py", "src", False),
        ("out", "out", False),  # a pattern for one name needs no folder of that name
        ("fs:out/**", "fs:out", True),  # a contract's scope, as the promote gate matches it
    ],
)
def test_names_folder(pattern, path, expected):
    assert names_folder(pattern, path) is expected
