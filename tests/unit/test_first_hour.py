"""What a new user's first hour met, refused before any work in words that name the file, the
field and the fix: an output file that could never be written, a suite given to `run` (and a
spec to `suite`), an --only id the standard does not have (the real `assure` command; every
refusal comes before the engine is asked: none answers here). And its surprises: a standalone
run that finished a suite's run, reasons escaped twice, reports folded mid-word off a terminal,
a phase shown twice, an alert's message cut to 8 characters a line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from assure.verify.judge import _head_words

ROOT = Path(__file__).resolve().parents[2]
BENIGN = ROOT / "specs" / "examples" / "benign.yaml"
SUITE = ROOT / "suites" / "containment.yaml"
NO_ENGINE = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}


def assure(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "assure.cli", *args],
        cwd=cwd,
        env=NO_ENGINE,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "argv,option",
    [
        (["suite", str(SUITE), "--summary"], "--summary"),
        (["suite", str(SUITE), "--junit"], "--junit"),
        (["run", str(BENIGN), "--junit"], "--junit"),
    ],
    ids=["suite-summary", "suite-junit", "run-junit"],
)
@pytest.mark.parametrize("where", ["/proc/x.json", "folder"])
def test_an_output_file_that_cannot_be_written_is_refused_before_any_work(
    argv: list[str], option: str, where: str, tmp_path: Path
) -> None:
    """/proc/x.json once ran the whole suite, then failed writing it (as root, /proc passes
    os.access)."""
    target = tmp_path / "out.json" if where == "folder" else Path(where)
    if where == "folder":
        target.mkdir()
    done = assure(*argv, str(target), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert f"error: {option} {target}: " in done.stderr and "fix: " in done.stderr, done.stderr
    assert "Docker engine" not in done.stderr  # refused before the engine is asked
    assert not (tmp_path / "runs").exists() and not (tmp_path / "suites").exists()


def test_a_suite_given_to_run_and_a_spec_given_to_suite_name_the_command(tmp_path: Path) -> None:
    ran = assure("run", str(SUITE), cwd=tmp_path)
    assert ran.returncode == 1 and ran.stderr.splitlines() == [
        f"error: {SUITE}:1: (document): this is a suite (it has `specs:`), not a spec",
        f"fix: run it with `assure suite {SUITE}`",
    ], ran.stderr
    suite = assure("suite", str(BENIGN), cwd=tmp_path)
    assert suite.returncode == 1 and suite.stderr.splitlines() == [
        f"error: {BENIGN}:1: (document): this is a spec (it has `agent:`), not a suite",
        f"fix: run it with `assure run {BENIGN}`",
    ], suite.stderr


def test_conformance_refuses_an_unknown_obligation_id_and_writes_no_packet(tmp_path: Path) -> None:
    done = assure(
        "conformance", "--only", "nonexistent-id", "--out", str(tmp_path / "packets"), cwd=tmp_path
    )
    assert done.returncode == 1
    assert done.stderr.startswith(
        "error: --only: no obligation nonexistent-id\nfix: pass one of: chaos_kill_resume, "
    ), done.stderr
    assert not (tmp_path / "packets").exists()
    shown = assure("conformance", "--help", cwd=tmp_path)
    assert "stale_heartbeat_alert_ack" in shown.stdout  # the help lists the ids


def test_a_journal_head_reads_as_words_not_a_python_repr() -> None:
    assert _head_words(None) == "no record"
    assert _head_words({"seq": 7, "hash": "ab" * 32}) == "record 7, hash " + "ab" * 8


def test_a_standalone_run_never_continues_a_run_a_suite_run_names(tmp_path: Path) -> None:
    """After an interrupted suite, `assure run` of one of its specs once resumed and finished
    the suite's run of it: that run is the suite's to continue; a standalone run starts its own."""
    from assure.records import layout, store
    from assure.records.states import RunState
    from assure.run.driver import find_unfinished
    from tests.unit.test_driver_states import new_run, write_spec

    spec = write_spec(tmp_path, "fix")
    runs = tmp_path / "runs"
    run = new_run(tmp_path, spec)
    store.write_json(
        run.paths.state, {"state": RunState.RUNNING, "tasks": {}, "order": [], "next_attempt": 1}
    )
    found = find_unfinished(runs, spec)
    assert found is not None and found.path == run.path  # a standalone run's own: resumed
    suite_run = layout.suites_base(runs) / "s-20260101T000000Z-000000"
    suite_run.mkdir(parents=True)
    store.write_json(
        layout.SuitePaths(suite_run).state,
        {
            "suite": "s",
            "state": "running",
            "runs": [{"spec": str(spec.path), "run_id": run.run_id}],
        },
    )
    assert find_unfinished(runs, spec) is None


def test_a_case_s_stdout_is_escaped_once_in_the_terminal_junit_and_html() -> None:
    """`expected '6\\n', got '2\\n'` once read with two backslashes everywhere: the reason held a
    repr that each renderer escaped again."""
    from assure.records import html_report, junit
    from assure.records.report import plain
    from tests.unit.test_cases import DIGEST, Case, compare, out, recorded, spec_cases

    _, why, _ = compare(spec_cases(Case(("3", "3"), None, "6\n", 0)), recorded(out(b"2\n")), DIGEST)
    once = "stdout differs: expected '6\\n', got '2\\n'"
    assert once in plain(why).plain and once in junit.text(why)
    assert html_report._h(why).replace("&#x27;", "'").endswith(once)


def test_off_a_terminal_a_report_is_as_wide_as_its_longest_line_and_splits_no_word(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Piped or in a CI log, rich folded at 80 columns mid-word (`claude-fix-bu g-scripted`)."""
    from assure.cli import output
    from assure.records.report import render_suite
    from assure.run.suite import Outcome

    names = [f"claude-fix-bug-scripted-{n}-with-a-name-as-long-as-a-corpus-gives" for n in range(3)]
    outcomes = [
        Outcome(name, f"{name}-20260101T000000Z-00000{n}", "fail", "pass")
        for n, name in enumerate(names)
    ]
    assert not output.out.is_terminal
    output._print_whole(
        render_suite("containment", "containment-20260101T000000Z-000000", outcomes, 3)
    )
    lines = capsys.readouterr().out.splitlines()
    for o in outcomes:
        assert any(
            o.spec in line and o.run_id in line and "(expects pass)" in line for line in lines
        ), lines


