"""Bounded bookkeeping, write-ahead intents and idempotency bound to the call: the real
gateway in-process on a real socket, and the pure parts (pre-scan, stream verifier,
completeness of the journal) as plain functions."""

from __future__ import annotations

import hashlib
import json
import socket
import time
from pathlib import Path

import pytest

from assure.client import Client, GatewayError
from assure.core import control
from assure.core.chain import (
    MAX_LINE_BYTES,
    ChainError,
    ChainWriter,
    chain_head,
    iter_chain,
    verify_chain,
)
from assure.gateway import jsonscan
from assure.gateway.config import Limits, parse
from assure.gateway.server import serve
from assure.verify.completeness import account
from assure.verify.findings import Kind


@pytest.fixture
def gateway(gateway_config, tmp_path):
    started = []

    def start(limits=None, **extra):
        raw = {
            **gateway_config(**(limits or {})),
            "breach_file": str(tmp_path / "breach.json"),
            "idempotency_db": str(tmp_path / "idem.sqlite"),
            **extra,
        }
        gw = serve(parse(raw))
        started.append(gw)
        return gw, Client(gw.config.socket, connect_timeout=2, timeout=10)

    yield start
    for gw in started:
        gw.shutdown()


def records(gw, event=None):
    return [r for r in verify_chain(gw.config.journal) if event is None or r["event"] == event]


def status_of(client, tool, **args):
    try:
        client.call(tool, **args)
        return 200
    except GatewayError as exc:
        return exc.status


# ---------------------------------------------------------------- journaled fields


def test_long_agent_strings_are_journaled_as_their_digest(gateway):
    gw, client = gateway()
    key, human = "K" * 100_000, "H" * 50_000
    client.call("fs.write", path="a.txt", content="x", idempotency_key=key)
    with pytest.raises(GatewayError):
        client.call(
            "fs.write", path="tests/t.py", content="x", human_gate=human, rollback_ref="R" * 10_000
        )
    intent, call = records(gw, "intent")[0], records(gw, "tool_call")[0]
    assert (
        call["idempotency_key"]
        == intent["idempotency_key"]
        == "sha256:" + hashlib.sha256(key.encode()).hexdigest()
    )
    denied = records(gw, "tool_call")[1]
    assert denied["human_gate"].startswith("sha256:") and denied["rollback_ref"].startswith(
        "sha256:"
    )
    assert denied["inputs"]["human_gate"] == denied["human_gate"]
    assert max(len(line) for line in Path(gw.config.journal).read_text().splitlines()) < 4096
    assert (
        client.call("fs.write", path="a.txt", content="x", idempotency_key=key)["idempotent_replay"]
        is True
    )  # the key still works


# ---------------------------------------------------------------- every request counts


def test_every_request_counts_and_past_the_budget_nothing_more_is_journaled(gateway, tmp_path):
    gw, client = gateway({"requests": 6})
    assert status_of(client, "fs.write", path="a.txt", content="x", idempotency_key="k") == 200
    assert (
        status_of(client, "fs.write", path="a.txt", content="x", idempotency_key="k") == 200
    )  # a replay is a request
    assert status_of(client, "no.such.tool") == 404
    for _ in range(3):
        with socket.socket(socket.AF_UNIX) as sock:  # malformed: rejected, journaled, counted
            sock.connect(gw.config.socket)
            sock.sendall(b"BROKEN\r\n\r\n")
            sock.recv(4096)
    size = Path(gw.config.journal).stat().st_size
    for _ in range(50):
        assert status_of(client, "fs.list") == 429
    assert json.loads((tmp_path / "breach.json").read_text())["counter"] == "requests"
    assert [r["counter"] for r in records(gw, "budget_breach")] == ["requests"]
    assert (
        Path(gw.config.journal).stat().st_size - size < 1024
    )  # the 50 refusals: one breach line, no more
    assert gw.counters.requests == 56


# ---------------------------------------------------------------- the journal's cap


def test_the_journal_stops_at_its_cap_and_every_intent_keeps_its_outcome(gateway, tmp_path):
    cap = 20_000
    gw, client = gateway({"max_journal_bytes": cap})
    statuses = [status_of(client, "fs.write", path=f"out/{n}.txt", content="x") for n in range(100)]
    assert 200 in statuses and statuses[-1] == 503
    answered = statuses.index(503)
    assert set(statuses[answered:]) == {503}  # once full, nothing more is served
    files = sorted(p.name for p in (Path(gw.config.workspace) / "out").iterdir())
    gw.shutdown()
    journal = records(gw)
    assert (
        journal[-1]["event"] == "gateway_stopped"
        and [r["event"] for r in journal].count("journal_full") == 1
    )
    assert json.loads((tmp_path / "breach.json").read_text())["counter"] == "journal_bytes"
    assert (
        Path(gw.config.journal).stat().st_size < cap + 4096
    )  # the closing records past the cap, nothing else
    outcomes = [r for r in journal if r["event"] == "tool_call"]
    assert {r["action_id"] for r in records(gw, "intent")} == {r["action_id"] for r in outcomes}
    assert (
        sorted(r["path"].split("/")[1] for r in outcomes if r["decision"] == "allow") == files
    )  # every effect journaled


