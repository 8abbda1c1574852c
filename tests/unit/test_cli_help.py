"""Every command's --help as a new user reads it: what a help string says is what is shown (Rich
eats nothing as markup: `needs assure[ray]` once read `needs assure.`), a command's line in its
group's list is one sentence unbroken, and every repository file the help names exists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from rich.text import Text

from tests.unit.test_cli_naming import commands, invoke

ROOT = Path(__file__).resolve().parents[2]
ALL = list(commands())
FILE = re.compile(r"(?<![\w./])((?:assure|specs|suites|fixtures|bench|tests)/[\w./*-]*[\w/*])")


def shown(help_text: str) -> str:
    """What a user should read for `help_text`: the text as written, escapes undone."""
    return re.sub(r"\\(\[)", r"\1", help_text)


def flat(text: str) -> str:
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def helps(command: Any) -> list[str]:
    return [h for h in [command.help, *(getattr(p, "help", None) for p in command.params)] if h]


@pytest.mark.parametrize("path,command", ALL, ids=[" ".join(p) or "assure" for p, _ in ALL])
def test_help_shows_every_string_whole_and_names_only_files_that_exist(
    path: tuple[str, ...], command: Any
) -> None:
    rendered = flat(invoke(*path, "--help", columns=1000).output)
    for help_text in helps(command):
        meant = shown(help_text)
        assert Text.from_markup(help_text).plain == meant, f"markup eaten from {meant!r}"
        first = meant.split("\n\n")[0]
        assert flat(first) in rendered, first
        for name in FILE.findall(meant):
            assert list(ROOT.glob(name.rstrip("/"))), (
                f"{' '.join(path)} names {name}, which does not exist"
            )


def test_conformance_help_lists_every_obligation_id_and_images_promises_only_build() -> None:
    from assure.records.obligations import OBLIGATIONS

    said = flat(invoke("conformance", "--help", columns=1000).output)
    assert all(oid in said for oid in OBLIGATIONS), said
    images = next(g for p, g in ALL if p == ("images",))
    assert set(images.commands) == {"build"} and "inspect" not in (images.help or "")


def test_the_cluster_option_says_what_to_install() -> None:
    assert "needs assure[ray]." in flat(invoke("suite", "--help", columns=1000).output)


@pytest.mark.parametrize(
    "path,group",
    [(p, g) for p, g in ALL if hasattr(g, "commands")],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else "",
)
def test_a_group_lists_each_command_on_one_line(path: tuple[str, ...], group: Any) -> None:
    """A command's first paragraph on its own row, unbroken (a docstring's line breaks once cut it
    mid-sentence)."""
    lines = invoke(*path, "--help", columns=1000).output.splitlines()
    for name, sub in group.commands.items():
        row = next(line for line in lines if line.startswith(f"│ {name} "))
        first = " ".join(shown(sub.help or "").split("\n\n")[0].split())
        assert first in row, (name, row)
