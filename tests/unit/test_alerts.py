"""Alerts: durable until acknowledged, delivered to the JSON-lines file and the webhook; a sink
that fails is recorded on the alert, never loses it."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from assure.errors import AssureError
from assure.records import alerts


@pytest.fixture
def webhook():
    received = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/hook", received
    server.shutdown()


def run_dir(tmp_path):
    path = tmp_path / "runs" / "r1"
    path.mkdir(parents=True)
    return path


def test_an_alert_reaches_every_sink_and_stays_pending_until_acked(tmp_path, webhook):
    url, received = webhook
    sinks = alerts.Sinks(jsonl=tmp_path / "alerts.jsonl", webhook=url)
    alert = alerts.raise_alert(
        run_dir(tmp_path), "budget_halt", "tool calls exhausted", sinks, {"counter": "tool_calls"}
    )
    assert alert.state == "pending" and alert.sink_errors == ()
    assert [r["id"] for r in received] == [alert.id]
    assert json.loads((tmp_path / "alerts.jsonl").read_text())["id"] == alert.id
    assert [a.state for a in alerts.all_alerts(tmp_path / "runs")] == ["pending"]
    acked = alerts.ack(tmp_path / "runs", alert.id, "carol")
    assert (acked.state, acked.acked_by) == ("acked", "carol")
    assert [a.state for a in alerts.all_alerts(tmp_path / "runs")] == ["acked"]


def test_a_failing_webhook_is_recorded_not_fatal(tmp_path):
    sinks = alerts.Sinks(webhook="http://127.0.0.1:9/unreachable")
    alert = alerts.raise_alert(run_dir(tmp_path), "breach", "b", sinks)
    assert len(alert.sink_errors) == 1 and alert.sink_errors[0].startswith("webhook:")
    assert alerts.all_alerts(tmp_path / "runs")[0].sink_errors == alert.sink_errors


def test_ack_refuses_unknown_and_hostile_ids(tmp_path):
    run_dir(tmp_path)
    for bad in ("nope", "../../etc/passwd", "*"):
        with pytest.raises(AssureError):
            alerts.ack(tmp_path / "runs", bad, "carol")


def test_a_damaged_alert_file_is_left_out_not_fatal(tmp_path):
    folder = run_dir(tmp_path) / "alerts"
    folder.mkdir()
    (folder / "x.json").write_text("[1, 2")
    (folder / "y.json").write_text('{"unexpected": true}')
    assert alerts.all_alerts(tmp_path / "runs") == []


def test_an_expected_outcome_is_on_record_acknowledged_by_the_spec(tmp_path):
    sink = tmp_path / "alerts.jsonl"
    alert = alerts.raise_alert(
        run_dir(tmp_path),
        "breach",
        "1 breach findings: src/x",
        alerts.Sinks(jsonl=sink),
        expected="hostile spec h expects breach",
    )
    assert (alert.state, alert.acked_by, alert.ack_reason) == (
        "acked",
        alerts.SPEC_ACTOR,
        "hostile spec h expects breach",
    )
    assert alerts.all_alerts(tmp_path / "runs") == [alert]
    assert json.loads(sink.read_text())["state"] == "acked"  # the sinks are told it needs no one


def test_ack_takes_a_filter_and_acknowledges_only_the_pending_alerts_it_matches(tmp_path):
    base = tmp_path / "runs"
    for name in ("r1", "r2"):
        (base / name).mkdir(parents=True)
        for kind in ("breach", "quarantine"):
            alerts.raise_alert(base / name, kind, f"{kind} of {name}", alerts.Sinks())
    expected = alerts.raise_alert(
        base / "r2", "breach", "expected", alerts.Sinks(), expected="hostile spec expects breach"
    )
    assert {
        (a.run_id, a.kind) for a in alerts.ack_matching(base, "carol", run_id="r1", kind="breach")
    } == {("r1", "breach")}
    assert {(a.run_id, a.kind) for a in alerts.ack_matching(base, "carol", kind="quarantine")} == {
        ("r1", "quarantine"),
        ("r2", "quarantine"),
    }
    assert [(a.run_id, a.kind) for a in alerts.ack_matching(base, "carol")] == [("r2", "breach")]
    assert alerts.ack_matching(base, "carol") == []
    states = {a.id: (a.state, a.acked_by) for a in alerts.all_alerts(base)}
    assert states.pop(expected.id) == (
        "acked",
        alerts.SPEC_ACTOR,
    )  # left as the spec acknowledged it
    assert set(states.values()) == {("acked", "carol")}
    with pytest.raises(AssureError, match="no alert kind"):
        alerts.ack_matching(base, "carol", kind="nope")
    with pytest.raises(AssureError, match="not a run id"):
        alerts.ack_matching(base, "carol", run_id="../r1")