# ---------------------------------------------------------------- idempotency bound to the call


def test_a_halt_is_checked_before_a_replay(gateway, tmp_path):
    control_dir = tmp_path / "control"
    control_dir.mkdir()
    gw, client = gateway(control_dir=str(control_dir))
    client.call("fs.write", path="a.txt", content="x", idempotency_key="k")
    control.request(control_dir, run_id="run-test", actor="carol", halt=True)
    deadline = time.monotonic() + 5
    while not records(gw, "override_effective") and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(GatewayError) as info:
        client.call("fs.write", path="a.txt", content="x", idempotency_key="k")
    assert info.value.status == 403
    last = records(gw, "tool_call")[-1]
    assert (last["decision"], last["rule"]) == ("deny", "operator_halt")


def test_a_key_reused_for_a_protected_path_is_denied_by_the_gate_not_replayed(gateway):
    gw, client = gateway()
    client.call("fs.write", path="out/a", content="a", idempotency_key="K")
    with pytest.raises(GatewayError) as info:
        client.call("fs.write", path="tests/test_calc.py", content="pwned", idempotency_key="K")
    assert info.value.status == 403
    assert [(r["path"], r["decision"]) for r in records(gw, "tool_call")] == [
        ("out/a", "allow"),
        ("tests/test_calc.py", "deny"),
    ]


def test_a_store_from_before_bindings_refuses_its_old_caller_keys_with_409(gateway, tmp_path):
    from tests.unit.test_idempotency import _old_store

    _old_store(
        str(tmp_path / "idem.sqlite"), bound=False
    )  # a run resumed across the change: `key:K` done, binding unknown
    gw, client = gateway()
    with pytest.raises(GatewayError) as info:
        client.call("fs.write", path="a.txt", content="x", idempotency_key="K")
    assert (
        info.value.status == 409
    )  # neither repeated (a second effect) nor replayed unchecked, nor a 500
    last = records(gw, "tool_call")[-1]
    assert (last["decision"], last["rule"], last["original_action_id"]) == (
        "deny",
        "idempotency.unbound",
        "a1",
    )
    assert not (Path(gw.config.workspace) / "a.txt").exists()
    assert (
        client.call("fs.write", path="a.txt", content="x", idempotency_key="K2")["decision"]
        == "allow"
    )


# ---------------------------------------------------------------- the JSON pre-scan


@pytest.mark.parametrize(
    ("body", "refused"),
    [
        (
            b'{"path": "a", "content": "' + b"[{" * 100_000 + b'"}',
            False,
        ),  # brackets inside a string are text
        (b'{"s": "a\\"[[[[", "n": [1, 2, 3]}', False),  # an escaped quote does not end the string
        (
            b'{"s": "a\\\\", "d": ' + b"[" * 65 + b"]" * 65 + b"}",
            True,
        ),  # an escaped backslash does not hide what follows
        (b'{"s": "\\\\\\"' + b"[" * 70 + b'"}', False),  # backslash, quote: still inside the string
        (b"[" * 65 + b"]" * 65, True),
        (b"[" * 64 + b"]" * 64, False),
        (b"[" + b"{}," * 60_000 + b"{}]", True),
        (b"[" + b"1," * 99_998 + b"1]", False),
        (b"not json at all", False),  # the parser refuses it
        (
            b"]" * 8_000_000,
            True,
        ),  # closers only: no element counted, but 8 M brackets to walk in Python (0.5 s, GIL held)
        (b'{"a": ' + b"]}" * 300_000 + b"}", True),
    ],
)
def test_the_pre_scan_counts_structure_outside_strings(body, refused):
    limits = Limits(tool_calls=0)  # the pre-scan's limits; tool_calls has no default
    assert (
        jsonscan.too_complex(body, limits.max_json_depth, limits.max_json_items) is not None
    ) is refused


# ---------------------------------------------------------------- the stream verifier


def test_iter_chain_yields_only_verified_records_and_names_the_broken_line(tmp_path):
    path = tmp_path / "j.jsonl"
    writer = ChainWriter(path)
    for n in range(5):
        writer.append("e", n=n)
    writer.close()
    lines = path.read_text().splitlines()
    lines[3] = lines[3].replace('"n":3', '"n":9')
    path.write_text("\n".join(lines) + "\n")
    seen = []
    with pytest.raises(ChainError) as info:
        for record in iter_chain(path):
            seen.append(record["n"])
    assert seen == [0, 1, 2] and info.value.line == 4


def test_iter_chain_refuses_an_overlong_line_without_reading_it_whole(tmp_path):
    path = tmp_path / "j.jsonl"
    path.write_bytes(b"x" * (MAX_LINE_BYTES + 10) + b"\n")
    with pytest.raises(ChainError, match="longer than"):
        chain_head(path)


