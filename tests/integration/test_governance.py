"""Operator override, budget halts and alerts with ACK, live on real containers."""

import json
import subprocess
import sys
import time

import pytest

from assure.core import control
from assure.records import alerts, journal
from assure.records.store import RunDir

from .conftest import SPECS, run_dirs

ASSURE = [sys.executable, "-m", "assure.cli"]


def wait_for_agent(backend, pid: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(
            c.get("assure.pid") == str(pid) and c.get("assure.role") == "agent"
            for c in backend.owned()["containers"]
        ):
            return
        time.sleep(0.1)
    pytest.fail("the agent container never started")


def test_halt_mid_run_stops_the_agent_and_leaves_a_pending_alert(tmp_path, images, backend):
    proc = subprocess.Popen(
        ASSURE + ["run", "--json", str(SPECS / "hang.yaml")],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_agent(backend, proc.pid)
        run_id = run_dirs(tmp_path / ".assure" / "runs")[0].name
        halted = subprocess.run(
            ASSURE + ["halt", run_id], cwd=tmp_path, capture_output=True, text=True, timeout=30
        )
        assert halted.returncode == 0, halted.stderr
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    report = json.loads(out)
    stop = report["attempts"][0]["stopped"]
    assert stop["reason"] == "operator_halt"
    assert 0 < stop["latency_ms"] < 5000  # the standard allows 5 s; the agent ignores nothing here
    run = RunDir.open(tmp_path / ".assure" / "runs" / run_id)
    effective = list(journal.query(run, event="override_effective"))
    requested = list(journal.query(run, event="override_requested"))
    assert len(requested) == 1 and requested[0]["source"] == "operator"
    assert len(effective) >= 1 and effective[0]["request_id"] == requested[0]["request_id"]
    pending = [a for a in alerts.all_alerts(tmp_path / ".assure" / "runs") if a.state == "pending"]
    assert [a.kind for a in pending] == [
        "override_block"
    ]  # halted: not quarantined, no new attempt
    listed = subprocess.run(
        ASSURE + ["alerts", "--pending", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert [a["id"] for a in json.loads(listed.stdout)] == [pending[0].id]
    acked = subprocess.run(
        ASSURE + ["ack", pending[0].id], cwd=tmp_path, capture_output=True, text=True, timeout=30
    )
    assert acked.returncode == 0
    assert [a.state for a in alerts.all_alerts(tmp_path / ".assure" / "runs")] == ["acked"]
    assert control.read(run.control_dir).halted is True


def test_deadline_is_a_budget_halt_with_a_pending_alert(run, tmp_path):
    result = run("sleeper")
    stop = result.report["attempts"][0]["stopped"]
    assert stop["reason"] == "deadline" and stop["counter"] == "wall_seconds"
    assert stop["latency_ms"] is not None and stop["latency_ms"] >= 0
    by_kind = {a.kind: a for a in alerts.all_alerts(result.run_dir.parent)}
    assert sorted(by_kind) == ["budget_halt", "quarantine"]  # one attempt allowed, none verified
    alert = by_kind["budget_halt"]
    assert alert.state == "pending"
    records = list(journal.query(RunDir.open(result.run_dir), event="budget_halt"))
    assert [r["counter"] for r in records] == ["wall_seconds"]
    lines = (result.run_dir.parent.parent / "alerts.jsonl").read_text().splitlines()
    assert alert.id in [json.loads(line)["id"] for line in lines]


def test_a_breach_raises_an_alert(run):
    result = run("escape")
    kinds = sorted(a.kind for a in alerts.all_alerts(result.run_dir.parent))
    assert kinds == ["breach", "quarantine"]  # a breach quarantines the task at once


def test_a_stale_heartbeat_raises_an_alert_that_stays_pending_until_acked(
    make_spec, tmp_path, images, backend
):
    import os
    import signal

    from .conftest import ROOT, ratified

    spec = make_spec(
        "stale",
        "fix-slow.sh",
        contract=ratified(["fs:**"]),
        agent={
            "command": ["sh", "/opt/agent/fix-slow.sh"],
            "files": str(ROOT / "fixtures" / "agents" / "governance"),
            "env": {"LINGER": "30"},
        },
    )
    proc = subprocess.Popen(
        ASSURE + ["run", str(spec)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    runs = tmp_path / ".assure" / "runs"
    manifest = tmp_path / "health.json"
    manifest.write_text(
        json.dumps(
            {
                "components": [
                    {"name": "verifier", "stale_after_seconds": 1},
                    {"name": "driver", "stale_after_seconds": 1},
                ]
            }
        )
    )
    try:
        wait_for_agent(backend, proc.pid)
        deadline = (
            time.monotonic() + 30
        )  # the agent is listed before the driver's first heartbeats (its run phase)
        while not list(runs.glob("*/control/verifier.json")) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(
            proc.pid, signal.SIGSTOP
        )  # the driver freezes: its heartbeats stop, its run stays "running"
        time.sleep(2.5)
        monitor = subprocess.run(
            ASSURE + ["monitor", "--once", "--runs-dir", str(runs), "--manifest", str(manifest)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert monitor.returncode == 0, monitor.stderr
        stale = [a for a in alerts.all_alerts(runs) if a.kind == "stale_health"]
        assert stale and all(a.state == "pending" for a in stale)
        assert any("verifier" in a.message for a in stale)
        again = subprocess.run(
            ASSURE + ["monitor", "--once", "--runs-dir", str(runs), "--manifest", str(manifest)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert again.returncode == 0
        assert len([a for a in alerts.all_alerts(runs) if a.kind == "stale_health"]) == len(
            stale
        )  # not raised twice
        for alert in stale:
            assert (
                subprocess.run(
                    ASSURE + ["ack", alert.id, "--runs-dir", str(runs)],
                    cwd=tmp_path,
                    capture_output=True,
                    timeout=30,
                ).returncode
                == 0
            )
        assert all(a.state == "acked" for a in alerts.all_alerts(runs) if a.kind == "stale_health")
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        proc.wait(timeout=60)
