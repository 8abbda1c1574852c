"""Model access, live: the stock SDK in the agent container → gateway → egress proxy → a local
Anthropic-compatible upstream; the key never reaches the agent; budgets; zero-token replay."""

from __future__ import annotations

import json
import secrets

import pytest

from assure.core.chain import verify_chain

from .conftest import ROOT

KEY = "sk-test-" + secrets.token_hex(16)
PRICES = {"claude-test": {"input": 3, "output": 15}, "flaky": {"input": 3, "output": 15}}


@pytest.fixture
def fake_api(images, monkeypatch):
    import docker

    client = docker.from_env()
    name = f"assure-test-api-{secrets.token_hex(3)}"
    network = client.networks.create(name, internal=True)
    server = client.containers.create(
        images.agent,
        ["python3", "/srv/fake_anthropic.py", "8080"],
        name=f"{name}-srv",
        environment={"FAKE_KEY": KEY},
        volumes={str(ROOT / "fixtures" / "upstreams"): {"bind": "/srv", "mode": "ro"}},
        read_only=True,
        cap_drop=["ALL"],
    )
    network.connect(server, aliases=["fakeapi"])
    server.start()
    monkeypatch.setenv("ASSURE_TEST_MODEL_KEY", KEY)
    try:
        yield name, server
    finally:
        server.remove(force=True)
        network.remove()


def upstream_requests(server) -> list[dict]:
    return [
        json.loads(line) for line in server.logs().decode().splitlines() if line.startswith("{")
    ]


def model_spec(make_spec, name, **changes):
    fields = {
        "agent": {
            "command": ["python3", "/opt/agent/sdk_agent.py"],
            "files": str(ROOT / "fixtures" / "agents" / "model"),
        },
        "assertions": [{"exit_code": 0}],
        **changes,
    }
    return make_spec(name, "unused", **fields)


def agent_report(result):
    return json.loads(
        (result.run_dir / "attempts" / "1" / "agent.log").read_text().splitlines()[-1]
    )


def model_calls(result):
    return [
        r
        for r in verify_chain(result.run_dir / "attempts" / "1" / "gateway" / "journal.jsonl")
        if r["event"] == "model_call"
    ]


def test_the_stock_sdk_through_gateway_and_proxy_and_the_key_never_reaches_the_agent(
    run, make_spec, fake_api
):
    network, server = fake_api
    spec = model_spec(
        make_spec,
        "model",
        egress={"allow": ["fakeapi:8080"], "upstream": network, "allow_private": True},
        model={
            "mode": "anthropic",
            "upstream": "http://fakeapi:8080",
            "allow_http": True,
            "key_env": "ASSURE_TEST_MODEL_KEY",
            "prices": PRICES,
        },
    )
    result = run(spec)
    assert result.verdict == "pass", result.report
    assert agent_report(result) == {
        "plain": "echo: hello",
        "stream": "echo: hello stream",
        "flaky": "echo: hello flaky",
    }
    seen = upstream_requests(server)
    assert [(r["model"], r["stream"]) for r in seen] == [
        ("claude-test", False),
        ("claude-test", True),
        ("flaky", False),
        ("flaky", False),
    ]
    assert all(r["key_ok"] for r in seen)  # the gateway added the key upstream
    calls = model_calls(result)
    assert [c["status"] for c in calls] == [200, 200, 429, 200]
    assert calls[0]["usage"]["input_tokens"] == 11 and calls[-1]["counters"]["tokens"] == 54
    proxy_log = [
        json.loads(line)
        for line in (
            (result.run_dir / "attempts" / "1" / "egress" / "requests.jsonl")
            .read_text()
            .splitlines()
        )
    ]
    assert {(e["host"], e["decision"]) for e in proxy_log} == {("fakeapi", "allow")}
    for path in result.run_dir.rglob("*"):  # journal, blobs, logs, reports, the agent's own dump
        if path.is_file() and not path.is_symlink():
            assert KEY.encode() not in path.read_bytes(), path


