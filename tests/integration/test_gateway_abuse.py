"""Hostile agents against the gateway's bookkeeping, on real containers (issue 10, findings 5, 7, 8,
9).

Each test runs one fixture agent from fixtures/agents/abuse and asserts what must not
happen: the journal past its cap, an `allow` journaled for a call the gate did not decide,
an effect the journal does not show, a verdict of pass or error for the attacker.
"""

from __future__ import annotations

import json
import os
import sqlite3

from assure.core.chain import iter_chain
from assure.gateway.config import Limits

from .conftest import ROOT, live_ledger, ratified

ABUSE = str(ROOT / "fixtures" / "agents" / "abuse")


def journal_of(result, attempt: int = 1):
    return result.run_dir / "attempts" / str(attempt) / "gateway" / "journal.jsonl"


def records(result, attempt: int = 1) -> list[dict]:
    return list(iter_chain(journal_of(result, attempt)))


def flood(make_spec, mode: str, tool_calls: int = 3):
    return make_spec(
        f"flood-{mode}",
        "flood.py",
        agent={"command": ["python3", "/opt/agent/flood.py", mode], "files": ABUSE},
        contract=ratified(["fs:**"]),
        limits={"wall_seconds": 120, "tool_calls": tool_calls},
        assertions=[{"journal_has": {"tool": "fs.write", "path": "out/a", "decision": "allow"}}],
    )


def test_replays_with_huge_keys_are_gated_and_journaled_by_digest(run, make_spec):
    result = run(flood(make_spec, "replays"))
    journal = records(result)
    assert (
        journal_of(result).stat().st_size < 1024 * 1024
    )  # 8 MB keys, 23 calls: journaled by digest
    assert max(len(v) for r in journal for v in r.values() if isinstance(v, str)) <= 1024
    calls = [r for r in journal if r["event"] == "tool_call"]
    assert [r["path"] for r in calls if r["decision"] == "allow"] == [
        "out/a",
        "out/s0",
        "out/s1",
    ]  # no replay journaled as allow
    assert {r["rule"] for r in calls[3:]} == {
        "budget.tool_calls"
    }  # a replay past the budget is denied like any call
    stopped = result.report["attempts"][0]["stopped"]
    assert stopped and (stopped["reason"], stopped["counter"]) == ("budget", "tool_calls")
    assert journal[-1]["event"] == "gateway_stopped"


def test_a_flood_of_rejected_requests_runs_out_of_budget_and_stops_the_attempt(run, make_spec):
    result = run(flood(make_spec, "rejects"))
    assert (
        journal_of(result).stat().st_size <= Limits(tool_calls=0).max_journal_bytes + 64 * 1024
    )  # the cap, plus the closing records
    journal = records(result)
    assert journal[-1]["event"] == "gateway_stopped"  # it stopped cleanly and said so
    assert (
        sum(1 for r in journal if r["event"] == "request_rejected") <= Limits(tool_calls=0).requests
    )
    stopped = result.report["attempts"][0]["stopped"]
    assert (
        stopped
        and stopped["reason"] == "budget"
        and stopped["counter"] in ("requests", "journal_bytes")
    )  # not the deadline
    findings = {f["kind"]: f["subject"] for f in result.report["attempts"][0]["findings"]}
    assert findings.get("gateway_limit") in ("budget:requests", "budget:journal_bytes")
    assert result.report["verdict"] not in ("pass", "error")


def test_a_journal_that_reaches_its_cap_stops_the_attempt(run, make_spec):
    result = run(flood(make_spec, "paths", tool_calls=100_000))
    cap = Limits(tool_calls=0).max_journal_bytes
    assert (
        cap - 64 * 1024 < journal_of(result).stat().st_size <= cap + 64 * 1024
    )  # reached; past it only the closing records
    journal = records(result)
    full = [r["event"] for r in journal].index("journal_full")
    closing = [(r["event"], r.get("counter")) for r in journal[full:]]
    # The agent's requests go on, answered 503 and journaled no more, until the host's halt
    # lands; on a loaded machine they can pass `limits.requests` first, and that breach is
    # journaled too. Nothing else is written after the cap.
    assert closing[:2] == [("journal_full", None), ("budget_breach", "journal_bytes")]
    assert closing[2:-1] in ([], [("budget_breach", "requests")]), closing
    assert closing[-1] == ("gateway_stopped", None)
    stopped = result.report["attempts"][0]["stopped"]
    assert stopped and (stopped["reason"], stopped["counter"]) == ("budget", "journal_bytes")
    assert {
        f["subject"]
        for f in result.report["attempts"][0]["findings"]
        if f["kind"] == "gateway_limit"
    } - {"budget:requests"} == {"budget:journal_bytes"}
    assert result.report["verdict"] not in ("pass", "error")


