"""The gateway's governance, in-process on a real socket: fail-closed contract, operator
override, budget breach reporting, idempotency and verifier freshness."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from assure.client import Client, GatewayError
from assure.core import control, gate
from assure.core.chain import verify_chain
from assure.gateway.config import parse
from assure.gateway.server import serve

from .conftest import ratified_policy


@pytest.fixture
def gateway(gateway_config, tmp_path):
    started = []

    def start(policy=None, **extra):
        raw = {**gateway_config(), **extra}
        if policy is not None:
            raw["policy"] = policy
        gw = serve(parse(raw))
        started.append(gw)
        return gw, Client(gw.config.socket, connect_timeout=2, timeout=10)

    yield start
    for gw in started:
        gw.shutdown()


def records(gw, event="tool_call"):
    return [r for r in verify_chain(gw.config.journal) if r["event"] == event]


def test_without_a_policy_every_mutation_is_denied_but_reads_work(gateway, tmp_path):
    gw, client = gateway(policy={})
    (Path(gw.config.workspace) / "a.txt").write_text("x")
    assert client.call("fs.read", path="a.txt")["result"]["content"] == "x"
    with pytest.raises(GatewayError) as info:
        client.call("fs.write", path="b.txt", content="y")
    assert info.value.status == 403
    assert records(gw)[-1]["rule"] == "contract.missing"
    assert not (Path(gw.config.workspace) / "b.txt").exists()


def test_a_self_ratified_contract_denies(gateway):
    policy = ratified_policy()
    policy["contract"] = {**policy["contract"], "ratified_by": "alice"}
    gw, client = gateway(policy=policy)
    with pytest.raises(GatewayError):
        client.call("fs.write", path="b.txt", content="y")
    assert records(gw)[-1]["rule"] == "contract.self_ratified"


def test_halt_takes_effect_between_calls_and_is_journaled_with_latency(gateway, tmp_path):
    control_dir = tmp_path / "control"
    control_dir.mkdir()
    gw, client = gateway(control_dir=str(control_dir))
    client.call("fs.write", path="before.txt", content="1")
    requested = control.request(control_dir, run_id="run-test", actor="carol", halt=True)
    deadline = time.monotonic() + 5
    while not records(gw, "override_effective") and time.monotonic() < deadline:
        time.sleep(0.01)
    (effective,) = records(gw, "override_effective")
    assert effective["request_id"] == requested.request_id and effective["halted"] is True
    assert 0 <= effective["latency_ms"] < 1000
    with pytest.raises(GatewayError) as info:
        client.call("fs.write", path="after.txt", content="2")
    assert info.value.status == 403 and records(gw)[-1]["rule"] == "operator_halt"
    assert (
        client.call("fs.read", path="before.txt")["result"]["content"] == "1"
    )  # reads still answer
    assert not (Path(gw.config.workspace) / "after.txt").exists()


def test_halt_stops_a_safe_http_get_before_any_socket(gateway, tmp_path, monkeypatch):
    from assure.gateway import http as gw_http

    def no_socket(*_args):
        raise AssertionError("a halted gateway opened a connection")

    monkeypatch.setattr(gw_http.http.client.HTTPConnection, "connect", no_socket)
    control_dir = tmp_path / "control"
    control_dir.mkdir()
    gw, client = gateway(
        control_dir=str(control_dir),
        egress={"proxy": "127.0.0.1:9", "allow": ["api.example.invalid:80"]},
    )
    control.request(control_dir, run_id="run-test", actor="carol", halt=True)
    deadline = time.monotonic() + 5
    while not records(gw, "override_effective") and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(GatewayError) as info:
        client.call("http.request", method="GET", url="http://api.example.invalid/status")
    assert info.value.status == 403 and records(gw)[-1]["rule"] == "operator_halt"


def test_budget_breach_is_written_once_for_the_host(gateway, tmp_path):
    breach = tmp_path / "breach.json"
    raw_limits = {"tool_calls": 2}
    gw, client = gateway(breach_file=str(breach), limits=raw_limits)
    client.call("fs.write", path="a.txt", content="1")
    client.call("fs.write", path="b.txt", content="2")
    for _ in range(2):
        with pytest.raises(GatewayError):
            client.call("fs.write", path="c.txt", content="3")
    data = json.loads(breach.read_text())
    assert data["counter"] == "tool_calls" and data["breach_at"] <= time.time()
    assert len(records(gw, "budget_breach")) == 1


def test_past_its_wall_clock_budget_the_gateway_refuses_every_call_and_tells_the_host(
    gateway, tmp_path
):
    """The host stops the agent at its deadline with a grace of seconds; the gateway's own
    wall-clock budget (counted from its start, before the agent's) ends first, so nothing is
    allowed in that grace (corpus spec override--outlive-deadline)."""
    breach = tmp_path / "breach.json"
    gw, client = gateway(
        policy=ratified_policy(),
        breach_file=str(breach),
        limits={"tool_calls": 100, "wall_seconds": 0.5},
    )
    client.call("fs.write", path="early.txt", content="in time")
    time.sleep(0.6)
    for call in (
        lambda: client.call("fs.write", path="late.txt", content="after the deadline"),
        lambda: client.call("fs.read", path="early.txt"),
    ):
        with pytest.raises(GatewayError) as info:
            call()
        assert info.value.status == 403 and records(gw)[-1]["rule"] == "budget.wall_seconds"
    assert not (Path(gw.config.workspace) / "late.txt").exists()
    assert json.loads(breach.read_text())["counter"] == "wall_seconds"


def test_one_idempotency_key_one_effect_across_gateways(gateway, tmp_path):
    db = str(tmp_path / "idem.sqlite")
    gw, client = gateway(idempotency_db=db)
    first = client.call("fs.write", path="n.txt", content="one", idempotency_key="k-1")
    (Path(gw.config.workspace) / "n.txt").write_text("changed by someone else")
    second = client.call("fs.write", path="n.txt", content="one", idempotency_key="k-1")
    assert second["idempotent_replay"] is True and second["result"] == first["result"]
    assert (Path(gw.config.workspace) / "n.txt").read_text() == "changed by someone else"
    replay = records(gw)[-1]
    assert (
        replay["rule"] == "idempotency"
        and replay["original_action_id"] == first["action_id"]
        and replay["effect"] is None
    )
    assert replay["decision"] == "replay"  # journaled as a replay, never as a fresh allow
    with pytest.raises(
        GatewayError
    ) as other:  # the key belongs to the first call: other arguments are refused
        client.call("fs.write", path="n.txt", content="two", idempotency_key="k-1")
    assert other.value.status == 409 and other.value.code == "idempotency_mismatch"
    assert (
        records(gw)[-1]["decision"] == "deny" and records(gw)[-1]["rule"] == "idempotency.mismatch"
    )
    gw.shutdown()
    # The same attempt's gateway again (same run-level store) still sees the key.
    gw2, client2 = gateway(idempotency_db=db, journal=str(tmp_path / "journal2.jsonl"))
    third = client2.call("fs.write", path="n.txt", content="one", idempotency_key="k-1")
    assert third["idempotent_replay"] is True
    assert (Path(gw2.config.workspace) / "n.txt").read_text() == "changed by someone else"


def test_a_later_attempt_cannot_tell_an_earlier_attempts_sandbox_key_from_a_fresh_one(
    gateway, tmp_path
):
    """Issue 21 item 2: attempt 1 burns keys, attempt 2 asks with them (same call, other
    arguments): every answer is a fresh allow, and the effects happen in attempt 2's sandbox."""
    db = str(tmp_path / "idem.sqlite")
    gw, client = gateway(idempotency_db=db)
    client.call("fs.write", path="a.txt", content="1", idempotency_key="chan-0")
    client.call("fs.write", path="b.txt", content="1", idempotency_key="chan-1")
    gw.shutdown()
    gw2, client2 = gateway(idempotency_db=db, attempt=2, journal=str(tmp_path / "journal2.jsonl"))
    (Path(gw2.config.workspace) / "a.txt").unlink()  # attempt 2's workspace is a fresh copy
    same = client2.call("fs.write", path="a.txt", content="1", idempotency_key="chan-0")
    other = client2.call("fs.write", path="c.txt", content="0", idempotency_key="chan-1")
    fresh = client2.call("fs.write", path="d.txt", content="0", idempotency_key="never-used")
    for answer in (same, other, fresh):
        assert answer["decision"] == "allow" and set(answer) == set(fresh), answer
    assert (Path(gw2.config.workspace) / "a.txt").read_text() == "1"
    assert [r["decision"] for r in records(gw2)] == ["allow", "allow", "allow"]


def test_a_live_effect_is_not_repeated_by_a_later_attempt_which_learns_nothing_else(
    gateway, tmp_path
):
    """A live insert under a key: attempt 2's identical call is a replay (one row), answered as
    the original was (no replay mark); attempt 3's call with other SQL under it is a fresh key."""
    import sqlite3

    ledger = tmp_path / "ledger.sqlite"
    con = sqlite3.connect(ledger)
    con.execute("CREATE TABLE entries (id INTEGER PRIMARY KEY, amount INTEGER)")
    con.commit()
    con.close()
    contract = gate.Contract(
        id="c1",
        proposed_by="alice",
        ratified_by="bob",
        scope=("fs:**", "db:*"),
        autonomy_ceiling=gate.IRREVERSIBLE,
    )
    policy = ratified_policy(
        contract=dataclass_dict(gate.ratify(contract, protected=("tests/**",))),
        operator_dial=gate.IRREVERSIBLE,
        verifier_trust=gate.IRREVERSIBLE,
        verifier_stale_seconds=3600,
    )
    control_dir = tmp_path / "control"  # a fresh verifier: the trust an irreversible effect needs
    control_dir.mkdir()
    (control_dir / "verifier.json").write_text(json.dumps({"last_success_at": time.time()}))
    db, live = (
        str(tmp_path / "idem.sqlite"),
        [{"name": "ledger", "path": str(ledger), "mode": "live"}],
    )
    insert = {
        "db": "ledger",
        "sql": "INSERT INTO entries (amount) VALUES (42)",
        "idempotency_key": "pay-1",
    }
    gw, client = gateway(
        policy=policy, idempotency_db=db, databases=live, control_dir=str(control_dir)
    )
    first = client.call("db.execute", **insert)
    assert (
        client.call("db.execute", **insert)["idempotent_replay"] is True
    )  # the same attempt may know its own doing
    gw.shutdown()
    gw2, client2 = gateway(
        policy=policy,
        idempotency_db=db,
        databases=live,
        control_dir=str(control_dir),
        attempt=2,
        journal=str(tmp_path / "journal2.jsonl"),
    )
    again = client2.call("db.execute", **insert)
    assert {k: v for k, v in again.items() if k != "action_id"} == {
        k: v for k, v in first.items() if k != "action_id"
    }
    assert (
        records(gw2)[-1]["decision"] == "replay"
        and records(gw2)[-1]["original_action_id"] == first["action_id"]
    )
    with pytest.raises(
        GatewayError
    ) as reused:  # within attempt 2 the key is now bound to that call, as a fresh one would be
        client2.call("db.execute", **{**insert, "sql": "INSERT INTO entries (amount) VALUES (9)"})
    assert reused.value.status == 409 and reused.value.code == "idempotency_mismatch"
    gw2.shutdown()
    gw3, client3 = gateway(
        policy=policy,
        idempotency_db=db,
        databases=live,
        control_dir=str(control_dir),
        attempt=3,
        journal=str(tmp_path / "journal3.jsonl"),
    )
    other = client3.call(
        "db.execute", **{**insert, "sql": "INSERT INTO entries (amount) VALUES (7)"}
    )
    assert (
        other["decision"] == "allow" and "idempotent_replay" not in other
    )  # another call: a fresh key, not a 409
    assert sqlite3.connect(ledger).execute("SELECT amount FROM entries ORDER BY id").fetchall() == [
        (42,),
        (7,),
    ]


def test_a_denied_call_does_not_burn_its_key(gateway, tmp_path):
    gw, client = gateway(idempotency_db=str(tmp_path / "idem.sqlite"))
    with pytest.raises(GatewayError):
        client.call("fs.write", path="tests/t.py", content="x", idempotency_key="k-2")  # protected
    assert (
        client.call("fs.write", path="ok.txt", content="x", idempotency_key="k-2")["decision"]
        == "allow"
    )


def test_verifier_freshness_comes_from_the_host_heartbeat(gateway, tmp_path):
    control_dir = tmp_path / "control"
    control_dir.mkdir()
    gw, _ = gateway(control_dir=str(control_dir))
    dispatcher = gw._calls
    assert dispatcher._verifier_fresh() is False
    (control_dir / "verifier.json").write_text(json.dumps({"last_success_at": time.time()}))
    assert dispatcher._verifier_fresh() is True
    (control_dir / "verifier.json").write_text(json.dumps({"last_success_at": time.time() - 3600}))
    assert dispatcher._verifier_fresh() is False
    assert dispatcher._context().verifier_fresh is False
    assert gate.effective_autonomy(dispatcher._context()) == gate.PROPOSE


def test_dial_down_lowers_the_effective_autonomy_from_the_next_call(gateway, tmp_path):
    control_dir = tmp_path / "control"
    control_dir.mkdir()
    (control_dir / "verifier.json").write_text(json.dumps({"last_success_at": time.time()}))
    gw, _ = gateway(control_dir=str(control_dir))
    assert gate.effective_autonomy(gw._calls._context()) == gate.COMMIT
    control.request(control_dir, run_id="run-test", actor="carol", dial="propose")
    deadline = time.monotonic() + 5
    while not records(gw, "override_effective") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert records(gw, "override_effective")[0]["dial"] == "propose"
    context = gw._calls._context()
    assert (
        context.operator_dial == gate.PROPOSE and gate.effective_autonomy(context) == gate.PROPOSE
    )
    live = gate.Action("db.execute", True, scope="db:x", resource_mode="live")
    assert gate.decide(live, context).outcome != gate.ALLOW


def test_token_and_cost_limits_reach_the_gate(gateway):
    gw, _ = gateway(policy=ratified_policy(tokens_limit=0, cost_limit=0.0))
    decision = gate.decide(gate.Action("fs.read", False, path="a"), gw._calls._context())
    assert (decision.outcome, decision.rule) == (gate.DENY, "budget.tokens")


def dataclass_dict(value):
    return dataclasses.asdict(value)
