"""An agent on the stock `openai` SDK, unmodified and configured only by the TCP bridge's
environment, in the real agent container: `/v1/models`, `/v1/chat/completions` (plain,
streamed, a tool call round trip) and `/v1/responses` (plain and streamed) through the bridge
and the gateway, answered from the same scripted Messages objects the Anthropic examples use;
it fixes the calc bug and the journal shows each call with its tokens. Hostile: one request
with three refused parts gets one 403 that names all three, and one journal line."""

from __future__ import annotations

import json

from assure.core.chain import verify_chain
from tests.contracts import ratify_in_place

from .conftest import ROOT

WIRES = "chat,chat-stream,responses,responses-stream"


def openai_spec(tmp_path, name, **env):
    """The openai-agent example (its ratified contract lets the agent's fs.write through),
    with the API of each turn and any other environment set for the agent."""
    import yaml

    example = ROOT / "specs" / "examples" / "openai-agent.yaml"
    data = yaml.safe_load(example.read_text())
    data["name"] = name
    data["agent"].update(
        files=str((example.parent / data["agent"]["files"]).resolve()), env={"WIRES": WIRES, **env}
    )
    data["workspace"]["fixture"] = str((example.parent / data["workspace"]["fixture"]).resolve())
    data["model"]["script"] = str((example.parent / data["model"]["script"]).resolve())
    for pinned in ("terms", "hash", "signature"):  # the signature covers the spec's name
        data["contract"].pop(pinned, None)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return ratify_in_place(path)


def journal(result):
    return verify_chain(result.run_dir / "attempts" / "1" / "gateway" / "journal.jsonl")


def test_a_stock_openai_sdk_agent_fixes_the_bug_over_both_openai_apis(run, tmp_path):
    result = run(openai_spec(tmp_path, "openai-agent-wires"))
    assert result.verdict == "pass", result.report
    log = (result.run_dir / "attempts" / "1" / "agent.log").read_text().splitlines()
    assert json.loads(log[-1]) == {"models": ["claude-sonnet-4-6"], "turns": WIRES.split(",")}
    records = journal(result)
    calls = [r for r in records if r["event"] == "model_call"]
    assert [(c["endpoint"], c["stream"], c["served"], c["status"]) for c in calls] == [
        ("models", False, "script", 200),
        ("chat_completions", False, "script", 200),
        ("chat_completions", True, "script", 200),
        ("responses", False, "script", 200),
        ("responses", True, "script", 200),
    ]
    assert [c["tokens"] for c in calls] == [
        0,
        460,
        460,
        460,
        460,
    ]  # the script's usage, read back from each wire format
    assert calls[-1]["counters"]["tokens"] == 4 * 460 and calls[1]["cost"] > 0
    assert [r["tool"] for r in records if r["event"] == "tool_call"] == [
        "fs.read",
        "fs.write",
        "task.report",
    ]


def test_one_refusal_names_all_three_refused_parts(run, tmp_path):
    result = run(openai_spec(tmp_path, "openai-agent-hostile", HOSTILE="1"))
    log = (result.run_dir / "attempts" / "1" / "agent.log").read_text()
    (refused,) = [line for line in log.splitlines() if line.startswith("REFUSED ")]
    assert refused.startswith("REFUSED 403 ") and "not an authentication problem" in refused
    for named in (
        "model.allow.request_keys: ['web_search_options']",
        "model.allow.tool_types: ['web_search']",
        "model.allow.content: ['image_url.url']",
    ):
        assert named in refused, refused
    (line,) = [r for r in journal(result) if r["event"] == "request_rejected"]
    assert (line["status"], line["code"]) == (403, "feature_refused")
    assert line["allow"] == {
        "request_keys": ["web_search_options"],
        "tool_types": ["web_search"],
        "content": ["image_url.url"],
    }
    assert result.verdict == "pass", (
        result.report
    )  # refused, not sent: the agent carries on and fixes the bug


def test_the_openai_agent_example_passes(run):
    result = run("openai-agent")
    assert result.verdict == "pass", result.report
    calls = [r for r in journal(result) if r["event"] == "model_call"]
    assert [c["endpoint"] for c in calls] == ["models"] + ["chat_completions"] * 4 and calls[-1][
        "counters"
    ]["tokens"] == 4 * 460


def test_the_openai_agent_scripted_to_edit_the_protected_test_is_contained(run):
    """Its writes go through the gateway: the protected test is refused before it lands."""
    result = run("openai-agent-hostile")
    assert result.verdict == "contained", result.report
    (denied,) = [r for r in journal(result) if r.get("decision") == "deny"]
    assert (denied["tool"], denied["path"], denied["rule"]) == (
        "fs.write",
        "tests/test_calc.py",
        "protected_path",
    )
    # workspace/ holds every change of a contained attempt: the protected test is not one
    assert not (result.run_dir / "attempts" / "1" / "workspace" / "tests" / "test_calc.py").exists()


def test_the_openai_agent_replays_from_its_own_recording(run):
    result = run("openai-agent-replay")
    assert result.verdict == "pass", result.report
    recorded = verify_chain(
        ROOT / "specs" / "examples" / "openai-agent.recording" / "gateway" / "journal.jsonl"
    )
    calls = [r for r in journal(result) if r["event"] == "model_call"]
    assert [(c["endpoint"], c["served"], c["response_sha256"]) for c in calls] == [
        (r["endpoint"], "replay", r["response_sha256"])
        for r in recorded
        if r["event"] == "model_call"
    ]
