"""The command line as a new user meets it: one way to name a run (its id or its folder) on
every command that takes one, -h and uppercase placeholders everywhere, --version, and bad
arguments (a file or /proc as --runs-dir, an empty, binary, missing or folder spec) answered
in words with exit 1, never a traceback or a Python repr. Runs come from the in-memory backend."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.core import TyperArgument, TyperOption
from typer.testing import CliRunner, Result

from assure.cli import DEFAULT_SPEC, FOLD_ROOM, app
from assure.records import journal, keys, store
from tests.unit.test_driver_states import ACCEPTANCE, drive, fix, ratified, write_spec

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suites" / "containment.yaml"
RESOLVER_ERRORS = (
    "neither a run's folder nor a run id",
    "no run `",
    "not a run directory",
    "Traceback",
)
FILLERS = {
    "LEVEL": "propose",
    "ALERT": "no-such-alert",
    "SPEC": str(DEFAULT_SPEC),
    "[SPEC]": str(DEFAULT_SPEC),
    "SUITE": str(SUITE),
    "FILE...": str(DEFAULT_SPEC),
    "[SPEC]...": str(DEFAULT_SPEC),
    "PACKET": str(DEFAULT_SPEC),
    "AGENT": "sha256:0",
    "LEDGER": str(DEFAULT_SPEC),
}


def commands(
    group: Any = None, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command and group of the app, with the words that invoke it: nothing hard-coded."""
    group = group or typer.main.get_command(app)
    yield path, group
    # list_commands and get_command, not .commands: the root group loads each command when asked
    ctx = typer.Context(group)
    for name in group.list_commands(ctx) if hasattr(group, "list_commands") else ():
        sub = group.get_command(ctx, name)
        if hasattr(sub, "list_commands"):
            yield from commands(sub, path + (name,))
        else:
            yield path + (name,), sub


def argv_for(command: Any, run: str | None) -> list[str]:
    """Positional arguments for `command`: RUN as given, the rest from FILLERS (and --once for
    a command that would otherwise keep watching)."""
    out = ["--once"] if any(p.name == "once" for p in command.params) else []
    for param in command.params:
        if isinstance(param, TyperArgument) and param.required or param.metavar in ("RUN", "[RUN]"):
            out.append(run if param.metavar in ("RUN", "[RUN]") else FILLERS[param.metavar])
    return out


