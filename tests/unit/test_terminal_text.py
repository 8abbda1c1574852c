"""Agent-controlled strings in terminal output are text, never Rich markup: a name like
`x[/bold]` must not raise, `[link=...]` must not become a hyperlink, `[bold red]` must not
style what follows, `:smile:` must not become an emoji. Rendered for real with rich."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console
from typer.testing import CliRunner

from assure.cli import app
from assure.records import alerts, report, store
from assure.records.run_report import Report
from tests.unit.reports import report_of

LINK = "[link=https://attacker.invalid/x]click me[/link]"
HOSTILE = [
    "x[/bold]",
    LINK,
    "[bold red]styled[/]",
    "[/]",
    ":smile: :thumbs_up:",
    "[reverse]src/calc.py",
    "a\\[b]",
]
OSC8 = "\x1b]8;"  # the terminal hyperlink escape
SGR = "\x1b["  # any style


def rendered(renderable: object) -> tuple[str, str]:
    """(plain text, what a colour terminal gets) of a renderable, on a console with rich's
    defaults (markup and emoji on): the renderable itself must be safe, whoever prints it."""
    plain = Console(file=io.StringIO(), width=400, color_system=None, record=True)
    plain.print(renderable)
    ansi = Console(file=io.StringIO(), width=400, force_terminal=True, color_system="truecolor")
    ansi.print(renderable)
    # the console's file is the StringIO made above; rich types it as IO[str]
    return plain.export_text(), ansi.file.getvalue()  # type: ignore[attr-defined]


def assert_shown_as_text(text: str, ansi: str, names: list[str] = HOSTILE) -> None:
    for name in names:
        assert report.display(name) in text, (name, text)
    assert OSC8 not in ansi and "😄" not in text and "👍" not in text


def hostile_report() -> Report:
    findings = [
        {
            "kind": "unattributed",
            "severity": "breach",
            "subject": name,
            "message": f"added file {name}",
            "attribution": name,
        }
        for name in HOSTILE
    ]
    return report_of(
        spec=HOSTILE[0],
        verdict="breach",
        expect="breach",
        tasks=[{"id": LINK, "state": "proposed", "reason": HOSTILE[2], "attempts": [1]}],
        attempts=[
            {
                "attempt": 1,
                "task": LINK,
                "verdict": "breach",
                "exit_code": 0,
                "findings": findings,
                "claim": {"status": HOSTILE[1], "summary": HOSTILE[0]},
            }
        ],
    )


def test_a_report_shows_hostile_names_as_text() -> None:
    text, ansi = rendered(
        report.render_report(hostile_report(), "runs/" + HOSTILE[0], verbose=True)
    )
    assert_shown_as_text(text, ansi)


def test_changes_show_hostile_paths_as_text() -> None:
    changes = [{"path": name, "kind": "added", "fields": [name]} for name in HOSTILE]
    findings = [
        {"kind": "attributed", "severity": "info", "subject": name, "attribution": name}
        for name in HOSTILE
    ]
    text, ansi = rendered(report.render_changes(changes, findings))
    assert_shown_as_text(text, ansi)


def test_a_suite_shows_hostile_spec_names_as_text() -> None:
    outcomes = [
        SimpleNamespace(spec=name, run_id=name, verdict="fail", expect="pass", as_expected=False)
        for name in HOSTILE
    ]
    text, ansi = rendered(report.render_suite(LINK, HOSTILE[0], outcomes, len(outcomes) + 1))
    assert_shown_as_text(text, ansi)


def test_plain_is_escaped_unstyled_text() -> None:
    text, ansi = rendered(report.plain(LINK + "\x1b[31m"))
    assert text.strip() == LINK + "\\x1b[31m" and SGR not in ansi


def test_the_cli_consoles_read_no_markup() -> None:
    for console in (report.console(), report.console(stderr=True)):
        buffer = io.StringIO()
        console.file = buffer
        console.print(*(report.display(name) for name in HOSTILE))
        assert all(report.display(name) in buffer.getvalue() for name in HOSTILE)


@pytest.fixture()
def hostile_runs(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    (tmp_path / "spec.yaml").write_text("name: hostile\n")
    run = store.RunDir.create(
        runs, "hostile-20261201T000000Z-abcdef", tmp_path / "spec.yaml", {"name": "hostile"}
    ).path
    state = {
        "state": "done",
        "verdict": "breach",
        "started_at": "2026-12-01T00:00:00Z",
        "tasks": {name: {"state": name} for name in HOSTILE},
    }
    (run / "state.json").write_text(json.dumps(state))
    for name in HOSTILE:
        alerts.raise_alert(run, "breach", f"unattributed change {name}", alerts.Sinks())
    return runs


@pytest.mark.parametrize(
    "command", [["alerts"], ["runs"], ["show", "hostile-20261201T000000Z-abcdef"]]
)
def test_cli_tables_show_hostile_strings_as_text(hostile_runs: Path, command: list[str]) -> None:
    result = CliRunner().invoke(
        app,
        [*command, "--runs-dir", str(hostile_runs)],
        env={"COLUMNS": "400", "TERM": "xterm-256color"},
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert_shown_as_text(result.output, result.output)
