"""The CLI end to end: exit codes follow the verdict, reports are machine-readable, `verify`
reproduces the verdict offline and notices a run directory changed after the fact."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from assure.records import summary

from .conftest import EXAMPLES, SPECS, run_dirs

ASSURE = [sys.executable, "-m", "assure.cli"]


def assure(*args, cwd, check_code=None):
    done = subprocess.run(ASSURE + list(args), cwd=cwd, capture_output=True, text=True, timeout=300)
    if check_code is not None:
        assert done.returncode == check_code, (done.stdout, done.stderr)
    return done


def test_run_json_then_verify_offline(tmp_path, images):
    done = assure(
        "run",
        "--json",
        "--junit",
        "run.xml",
        str(EXAMPLES / "benign.yaml"),
        cwd=tmp_path,
        check_code=0,
    )
    report = json.loads(done.stdout)
    assert report["verdict"] == "pass"
    run_dir = tmp_path / ".assure" / "runs" / report["run_id"]
    assert summary.problems(report) == [] and (report["kind"], report["run_dir"]) == (
        "run",
        str(run_dir.resolve()),
    )
    [case] = ET.parse(tmp_path / "run.xml").getroot().iter("testcase")
    assert case.get("name") == "benign" and [e.tag for e in case] == [
        "system-out"
    ]  # passed: no failure
    assert (run_dir / "state.json").is_file() and (run_dir / "events.jsonl").is_file()
    again = json.loads(assure("verify", "--json", str(run_dir), cwd=tmp_path, check_code=0).stdout)
    assert again["reproduced"] is True and again["verdict"] == "pass"
    changes = json.loads(assure("diff", "--json", str(run_dir), cwd=tmp_path, check_code=0).stdout)[
        "changes"
    ]
    assert sorted(c["path"] for c in changes) == ["out/notes.txt", "src/calc.py"]

    # Edit the kept workspace after the run: offline verification must not reproduce a pass.
    (run_dir / "attempts" / "1" / "workspace" / "src" / "calc.py").write_text("tampered\n")
    tampered = json.loads(
        assure("verify", "--json", str(run_dir), cwd=tmp_path, check_code=6).stdout
    )
    assert tampered["verdict"] == "error" and tampered["reproduced"] is False

    # A dropped journal line is found too.
    (run_dir / "attempts" / "1" / "workspace" / "src" / "calc.py").unlink()
    journal = run_dir / "attempts" / "1" / "gateway" / "journal.jsonl"
    lines = journal.read_text().splitlines()
    journal.write_text("\n".join(lines[:1] + lines[2:]) + "\n")
    broken = json.loads(assure("verify", "--json", str(run_dir), cwd=tmp_path).stdout)
    assert any("journal does not verify" in f["message"] for f in broken["attempts"][0]["findings"])


# Names an agent may leave to fool a reviewer: as bytes on disk -> as every output must show them.
HOSTILE_NAMES = {
    b"new\nline": "new\\nline",
    b"\x1b[2J\x1b[31mred": "\\x1b[2J\\x1b[31mred",
    b"bad\xffbyte": "bad\\xffbyte",
    "\u202etxt.exe".encode(): "\\u202etxt.exe",
    b"<img src=x onerror=alert(1)>": "<img src=x onerror=alert(1)>",
}


def test_hostile_names_are_escaped_in_terminal_json_and_html(tmp_path, make_spec, images):
    create = (
        f"for name in {sorted(HOSTILE_NAMES)!r}:\n    open(name, 'wb').close()\n"
        "from assure.client import Client\n"
        # a lone surrogate, via JSON
        "Client().call('task.report', status='done', summary='all good\\n\\x1b[2J\\ud800')\n"
    )
    spec = make_spec(
        "hostile-names", "unused.sh", agent={"command": ["python3", "-c", create]}, expect="breach"
    )
    ran = assure("run", str(spec), cwd=tmp_path, check_code=4)  # unattributed changes
    [run_dir] = run_dirs(tmp_path / ".assure" / "runs")
    assert "\x1b" not in ran.stdout + ran.stderr and "all good\\n\\x1b[2J\\ud800" in ran.stdout
    assure(
        "receipts", "verify", str(run_dir), cwd=tmp_path, check_code=0
    )  # the claim and names are in it, escaped
    wide = {**os.environ, "COLUMNS": "300"}

    terminal = subprocess.run(
        ASSURE + ["diff", str(run_dir)], cwd=tmp_path, capture_output=True, env=wide, timeout=60
    )
    as_json = assure("diff", "--json", str(run_dir), cwd=tmp_path, check_code=0).stdout
    page = assure("diff", "--html", str(run_dir), cwd=tmp_path, check_code=0).stdout

    shown = terminal.stdout.decode("utf-8")  # strict: no raw undecodable byte came through
    assert terminal.returncode == 0 and all(
        escaped in shown for escaped in HOSTILE_NAMES.values()
    ), shown
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", shown)
    assert as_json.isascii()
    assert {c["path"] for c in json.loads(as_json)["changes"]} == {
        os.fsdecode(name) for name in HOSTILE_NAMES
    }
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert all(escaped in page for escaped in list(HOSTILE_NAMES.values())[:4])
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", page)


def test_exit_codes_follow_the_verdict(tmp_path, images):
    assert assure("run", str(EXAMPLES / "escape.yaml"), cwd=tmp_path).returncode == 4
    assert assure("run", "--expect", str(EXAMPLES / "escape.yaml"), cwd=tmp_path).returncode == 0
    assert assure("run", "--expect", str(EXAMPLES / "network.yaml"), cwd=tmp_path).returncode == 0


def test_invalid_spec_exits_1_with_file_line_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (EXAMPLES / "benign.yaml")
        .read_text()
        .replace("  wall_seconds: 60", "  wall_seconds: -1\n  colour: red")
    )
    done = assure("validate", str(bad), cwd=tmp_path, check_code=1)
    lines = done.stderr.splitlines()
    assert any(x.startswith(f"{bad}:") and "limits.colour: unknown field" in x for x in lines), (
        done.stderr
    )
    assert any(
        "limits.wall_seconds: -1 is less than or equal to the minimum of 0" in x for x in lines
    ), done.stderr
    assert assure("run", str(bad), cwd=tmp_path).returncode == 1


def test_sigkill_leaves_containers_that_gc_reaps(tmp_path, images, backend):
    proc = subprocess.Popen(
        ASSURE + ["run", str(SPECS / "hang.yaml")],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            roles = {
                c.get("assure.role")
                for c in backend.owned()["containers"]
                if c.get("assure.pid") == str(proc.pid)
            }
            if "agent" in roles:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the agent container never started")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    left = [c for c in backend.owned()["containers"] if c.get("assure.pid") == str(proc.pid)]
    assert {c["assure.role"] for c in left} == {"agent", "gateway"}
    assert len([v for v in backend.owned()["volumes"] if v.get("assure.pid") == str(proc.pid)]) == 1
    out = assure("gc", cwd=tmp_path, check_code=0).stdout
    containers, volumes = (
        int(n) for n in re.match(r"removed (\d+) containers, (\d+) volumes", out).groups()
    )
    assert containers >= 2 and volumes >= 1  # ours, and any other orphan of a dead process
    assert not [c for c in backend.owned()["containers"] if c.get("assure.pid") == str(proc.pid)]


def test_sigterm_cleans_up_like_ctrl_c(tmp_path, images, backend):
    proc = subprocess.Popen(
        ASSURE + ["run", str(SPECS / "hang.yaml")],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(
        c.get("assure.pid") == str(proc.pid) and c.get("assure.role") == "agent"
        for c in backend.owned()["containers"]
    ):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 130
    assert not [c for c in backend.owned()["containers"] if c.get("assure.pid") == str(proc.pid)]
    state = json.loads(
        run_dirs(tmp_path / ".assure" / "runs")[0].joinpath("state.json").read_text()
    )
    assert state["state"] == "aborted"


def write_suite(tmp_path, specs, **fields):
    import yaml

    path = tmp_path / "suite.yaml"
    path.write_text(
        yaml.safe_dump({"version": 1, "name": "s", "specs": [str(p) for p in specs], **fields})
    )
    return path


def test_a_suite_killed_mid_run_continues_where_it_stopped(tmp_path, make_spec, images):
    first = make_spec(
        "first", "notes-only.sh"
    )  # max_attempts 1: the interrupted attempt does not count
    second = make_spec("second", "notes-only.sh")
    suite = write_suite(tmp_path, [first, second])

    killed = subprocess.run(
        ASSURE + ["suite", "-j", "1", str(suite)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ASSURE_FAILPOINT": "start"},
    )  # hit by every attempt, before its agent starts
    assert killed.returncode == -9, killed.stderr
    [interrupted] = run_dirs(tmp_path / ".assure" / "runs")

    done = assure("suite", "--json", "-j", "1", str(suite), cwd=tmp_path, check_code=0)

    result = json.loads(done.stdout)
    assert "continuing unfinished suite run" in done.stderr
    assert [(r["spec"], r["verdict"], r["as_expected"]) for r in result["results"]] == [
        ("first", "pass", True),
        ("second", "pass", True),
    ]
    assert (
        result["results"][0]["run_id"] == interrupted.name
    )  # the same run, resumed: not a new one
    events = [
        json.loads(line)["event"]
        for line in (interrupted / "events.jsonl").read_text().splitlines()
    ]
    assert "run_resumed" in events and "attempt_interrupted" in events
    assert [p.name for p in run_dirs(tmp_path / ".assure" / "runs")] == sorted(
        [interrupted.name, result["results"][1]["run_id"]]
    )
    assert len(list((tmp_path / ".assure" / "suites").iterdir())) == 1


def test_a_suite_with_an_unexpected_verdict_exits_6_and_can_stop_there(tmp_path, make_spec, images):
    wrong = make_spec("wrong", "notes-only.sh", expect="breach")
    right = make_spec("right", "notes-only.sh")
    suite = write_suite(tmp_path, [wrong, right], stop_on_unexpected=True)

    done = assure(
        "suite", "--json", "-j", "1", str(suite), cwd=tmp_path, check_code=6
    )  # one at a time: right never starts

    result = json.loads(done.stdout)
    assert result["as_expected"] is False and result["counts"]["not_run"] == 1
    assert [(r["spec"], r["verdict"], r["expect"]) for r in result["results"]] == [
        ("wrong", "pass", "breach"),
        ("right", None, "pass"),
    ]
    shown = assure("suite", "--new", "-j", "1", str(suite), cwd=tmp_path, check_code=6).stdout
    assert (
        "UNEXPECTED" in shown
        and "PASS (expects breach)" in shown
        and "stopped after 1 of 2 specs" in shown
    )


def test_a_suite_writes_its_summary_and_a_junit_report(tmp_path, make_spec, images):
    wrong = make_spec("wrong", "notes-only.sh", expect="breach")
    right = make_spec("right", "notes-only.sh")
    suite = write_suite(tmp_path, [wrong, right])

    done = assure(
        "suite",
        "--json",
        "--summary",
        "summary.json",
        "--junit",
        "junit.xml",
        str(suite),
        cwd=tmp_path,
        check_code=6,
    )

    printed = json.loads(done.stdout)
    assert (
        done.stdout.isascii()
        and printed == json.loads((tmp_path / "summary.json").read_text())
        and summary.problems(printed) == []
    )
    assert [
        (r["spec"], r["verdict"], r["as_expected"], r["reason"]) for r in printed["results"]
    ] == [
        ("wrong", "pass", False, "verdict pass, the spec expects breach"),
        ("right", "pass", True, None),
    ]
    assert printed["counts"] == {
        "total": 2,
        "as_expected": 1,
        "unexpected": 1,
        "pass": 2,
        "fail": 0,
        "breach": 0,
        "contained": 0,
        "error": 0,
        "not_run": 0,
    }
    assert all(
        (Path(r["run_dir"]) / "report.json").is_file() and r["duration_seconds"] > 0
        for r in printed["results"]
    )
    root = ET.parse(tmp_path / "junit.xml").getroot()
    [testsuite] = root
    assert (
        root.tag,
        testsuite.get("name"),
        testsuite.get("tests"),
        testsuite.get("failures"),
        testsuite.get("errors"),
    ) == ("testsuites", "s", "2", "1", "0")
    first, second = testsuite.iter("testcase")
    assert (first.get("classname"), first.get("name"), first.find("failure").get("message")) == (
        "s",
        "wrong",
        "verdict pass, the spec expects breach",
    )
    assert second.find("failure") is None and second.get("name") == "right"


def test_a_runtime_the_engine_lacks_is_refused_before_any_run_starts(tmp_path, make_spec):
    spec = make_spec("gvisor", "notes-only.sh", sandbox={"runtime": "runsc-not-installed"})
    suite = write_suite(tmp_path, [spec])

    for args in (["run", str(spec)], ["suite", str(suite)]):
        done = assure(*args, cwd=tmp_path, check_code=1)
        assert (
            "sandbox.runtime: the Docker engine has no runtime 'runsc-not-installed'" in done.stderr
        ), done.stderr
    assert not (tmp_path / ".assure").exists()  # no run, no suite run


def test_resuming_a_finished_run_whose_receipts_are_missing_issues_them(tmp_path, images):
    report = json.loads(
        assure("run", "--json", str(EXAMPLES / "benign.yaml"), cwd=tmp_path, check_code=0).stdout
    )
    run_dir = tmp_path / ".assure" / "runs" / report["run_id"]
    shutil.rmtree(run_dir / "receipts")  # as if issuing them had failed after the run finished
    assure("receipts", "verify", str(run_dir), cwd=tmp_path, check_code=1)

    again = json.loads(
        assure("resume", "--json", report["run_id"], cwd=tmp_path, check_code=0).stdout
    )

    assert again["verdict"] == "pass" and again["run_id"] == report["run_id"]
    assure("receipts", "verify", str(run_dir), cwd=tmp_path, check_code=0)


def test_sigterm_stops_a_suite_cleanly_and_leaves_it_to_be_continued(tmp_path, images, backend):
    suite = write_suite(tmp_path, [SPECS / "hang.yaml"])
    proc = subprocess.Popen(
        ASSURE + ["suite", str(suite)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(
        c.get("assure.pid") == str(proc.pid) and c.get("assure.role") == "agent"
        for c in backend.owned()["containers"]
    ):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)

    assert proc.wait(timeout=60) == 130
    assert "continues this suite run" in proc.stderr.read()
    assert not [c for c in backend.owned()["containers"] if c.get("assure.pid") == str(proc.pid)]
    [record] = (tmp_path / ".assure" / "suites").iterdir()
    state = json.loads((record / "state.json").read_text())
    assert (
        state["state"] == "running"
        and state["runs"][0]["run_id"] == run_dirs(tmp_path / ".assure" / "runs")[0].name
    )


def _benign_variant(tmp_path, name, change):
    """The benign example with absolute paths and `change(data)` applied."""
    import yaml

    from .conftest import ROOT

    data = yaml.safe_load((EXAMPLES / "benign.yaml").read_text())
    data["name"] = name
    data["workspace"]["fixture"] = str(ROOT / "fixtures" / "workspaces" / "calc")
    data["agent"]["files"] = str(ROOT / "fixtures" / "agents" / "benign")
    change(data)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_failed_run_says_why_a_self_ratified_contract_and_a_missing_script(tmp_path, images):
    """Real containers: the gateway journals the gate's denial; the report's reason and the box
    name it (and `validate` had said so before the run). A missing script is refused before
    the start, as `validate` refuses it."""

    def self_ratified(d):
        d["contract"]["ratified_by"] = d["contract"]["proposed_by"]

    def missing(d):
        d["agent"]["command"] = ["sh", "/opt/agent/gone.sh"]

    spec = _benign_variant(tmp_path, "self-ratified", self_ratified)
    assert (
        "contract.self_ratified" in assure("validate", str(spec), cwd=tmp_path, check_code=1).stderr
    )
    (attempt,) = json.loads(assure("run", "--json", str(spec), cwd=tmp_path, check_code=3).stdout)[
        "attempts"
    ]
    denial = attempt["reason"]["gate_denial"]
    assert (denial["tool"], denial["path"], denial["rule"]) == (
        "fs.write",
        "src/calc.py",
        "contract.self_ratified",
    )
    assert (
        attempt["reason"]["summary"]
        == 'the gate denied agent:"fs.write" on agent:"src/calc.py": contract.self_ratified'
    )
    assert attempt["reason"]["agent_output"]  # assure-tool's complaint, as the agent printed it

    spec = _benign_variant(tmp_path, "missing-script", missing)
    assert "agent.command[1]" in assure("validate", str(spec), cwd=tmp_path, check_code=1).stderr
    refused = assure(
        "run", str(spec), cwd=tmp_path, check_code=1
    ).stderr  # told before the start, as validate tells it
    assert "agent.command[1]: /opt/agent/gone.sh is not among the agent files" in refused, refused
