"""Default token budgets (issue 22 item 5): a spec that sets none gets its preset's (else the
general default), and the preset's is big enough for a realistic session of its agent and still
stops a runaway one. The session is the one bench/agent_budget.py derives: Claude Code's real
request (from the example's committed recording) growing turn by turn as measured, each answer
reporting the usage a cached session would (the previous input read from the cache, the new
part written), until $3 at the example's prices is spent."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import httpx
import yaml

from assure import presets
from assure import spec as spec_mod
from assure.core.chain import verify_chain
from assure.gateway.config import Price, parse
from assure.gateway.server import serve
from assure.run import modelaccess, policy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "specs" / "examples"
RECORDING = EXAMPLES / "claude-code.recording" / "gateway"


def bench() -> Any:
    found = importlib.util.spec_from_file_location(
        "bench_agent_budget", ROOT / "bench" / "agent_budget.py"
    )
    assert found and found.loader
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


def variant(tmp_path: Path, name: str, change) -> Path:
    data = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    data["workspace"]["fixture"] = str(ROOT / "fixtures" / "workspaces" / "calc")
    data["model"]["script"] = str((EXAMPLES / data["model"]["script"]).resolve())
    if "files" in data["agent"]:
        data["agent"]["files"] = str((EXAMPLES / data["agent"]["files"]).resolve())
    change(data)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_spec_without_budgets_gets_its_presets_and_a_given_one_wins(tmp_path: Path) -> None:
    def unset(data: dict[str, Any]) -> None:
        data.setdefault("limits", {}).pop("tokens", None)

    for name, preset in (
        ("claude-code", "claude-code"),
        ("mini-swe-agent", "mini-swe-agent"),
        ("openai-agent", "openai-sdk"),
    ):
        spec = spec_mod.load(variant(tmp_path, name, unset))
        wanted = presets.PRESETS[preset].get("limits", {}).get("tokens", presets.DEFAULT_TOKENS)
        assert spec.agent.preset == preset and spec.limits.tokens == wanted, name
        assert policy.gateway_policy(spec).tokens_limit == wanted  # what the gateway enforces
        assert spec.limits.cost is None  # no default: see the schema
        assert spec_mod.Spec.from_json(spec.to_json()) == spec  # spec.json reads back the same
        given = spec_mod.load(variant(tmp_path, name, lambda d: d["limits"].update(tokens=5000)))
        assert given.limits.tokens == 5000
    assert presets.PRESETS["claude-code"]["limits"]["tokens"] > presets.DEFAULT_TOKENS
    benign = spec_mod.load(EXAMPLES / "benign.yaml")  # no preset: the general default
    assert benign.agent.preset is None and benign.limits.tokens == presets.DEFAULT_TOKENS


def test_a_realistic_claude_code_session_fits_its_default_and_a_runaway_is_stopped(
    tmp_path: Path, gateway_config
) -> None:
    b = bench()
    spec = spec_mod.load(
        variant(tmp_path, "claude-code", lambda d: d["limits"].pop("tokens", None))
    )
    limit = policy.gateway_policy(spec).tokens_limit
    assert spec.model is not None and limit == presets.PRESETS["claude-code"]["limits"]["tokens"]
    price = Price(**modelaccess.prices(spec.model.prices)[b.PRICED])
    first, growth, output, cached = b.shape(b.calls(RECORDING))
    assert cached and first > 10_000  # Claude Code's system prompt and tools, measured
    turns, spent, _ = b.session(first, growth, output, cached, price, 3.0)

    record = next(
        r for r in verify_chain(RECORDING / "journal.jsonl") if r["event"] == "model_call"
    )
    request = json.loads((RECORDING / "blobs" / record["request_sha256"]).read_bytes())
    assert request["max_tokens"] == 128_000 and request["stream"] is True
    runaway = turns + 200  # calls it would make with no limit of its own
    inputs = [round(first + n * growth) for n in range(runaway)]
    script = []
    for n, now in enumerate(inputs):
        before = inputs[n - 1] if n else 0
        usage = {
            "input_tokens": 0,
            "cache_read_input_tokens": before,
            "cache_creation_input_tokens": now - before,
            "output_tokens": output,
        }
        script.append(
            {
                "id": f"msg_{n}",
                "type": "message",
                "role": "assistant",
                "model": request["model"],
                "content": [{"type": "text", "text": "working"}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": usage,
            }
        )
    (tmp_path / "script.json").write_text(json.dumps(script))
    model = modelaccess.ModelAccess(spec.model, spec.path.parent, tmp_path, 0, 0).gateway_config()
    assert model is not None
    model = json.loads(json.dumps(model.to_json()))  # as the host writes the gateway's config
    model.update(blob_dir=str(tmp_path / "blobs"), script=str(tmp_path / "script.json"))
    raw = gateway_config()
    raw["model"], raw["policy"] = model, {**raw["policy"], "tokens_limit": limit}
    gateway = serve(parse(raw))
    headers = {"anthropic-version": "2023-06-01", "anthropic-beta": record["anthropic_beta"]}
    statuses = []
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=gateway.config.socket)) as plain:
            for now in inputs:
                # the conversation so far: the request's bytes grow as its input does
                pad = "x" * max(0, (now - first) * 4 - 64)
                body = {
                    **request,
                    "messages": [*request["messages"], {"role": "user", "content": pad or "go"}],
                }
                answer = plain.post("http://gateway/v1/messages", json=body, headers=headers)
                statuses.append(answer.status_code)
                assert gateway.counters.tokens <= limit  # never past the limit
                if answer.status_code != 200:
                    assert "budget.tokens" in answer.text, answer.text
                    break
    finally:
        gateway.shutdown()
    assert statuses[:turns] == [200] * turns  # the whole $3 session: no call locked out
    assert gateway.counters.tokens >= spent  # it spent what the session spends
    assert 403 in statuses and len(statuses) < runaway  # the runaway is stopped
    journal = [r for r in verify_chain(gateway.config.journal) if r["event"] == "model_call"]
    clamped = [r for r in journal if r.get("output_cap")]
    assert clamped and all(
        r["output_cap"]["asked"] == 128_000 > r["output_cap"]["forwarded"] for r in clamped
    )  # near the end Claude Code's max_tokens shrank to fit instead of being denied
    assert journal[-1]["decision"] == "deny" and journal[-1]["rule"] == "budget.tokens"