def test_a_token_budget_breach_denies_the_next_call_and_halts(run, make_spec, fake_api):
    network, server = fake_api
    spec = model_spec(
        make_spec,
        "model-budget",
        egress={"allow": ["fakeapi:8080"], "upstream": network, "allow_private": True},
        limits={"wall_seconds": 60, "tokens": 40},
        model={
            "mode": "anthropic",
            "upstream": "http://fakeapi:8080",
            "allow_http": True,
            "key_env": "ASSURE_TEST_MODEL_KEY",
            "prices": PRICES,
        },
    )
    result = run(spec)
    # the first call's input estimate is 22 tokens, so its max_tokens 64 is clamped to the 18 left
    # and it spends 18;
    # the next one's input estimate (27) is more than the 22 left: no output fits, denied
    assert [c["status"] for c in model_calls(result)] == [200, 403]
    assert model_calls(result)[0]["output_cap"] == {"asked": 64, "forwarded": 18}
    assert model_calls(result)[1]["rule"] == "budget.tokens"
    assert [r["body"]["max_tokens"] for r in upstream_requests(server)] == [
        18
    ]  # what the upstream was asked for
    stop = result.report["attempts"][0]["stopped"]
    assert (stop["reason"], stop["counter"]) == ("budget", "tokens") and stop["latency_ms"] < 5000
    breach = json.loads((result.run_dir / "attempts" / "1" / "gateway" / "breach.json").read_text())
    assert breach["counter"] == "tokens"


def test_a_recorded_run_replays_with_zero_upstream_calls_and_a_changed_request_fails(
    run, make_spec, fake_api
):
    network, server = fake_api
    recorded = run(
        model_spec(
            make_spec,
            "model-rec",
            egress={"allow": ["fakeapi:8080"], "upstream": network, "allow_private": True},
            model={
                "mode": "anthropic",
                "upstream": "http://fakeapi:8080",
                "allow_http": True,
                "key_env": "ASSURE_TEST_MODEL_KEY",
                "prices": PRICES,
            },
        )
    )
    before = len(upstream_requests(server))
    attempt = str(recorded.run_dir / "attempts" / "1")
    replayed = run(
        model_spec(
            make_spec,
            "model-replay",
            model={"mode": "replay", "recording": attempt, "prices": PRICES},
        )
    )
    assert replayed.verdict == "pass"
    assert agent_report(replayed) == agent_report(recorded)
    assert len(upstream_requests(server)) == before  # zero upstream requests
    assert [c["response_sha256"] for c in model_calls(replayed)] == [
        c["response_sha256"] for c in model_calls(recorded)
    ]
    assert all(c["served"] == "replay" for c in model_calls(replayed))
    changed = run(
        model_spec(
            make_spec,
            "model-mismatch",
            agent={
                "command": ["python3", "/opt/agent/sdk_agent.py"],
                "files": str(ROOT / "fixtures" / "agents" / "model"),
                "env": {"PROMPT": "something else"},
            },
            model={"mode": "replay", "recording": attempt, "prices": PRICES},
        )
    )
    report = agent_report(changed)
    assert report["error"]["status"] == 409 and "replay_mismatch" in json.dumps(
        report["error"]["body"]
    )
    assert len(upstream_requests(server)) == before


def test_a_deadline_during_a_model_call_leaves_a_complete_journal(run, make_spec, fake_api):
    """An honest agent stopped at its deadline while the provider is still thinking: the
    gateway settles the call at its reservation and stops cleanly within the stop grace, so
    the verdict rests on the work (nothing unexplained) and never on a false breach."""
    network, _server = fake_api
    spec = make_spec(
        "model-stall",
        "unused",
        agent={
            "command": ["python3", "/opt/agent/stall.py"],
            "files": str(ROOT / "fixtures" / "agents" / "model"),
        },
        egress={"allow": ["fakeapi:8080"], "upstream": network, "allow_private": True},
        limits={"wall_seconds": 4},
        model={
            "mode": "anthropic",
            "upstream": "http://fakeapi:8080",
            "allow_http": True,
            "key_env": "ASSURE_TEST_MODEL_KEY",
            "prices": {**PRICES, "stall": {"input": 3, "output": 15}},
        },
        assertions=[{"no_unattributed_changes": True}],
        expect="pass",
    )
    result = run(spec)
    (attempt,) = result.report["attempts"]
    assert attempt["timed_out"], attempt  # the deadline, not the answer, ended it
    journal = verify_chain(result.run_dir / "attempts" / "1" / "gateway" / "journal.jsonl")
    (intent,) = [r for r in journal if r["event"] == "intent"]
    (outcome,) = [r for r in journal if r["event"] == "model_call"]
    assert outcome["action_id"] == intent["action_id"] and outcome["status"] == "interrupted"
    assert outcome["counters"]["tokens"] > 0  # spent at its reservation, never free
    assert journal[-1]["event"] == "gateway_stopped"
    assert not [f for f in attempt["findings"] if f["kind"] == "journal_incomplete"], attempt[
        "findings"
    ]
    assert result.verdict == "pass", result.report
