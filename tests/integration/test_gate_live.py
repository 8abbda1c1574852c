"""The gate, live: contract, override, idempotency, budget and egress on real containers."""

from __future__ import annotations

import json
import secrets
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assure.core.chain import verify_chain
from assure.records import alerts, journal
from assure.records.store import RunDir

from .conftest import ROOT, live_ledger, ratified, run_dirs

SHOP = str(ROOT / "fixtures" / "databases" / "shop.sql")
ASSURE = [sys.executable, "-m", "assure.cli"]


def tool_calls(result, attempt=1):
    return [
        r
        for r in verify_chain(
            result.run_dir / "attempts" / str(attempt) / "gateway" / "journal.jsonl"
        )
        if r["event"] == "tool_call"
    ]


def test_acceptance_tests_edited_after_ratification_deny_every_mutation_naming_assertions(
    run, make_spec
):
    """The contract pins what done means: the spec is ratified (make_spec), then its assertions
    are loosened without re-ratifying. Every mutation is denied, the reason names the term."""
    import yaml

    path = make_spec(
        "loosened",
        "every-mutation.sh",
        contract=ratified(["fs:**", "db:shop"]),
        databases=[{"name": "shop", "fixture": SHOP}],
        assertions=[{"command": {"run": ["python3", "tests/test_calc.py"]}}],
    )
    data = yaml.safe_load(path.read_text())
    data["assertions"] = [{"exit_code": 0}]  # "done" made easier after the ratifier signed off
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result = run(path)
    calls = {r["tool"]: r for r in tool_calls(result)}
    for tool in ("fs.write", "fs.delete", "db.execute"):
        assert (calls[tool]["decision"], calls[tool]["rule"]) == (
            "deny",
            "contract.terms_changed",
        ), calls[tool]
        assert "ratified: assertions;" in calls[tool]["reason"], calls[tool]
    assert calls["db.query"]["decision"] == "allow"
    verdict = json.loads((result.run_dir / "attempts" / "1" / "verdict.json").read_text())
    assert verdict["changes"] == []
    db = sqlite3.connect(result.run_dir / "attempts" / "1" / "gateway" / "db" / "shop.sqlite")
    assert db.execute("SELECT item FROM orders ORDER BY id").fetchall() == [("pen",), ("ink",)]


def test_an_unratified_contract_denies_every_mutation_and_nothing_changes(run, make_spec):
    unratified = ratified(["fs:**", "db:shop"])
    del unratified["ratified_by"]
    result = run(
        make_spec(
            "unratified",
            "every-mutation.sh",
            contract=unratified,
            databases=[{"name": "shop", "fixture": SHOP}],
        )
    )
    calls = {r["tool"]: r for r in tool_calls(result)}
    for tool in ("fs.write", "fs.delete", "db.execute"):
        assert (calls[tool]["decision"], calls[tool]["rule"]) == (
            "deny",
            "contract.unratified",
        ), calls[tool]
    assert calls["db.query"]["decision"] == "allow"
    verdict = json.loads((result.run_dir / "attempts" / "1" / "verdict.json").read_text())
    assert verdict["changes"] == []
    db = sqlite3.connect(result.run_dir / "attempts" / "1" / "gateway" / "db" / "shop.sqlite")
    assert db.execute("SELECT item FROM orders ORDER BY id").fetchall() == [("pen",), ("ink",)]


def test_a_self_ratified_contract_is_no_contract(run, make_spec):
    result = run(
        make_spec("selfie", "every-mutation.sh", contract=ratified(["fs:**"], ratified_by="alice"))
    )
    assert {r["rule"] for r in tool_calls(result) if r["tool"] == "fs.write"} == {
        "contract.self_ratified"
    }


def test_one_key_one_effect_and_a_derived_key_for_live_effects(run, make_spec, tmp_path):
    live = live_ledger(tmp_path)
    spec = make_spec(
        "dup",
        "duplicate.sh",
        contract=ratified(["db:*"], ceiling="irreversible"),
        autonomy={"dial": "irreversible", "verifier_trust": "irreversible"},
        databases=[
            {"name": "shop", "fixture": SHOP},
            {"name": "ledger", "fixture": str(live), "mode": "live"},
        ],
        assertions=[{"exit_code": 0}],
    )
    result = run(spec)
    sandbox = sqlite3.connect(result.run_dir / "attempts" / "1" / "gateway" / "db" / "shop.sqlite")
    assert sandbox.execute("SELECT count(*) FROM orders WHERE item = 'book'").fetchone() == (1,)
    assert sqlite3.connect(live).execute("SELECT count(*) FROM entries").fetchone() == (1,)
    calls = [r for r in tool_calls(result) if r["tool"] == "db.execute"]
    assert [r.get("idempotent_replay", False) for r in calls] == [False, False, True, True]
    assert calls[2]["original_action_id"] == calls[0]["action_id"]
    assert calls[1]["resource_mode"] == "live" and calls[1]["idempotency_key"].startswith(
        "derived:"
    )
    assert (
        calls[1]["inputs"]["required_trust"] == 2
    )  # a live insert with no rollback is irreversible


def test_a_live_effect_without_enough_trust_escalates(run, make_spec, tmp_path):
    live = live_ledger(tmp_path)
    result = run(
        make_spec(
            "lowtrust",
            "duplicate.sh",
            contract=ratified(["db:*"]),
            databases=[
                {"name": "shop", "fixture": SHOP},
                {"name": "ledger", "fixture": str(live), "mode": "live"},
            ],
        )
    )
    live_calls = [
        r for r in tool_calls(result) if r["tool"] == "db.execute" and r["resource_mode"] == "live"
    ]
    assert {(r["decision"], r["rule"]) for r in live_calls} == {
        ("escalate", "escalate.irreversible")
    }
    assert sqlite3.connect(live).execute("SELECT count(*) FROM entries").fetchone() == (0,)