def invoke(*args: str, columns: int = 200) -> Result:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns)})


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(run folder, public key) of a signed run that verified and promoted, on the fake."""
    tmp = tmp_path_factory.mktemp("naming")
    target = tmp / "target"
    shutil.copytree(ROOT / "fixtures" / "workspaces" / "calc", target)
    from tests.unit.test_driver_states import git

    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "fixture"]):
        git(target, *cmd)
    private, public = keys.generate_keypair(tmp / "keys")
    spec = write_spec(
        tmp,
        "fix",
        contract=ratified(["fs:**"]),
        promote={"target": str(target)},
        assertions=ACCEPTANCE,
    )
    run = store.RunDir.create(tmp / "runs", store.new_run_id(spec.name), spec.path, spec.to_json())
    short = tempfile.mkdtemp(prefix="nam", dir="/tmp")
    try:
        result, _ = drive(spec, run, short, {"fix": fix}, signing_key=private)
    finally:
        shutil.rmtree(short, ignore_errors=True)
    assert result.verdict == "pass"
    return run.path, public


@pytest.fixture()
def run_copy(finished: tuple[Path, Path], tmp_path: Path) -> Path:
    """A copy of the finished run this test may change (halt, dial)."""
    copy = tmp_path / "runs" / finished[0].name
    shutil.copytree(finished[0], copy, symlinks=True)
    return copy


RUN_COMMANDS = [
    path for path, c in commands() if any(p.metavar in ("RUN", "[RUN]") for p in c.params)
]


def test_the_run_naming_commands_are_found() -> None:
    names = {" ".join(p) for p in RUN_COMMANDS}
    assert {
        "verify",
        "diff",
        "show",
        "journal",
        "halt",
        "dial",
        "promote",
        "resume",
        "health",
        "receipts verify",
    } <= names


@pytest.mark.parametrize("path", RUN_COMMANDS, ids=" ".join)
def test_every_command_that_names_a_run_takes_its_id_or_its_folder(
    path: tuple[str, ...], run_copy: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(
        tmp_path
    )  # what a command writes to its working folder (report html's page) lands here
    command = dict(commands())[path]
    by_id = invoke(*path, *argv_for(command, run_copy.name), "--runs-dir", str(run_copy.parent))
    empty = tmp_path / "elsewhere"
    by_folder = invoke(*path, *argv_for(command, str(run_copy)), "--runs-dir", str(empty))
    for result in (by_id, by_folder):
        assert not any(e in result.output for e in RESOLVER_ERRORS), result.output
    assert by_id.exit_code == by_folder.exit_code
    unknown = invoke(
        *path,
        *argv_for(command, "no-such-run-20260101T000000Z-000000"),
        "--runs-dir",
        str(run_copy.parent),
    )
    assert (
        unknown.exit_code == 1
        and "no run `no-such-run" in unknown.output
        and "assure runs" in unknown.output
    )
    assert "Traceback" not in unknown.output


def test_receipts_verify_takes_a_run_id(finished: tuple[Path, Path]) -> None:
    run, public = finished
    result = invoke(
        "receipts",
        "verify",
        run.name,
        "--runs-dir",
        str(run.parent),
        "--public-key",
        str(public),
        "--json",
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["verified"] is True and report["run_id"] == run.name


def test_verify_and_diff_take_a_run_id(finished: tuple[Path, Path]) -> None:
    run, _ = finished
    verified = invoke("verify", run.name, "--runs-dir", str(run.parent), "--json")
    assert verified.exit_code == 0, verified.output
    assert json.loads(verified.stdout)["reproduced"] is True
    diff = invoke("diff", run.name, "--runs-dir", str(run.parent), "--json")
    assert diff.exit_code == 0, diff.output
    assert any(c["path"] == "src/calc.py" for c in json.loads(diff.stdout)["changes"])


def test_show_and_halt_answer_in_json(run_copy: Path) -> None:
    shown = invoke("show", run_copy.name, "--runs-dir", str(run_copy.parent), "--json")
    assert shown.exit_code == 0, shown.output
    events = json.loads(shown.stdout)["events"]
    assert "run_finished" in [e["standard_event"] for e in events]
    halted = invoke("dial", str(run_copy), "propose", "--json")
    if halted.exit_code == 0:  # a finished run may be refused; a result is JSON
        assert json.loads(halted.stdout)["dial"] == "propose"


def test_show_says_the_promote_decision_in_words(finished: tuple[Path, Path]) -> None:
    run, _ = finished
    shown = invoke("show", str(run), columns=400)
    assert shown.exit_code == 0, shown.output
    assert "decision.outcome=allow" in shown.output
    assert "{'" not in shown.output and "decision={" not in shown.output


def test_a_journal_detail_is_words_not_a_repr() -> None:
    record = {
        "tool": "promote",
        "decision": {"outcome": "deny", "rule": "autonomy.propose", "inputs": {"dial": "propose"}},
        "path": None,
    }
    assert (
        journal.detail(record, ("tool", "path", "decision"))
        == "tool=promote decision.outcome=deny decision.rule=autonomy.propose"
    )


def test_version_prints_the_package_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"assure {version('assure')}"


@pytest.mark.parametrize("path", [p for p, _ in commands()], ids=lambda p: " ".join(p) or "assure")
def test_h_is_help_on_every_command(path: tuple[str, ...]) -> None:
    short, long = invoke(*path, "-h"), invoke(*path, "--help")
    assert short.exit_code == 0 and "Usage:" in short.output, short.output
    assert short.output == long.output


def test_every_placeholder_is_uppercase_and_named() -> None:
    """No PATH, TEXT or RUN_DIR: each argument and option value says what it is, one style."""
    unnamed = []
    for path, command in commands():
        for param in command.params:
            if isinstance(param, TyperOption) and (param.is_flag or param.count):
                continue
            metavar = param.metavar or ""
            if (
                not metavar
                or metavar != metavar.upper()
                or metavar.strip("[].") in ("PATH", "TEXT", "INTEGER", "FLOAT")
                or "_" in metavar
            ):
                unnamed.append(f"{' '.join(path)} {param.name}: {metavar or '(none)'}")
    assert unnamed == []


@pytest.mark.parametrize("path", [p for p, _ in commands()], ids=lambda p: " ".join(p) or "assure")
def test_the_usage_line_wraps_each_argument_once(path: tuple[str, ...]) -> None:
    """One style on the usage line: {RUN} required, [SPEC] optional, ... after a list, as the
    help framework writes them; never [[SPEC]] or {FILE...}... from a metavar that wraps itself."""
    usage = next(line for line in invoke(*path, "-h").output.splitlines() if "Usage:" in line)
    words = usage.split("Usage:", 1)[1].split()[
        len(path) + 1 :
    ]  # after `assure` and the command's words
    odd = [
        w
        for w in words
        if w not in ("[OPTIONS]", "COMMAND", "[ARGS]...")
        and not re.fullmatch(r"(\{[A-Z/]+\}|\[[A-Z/]+\])(\.\.\.)?", w)
    ]
    assert odd == [], usage


@pytest.mark.parametrize(
    "path", [p for p, c in commands() if any(o.name == "runs_dir" for o in c.params)], ids=" ".join
)
def test_a_file_as_runs_dir_is_refused_in_words(path: tuple[str, ...], tmp_path: Path) -> None:
    somefile = tmp_path / "somefile"
    somefile.write_text("x\n")
    result = invoke(
        *path, *argv_for(dict(commands())[path], "some-run"), "--runs-dir", str(somefile)
    )
    assert result.exit_code == 1, result.output
    assert "--runs-dir is not a folder" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    "argv", [["run", str(DEFAULT_SPEC)], ["suite", str(SUITE)]], ids=lambda a: a[0]
)
@pytest.mark.parametrize("base", ["/proc", "file"])
def test_a_runs_dir_no_run_can_be_made_in_is_refused_before_the_engine(
    argv: list[str], base: str, tmp_path: Path
) -> None:
    if base == "file":
        base = str(tmp_path / "somefile")
        Path(base).write_text("x\n")
    result = invoke(*argv, "--runs-dir", base)
    assert result.exit_code == 1, result.output
    assert "--runs-dir" in result.output and "Traceback" not in result.output
    assert "fix: pass --runs-dir a folder you can write to" in result.output


def test_a_run_directory_cannot_be_made_in_proc() -> None:
    with pytest.raises(store.RunDirError, match="cannot make the run directory"):
        store.RunDir.create(Path("/proc"), "x-20260101T000000Z-000000", DEFAULT_SPEC, {})


@pytest.mark.parametrize(
    "content, said",
    [
        (b"", "the file is empty: a spec is a mapping with the fields version, name"),
        (b"# only a comment\n", "the file is empty"),
        (b"- a\n- b\n", "the file holds a list: a spec is a mapping"),
        (b"\xff\xfe\x00name: x\n", "not UTF-8 text (byte 0xff at offset 0)"),
        (
            b"version: 1\nname: x\nagent:\nworkspace: [1]\nassertions: []\nexpect: pass\n",
            "agent: expected a mapping, found nothing",
        ),
    ],
)
def test_a_bad_spec_is_explained_in_words(content: bytes, said: str, tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_bytes(content)
    result = invoke("validate", str(path))
    assert result.exit_code == 1
    assert said in result.output
    assert (
        "None is not of type" not in result.output
        and "Traceback" not in result.output
        and "codec" not in result.output
    )


@pytest.mark.parametrize("kind", ["missing", "folder", "unreadable"])
def test_a_spec_that_cannot_be_read_is_explained(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    if kind == "folder":
        path.mkdir()
    elif kind == "unreadable":
        path.write_text("version: 1\n")
        path.chmod(0)
    said = {
        "missing": "no such file",
        "folder": "is a folder, not a file",
        "unreadable": "permission denied",
    }[kind]
    for argv in (
        ["validate", str(path)],
        ["validate", str(path), "--json"],
        ["contract", "hash", str(path)],
        ["doctor", str(path)],
    ):
        result = invoke(*argv)
        assert result.exit_code == 1 and "Traceback" not in result.output
        if kind != "unreadable" or not _root():  # root reads a mode-0 file
            assert said in result.output, result.output
            assert "Errno" not in result.output


def _root() -> bool:
    import os

    return os.geteuid() == 0


def test_validate_json_lists_each_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    result = invoke("validate", str(DEFAULT_SPEC), str(empty), "--json")
    assert result.exit_code == 1
    good, bad = json.loads(result.stdout)
    assert good == {
        "file": str(DEFAULT_SPEC),
        "ok": True,
        "problems": [],
        "fix": None,
        "notes": [],
        "ratified": [
            f"{DEFAULT_SPEC}: contract 'fix-calc-add': ratified by bob@example.org with key "
            "ed25519:e5738e67dcb3fd00 (a trusted ratifier)"
        ],
    }
    assert bad["ok"] is False and "the file is empty" in bad["problems"][0]


def test_a_long_run_id_is_printed_whole_in_a_narrow_table(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: long\n")
    run_id = "a-spec-with-a-rather-long-descriptive-name-for-its-runs-20261201T000000Z-abcdef"
    run = store.RunDir.create(tmp_path / "runs", run_id, spec, {"name": "long"}).path
    (run / "state.json").write_text(
        json.dumps(
            {
                "state": "finished",
                "verdict": "pass",
                "started_at": "2026-12-01T00:00:00.000Z",
                "tasks": {"main": {"state": "committed"}},
            }
        )
    )
    from assure.records import alerts

    alerts.raise_alert(run, "breach", "something happened", alerts.Sinks())
    for argv in (["runs"], ["alerts"]):
        result = invoke(*argv, "--runs-dir", str(tmp_path / "runs"), columns=60)
        assert result.exit_code == 0, result.output
        assert run_id in result.output and "…" not in result.output, result.output


def test_diff_of_an_attempt_the_run_does_not_have_says_which_it_has(
    finished: tuple[Path, Path],
) -> None:
    run, _ = finished
    for n in ("5", "0"):
        result = invoke("diff", str(run), "--attempt", n)
        assert (
            result.exit_code == 1 and f"the run has no attempt {n} (it has: 1)" in result.output
        ), result.output


def test_journal_since_must_be_a_time(finished: tuple[Path, Path]) -> None:
    run, _ = finished
    bad = invoke("journal", str(run), "--since", "yesterday")
    assert bad.exit_code == 2 and "--since must be an ISO time" in bad.output
    good = invoke("journal", str(run), "--since", "2000-01-01T00:00", "--json")
    assert good.exit_code == 0 and good.stdout.strip()


def test_operator_results_answer_in_json(tmp_path: Path) -> None:
    from assure.records import alerts

    spec = tmp_path / "spec.yaml"
    spec.write_text("name: live\n")
    run = store.RunDir.create(
        tmp_path / "runs", "live-20261201T000000Z-abcdef", spec, {"name": "live"}
    ).path
    (run / "state.json").write_text(json.dumps({"state": "running", "tasks": {}}))
    base = ["--runs-dir", str(tmp_path / "runs"), "--json"]
    halted = invoke("halt", run.name, *base)
    assert halted.exit_code == 0, halted.output
    assert (
        json.loads(halted.stdout)["halt"] is True
        and json.loads(halted.stdout)["run_id"] == run.name
    )
    dialed = invoke("dial", run.name, "propose", *base)
    assert dialed.exit_code == 0, dialed.output
    assert json.loads(dialed.stdout)["dial"] == "propose"
    alert = alerts.raise_alert(run, "breach", "look at this", alerts.Sinks())
    acked = invoke("ack", alert.id, *base)
    assert acked.exit_code == 0, acked.output
    assert (
        json.loads(acked.stdout)["id"] == alert.id and json.loads(acked.stdout)["state"] == "acked"
    )
    made = invoke("keys", "generate", "--dir", str(tmp_path / "keys"), "--json")
    assert made.exit_code == 0, made.output
    assert json.loads(made.stdout)["key_id"] == keys.key_id(
        keys.load_public(tmp_path / "keys" / keys.PUBLIC_NAME)
    )


def test_ack_by_kind_names_its_runs_or_says_all(tmp_path: Path) -> None:
    """`--kind breach` alone would silence every run's breaches: refused, nothing acked; with --all
    it acks them."""
    from assure.records import alerts

    spec = tmp_path / "spec.yaml"
    spec.write_text("name: live\n")
    runs = [
        store.RunDir.create(
            tmp_path / "runs", f"live-20261201T000000Z-abcde{i}", spec, {"name": "live"}
        ).path
        for i in range(2)
    ]
    for run in runs:
        alerts.raise_alert(run, "breach", "look at this", alerts.Sinks())
    base = ["--runs-dir", str(tmp_path / "runs")]
    refused = invoke("ack", "--kind", "breach", *base)
    assert (
        refused.exit_code == 1
        and "--kind alone would acknowledge every pending 'breach' alert of every run"
        in refused.output
    )
    assert len([a for a in alerts.all_alerts(tmp_path / "runs") if a.state == "pending"]) == 2
    acked = invoke("ack", "--kind", "breach", "--all", *base)
    assert acked.exit_code == 0, acked.output
    assert [a.state for a in alerts.all_alerts(tmp_path / "runs")] == ["acked", "acked"]


def test_a_narrow_timeline_keeps_every_time_whole_and_folds_the_rest(
    finished: tuple[Path, Path],
) -> None:
    run, _ = finished
    events = json.loads(invoke("show", str(run), "--json").stdout)["events"]
    narrow = invoke("show", str(run), columns=60)
    assert narrow.exit_code == 0, narrow.output
    assert all(e["ts"] in narrow.output for e in events) and "…" not in narrow.output
    # long details fold: only the uncut columns and what a folding one keeps (FOLD_ROOM, so words
    # are never split) set the width
    assert max(len(line) for line in narrow.output.splitlines()) < 80 + FOLD_ROOM


def test_a_run_file_that_is_a_folder_or_not_utf8_is_explained(run_copy: Path) -> None:
    (run_copy / "report.json").unlink()
    (run_copy / "report.json").mkdir()
    folder = invoke("verify", str(run_copy))
    assert (
        folder.exit_code == 1 and "unreadable report.json: is a folder, not a file" in folder.output
    ), folder.output
    (run_copy / "report.json").rmdir()
    (run_copy / "report.json").write_bytes(b"\xff{}")
    binary = invoke("verify", str(run_copy))
    assert (
        binary.exit_code == 1
        and "unreadable report.json: not UTF-8 text" in binary.output
        and "Errno" not in binary.output
    )