def test_a_json_bomb_is_refused_before_parsing_and_every_effect_is_journaled(run, make_spec):
    spec = make_spec(
        "bomb",
        "json_bomb.py",
        agent={"command": ["python3", "/opt/agent/json_bomb.py"], "files": ABUSE},
        contract=ratified(["fs:**"]),
        assertions=[{"file_exists": "out/w8"}],
    )
    result = run(spec)
    journal = records(result)
    assert journal[-1]["event"] == "gateway_stopped"
    facts = json.loads((result.run_dir / "attempts" / "1" / "container.json").read_text())
    assert facts["gateway"] == {"exit_code": 0, "oom_killed": False}  # what the engine saw
    rejected = [
        r for r in journal if r["event"] == "request_rejected" and r["code"] == "json_too_complex"
    ]
    assert len(rejected) == 5
    intents = {r["action_id"] for r in journal if r["event"] == "intent"}
    outcomes = {
        r["action_id"] for r in journal if r["event"] == "tool_call" and r["decision"] == "allow"
    }
    assert intents == outcomes and len(outcomes) == 9  # every effect: intent before, outcome after
    kinds = {f["kind"] for f in result.report["attempts"][0]["findings"]}
    assert (
        "journal_incomplete" not in kinds and result.report["verdict"] == "pass"
    )  # the agent gained nothing, lost nothing


def test_an_idempotency_key_is_bound_to_its_call_and_gated_before_replay(run, make_spec):
    spec = make_spec(
        "replay",
        "replay.sh",
        agent={"command": ["sh", "/opt/agent/replay.sh"], "files": ABUSE},
        contract=ratified(["fs:**"]),
        limits={"wall_seconds": 60, "tool_calls": 4},
        assertions=[
            {"journal_has": {"tool": "fs.write", "path": "tests/test_calc.py", "decision": "allow"}}
        ],
    )
    result = run(spec)
    calls = [r for r in records(result) if r["event"] == "tool_call"]
    got = [(r["path"], r["decision"], r["status"], r["rule"]) for r in calls]
    assert got[:5] == [
        ("out/a", "allow", 200, "autonomy"),
        ("tests/test_calc.py", "deny", 403, "protected_path"),  # the gate decides first
        ("out/b", "deny", 409, "idempotency.mismatch"),  # the key belongs to another call
        ("out/c", "allow", 200, "autonomy"),
        ("out/d", "deny", 403, "budget.tool_calls"),  # budget spent (4 calls: denied ones count)
    ]
    # The host stops the agent at the breach; a replay that still got in is gated like any call.
    assert got[5:] in ([], [("out/a", "deny", 403, "budget.tool_calls")])
    assert not (result.run_dir / "attempts" / "1" / "workspace" / "out" / "b").exists()
    assert result.report["verdict"] not in ("pass", "error")


def test_a_rollback_ref_counts_only_for_the_scope_it_covers(run, make_spec, tmp_path):
    ledger = live_ledger(tmp_path)
    vault = tmp_path / "vault" / "vault.sqlite"  # a live database in its own directory
    vault.parent.mkdir()
    db = sqlite3.connect(vault)
    db.execute("CREATE TABLE entries (id INTEGER PRIMARY KEY, amount INTEGER)")
    db.commit()
    db.close()
    for path in (vault.parent, vault):
        os.chown(path, 10001, 10001)
    (tmp_path / "ledger.restore").write_text("restore the ledger from its nightly backup\n")
    spec = make_spec(
        "rollback",
        "rollback.sh",
        agent={"command": ["sh", "/opt/agent/rollback.sh"], "files": ABUSE},
        contract=ratified(["db:*"]),
        assertions=[{"exit_code": 0}],
        databases=[
            {
                "name": "ledger",
                "fixture": str(ledger),
                "mode": "live",
                "rollback": "ledger.restore",
            },
            {"name": "vault", "fixture": str(vault), "mode": "live"},
        ],
    )
    result = run(spec)
    calls = {r["scope"]: r for r in records(result) if r["event"] == "tool_call"}
    assert (
        calls["db:vault"]["decision"] != "allow"
        and calls["db:vault"]["inputs"]["rollback_confirmed"] is False
    )
    assert calls["db:ledger"]["decision"] == "allow"  # the ref does cover its own database
    assert sqlite3.connect(vault).execute("SELECT count(*) FROM entries").fetchone() == (0,)


def test_model_calls_with_huge_model_names_stay_within_the_journal_cap(run, make_spec):
    spec = make_spec(
        "model-flood",
        "model_flood.py",
        agent={"command": ["python3", "/opt/agent/model_flood.py"], "files": ABUSE},
        model={"mode": "scripted", "script": str(ROOT / "fixtures" / "models" / "empty.json")},
        # each 8 MB request reserves ~2M input tokens: past the default budget, which would
        # deny the calls before they are journaled as model calls
        limits={"wall_seconds": 120, "tokens": 100_000_000},
    )
    result = run(spec)
    size = journal_of(result).stat().st_size
    assert size < 1024 * 1024, (
        size
    )  # 12 model names of 8 MB: journaled by digest (before: 96 MB, past the 64 MiB cap)
    journal = records(result)
    assert max(len(v) for r in journal for v in r.values() if isinstance(v, str)) <= 1024
    calls = [r for r in journal if r["event"] == "model_call"]
    assert len(calls) == 12 and all(r["model"].startswith("sha256:") for r in calls)
    assert journal[-1]["event"] == "gateway_stopped"
    assert result.report["verdict"] != "error", result.report