def _allowed_writes(journal: Path) -> int:
    """The writes the gate let through so far (each write has an `intent` line too: counting
    every `fs.write` once halted after three writes under load)."""
    count = 0
    for line in journal.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:  # the line being written
            continue
        count += record.get("event") == "tool_call" and record.get("decision") == "allow"
    return count


def test_override_mid_run_leaves_no_mutation_after_its_effect(make_spec, tmp_path, images, backend):
    spec = make_spec("writer", "writer-loop.sh", contract=ratified(["fs:**"]))
    proc = subprocess.Popen(
        ASSURE + ["run", "--json", str(spec)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        runs = tmp_path / ".assure" / "runs"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            journals = (
                list(runs.glob("*/attempts/1/gateway/journal.jsonl")) if runs.exists() else []
            )
            if journals and _allowed_writes(journals[0]) >= 5:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the writer never wrote")
        run_id = run_dirs(runs)[0].name
        assert (
            subprocess.run(
                ASSURE + ["halt", run_id], cwd=tmp_path, capture_output=True, timeout=30
            ).returncode
            == 0
        )
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert json.loads(out)["attempts"][0]["stopped"]["reason"] == "operator_halt"
    records = verify_chain(next(runs.glob("*/attempts/1/gateway/journal.jsonl")))
    effective = next(r for r in records if r["event"] == "override_effective")
    assert effective["latency_ms"] < 1000
    after = [r for r in records if r["seq"] > effective["seq"] and r["event"] == "tool_call"]
    assert all(r["decision"] == "deny" and r["rule"] == "operator_halt" for r in after)
    assert all(r["effect"] is None for r in after)
    before = [r for r in records if r["seq"] < effective["seq"] and r["event"] == "tool_call"]
    assert len([r for r in before if r["decision"] == "allow"]) >= 5


def test_a_budget_breach_halts_the_attempt_and_leaves_a_pending_alert(run, make_spec):
    result = run(
        make_spec(
            "spin",
            "spin.sh",
            contract=ratified(["fs:**"]),
            limits={"wall_seconds": 60, "tool_calls": 5},
        )
    )
    stop = result.report["attempts"][0]["stopped"]
    assert (stop["reason"], stop["counter"]) == ("budget", "tool_calls")
    assert 0 <= stop["latency_ms"] < 5000
    calls = tool_calls(result)
    assert [r["decision"] for r in calls[:5]] == ["allow"] * 5
    assert calls[5]["rule"] == "budget.tool_calls"
    (alert,) = [a for a in alerts.all_alerts(result.run_dir.parent) if a.kind == "budget_halt"]
    assert alert.state == "pending"
    (halt,) = journal.query(RunDir.open(result.run_dir), event="budget_halt")
    assert halt["counter"] == "tool_calls" and halt["latency_ms"] == stop["latency_ms"]


@pytest.fixture
def upstream(backend, images):
    """A test HTTP server on a network of its own: the proxy's only upstream."""
    import docker

    client = docker.from_env()
    name = f"assure-test-upstream-{secrets.token_hex(3)}"
    network = client.networks.create(name, internal=True)
    server = client.containers.create(
        images.agent,
        ["python3", "-c", UPSTREAM_SERVER],
        name=f"{name}-srv",
        read_only=True,
        cap_drop=["ALL"],
    )
    network.connect(server, aliases=["upstream"])
    server.start()
    try:
        deadline = time.monotonic() + 30
        while b"listening" not in server.logs() and time.monotonic() < deadline:
            time.sleep(0.05)
        yield name
    finally:
        server.remove(force=True)
        network.remove()


UPSTREAM_SERVER = """
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def _answer(self):
        body = self.rfile.read(int(self.headers.get('Content-Length') or 0))
        got = {'method': self.command, 'path': self.path, 'body': body.decode()}
        data = json.dumps(got).encode()
        self.send_response(200); self.send_header('Content-Length', str(len(data)))
        self.end_headers(); self.wfile.write(data)
    do_GET = do_POST = _answer
server = http.server.ThreadingHTTPServer(('0.0.0.0', 8080), H)
print('listening', flush=True)
server.serve_forever()
"""


def test_egress_allows_the_allowlist_and_refuses_everything_else(run, make_spec, upstream):
    spec = make_spec(
        "http",
        "http.sh",
        contract=ratified(["http:*"], ceiling="irreversible"),
        autonomy={"dial": "irreversible", "verifier_trust": "irreversible"},
        egress={"allow": ["upstream:8080"], "upstream": upstream, "allow_private": True},
        assertions=[{"exit_code": 0}],
    )  # a verifier: without one, trust is propose
    result = run(spec)
    calls = tool_calls(result)
    urls = [(r["decision"], r["status"], r.get("error")) for r in calls]
    evidence = (
        result.run_dir / "attempts" / "1" / "agent.log"
    ).read_text()  # shown if an assertion fails
    assert urls[0] == ("allow", 200, None), evidence
    assert urls[1] == (
        "allow",
        200,
        None,
    ), evidence  # POST: an external effect, allowed at the irreversible tier
    assert [u[2] for u in urls[2:]] == ["egress_denied"] * 4
    log = result.run_dir / "attempts" / "1" / "egress" / "requests.jsonl"
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["method"], e["host"], e["decision"]) for e in entries] == [
        ("GET", "upstream", "allow"),
        ("POST", "upstream", "allow"),
    ]
    agent_log = (result.run_dir / "attempts" / "1" / "agent.log").read_text()
    assert '"path": "/hello"' in agent_log or '\\"path\\": \\"/hello\\"' in agent_log
