"""The dumb driver, live: kill -9 at four points resumes with no duplicate effect; the promote
gate commits only what a ratified contract allows; max attempts quarantine; receipts verify."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest

from assure.records import alerts
from assure.records.store import read_json

from .conftest import ROOT, live_ledger, ratified, run_dirs

ASSURE = [sys.executable, "-m", "assure.cli"]


def assure(*args, cwd, env=None, timeout=300):
    return subprocess.run(
        ASSURE + list(args),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def target(tmp_path):
    """A git repository holding the fixture: where verified results are committed."""
    repo = tmp_path / "target"
    subprocess.run(
        ["cp", "-a", str(ROOT / "fixtures" / "workspaces" / "calc"), str(repo)], check=True
    )
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "fixture"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True, env=env)
    return repo


@pytest.fixture
def ledger(tmp_path):
    return live_ledger(tmp_path)


def commits(repo):
    return subprocess.run(
        ["git", "-C", str(repo), "log", "--format=%s"], capture_output=True, text=True, check=True
    ).stdout.splitlines()


@pytest.mark.parametrize("point", ["start", "run", "verify", "promote"])
def test_kill_9_resumes_the_same_task_with_no_duplicate_effect(
    point, make_spec, tmp_path, target, ledger, images, backend
):
    spec = make_spec(
        f"chaos-{point}",
        "fix-and-record.sh",
        contract=ratified(["fs:**", "db:*"], ceiling="irreversible"),
        autonomy={"dial": "irreversible", "verifier_trust": "irreversible"},
        max_attempts=3,
        databases=[{"name": "ledger", "fixture": str(ledger), "mode": "live"}],
        promote={"target": str(target)},
        assertions=[{"command": {"run": ["python3", "tests/test_calc.py"]}}, {"exit_code": 0}],
    )
    killed = assure("run", str(spec), cwd=tmp_path, env={"ASSURE_FAILPOINT": point})
    assert killed.returncode == -9, killed.stderr
    (run_dir,) = run_dirs(tmp_path / ".assure" / "runs")
    assert read_json(run_dir / "state.json")["state"] == "running"

    # `assure resume RUN`, or the same `assure run SPEC` again: both pick up the same run
    resumed = (
        assure("run", "--json", str(spec), cwd=tmp_path)
        if point == "verify"
        else assure("resume", run_dir.name, "--json", cwd=tmp_path)
    )
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    (task,) = report["tasks"]
    assert task["id"] == "main" and task["state"] == "committed"
    assert task["attempts"] == (
        [1] if point == "promote" else [1, 2]
    )  # the interrupted attempt is kept, the next one runs
    assert sqlite3.connect(ledger).execute("SELECT count(*) FROM entries").fetchone() == (
        1,
    )  # one effect
    assert commits(target) == ["assure: task main", "fixture"]  # one commit, never two
    assert "return a + b" in (target / "src" / "calc.py").read_text()
    events = [
        json.loads(line)["event"] for line in (run_dir / "events.jsonl").read_text().splitlines()
    ]
    assert "run_resumed" in events
    if point != "promote":
        assert "attempt_interrupted" in events
    assert not backend.owned(run_dir.name)["containers"]


def test_an_unratified_contract_with_a_passing_agent_commits_nothing(
    make_spec, tmp_path, target, images
):
    unratified = ratified(["fs:**"])
    del unratified["ratified_by"]
    spec = make_spec(
        "unratified-promote",
        "notes-only.sh",
        contract=unratified,
        promote={"target": str(target)},
        assertions=[{"file_exists": "out/notes.txt"}],
    )
    done = assure("run", "--json", str(spec), cwd=tmp_path)
    report = json.loads(done.stdout)
    assert report["verdict"] == "pass"
    (task,) = report["tasks"]
    assert task["state"] == "proposed" and "ratif" in task["reason"]
    assert commits(target) == ["fixture"] and not (target / "out" / "notes.txt").exists()
    run_dir = tmp_path / ".assure" / "runs" / report["run_id"]
    bundle = next((run_dir / "proposals").iterdir())
    assert "out/notes.txt" in (bundle / "patch.diff").read_text()


def test_max_attempts_quarantine_with_a_pending_alert(make_spec, tmp_path, images):
    spec = make_spec(
        "never",
        "notes-only.sh",
        contract=ratified(["fs:**"]),
        max_attempts=2,
        assertions=[{"file_exists": "out/never.txt"}],
    )
    report = json.loads(assure("run", "--json", str(spec), cwd=tmp_path).stdout)
    (task,) = report["tasks"]
    assert (task["state"], task["attempts"]) == ("quarantined", [1, 2])
    pending = [
        a for a in alerts.all_alerts(tmp_path / ".assure" / "runs") if a.kind == "quarantine"
    ]
    assert len(pending) == 1 and pending[0].state == "pending"
    again = assure(
        "run", "--json", str(spec), cwd=tmp_path
    )  # quarantine is terminal: a new run, never a re-queue
    assert json.loads(again.stdout)["run_id"] != report["run_id"]


def test_receipts_verify_with_the_public_key_and_fail_after_one_byte(
    make_spec, tmp_path, target, images
):
    keys = tmp_path / "keys"
    assert assure("keys", "generate", "--dir", str(keys), cwd=tmp_path).returncode == 0
    private, public = keys / "aar-ed25519.pem", keys / "aar-ed25519.pub.pem"
    spec = make_spec(
        "signed",
        "fix-and-record.sh",
        contract=ratified(["fs:**", "db:*"]),
        promote={"target": str(target)},
        assertions=[{"command": {"run": ["python3", "tests/test_calc.py"]}}],
    )
    # no ledger database here: the agent's db call is refused, its fix still passes
    report = json.loads(
        assure("run", "--json", "--key", str(private), str(spec), cwd=tmp_path).stdout
    )
    run_dir = tmp_path / ".assure" / "runs" / report["run_id"]
    receipt = json.loads(next((run_dir / "receipts").glob("main-*.json")).read_text())
    assert receipt["verdict"] == "verified" and receipt["signature"]["alg"] == "Ed25519"
    assert receipt["deployment_id"] and receipt["scope_id"] == "c-test"
    ok = assure("receipts", "verify", str(run_dir), "--public-key", str(public), cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    journal = run_dir / "attempts" / "1" / "gateway" / "journal.jsonl"
    data = bytearray(journal.read_bytes())
    data[data.index(b'"tool":"fs.write"') + 9] ^= 0x01
    journal.write_bytes(bytes(data))
    bad = assure("receipts", "verify", str(run_dir), "--public-key", str(public), cwd=tmp_path)
    assert bad.returncode == 1 and "attempts/1/gateway/journal.jsonl" in bad.stdout + bad.stderr


HOSTILE_ID = "../../notes $(touch /tmp/assure-pwned) `id`\n\x1b[31m;rm -rf /"


def test_tasks_run_in_order_on_committed_state_and_a_hostile_id_stays_data(
    make_spec, tmp_path, target, images
):
    contract = ratified(["fs:**"])
    spec = make_spec(
        "goal",
        "tasks.sh",
        contract=contract,
        promote={"target": str(target)},
        tasks=[
            {
                "id": "fix add",
                "description": "fix the add function",
                "assertions": [{"command": {"run": ["python3", "tests/test_calc.py"]}}],
            },
            {
                "id": HOSTILE_ID,
                "description": "notes on the fix",
                "max_attempts": 1,
                "assertions": [
                    {"file_contains": {"path": "out/notes.txt", "text": "builds on the fix"}}
                ],
            },
        ],
    )
    report = json.loads(assure("run", "--json", str(spec), cwd=tmp_path).stdout)
    assert [(t["id"], t["state"]) for t in report["tasks"]] == [
        ("fix add", "committed"),
        (HOSTILE_ID, "committed"),
    ]
    assert (target / "out" / "notes.txt").read_text() == "builds on the fix\n"
    assert commits(target)[:2] == [
        "assure: task " + "../../notes $(touch /tmp/assure-pwned) `id`\\n\\x1b[31m;rm -rf /",
        "assure: task fix add",
    ]
    assert not os.path.exists("/tmp/assure-pwned")
    run_dir = tmp_path / ".assure" / "runs" / report["run_id"]
    for path in run_dir.rglob("*"):
        assert path.resolve().is_relative_to(run_dir.resolve()) or path.is_symlink()
        assert "\n" not in path.name and "\x1b" not in path.name
    assert len(list((run_dir / "receipts").glob("*.json"))) == 3  # two receipts and the seal


def wait_for(predicate, timeout=60):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    pytest.fail("timed out")


def test_dial_down_proposes_and_promote_commits_under_a_raised_dial(
    make_spec, tmp_path, target, images, backend
):
    spec = make_spec(
        "dialed",
        "fix-slow.sh",
        contract=ratified(["fs:**"]),
        promote={"target": str(target)},
        assertions=[{"command": {"run": ["python3", "tests/test_calc.py"]}}],
    )
    proc = subprocess.Popen(
        ASSURE + ["run", "--json", str(spec)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    runs = tmp_path / ".assure" / "runs"
    wait_for(
        lambda: (
            runs.exists()
            and run_dirs(runs)
            and any(
                c.get("assure.role") == "agent"
                for c in backend.owned(run_dirs(runs)[0].name)["containers"]
            )
        )
    )
    run_id = run_dirs(runs)[0].name
    assert assure("dial", run_id, "propose", cwd=tmp_path).returncode == 0
    report = json.loads(proc.communicate(timeout=120)[0])
    assert report["tasks"][0]["state"] == "proposed" and commits(target) == ["fixture"]
    assert (
        assure("promote", run_id, cwd=tmp_path).returncode == 1
    )  # still dialled down: stays proposed
    assert (
        assure("dial", run_id, "commit", cwd=tmp_path).returncode == 1
    )  # the run is over: its logs are sealed
    promoted = assure("promote", run_id, "--dial", "commit", cwd=tmp_path)
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    assert commits(target) == ["assure: task main", "fixture"]
    assert "return a + b" in (target / "src" / "calc.py").read_text()
    listed = json.loads(assure("runs", "--json", cwd=tmp_path).stdout)
    assert [(r["run_id"], r["tasks"]) for r in listed] == [(run_id, {"main": "committed"})]
    timeline = assure("show", run_id, cwd=tmp_path).stdout
    for event in (
        "attempt_started",
        "dial_changed",
        "promote_proposed",
        "promote_decided",
        "promote_committed",
    ):
        assert event in timeline, event
    assert (
        assure(
            "receipts", "verify", str(tmp_path / ".assure" / "runs" / run_id), cwd=tmp_path
        ).returncode
        == 0
    )


def test_a_failed_commit_is_commit_failed_with_an_alert_never_done(make_spec, tmp_path, images):
    broken = tmp_path / "broken-target"
    broken.mkdir()
    (broken / ".git").write_text("not a git directory\n")
    spec = make_spec(
        "broken",
        "fix-slow.sh",
        contract=ratified(["fs:**"]),
        promote={"target": str(broken)},
        agent={
            "command": ["sh", "/opt/agent/fix-slow.sh"],
            "files": str(ROOT / "fixtures" / "agents" / "governance"),
            "env": {"LINGER": "0"},
        },
        assertions=[{"command": {"run": ["python3", "tests/test_calc.py"]}}],
    )
    report = json.loads(assure("run", "--json", str(spec), cwd=tmp_path).stdout)
    (task,) = report["tasks"]
    assert task["state"] == "commit_failed" and "git" in task["reason"]
    pending = [
        a for a in alerts.all_alerts(tmp_path / ".assure" / "runs") if a.kind == "commit_failed"
    ]
    assert len(pending) == 1 and pending[0].state == "pending"


NAMES = [
    b"out/new\nline.txt",
    b"out/\x1b[31mred.txt",
    b"out/bad\xffbyte.txt",
    "out/\u202etxt.exe".encode(),
]


@pytest.mark.parametrize("where", ["git", "folder", "proposal"])
def test_hostile_names_in_the_writable_scope_are_promoted_as_the_bytes_they_are(
    make_spec, tmp_path, target, images, where
):
    create = (
        f"import os\nos.makedirs('out', exist_ok=True)\nfor name in {NAMES!r}:\n    open(name,"
        " 'wb').write(name)"
    )
    if where == "folder":
        shutil.rmtree(target / ".git")
    promote = {} if where == "proposal" else {"promote": {"target": str(target)}}
    spec = make_spec(
        "names",
        "unused.sh",
        agent={"command": ["python3", "-c", create]},
        contract=ratified(["fs:**"]),
        assertions=[{"exit_code": 0}],
        **promote,
    )

    done = assure("run", "--json", str(spec), cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    [task] = json.loads(done.stdout)["tasks"]
    assert task["state"] == ("proposed" if where == "proposal" else "committed"), task
    if where == "proposal":
        [run_dir] = run_dirs(tmp_path / ".assure" / "runs")
        [bundle] = (run_dir / "proposals").iterdir()
        listed = [c["path"] for c in json.loads((bundle / "proposal.json").read_text())["changes"]]
        assert sorted(listed) == sorted(os.fsdecode(name) for name in NAMES)
        patch = (bundle / "patch.diff").read_text().splitlines()
        # each text file's one line has no newline: marked, never glued to the next header
        assert patch.count("\\ No newline at end of file") == 3 and not any(
            "Binary" in line[1:] for line in patch
        )
        assert (
            "Binary, special or large file out/bad\\xffbyte.txt (added)" in patch
        )  # not UTF-8: not shown as text
        return
    for name in NAMES:
        assert (target / os.fsdecode(name)).read_bytes() == name
    if where == "git":
        assert commits(target)[0] == "assure: task main"
        assert (
            subprocess.run(
                ["git", "-C", str(target), "status", "--porcelain"], capture_output=True
            ).stdout
            == b""
        )