def test_chain_writer_reports_its_size_and_continues_a_chain(tmp_path):
    path = tmp_path / "j.jsonl"
    writer = ChainWriter(path)
    writer.append("a")
    writer.close()
    again = ChainWriter(path)
    assert again.size == path.stat().st_size
    again.append("b")
    again.close()
    assert again.size == path.stat().st_size and chain_head(path)[0] == 2


# ---------------------------------------------------------------- the journal's completeness


def _chain(*events):
    """Records as a verified journal yields them (account() reads only these fields)."""
    return [
        {"seq": n, "hash": f"h{n}", "event": event, **fields}
        for n, (event, fields) in enumerate(events, start=1)
    ]


def test_an_intent_without_an_outcome_and_an_unclean_stop_are_breach_level():
    journal = _chain(
        ("gateway_started", {}),
        ("intent", {"action_id": "a1", "tool": "fs.write", "path": "out/a"}),
        ("tool_call", {"action_id": "a1"}),
        ("intent", {"action_id": "a2", "tool": "fs.write", "path": "out/b"}),
    )
    head, findings = account(journal, {"exit_code": 137, "oom_killed": True})
    assert head == {"seq": 4, "hash": "h4"}
    assert [(f.kind, f.subject) for f in findings] == [
        (Kind.JOURNAL_INCOMPLETE, "intent:a2"),
        (Kind.JOURNAL_INCOMPLETE, "gateway"),
    ]
    assert "OOM-killed" in findings[1].message and "exit code 137" in findings[1].message
    assert {f.severity for f in findings} == {"breach"}


def test_a_clean_journal_is_complete_and_limits_are_findings():
    clean = _chain(
        ("gateway_started", {}),
        ("intent", {"action_id": "a1"}),
        ("tool_call", {"action_id": "a1"}),
        ("gateway_stopped", {}),
    )
    assert account(clean, {"exit_code": 0, "oom_killed": False})[1] == []
    flooded = _chain(
        ("gateway_started", {}),
        ("budget_breach", {"counter": "tool_calls"}),
        ("budget_breach", {"counter": "requests"}),
        ("journal_full", {"limit": 10}),
        ("gateway_stopped", {}),
    )
    findings = account(flooded, None)[1]
    assert [(f.kind, f.subject) for f in findings] == [
        (Kind.GATEWAY_LIMIT, "budget:journal_bytes"),
        (Kind.GATEWAY_LIMIT, "budget:requests"),
    ]
    assert {f.severity for f in findings} == {"fail"}  # never a pass, and not a harness error


def test_a_model_call_intent_is_closed_by_its_model_call():
    open_call = _chain(
        ("gateway_started", {}),
        ("intent", {"action_id": "m1", "tool": "model.messages", "scope": "model:messages"}),
        ("gateway_stopped", {}),
    )
    _, findings = account(open_call, {"exit_code": 0, "oom_killed": False})
    assert [f.kind for f in findings] == [
        Kind.JOURNAL_INCOMPLETE
    ] and "model.messages model:messages" in findings[0].message
    closed = _chain(
        ("gateway_started", {}),
        ("intent", {"action_id": "m1"}),
        ("model_call", {"action_id": "m1"}),
        ("gateway_stopped", {}),
    )
    assert account(closed, {"exit_code": 0, "oom_killed": False})[1] == []


def test_a_model_call_in_flight_at_the_stop_is_settled_at_its_reservation(gateway):
    """An agent killed at its deadline during a slow model call: the gateway stops before the
    upstream answers. The call gets its outcome at close, counted at the most it could cost,
    so the journal is complete (no journal_incomplete for an honest agent) and nothing is
    spent unrecorded; the late answer writes nothing more."""
    from assure.core import gate
    from assure.gateway.dispatch import MODEL_TOOL

    gw, _ = gateway()
    dispatcher = gw._dispatcher
    record = {
        "action_id": "m-slow",
        "tool": MODEL_TOOL,
        "endpoint": "messages",
        "model": "claude-test-1",
    }
    action = gate.Action(
        MODEL_TOOL, False, scope="model:messages", resource_mode=gate.SANDBOX, spends=True
    )
    assert dispatcher.decide_model_call(record, action, None, reserve=(500, 0.25)).allowed
    gw.shutdown()
    assert dispatcher.record_model_call(record, 10, 0.01) is False  # the upstream answered too late
    journal = records(gw)
    (outcome,) = [r for r in journal if r["event"] == "model_call"]
    assert outcome["action_id"] == "m-slow" and outcome["status"] == "interrupted"
    assert outcome["counters"] == {"tokens": 500, "cost": 0.25}
    assert journal[-1]["event"] == "gateway_stopped" and journal[-1]["counters"]["tokens"] == 500
    assert account(journal, {"exit_code": 0, "oom_killed": False})[1] == []
