"""The gateway's OpenAI-compatible routes (`/v1/chat/completions`, `/v1/responses`,
`/v1/models`) with the stock `openai` SDK bound to the gateway's unix socket: scripted
answers in both wire formats from one script, an OpenAI-compatible upstream through the egress
proxy, replay, the refusal that names every refused part at once (both APIs), and the
budget that shrinks a large output cap to what is left instead of locking the agent out."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from assure.core.chain import canonical, verify_chain
from assure.gateway import features
from assure.gateway.server import Gateway
from tests.unit._egress import loopback_only  # noqa: F401 -- an autouse fixture: every test here
from tests.unit.test_gateway_model import (  # noqa: F401  (fixtures)
    AGENT_KEY,
    ASK,
    KEY,
    PRICES,
    FakeAPI,
    api,
    calls,
    egress,
    httpx,
    in_flight_together,
    key_file,
    live,
    message,
    proxy,
    replay_model,
    sdk,
    start,
)

TOOL = {
    "type": "function",
    "function": {
        "name": "fs_write",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}
CHAT = {"model": "claude-test-1", "messages": [{"role": "user", "content": "fix the bug"}]}
WRITE = {
    **message("writing"),
    "content": [
        {"type": "text", "text": "writing"},
        {"type": "tool_use", "id": "call_1", "name": "fs_write", "input": {"path": "a.txt"}},
    ],
    "stop_reason": "tool_use",
}


def client(gateway: Gateway, max_retries: int = 0) -> openai.OpenAI:
    http_client = httpx.Client(transport=httpx.HTTPTransport(uds=gateway.config.socket))
    return openai.OpenAI(
        base_url="http://gateway/v1",
        api_key=AGENT_KEY,
        http_client=http_client,
        max_retries=max_retries,
    )


def scripted(
    start: Callable[..., Gateway], tmp_path: Path, items: list[Any], **extra: Any
) -> Gateway:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(items))
    return start({"mode": "scripted", "script": str(script), "prices": PRICES}, **extra)


def rejected(gateway: Gateway) -> list[dict[str, Any]]:
    return [r for r in verify_chain(gateway.config.journal) if r["event"] == "request_rejected"]


# ---------------------------------------------------------------- one script, two wire formats


def test_one_script_answers_chat_completions_plain_streamed_and_with_a_tool_call(
    start: Callable[..., Gateway], tmp_path: Path
) -> None:
    gateway = scripted(
        start, tmp_path, [message("plain"), message("streamed"), WRITE, message("done")]
    )
    oa = client(gateway)
    reply = oa.chat.completions.create(**CHAT)
    assert reply.choices[0].message.content == "plain" and reply.choices[0].finish_reason == "stop"
    assert (
        reply.usage.prompt_tokens,
        reply.usage.completion_tokens,
        reply.usage.prompt_tokens_details.cached_tokens,
    ) == (15, 5, 3)
    chunks = list(
        oa.chat.completions.create(**CHAT, stream=True, stream_options={"include_usage": True})
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "streamed"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 20
    # a tool call round trip: the model asks, the agent runs it and sends the result back
    asked = oa.chat.completions.create(**CHAT, tools=[TOOL])
    call = asked.choices[0].message.tool_calls[0]
    assert (
        asked.choices[0].finish_reason,
        call.id,
        call.function.name,
        json.loads(call.function.arguments),
    ) == ("tool_calls", "call_1", "fs_write", {"path": "a.txt"})
    history = [
        *CHAT["messages"],
        asked.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "written"},
    ]
    assert (
        oa.chat.completions.create(model=CHAT["model"], messages=history, tools=[TOOL])
        .choices[0]
        .message.content
        == "done"
    )
    records = calls(gateway)
    assert [(r["endpoint"], r["stream"], r["script_index"], r["tokens"]) for r in records] == [
        ("chat_completions", False, 0, 20),
        ("chat_completions", True, 1, 20),
        ("chat_completions", False, 2, 20),
        ("chat_completions", False, 3, 20),
    ]
    assert records[0]["usage"] == {
        "input_tokens": 12,
        "output_tokens": 5,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 3,
    }
    assert records[0]["cost"] > 0 and gateway.counters.tokens == 80


def test_a_chat_stream_without_include_usage_still_carries_its_usage(
    start: Callable[..., Gateway], tmp_path: Path
) -> None:
    gateway = scripted(start, tmp_path, [WRITE])
    with client(gateway).chat.completions.stream(
        **CHAT, tools=[TOOL]
    ) as stream:  # the SDK's own accumulator
        final = stream.get_final_completion()
    assert final.choices[0].message.tool_calls[0].function.arguments == '{"path":"a.txt"}'
    assert calls(gateway)[0]["tokens"] == 20 and "usage_unread" not in calls(gateway)[0]


def test_one_script_answers_the_responses_api_and_lists_its_models(
    start: Callable[..., Gateway], tmp_path: Path
) -> None:
    gateway = scripted(start, tmp_path, [message("plain"), WRITE])
    oa = client(gateway)
    reply = oa.responses.create(model="claude-test-1", input="hi", max_output_tokens=100)
    assert (
        reply.output_text == "plain"
        and reply.usage.input_tokens == 15
        and reply.usage.output_tokens == 5
    )
    with oa.responses.stream(
        model="claude-test-1",
        input="write it",
        tools=[{"type": "function", "name": "fs_write", "parameters": {"type": "object"}}],
    ) as stream:
        final = stream.get_final_response()
    calls_made = [item for item in final.output if item.type == "function_call"]
    assert (calls_made[0].call_id, calls_made[0].name, calls_made[0].arguments) == (
        "call_1",
        "fs_write",
        '{"path":"a.txt"}',
    )
    assert [m.id for m in oa.models.list()] == ["claude-test-1"]
    records = calls(gateway)
    assert [(r["endpoint"], r["stream"], r["tokens"]) for r in records] == [
        ("responses", False, 20),
        ("responses", True, 20),
        ("models", False, 0),
    ]


def test_openai_calls_replay_byte_for_byte(start: Callable[..., Gateway], tmp_path: Path) -> None:
    recorded = scripted(start, tmp_path, [message("one"), message("two")], name="rec")
    oa = client(recorded)

    def streamed(oa: openai.OpenAI) -> bytes:
        with oa.chat.completions.with_streaming_response.create(**CHAT, stream=True) as response:
            return b"".join(response.iter_bytes())

    first, second = (
        oa.chat.completions.with_raw_response.create(**CHAT).http_response.content,
        streamed(oa),
    )
    recorded.shutdown()
    replayed = client(start(replay_model(recorded), "rep"))
    assert replayed.chat.completions.with_raw_response.create(**CHAT).http_response.content == first
    assert streamed(replayed) == second
    with pytest.raises(openai.ConflictError) as info:
        replayed.chat.completions.create(
            **{**CHAT, "messages": [{"role": "user", "content": "something else"}]}
        )
    assert info.value.body["code"] == "replay_mismatch"  # OpenAI's error shape


# ---------------------------------------------------------------- an OpenAI-compatible upstream


def openai_model(api: FakeAPI, key_file: Path) -> dict[str, Any]:
    return {
        "mode": "openai",
        "upstream": f"http://{api.key}",
        "allow_http": True,
        "key_file": str(key_file),
        "prices": PRICES,
    }


def test_an_openai_upstream_gets_the_gateways_key_as_a_bearer_token(
    start: Callable[..., Gateway], api: FakeAPI, proxy: Any, key_file: Path
) -> None:
    gateway = start(openai_model(api, key_file), egress=egress(proxy, api))
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "claude-test-1",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
        "usage": {
            "prompt_tokens": 30,
            "completion_tokens": 4,
            "total_tokens": 34,
            "prompt_tokens_details": {"cached_tokens": 10},
        },
    }
    api.push(200, completion)
    assert client(gateway).chat.completions.create(**CHAT).choices[0].message.content == "hi"
    seen = api.seen[0]
    assert (
        seen["path"] == "/v1/chat/completions"
        and seen["headers"]["authorization"] == f"Bearer {KEY}"
    )
    assert AGENT_KEY not in json.dumps(seen["headers"]) and "x-api-key" not in seen["headers"]
    (record,) = calls(gateway)
    assert (record["served"], record["mode"], record["tokens"]) == ("upstream", "openai", 34)
    assert record["usage"] == {
        "input_tokens": 20,
        "output_tokens": 4,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 10,
    }
    assert record["cost"] == pytest.approx((20 * 3 + 4 * 15 + 10 * 0.3) / 1e6)
    with pytest.raises(anthropic.NotFoundError) as info:  # this upstream speaks only the OpenAI API
        sdk(gateway, max_retries=0).messages.create(**ASK)
    assert "upstream is an OpenAI-compatible API" in info.value.message and api.count == 1


# --------------------------------------------------------------- a refusal names every refused part


def test_one_403_names_all_three_refused_parts_and_the_spec_lines_that_allow_them(
    start: Callable[..., Gateway], tmp_path: Path
) -> None:
    gateway = scripted(start, tmp_path, [message()])
    hostile = {
        **CHAT,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "https://attacker.invalid/x.png"}}
                ],
            }
        ],
        "tools": [TOOL, {"type": "web_search"}],
    }
    with pytest.raises(openai.PermissionDeniedError) as info:
        client(gateway, max_retries=2).chat.completions.create(
            **hostile, extra_body={"web_search_options": {}}
        )
    error = info.value.body
    assert error["code"] == "feature_refused" and error["message"].startswith(
        "refused by the gateway, not an authentication problem"
    )
    for named in (
        "request key 'web_search_options'",
        "tools[1] of type 'web_search'",
        "messages[0].content[0]: an image by URL",
        "model.allow.request_keys: ['web_search_options']",
        "model.allow.tool_types: ['web_search']",
        "model.allow.content: ['image_url.url']",
    ):
        assert named in error["message"]
    assert error["allow"] == {
        "request_keys": ["web_search_options"],
        "tool_types": ["web_search"],
        "content": ["image_url.url"],
    }
    (line,) = rejected(gateway)  # one journal line, not retried
    assert (line["status"], line["code"], line["allow"]) == (
        403,
        "feature_refused",
        error["allow"],
    ) and line["reason"] == error["message"]
    assert calls(gateway) == []


def test_what_claude_code_sends_is_refused_in_one_answer_that_fits(
    start: Callable[..., Gateway], tmp_path: Path
) -> None:
    betas = [
        "claude-code-20250219",
        "context-management-2025-06-27",
        "per-turn-control-2026-07-01",
        "mid-conversation-tool-changes-2026-07-01",
        "thinking-token-count-2026-05-13",
        "advanced-tool-use-2025-11-20",
        "effort-2025-11-24",
    ]
    gateway = scripted(start, tmp_path, [message()])
    with pytest.raises(anthropic.PermissionDeniedError) as info:
        sdk(gateway, max_retries=0).messages.create(
            **ASK,
            extra_body={"context_management": {}},
            extra_headers={"anthropic-beta": ",".join(betas)},
        )
    text = info.value.body["error"]["message"]
    assert text.startswith(
        "refused by the gateway, not an authentication problem"
    )  # Claude Code prints "Failed to authenticate. API Error: 403 <this>"
    assert (
        "model.allow.request_keys: ['context_management']; model.allow.betas:"
        f" [{', '.join(repr(b) for b in betas)}]" in text
    )
    assert "8 parts" in text and len(text) < 1024  # whole: nothing cut off
    assert info.value.body["error"]["allow"] == {
        "request_keys": ["context_management"],
        "betas": betas,
    }
    assert len(rejected(gateway)) == 1


def test_the_allow_block_of_a_refusal_lets_the_same_request_through() -> None:
    body = {**CHAT, "tools": [TOOL, {"type": "web_search"}]}
    with pytest.raises(features.Refused) as info:
        features.check(body, None, features.Allow(), "chat_completions")
    allow = features.Allow(**{k: frozenset(v) for k, v in info.value.allow().items()})
    features.check(body, None, allow, "chat_completions")  # no longer refused


def test_inline_content_passes_and_stored_state_is_refused() -> None:
    inline = {
        **CHAT,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "see"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
                ],
            }
        ],
    }
    features.check(inline, None, features.Allow(), "chat_completions")
    features.check(
        {
            "model": "m",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                {"type": "function_call_output", "call_id": "c", "output": "ok"},
            ],
        },
        None,
        features.Allow(),
        "responses",
    )
    with pytest.raises(features.Refused) as info:
        features.check(
            {
                "model": "m",
                "previous_response_id": "resp_1",
                "input": [
                    {"type": "item_reference", "id": "x"},
                    {"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]},
                ],
            },
            None,
            features.Allow(),
            "responses",
        )
    assert info.value.allow() == {
        "request_keys": ["previous_response_id"],
        "content": ["item_reference", "input_file.file_id"],
    }


# ---------------------------------------------------------------- budgets that fit real agents


def test_a_large_max_tokens_is_clamped_to_what_is_left_and_settled_on_usage(
    live: Callable[..., Gateway], api: FakeAPI
) -> None:
    gateway = live(policy={"tokens_limit": 1000})
    reply = sdk(gateway, max_retries=0).messages.create(
        **{**ASK, "max_tokens": 128000}, timeout=30
    )  # Claude Code's
    assert reply.content[0].text == "hello"
    forwarded = json.loads(api.seen[0]["body"])
    (record,) = calls(gateway)
    estimate = -(
        -len(canonical({**ASK, "max_tokens": 128000})) // 4
    )  # its input, at 4 bytes a token
    assert forwarded["max_tokens"] == 1000 - estimate and record["output_cap"] == {
        "asked": 128000,
        "forwarded": 1000 - estimate,
    }
    assert (
        record["reserved"]["tokens"] == 1000
        and record["tokens"] == 20
        and gateway._calls._reserved_tokens == 0
    )
    sdk(gateway, max_retries=0).messages.create(**{**ASK, "max_tokens": 128000}, timeout=30)
    assert (
        json.loads(api.seen[1]["body"])["max_tokens"] == 1000 - 20 - estimate
    )  # what the first call left


def test_concurrent_large_calls_never_overshoot_the_budget(
    live: Callable[..., Gateway], api: FakeAPI
) -> None:
    gateway = live(policy={"tokens_limit": 300})
    statuses: list[int] = []

    def one() -> None:
        try:
            sdk(gateway, max_retries=0).messages.create(**{**ASK, "max_tokens": 128000}, timeout=30)
            statuses.append(200)
        except anthropic.APIStatusError as exc:
            statuses.append(exc.status_code)

    in_flight_together(api, [one] * 5, statuses)
    records = calls(gateway)
    allowed = [r for r in records if r["decision"] == "allow"]
    assert sum(r["reserved"]["tokens"] for r in allowed) <= 300 and gateway.counters.tokens <= 300
    assert statuses.count(200) == len(allowed) >= 1 and statuses.count(403) == 5 - len(allowed)
    assert gateway._calls._reserved_tokens == 0


def test_openai_output_caps_are_clamped_too(
    start: Callable[..., Gateway], api: FakeAPI, proxy: Any, key_file: Path
) -> None:
    gateway = start(
        openai_model(api, key_file), egress=egress(proxy, api), policy={"tokens_limit": 500}
    )
    completion = {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "claude-test-1",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1},
    }
    oa = client(gateway)
    for _ in range(3):
        api.push(200, completion)
    oa.chat.completions.create(**CHAT, max_completion_tokens=128000, max_tokens=100000)
    oa.chat.completions.create(**CHAT)  # no cap: it gets what is left
    sent = [json.loads(s["body"]) for s in api.seen]
    estimate = 500 - sent[0]["max_completion_tokens"]
    assert sent[0]["max_tokens"] == sent[0]["max_completion_tokens"] and 0 < estimate < 40
    assert "max_tokens" not in sent[1] and sent[1]["max_completion_tokens"] < 500 - 6
    with pytest.raises(openai.BadRequestError):
        # deliberately out of range: the test is that it is refused
        oa.responses.create(model="m", input="x", max_output_tokens=-1)  # type: ignore[arg-type]


def test_a_reservation_shrinks_to_what_the_budgets_leave_and_no_further() -> None:
    from assure.gateway.model import DEFAULT_OUTPUT, _Fit

    unlimited = _Fit(100, 128000, 3e-6, 15e-6, 0.0)
    assert (
        unlimited(None, None) == (100 + 128000, pytest.approx(100 * 3e-6 + 128000 * 15e-6))
        and unlimited.output == 128000
    )
    by_tokens = _Fit(100, 128000, 3e-6, 15e-6, 0.0)
    assert by_tokens(20000, None)[0] == 20000 and by_tokens.output == 19900
    by_cost = _Fit(100, 128000, 3e-6, 15e-6, 0.02)  # fees are reserved whole, before any output
    tokens, cost = by_cost(None, 0.05)
    assert by_cost.output == int((0.05 - 0.02 - 100 * 3e-6) / 15e-6) and cost <= 0.05
    full = _Fit(100, 128000, 3e-6, 15e-6, 0.0)
    assert full(100, None) == (
        100 + 128000,
        pytest.approx(100 * 3e-6 + 128000 * 15e-6),
    )  # no room for output: it asks for all, so the gate denies it
    uncapped = _Fit(100, None, 0.0, 0.0, 0.0)
    assert uncapped(10**9, None)[0] == 100 + DEFAULT_OUTPUT and uncapped.output == DEFAULT_OUTPUT
    free = _Fit(100, None, 0.0, 0.0, 0.0)
    assert (
        free(None, None) == (100, 0.0) and free.output is None
    )  # no budget: forwarded as the agent sent it


def test_the_bridge_gives_a_command_the_openai_sdks_environment(
    start: Callable[..., Gateway], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from assure.agents import tcp_bridge

    gateway = scripted(start, tmp_path, [message("through the bridge")])
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    out = tmp_path / "out.json"
    code = (
        "import json, openai, os; c = openai.OpenAI(max_retries=0); r ="
        " c.chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'hi'}]);"
        f" open({str(out)!r}, 'w').write(json.dumps([os.environ['OPENAI_BASE_URL'],"
        " r.choices[0].message.content]))"
    )
    assert (
        tcp_bridge.main(
            ["--port", "0", "--socket", gateway.config.socket, "--", sys.executable, "-c", code]
        )
        == 0
    )
    base, text = json.loads(out.read_text())
    assert (
        base.startswith("http://127.0.0.1:")
        and base.endswith("/v1")
        and text == "through the bridge"
    )
    assert [r["endpoint"] for r in calls(gateway)] == ["chat_completions"]


def test_mode_openai_needs_its_upstream_and_key_named(tmp_path: Path) -> None:
    import yaml

    from assure import spec as spec_mod
    from assure.errors import SpecError

    example = Path(__file__).resolve().parents[2] / "specs" / "examples" / "openai-agent.yaml"
    data = yaml.safe_load(example.read_text())
    for name in ("fixture",):
        data["workspace"][name] = str((example.parent / data["workspace"][name]).resolve())
    data["agent"]["files"] = str((example.parent / data["agent"]["files"]).resolve())
    data["model"] = {"mode": "openai", "prices": data["model"]["prices"]}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as info:  # not silently the Anthropic default upstream and key
        spec_mod.load(path)
    assert "upstream" in " ".join(info.value.problems)
    data["model"].update(upstream="http://vllm.internal:8000", key_env="VLLM_KEY", allow_http=True)
    path.write_text(yaml.safe_dump(data))
    loaded = spec_mod.load(path)
    assert loaded.model is not None and (
        loaded.model.mode,
        loaded.model.upstream,
        loaded.model.key_env,
    ) == ("openai", "http://vllm.internal:8000", "VLLM_KEY")
