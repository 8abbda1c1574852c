"""Runs and suites side by side on the real engine: six `assure run` processes at once in one
folder, `assure suite -j 2` with its progress off a terminal, and a kill -9 of a suite with
two specs in flight that the same command then finishes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import yaml

from assure.sandbox import uids
from tests.contracts import ratify_in_place
from tests.integration.conftest import ROOT, run_dirs

ASSURE = [sys.executable, "-m", "assure.cli"]
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


def spec_file(folder: Path, name: str, command: list[str], **fields: object) -> Path:
    data = {
        "version": 1,
        "name": name,
        "agent": {"command": command, "files": str(ROOT / "fixtures" / "agents" / "governance")},
        "workspace": {
            "fixture": str(ROOT / "fixtures" / "workspaces" / "calc"),
            "writable": ["out/**"],
            "protected": ["tests/**"],
        },
        "limits": {"wall_seconds": 60},
        "assertions": [],
        "expect": "pass",
        **fields,
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return ratify_in_place(path)


def notes(folder: Path, name: str) -> Path:
    return spec_file(folder, name, ["sh", "/opt/agent/notes-only.sh"])


def slow(folder: Path, name: str) -> Path:
    """An agent that outlives its wall clock (a fail, as expected); an interrupted attempt does not
    count."""
    return spec_file(
        folder,
        name,
        ["sh", "-c", "echo started; sleep 300"],
        limits={"wall_seconds": 15},
        max_attempts=1,
        assertions=[{"exit_code": 0}],
        expect="fail",
    )


def write_suite(folder: Path, specs: list[Path]) -> Path:
    path = folder / "suite.yaml"
    path.write_text(
        yaml.safe_dump({"version": 1, "name": "side", "specs": [p.name for p in specs]})
    )
    return path


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_six_runs_started_at_once_in_one_folder_each_get_their_own_run(tmp_path, images):
    spec = notes(tmp_path, "notes")
    procs = [
        subprocess.Popen(
            ASSURE + ["run", "--json", str(spec)],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    done = [(p.wait(timeout=600), p.stdout.read(), p.stderr.read()) for p in procs]

    for code, _, err in done:
        assert code == 0 and "Traceback" not in err and "resuming" not in err, err
        assert re.search(rf"^{STAMP} notes: start \d+\.\ds$", err, re.M) and re.search(
            rf"^{STAMP} notes: verify \d+\.\ds$", err, re.M
        ), err
    reports = [json.loads(out) for _, out, _ in done]
    assert [r["verdict"] for r in reports] == ["pass"] * 6
    ids = {r["run_id"] for r in reports}
    runs = tmp_path / ".assure" / "runs"
    assert len(ids) == 6 and {p.name for p in run_dirs(runs)} == ids
    for run_id in ids:
        assert json.loads((runs / run_id / "report.json").read_text())["run_id"] == run_id
        assert json.loads((runs / run_id / "state.json").read_text())["state"] == "finished"
        verified = subprocess.run(
            ASSURE + ["receipts", "verify", str(runs / run_id)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_suite_with_j_2_runs_two_at_once_and_prints_one_timestamped_line_per_spec(
    tmp_path, images
):
    specs = [notes(tmp_path, name) for name in ("alpha", "beta", "gamma")]
    suite = write_suite(tmp_path, specs)

    done = subprocess.run(
        ASSURE + ["suite", "--json", "-j", "2", str(suite)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )

    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if re.match(STAMP + " ", line)]
    assert len(lines) == 3, done.stderr
    for line in lines:
        assert re.fullmatch(
            rf"{STAMP} \[[123]/3\] (alpha|beta|gamma): pass \(expects pass\) \d+\.\ds", line
        ), line
    assert sorted(re.search(r"\] (\w+):", line).group(1) for line in lines) == [
        "alpha",
        "beta",
        "gamma",
    ]
    result = json.loads(done.stdout)
    assert [(r["spec"], r["verdict"]) for r in result["results"]] == [
        ("alpha", "pass"),
        ("beta", "pass"),
        ("gamma", "pass"),
    ]
    [record] = (tmp_path / ".assure" / "suites").iterdir()
    entries = json.loads((record / "state.json").read_text())["runs"]
    a, b = entries[0], entries[1]
    assert at(a["started_at"]) < at(b["finished_at"]) and at(b["started_at"]) < at(
        a["finished_at"]
    )  # alpha and beta overlapped


def test_off_a_terminal_each_finished_spec_is_printed_when_it_finishes_not_at_the_end(
    tmp_path, images
):
    """Issue 13 found nothing printed until the end when output is not a terminal: the first
    spec's line must arrive while the second (8 s of sleep) still runs."""
    suite = write_suite(
        tmp_path, [notes(tmp_path, "quick"), spec_file(tmp_path, "later", ["sh", "-c", "sleep 8"])]
    )
    proc = subprocess.Popen(
        ASSURE + ["suite", "-j", "1", str(suite)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    arrived = None
    for line in proc.stderr:
        if arrived is None and re.match(rf"{STAMP} \[1/2\] quick: pass", line):
            arrived = time.monotonic()
    assert proc.wait(timeout=300) == 0
    assert (
        arrived is not None and time.monotonic() - arrived > 5
    )  # printed as it happened, 8 s before the suite ended


def test_on_a_terminal_a_suite_shows_a_progress_bar_and_a_mark_per_finished_spec(tmp_path, images):
    """On a terminal (a pty here) the suite draws rich's bar, with the specs in flight and the
    count done, and prints one ✓/✗ line per finished spec above it, not the timestamped lines."""
    import pty

    suite = write_suite(
        tmp_path, [notes(tmp_path, "quick"), spec_file(tmp_path, "later", ["sh", "-c", "sleep 3"])]
    )
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "LINES": "40", "TERM": "xterm"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        ASSURE + ["suite", "-j", "1", str(suite)],
        cwd=tmp_path,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    seen = b""
    while True:  # until the pty closes with the process
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: every end of the follower is closed
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert proc.wait(timeout=300) == 0
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen.decode("utf-8", "replace"))
    assert "━" in text and re.search(r"suite \S+ .*1/2", text), text[
        -2000:
    ]  # the bar, one of two done
    assert "later: " in text  # the spec in flight, named in the bar
    assert re.search(r"✓ \[1/2\] quick: pass", text) and re.search(
        r"✓ \[2/2\] later: pass", text
    ), text[-2000:]
    assert not re.search(rf"{STAMP} \[1/2\]", text)  # the off-terminal form is not used


def test_a_suite_killed_with_two_specs_in_flight_is_finished_by_the_same_command(
    tmp_path, images, backend
):
    specs = [notes(tmp_path, "quick"), slow(tmp_path, "slow-a"), slow(tmp_path, "slow-b")]
    suite = write_suite(tmp_path, specs)
    command = ASSURE + ["suite", "-j", "2", str(suite)]
    proc = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    state_file = None
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # quick has its verdict, and both slow agents run
        found = list((tmp_path / ".assure" / "suites").glob("*/state.json"))
        state_file = found[0] if found else None
        state = json.loads(state_file.read_text()) if state_file else {"runs": []}
        agents = [
            c
            for c in backend.owned()["containers"]
            if c.get("assure.pid") == str(proc.pid) and c.get("assure.role") == "agent"
        ]
        if [e["verdict"] for e in state["runs"]] == ["pass", None, None] and len(agents) == 2:
            break
        time.sleep(0.2)
    else:
        proc.kill()
        raise AssertionError(f"the suite never had two specs in flight: {state}")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    before = json.loads(state_file.read_text())["runs"]
    runs = tmp_path / ".assure" / "runs"
    quick_events = hashlib.sha256(
        (runs / before[0]["run_id"] / "events.jsonl").read_bytes()
    ).hexdigest()

    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)

    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    assert "continuing unfinished suite run" in again.stderr
    lines = [line for line in again.stderr.splitlines() if re.match(STAMP + " ", line)]
    assert re.fullmatch(
        rf"{STAMP} \[1/3\] quick: pass \(expects pass\) kept from before", lines[0]
    ), lines
    assert sorted(line.split("] ")[1].split(":")[0] for line in lines[1:]) == ["slow-a", "slow-b"]
    after = json.loads(state_file.read_text())
    assert after["state"] == "finished" and after["runs"][0] == before[0]
    assert [e["run_id"] for e in after["runs"]] == [
        e["run_id"] for e in before
    ]  # the interrupted ones resumed, not replaced
    assert [e["verdict"] for e in after["runs"]] == ["pass", "fail", "fail"]
    assert (
        hashlib.sha256((runs / before[0]["run_id"] / "events.jsonl").read_bytes()).hexdigest()
        == quick_events
    )  # quick not re-run
    for entry in after["runs"][1:]:
        events = [
            json.loads(line)["event"]
            for line in (runs / entry["run_id"] / "events.jsonl").read_text().splitlines()
        ]
        assert "run_resumed" in events and "attempt_interrupted" in events
    assert len(run_dirs(runs)) == 3
    assert (
        os.path.isdir(tmp_path / ".assure" / "suites")
        and len(list((tmp_path / ".assure" / "suites").iterdir())) == 1
    )


