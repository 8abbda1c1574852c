"""The runtime monitor: stale heartbeats, the registered anomaly classes, escalation of
unacknowledged alerts, its own heartbeat, and a hostile runs base. No sleeping: every pass
gets its `now`."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from assure.cli import app
from assure.core import control
from assure.core.chain import verify_chain
from assure.errors import AssureError
from assure.ops import anomalies, monitor, runsbase
from assure.ops.anomalies import AttemptData, Call, RunData
from assure.records import alerts, health
from assure.records.alerts import Sinks
from assure.records.health import Manifest, Thresholds
from assure.verify.stopped import Stopped
from tests.unit import health_fixtures as hf

SINKS = Sinks()


@pytest.fixture()
def base(tmp_path: Path) -> Path:
    return tmp_path / "runs"


def run_pass(base: Path, now: float, manifest: Manifest | None = None) -> monitor.Pass:
    return monitor.scan(base, manifest or Manifest(), now, SINKS)


def alert_files(where: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((where / "alerts").glob("*.json"))]


# --- the registry -------------------------------------------------------------------------------
def test_the_registry_is_a_finite_tuple_with_one_alert_kind_per_class():
    names = [name for name, _ in anomalies.ANOMALIES]
    assert isinstance(anomalies.ANOMALIES, tuple)
    assert names == list(hf.CLASSES) and len(set(names)) == len(names)
    assert set(names) <= set(alerts.AlertKind) and "stale_health" in set(alerts.AlertKind)
    assert all(callable(detector) for _, detector in anomalies.ANOMALIES)


# --- each anomaly class has a fixture that fires it, and only it ----------------------------------
@pytest.mark.parametrize("anomaly", hf.CLASSES)
def test_each_fixture_fires_exactly_its_own_class_once(base, anomaly):
    run = hf.BUILDERS[anomaly](base)
    now = time.time()
    raised = monitor.run_once(base, Manifest(), now, SINKS)
    assert [a.kind for a in raised] == [anomaly]
    assert raised[0].run_id == run.name and raised[0].state == "pending"
    assert [a["kind"] for a in alert_files(run)] == [anomaly]
    assert monitor.run_once(base, Manifest(), now + 1, SINKS) == []  # not raised again


def test_the_clean_fixture_fires_nothing(base):
    hf.clean(base)
    now = time.time()
    assert monitor.run_once(base, Manifest(), now, SINKS) == []
    assert monitor.run_once(base, Manifest(), now + 5, SINKS) == []


@pytest.mark.parametrize("anomaly", hf.CLASSES)
def test_each_detector_is_quiet_on_the_other_fixtures(base, anomaly):
    """The pure detectors, on the plain data the monitor reads: each fires on its fixture alone."""
    for name, build in hf.BUILDERS.items():
        build(base / name)
    now = time.time()
    detector = dict(anomalies.ANOMALIES)[anomaly]
    fired = set()
    for name in hf.BUILDERS:
        runs, skipped = monitor.read_runs(base / name, Manifest(), now)
        assert skipped == [] and len(runs) == 1
        if detector(runs[0], Manifest().anomalies, now):
            fired.add(name)
    assert fired == {anomaly}


# --- the detectors as pure functions --------------------------------------------------------------
def _run(
    *attempts: AttemptData, state: str = "running", events_mtime: float | None = None
) -> RunData:
    return RunData("r", state, None, 0.0, 0.0, events_mtime, attempts, examined=True)


def test_rate_of_change_counts_any_sixty_second_window():
    assert anomalies.peak_per_window([0, 10, 59.9, 60, 61, 200]) == 4
    calls = tuple(Call(float(i), "fs.write", str(i), effect=True) for i in range(5))
    t = Thresholds(max_tool_calls_per_minute=10, max_changes_per_minute=4)
    found = anomalies.rate_of_change(_run(AttemptData(1, calls)), t, 100.0)
    assert [f.subject for f in found] == ["changes"]


def test_duplication_needs_enough_calls():
    same = tuple(Call(0.0, "fs.read", "d", effect=False) for _ in range(5))
    assert (
        anomalies.duplication_ratio(
            _run(AttemptData(1, same)), Thresholds(min_calls_for_ratio=6), 0.0
        )
        == []
    )
    assert [
        f.subject
        for f in anomalies.duplication_ratio(
            _run(AttemptData(1, same)), Thresholds(min_calls_for_ratio=5), 0.0
        )
    ] == ["duplicates"]


def test_resource_saturation_budget_stop_and_near_limit():
    t = Thresholds(near_limit_ratio=0.9)
    budget = AttemptData(
        1,
        finished=True,
        stopped=Stopped.budget("tool_calls", 1.0),
        tool_calls_used=10,
        tool_calls_limit=10,
    )
    near = AttemptData(2, tool_calls_used=9, tool_calls_limit=10)
    fine = AttemptData(3, tool_calls_used=8, tool_calls_limit=10)
    zero = AttemptData(4, tool_calls_used=0, tool_calls_limit=0)
    found = anomalies.resource_saturation(_run(budget, near, fine, zero), t, 0.0)
    assert [(f.attempt, f.subject) for f in found] == [(1, "budget"), (2, "tool_calls_near_limit")]


@pytest.mark.parametrize(
    "stopped",
    [{"reason": "tired"}, {"reason": "budget"}, {"reason": "deadline", "counter": 5}, [1], "x"],
    ids=["unknown-reason", "no-counter", "wrong-type", "a-list", "a-string"],
)
def test_a_malformed_stop_record_is_shown_as_malformed_never_as_no_stop(base, stopped):
    """container.json's `stopped` is read by `Stopped.from_json`: one it refuses is an alert and a
    skipped entry saying why, never dropped as if the agent had not been stopped."""
    run = hf.make_run(base, "stop-run", container={"stopped": stopped})
    done = run_pass(base, time.time())
    (alert,) = done.alerts
    assert (alert.kind, alert.detail["key"].rsplit(":", 1)[1]) == (
        "resource_saturation",
        "stop_malformed",
    )
    assert "its stop record (container.json `stopped`) is malformed: " in alert.message
    assert [s.reason for s in done.skipped if s.path.endswith("1/container.json")] == [
        f"malformed stop record: {alert.detail['why']}"
    ]
    assert alert.run_id == run.name


def test_a_budget_stop_read_from_the_tree_is_the_budget_anomaly(base):
    stop = Stopped.budget("tool_calls" + "x" * 100, 1.0).halted(2.0).to_json()
    hf.make_run(base, "budget-run", container={"stopped": stop})
    (alert,) = run_pass(base, time.time()).alerts
    assert alert.detail["key"].endswith(":budget")
    assert alert.detail["counter"] == "tool_calls" + "x" * 54  # bounded: the tree is untrusted


def test_silent_component_only_for_running_runs():
    t = Thresholds(silent_after_seconds=100)
    assert (
        anomalies.silent_component(
            _run(AttemptData(1, journal_mtime=50.0), events_mtime=10.0), t, 149.0
        )
        == []
    )
    assert (
        len(
            anomalies.silent_component(
                _run(AttemptData(1, journal_mtime=50.0), events_mtime=10.0), t, 151.0
            )
        )
        == 1
    )
    assert (
        anomalies.silent_component(
            _run(AttemptData(1, journal_mtime=50.0), state="finished"), t, 1e9
        )
        == []
    )


def test_staleness_counts_from_the_later_of_last_success_and_expected_since():
    assert anomalies.staleness(None, None, 10, 100) is None  # never expected, never seen
    assert anomalies.staleness(80.0, None, 10, 100) == 20
    assert anomalies.staleness(50.0, 95.0, 10, 100) is None  # expected only 5 s ago
    assert anomalies.staleness(None, 80.0, 10, 100) == 20


# --- stale heartbeats -----------------------------------------------------------------------------
def test_a_stale_heartbeat_raises_one_alert_that_stays_pending_until_acked(base):
    run = hf.clean(base)
    later = (
        time.time() + health.VERIFIER_STALE_SECONDS + 1
    )  # only the verifier (30 s) is overdue yet
    raised = monitor.run_once(base, Manifest(), later, SINKS)
    assert [(a.kind, a.detail["component"]) for a in raised] == [("stale_health", "verifier")]
    alert = raised[0]
    for step in range(1, 4):  # later passes: still pending, never duplicated
        assert monitor.run_once(base, Manifest(), later + step, SINKS) == []
        assert [(a["id"], a["state"]) for a in alert_files(run)] == [(alert.id, "pending")]
    acked = alerts.ack(base, alert.id, "alice")
    assert (acked.state, acked.acked_by) == ("acked", "alice")
    assert monitor.run_once(base, Manifest(), later + 5, SINKS) == []  # same staleness episode
    assert [a["state"] for a in alert_files(run)] == ["acked"]
    # the verifier recovers, then goes stale again: a new episode, a new alert
    health.beat(run / "control" / "verifier.json", health.VERIFIER, now=later + 6)
    health.beat(base / health.HEALTH_DIR / "driver.json", health.DRIVER, now=later + 6)
    assert monitor.run_once(base, Manifest(), later + 10, SINKS) == []
    again = monitor.run_once(base, Manifest(), later + 6 + health.VERIFIER_STALE_SECONDS + 1, SINKS)
    assert [(a.kind, a.detail["component"]) for a in again] == [("stale_health", "verifier")]


def test_a_missing_heartbeat_alerts_only_once_it_was_expected(base):
    run = hf.make_run(base, "nobeat-run", heartbeats=False)
    ready = (run / "attempts" / "1" / "gateway" / "ready").stat().st_mtime
    assert monitor.run_once(base, Manifest(), ready + 1, SINKS) == []
    raised = monitor.run_once(base, Manifest(), ready + health.VERIFIER_STALE_SECONDS + 1, SINKS)
    assert [a.detail["component"] for a in raised] == ["verifier"]
    assert "no usable heartbeat" in raised[0].message and raised[0].detail["problem"] == "missing"
    raised = monitor.run_once(base, Manifest(), ready + health.DRIVER_STALE_SECONDS + 1, SINKS)
    assert [(a.run_id, a.detail["component"]) for a in raised] == [(health.HEALTH_DIR, "driver")]


def test_nothing_is_expected_of_finished_attempts_or_runs(base):
    hf.make_run(base, "done-run", state="finished", heartbeats=False, container={"exit_code": 0})
    assert monitor.run_once(base, Manifest(), time.time() + 10_000, SINKS) == []


# --- escalation -----------------------------------------------------------------------------------
ESCALATING = Manifest.from_data(
    {"ack_window_seconds": 10, "halt_after_seconds": 20, "components": [{"name": "verifier"}]}
)


def _stale_verifier(base: Path) -> tuple[Path, alerts.Alert]:
    run = hf.clean(base)
    raised = monitor.run_once(
        base, ESCALATING, time.time() + health.VERIFIER_STALE_SECONDS + 1, SINKS
    )
    assert [a.detail["component"] for a in raised] == ["verifier"]
    return run, raised[0]


def _raised_at(alert: alerts.Alert) -> float:
    return runsbase.parse_time(alert.raised_at)


def test_unacked_alerts_dial_down_after_t1_and_halt_after_t2_once_each(base):
    run, alert = _stale_verifier(base)
    t0 = _raised_at(alert)
    assert run_pass(base, t0 + 9, ESCALATING).escalations == []
    assert control.read(run / "control") == control.Override()
    first = run_pass(base, t0 + 11, ESCALATING)
    assert [(e.alert_id, e.run_id, e.step, e.effect) for e in first.escalations] == [
        (alert.id, run.name, "dial_down", "requested")
    ]
    now = control.read(run / "control")
    assert (now.dial, now.halted, now.actor) == ("propose", False, "monitor")
    assert run_pass(base, t0 + 12, ESCALATING).escalations == []  # not repeated
    second = run_pass(base, t0 + 21, ESCALATING)
    assert [(e.step, e.effect) for e in second.escalations] == [("halt", "requested")]
    assert control.read(run / "control").halted is True
    assert run_pass(base, t0 + 40, ESCALATING).escalations == []
    log = verify_chain(run / "control" / control.OPERATOR_LOG)  # the operator log: each step once
    assert [(r["event"], r["actor"]) for r in log] == [
        ("dial_changed", "monitor"),
        ("override_requested", "monitor"),
    ]
    ledger = verify_chain(base / health.HEALTH_DIR / monitor.LEDGER)
    assert [(r["alert_id"], r["step"], r["request_id"]) for r in ledger] == [
        (alert.id, "dial_down", first.escalations[0].request_id),
        (alert.id, "halt", second.escalations[0].request_id),
    ]


def test_a_late_first_look_does_both_steps_in_one_pass(base):
    run, alert = _stale_verifier(base)
    done = run_pass(base, _raised_at(alert) + 100, ESCALATING).escalations
    assert [e.step for e in done] == ["dial_down", "halt"]
    assert control.read(run / "control").halted is True


def test_acked_alerts_never_escalate(base):
    run, alert = _stale_verifier(base)
    alerts.ack(base, alert.id, "alice")
    for later in (11, 21, 1000):
        assert run_pass(base, _raised_at(alert) + later, ESCALATING).escalations == []
    assert control.read(run / "control") == control.Override()
    assert not (run / "control" / control.OPERATOR_LOG).exists()


def test_an_operator_halt_already_in_effect_is_not_requested_again(base):
    run, alert = _stale_verifier(base)
    control.request(run / "control", run_id=run.name, actor="alice", halt=True)
    done = run_pass(base, _raised_at(alert) + 100, ESCALATING).escalations
    assert [(e.step, e.effect) for e in done] == [
        ("dial_down", "already_in_effect"),
        ("halt", "already_in_effect"),
    ]
    assert [r["actor"] for r in verify_chain(run / "control" / control.OPERATOR_LOG)] == ["alice"]


def test_a_stale_driver_escalates_on_every_running_run_only(base):
    manifest = Manifest.from_data(
        {"ack_window_seconds": 10, "halt_after_seconds": 20, "components": [{"name": "driver"}]}
    )
    runs = [hf.make_run(base, f"run-{n}", heartbeats=False) for n in range(2)]
    finished = hf.make_run(base, "old-run", state="finished", heartbeats=False, container={})
    raised = monitor.run_once(base, manifest, time.time() + health.DRIVER_STALE_SECONDS + 1, SINKS)
    assert [(a.run_id, a.detail["component"]) for a in raised] == [(health.HEALTH_DIR, "driver")]
    assert [a.id for a in alerts.all_alerts(base)] == [
        raised[0].id
    ]  # `assure alerts` and `assure ack` see it
    done = run_pass(base, _raised_at(raised[0]) + 11, manifest).escalations
    assert sorted((e.run_id, e.step) for e in done) == [
        ("run-0", "dial_down"),
        ("run-1", "dial_down"),
    ]
    assert all(control.read(r / "control").dial == "propose" for r in runs)
    assert control.read(finished / "control") == control.Override()


# --- the monitor's own heartbeat ------------------------------------------------------------------
def test_the_monitor_beats_every_pass_and_notices_its_own_gap(base):
    beat = base / health.HEALTH_DIR / "monitor.json"
    t = time.time()
    for n in range(3):
        run_pass(base, t + n)
        data = json.loads(beat.read_text())
        assert (data["component"], data["last_success_at"], data["pid"]) == (
            "monitor",
            t + n,
            os.getpid(),
        )
        assert set(data["detail"]) >= {"runs", "alerts", "escalations", "skipped"}
    gap = monitor.run_once(base, Manifest(), t + 2 + health.MONITOR_STALE_SECONDS + 1, SINKS)
    assert [(a.kind, a.detail["component"]) for a in gap] == [("stale_health", "monitor")]


def test_a_second_monitor_waits_for_the_lock(base):
    import fcntl

    run_pass(base, time.time())
    with open(base / health.HEALTH_DIR / monitor.LOCK_FILE, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert run_pass(base, time.time()).busy is True


def test_run_forever_passes_until_stopped(base):
    stop, seen = threading.Event(), []

    def on_pass(result: monitor.Pass) -> None:
        seen.append(result)
        if len(seen) == 2:
            stop.set()

    monitor.run_forever(base, Manifest(), SINKS, 0.01, on_pass=on_pass, stop=stop)
    assert len(seen) == 2 and (base / health.HEALTH_DIR / "monitor.json").is_file()


# --- a hostile runs base --------------------------------------------------------------------------
def test_a_hostile_runs_base_never_crashes_the_monitor(base):
    made = hf.hostile(base)
    outside = base.parent / "outside"
    before = sorted(p.name for p in outside.iterdir())
    result: dict[str, monitor.Pass] = {}
    later = time.time() + 400
    worker = threading.Thread(
        target=lambda: result.update(
            first=run_pass(base, later), second=run_pass(base, later + 301)
        )
    )
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the monitor blocked (a FIFO?)"
    first, second = result["first"], result["second"]
    skipped = {s.path: s.reason for s in first.skipped}
    # garbage is skipped and reported, never followed, never fatal
    assert skipped["linked-run"] == "a symlink in the runs base"
    assert "symlink" in skipped["state-link/state.json"]
    assert (
        "not JSON" in skipped["state-garbage/state.json"]
        and "RecursionError" in skipped["state-deep/state.json"]
    )
    assert skipped["state-fifo/state.json"] == "not a regular file"
    assert "over the" in skipped["state-huge/state.json"]
    assert (
        "not a directory" in skipped["odd-run/attempts"] and "symlink" in skipped["odd-run/alerts"]
    )
    assert skipped["trapped-run/attempts/2"] == "a symlink"
    assert "not an alert" == skipped["trapped-run/alerts/junk.json"]
    assert any("journal.jsonl" in s.path and "unparsable" in s.reason for s in first.skipped)
    assert any("journal.jsonl" in s.path and "examined" in s.reason for s in first.skipped)
    # garbage where an expected heartbeat should be counts as no heartbeat: stale_health
    stale = {(a.run_id, a.detail["component"]) for a in first.alerts if a.kind == "stale_health"}
    assert stale == {
        ("trapped-run", "verifier"),
        ("trapped-run", "gateway"),
        (health.HEALTH_DIR, "driver"),
    }
    # nothing was written through a symlink; the monitor still beat; the broken ledger was set aside
    assert sorted(p.name for p in outside.iterdir()) == before
    assert (
        json.loads((base / health.HEALTH_DIR / "monitor.json").read_text())["last_success_at"]
        == later + 301
    )
    assert any(s.path == f"{health.HEALTH_DIR}/{monitor.LEDGER}" for s in second.skipped)
    assert {e.run_id for e in second.escalations} == {"trapped-run", "odd-run"}
    assert control.read(made["trapped-run"] / "control").dial == "propose"


# --- the manifest ---------------------------------------------------------------------------------
def test_the_default_manifest_lists_the_four_components():
    m = Manifest()
    assert [c.name for c in m.components] == ["driver", "verifier", "gateway", "monitor"]
    assert m.component("verifier").path(Path("/b"), Path("/b/r")) == Path(
        "/b/r/control/verifier.json"
    )
    assert m.component("gateway").path(Path("/b"), Path("/b/r"), 3) == Path(
        "/b/r/attempts/3/gateway/heartbeat.json"
    )
    assert m.component("driver").path(Path("/b")) == Path("/b/.health/driver.json")
    assert Manifest.from_data(m.to_json()) == m
    assert health.default_path("driver", Path("/b")) == Path("/b/.health/driver.json")
    assert health.default_path("gateway", Path("/b"), Path("/b/r"), 2) == Path(
        "/b/r/attempts/2/gateway/heartbeat.json"
    )


def test_beat_writes_the_record_atomically(tmp_path):
    record = health.beat(tmp_path / "x" / "hb.json", "gateway", now=12.5, attempt=3)
    assert json.loads((tmp_path / "x" / "hb.json").read_text()) == record
    assert record == {
        "component": "gateway",
        "last_success_at": 12.5,
        "pid": os.getpid(),
        "host": record["host"],
        "detail": {"attempt": 3},
    }
    assert health.last_success(record, 13.0) == (12.5, None)
    assert health.last_success({"last_success_at": True}, 13.0)[0] is None
    assert health.last_success({"last_success_at": 1e12}, 13.0)[1].endswith("in the future")
    assert not list((tmp_path / "x").glob(".*tmp"))


def test_a_yaml_manifest_overrides_and_keeps_defaults(tmp_path):
    path = tmp_path / "monitor.yaml"
    path.write_text(
        "halt_after_seconds: 1200\ncomponents:\n  - {name: verifier, stale_after_seconds: 15}\n  -"
        " {name: proxy, heartbeat_path: '{run}/attempts/{attempt}/egress/heartbeat.json',"
        " stale_after_seconds: 40, ack_window_seconds: 60}\nanomalies: {max_duplicate_ratio:"
        " 0.25}\n"
    )
    m = Manifest.load(path)
    assert [(c.name, c.stale_after_seconds, c.ack_window_seconds) for c in m.components] == [
        ("verifier", 15.0, 300.0),
        ("proxy", 40.0, 60.0),
    ]
    assert m.component("verifier").heartbeat_path == "{run}/control/verifier.json"
    assert (
        m.anomalies.max_duplicate_ratio == 0.25
        and m.anomalies.min_calls_for_ratio == health.MIN_CALLS_FOR_RATIO
    )
    assert m.ack_window("proxy") == 60.0 and m.ack_window(None) == health.ACK_WINDOW_SECONDS


@pytest.mark.parametrize(
    "data, needle",
    [
        ({"interval": 5}, "unknown field"),
        ({"anomalies": {"max_duplicate_ratio": 2}}, "share"),
        ({"anomalies": {"max_tool_calls_per_minute": -1}}, "positive"),
        ({"ack_window_seconds": 100, "halt_after_seconds": 50}, "less than"),
        (
            {
                "components": [
                    {"name": "x", "heartbeat_path": "../etc/passwd", "stale_after_seconds": 1}
                ]
            },
            "relative path",
        ),
        (
            {"components": [{"name": "x", "heartbeat_path": "/abs", "stale_after_seconds": 1}]},
            "relative path",
        ),
        ({"components": [{"name": "x", "heartbeat_path": "a.json"}]}, "required"),
        (
            {
                "components": [
                    {"name": "x", "heartbeat_path": "{attempt}/a.json", "stale_after_seconds": 1}
                ]
            },
            "only allowed",
        ),
        ({"components": [{"name": "driver"}, {"name": "driver"}]}, "twice"),
        ([1, 2], "mapping"),
    ],
)
def test_a_bad_manifest_is_refused(data, needle):
    with pytest.raises(AssureError, match=needle):
        Manifest.from_data(data)


# --- the CLI --------------------------------------------------------------------------------------
def test_cli_monitor_once_prints_the_alerts_and_exits_0(base, tmp_path):
    hf.duplication_ratio(base)
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"alerts_file": str(tmp_path / "alerts.jsonl")}))
    result = CliRunner().invoke(
        app, ["monitor", "--once", "--runs-dir", str(base), "--manifest", str(manifest)]
    )
    assert result.exit_code == 0, result.output
    assert "ALERT duplication_ratio-" in result.output and "dup-run" in result.output
    assert (
        json.loads((tmp_path / "alerts.jsonl").read_text().splitlines()[0])["kind"]
        == "duplication_ratio"
    )
    again = CliRunner().invoke(
        app, ["monitor", "--once", "--runs-dir", str(base), "--manifest", str(manifest)]
    )
    assert again.exit_code == 0 and "ALERT" not in again.output


def test_cli_monitor_refuses_a_bad_manifest(base, tmp_path):
    manifest = tmp_path / "m.yaml"
    manifest.write_text("components: 3\n")
    result = CliRunner().invoke(
        app, ["monitor", "--once", "--runs-dir", str(base), "--manifest", str(manifest)]
    )
    assert result.exit_code == 1


def test_a_journal_line_still_being_written_is_not_garbage():
    line = (
        b'{"event":"tool_call","tool":"fs.read","args_digest":"d",'
        b'"ts":"2026-01-01T00:00:00.000000Z"}\n'
    )
    facts, garbage = runsbase.parse_journal(b"", line + line[:20], False)
    assert (len(facts["calls"]), garbage) == (1, 0)
    facts, garbage = runsbase.parse_journal(line, line[30:] + line + b"not json\n", True)
    assert (len(facts["calls"]), garbage) == (2, 1)  # the head's first line, one whole tail line