def test_each_phase_of_an_attempt_is_shown_once(tmp_path: Path) -> None:
    """Off a terminal a line is printed per new phase: the two writes named `record` (its facts,
    then its verdict, with `verify` between) printed `record` twice."""
    from assure.run.driver import Driver
    from tests.unit.test_driver_states import (
        ACCEPTANCE,
        IMAGES,
        fake,
        fix,
        new_run,
        ratified,
        write_spec,
    )

    spec = write_spec(tmp_path, "fix", contract=ratified(["fs:**"]), assertions=ACCEPTANCE)
    short = tempfile.mkdtemp(prefix="fh", dir="/tmp")
    phases: list[str] = []
    backend = fake({"fix": fix}, short)
    try:
        Driver(
            spec,
            new_run(tmp_path, spec),
            backend,
            IMAGES,
            lambda phase, info: phases.append(phase) if phase not in phases[-1:] else None,
        ).drive()
    finally:
        backend.close()
        shutil.rmtree(short, ignore_errors=True)
    assert "verify" in phases and "record" in phases
    assert len(phases) == len(set(phases)), phases


MESSAGE = (
    "task 'fix' quarantined: every attempt failed its assertions; the last one: stdout differs from"
    " what the case expects"
)


@pytest.fixture()
def alerted(tmp_path: Path) -> Path:
    from assure.records import alerts

    run = tmp_path / "runs" / "claude-fix-bug-scripted-20260101T000000Z-abcdef"
    run.mkdir(parents=True)
    alerts.raise_alert(run, "quarantine", MESSAGE, alerts.Sinks())
    return tmp_path / "runs"


def test_off_a_terminal_an_alert_s_message_folds_only_between_words(alerted: Path) -> None:
    from tests.unit.test_cli_naming import invoke

    shown = invoke("alerts", "--runs-dir", str(alerted), columns=80)
    column = [
        line.split("│")[-2].strip() for line in shown.output.splitlines() if line.count("│") > 2
    ]
    assert shown.exit_code == 0 and " ".join(c for c in column if c) == MESSAGE, shown.output
    assert all(len(c) > 20 for c in column[:-1] if c)  # whole words, many a line


def test_on_a_narrow_terminal_an_alert_s_message_keeps_room(
    alerted: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The ids take the 80 columns: the message once got 8 characters a line."""
    from rich.console import Console

    from assure.cli import monitor, output

    monkeypatch.setattr(
        output,
        "out",
        Console(
            force_terminal=True,
            width=80,
            color_system=None,
            markup=False,
            emoji=False,
            highlight=False,
        ),
    )
    monitor.alerts_cmd(pending=False, runs_dir=alerted, json_out=False)
    rows = [
        line.split("│")[-2] for line in capsys.readouterr().out.splitlines() if "│" in line
    ]  # the message column
    assert len(rows[0]) >= output.FOLD_ROOM, rows
    assert (
        " ".join(r.strip() for r in rows if r.strip()) == MESSAGE
    )  # folded at words, nothing lost


def test_a_halted_run_reads_halted_not_its_attempts_verdict() -> None:
    from assure.records.report import console, render_report
    from tests.unit.reports import report_of

    report = {"spec": "fix", "verdict": "fail", "expect": "pass", "state": "halted"}
    shown = console()
    with shown.capture() as captured:
        shown.print(render_report(report_of(**report), "/runs/fix-1"))
    title = captured.get().splitlines()[0]
    assert (
        "fix  HALTED  (by the operator; its attempts were judged fail)" in title
        and "FAIL" not in title
    )
    with shown.capture() as captured:
        shown.print(render_report(report_of(**{**report, "state": "finished"}), "/runs/fix-1"))
    assert "fix  FAIL" in captured.get().splitlines()[0]


def test_the_help_s_first_line_says_what_assure_is(tmp_path: Path) -> None:
    """typer prints the root callback's docstring over Typer(help=...): an internal note about
    logging once stood where a newcomer reads what the tool does."""
    shown = assure("--help", cwd=tmp_path)
    assert shown.returncode == 0
    assert "judge it by ground truth" in shown.stdout
    assert "logs" not in shown.stdout.split("Options")[0]