HOG = """\
import os, time
kids = []
for i in range(400):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(25)
        os._exit(0)
    kids.append(pid)
print("holding", len(kids), flush=True)
time.sleep(25)
"""


def sandbox_tasks() -> int:
    """Tasks (threads) on this host whose real uid is a sandbox user's (uids.IDS): what RLIMIT_NPROC
    counts, per uid."""
    done = subprocess.run(
        ["ps", "-e", "-L", "-o", "ruid=", "--no-headers"], capture_output=True, text=True
    )
    return sum(int(line) in uids.IDS for line in done.stdout.split())


def test_two_agents_filling_their_pids_limits_do_not_starve_a_third_run(tmp_path, images):
    """Two hostile agents each fill their own pids cgroup (contained); a benign run started
    meanwhile must still start its gateway. With nproc sized for one run, the uid's shared
    count left it "can't start new thread" (a harness error)."""
    hog = spec_file(
        tmp_path,
        "hog",
        ["python3", "-c", HOG],
        hostile=True,
        limits={"wall_seconds": 30, "pids": 128},
        assertions=[{"exit_code": 0}],
        expect="contained",
    )
    benign = notes(tmp_path, "bystander")
    hogs = [
        subprocess.Popen(
            ASSURE + ["run", "--json", "--new", str(hog)],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 60
        while sandbox_tasks() < 250 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sandbox_tasks() >= 250, "the hogs never filled their pids limits"

        bystander = subprocess.run(
            ASSURE + ["run", "--json", str(benign)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        hogged = [p.communicate(timeout=120) for p in hogs]  # each cleans up after itself

    report = json.loads(bystander.stdout)
    assert report["verdict"] == "pass", [
        f for a in report["attempts"] for f in a["findings"] if f["severity"] != "info"
    ]
    for out, err in hogged:
        assert json.loads(out)["verdict"] == "contained", err


def test_runs_started_at_once_beside_an_unfinished_run_resume_it_once_and_the_rest_start_anew(
    tmp_path, images
):
    spec = spec_file(tmp_path, "again", ["sh", "/opt/agent/notes-only.sh"], max_attempts=2)
    killed = subprocess.run(
        ASSURE + ["run", str(spec)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ASSURE_FAILPOINT": "start"},
    )
    assert killed.returncode == -9, killed.stderr
    runs = tmp_path / ".assure" / "runs"
    [interrupted] = run_dirs(runs)

    procs = [
        subprocess.Popen(
            ASSURE + ["run", "--json", str(spec)],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    done = [(p.wait(timeout=600), p.stdout.read(), p.stderr.read()) for p in procs]

    for code, _, err in done:
        assert code == 0 and "Traceback" not in err, (
            err
        )  # none turned away by the one that resumed it
    ids = [json.loads(out)["run_id"] for _, out, _ in done]
    assert ids.count(interrupted.name) == 1 and len(set(ids)) == 3
    assert {p.name for p in run_dirs(runs)} == set(ids)
    events = [
        json.loads(line)["event"]
        for line in (interrupted / "events.jsonl").read_text().splitlines()
    ]
    assert events.count("run_resumed") == 1


def test_the_shards_of_a_suite_run_apart_and_merge_back_into_the_whole(tmp_path, images):
    """A CI matrix: `--shard 1/2` and `--shard 2/2` as two processes at once in one folder, each
    its own suite run with its summary; `assure report merge` joins them into the whole suite."""
    specs = [
        notes(tmp_path, name) for name in ("delta", "alpha", "gamma")
    ]  # name order: alpha, delta, gamma
    suite = write_suite(tmp_path, specs)
    procs = [
        subprocess.Popen(
            ASSURE
            + ["suite", "-j", "1", "--shard", f"{k}/2", "--summary", f"shard{k}.json", str(suite)],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in (1, 2)
    ]
    for p in procs:
        assert p.wait(timeout=600) == 0, p.stderr.read()

    one, two = (json.loads((tmp_path / f"shard{k}.json").read_text()) for k in (1, 2))
    assert [r["spec"] for r in one["results"]] == ["alpha", "gamma"] and [
        r["spec"] for r in two["results"]
    ] == ["delta"]
    assert (one["shard"], two["shard"]) == ({"index": 1, "count": 2}, {"index": 2, "count": 2})
    states = [
        json.loads(p.read_text()) for p in (tmp_path / ".assure" / "suites").glob("*/state.json")
    ]
    assert (
        sorted(s["shard"]["index"] for s in states) == [1, 2]
        and len({s["digest"] for s in states}) == 2
    )
    merged = subprocess.run(
        ASSURE + ["report", "merge", "shard2.json", "shard1.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert merged.returncode == 0, merged.stderr
    whole = json.loads(merged.stdout)
    assert [(r["spec"], r["verdict"]) for r in whole["results"]] == [
        ("delta", "pass"),
        ("alpha", "pass"),
        ("gamma", "pass"),
    ]
    assert whole["counts"]["total"] == 3 and whole["as_expected"] is True
