"""Model access through the gateway (`POST /v1/messages`), in-process and on 127.0.0.1 only:
the stock `anthropic` SDK, its HTTP client bound to the gateway's unix socket -> the gateway
-> the in-process egress proxy -> a local Anthropic-compatible test API that counts requests.
Also replay and scripted modes, the budget, the key's secrecy, the reference agent and the
loopback TCP bridge."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import struct
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import pytest

from assure.agents import claude_agent, tcp_bridge
from assure.core.chain import canonical, verify_chain
from assure.gateway.config import ConfigError, Price, parse
from assure.gateway.modelwire import ModelError
from assure.gateway.server import Gateway, serve
from tests.unit._egress import (
    load_proxy,
    loopback_only,  # noqa: F401  (an autouse fixture: applies to every test here)
    wait_for_log,
)

proxy_mod = load_proxy()
httpx = claude_agent.http_module()

KEY = "sk-ant-test-Zq7cV3TESTKEY-do-not-leak-4f1e2d3c"
AGENT_KEY = "agent-supplied-key-must-be-dropped"
MODEL_ID = "claude-test-1"
PRICES = {MODEL_ID: {"input": 3, "output": 15, "cache_write": 3.75, "cache_read": 0.3}}
USAGE = {
    "input_tokens": 10,
    "output_tokens": 5,
    "cache_creation_input_tokens": 2,
    "cache_read_input_tokens": 3,
}
ASK = {"model": MODEL_ID, "max_tokens": 64, "messages": [{"role": "user", "content": "say hello"}]}


def message(
    text: str = "hello", usage: dict[str, int] | None = None, msg_id: str = "msg_01"
) -> dict[str, Any]:
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": MODEL_ID,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage or USAGE,
    }


def sse(*pieces: str, input_tokens: int = 7, output_tokens: int = 9) -> bytes:
    """A realistic stream: message_start usage is partial, message_delta has the final counts."""
    start = {
        **message(""),
        "content": [],
        "stop_reason": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": 1,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 4,
        },
    }
    events: list[tuple[str, Any]] = [("message_start", {"type": "message_start", "message": start})]
    events.append(
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        )
    )
    events.append(("ping", {"type": "ping"}))
    events += [
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}},
        )
        for p in pieces
    ]
    events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events
    )


# ---------------------------------------------------------------- the test API


@dataclass
class Canned:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    chunked: bool = False


@dataclass
class FakeAPI:
    """An Anthropic-compatible API on 127.0.0.1: answers queued responses (else a default
    message) and remembers every request it got."""

    server: http.server.ThreadingHTTPServer
    queue: deque[Canned] = field(default_factory=deque)
    seen: list[dict[str, Any]] = field(default_factory=list)
    delay: float = 0.0  # seconds before each answer
    hold: threading.Event | None = None  # answers wait for it: calls kept in flight together

    @property
    def key(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    @property
    def count(self) -> int:
        return len(self.seen)

    def push(
        self, status: int, body: Any, *, headers: dict[str, str] | None = None, stream: bool = False
    ) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.queue.append(
            Canned(
                status,
                data,
                headers or {},
                "text/event-stream" if stream else "application/json",
                stream,
            )
        )


HOLD_SECONDS = 30.0  # an answer held for a test never waits longer


def in_flight_together(api: FakeAPI, calls: list[Callable[[], None]], decided: list[int]) -> None:
    """Run `calls` in threads with every answer held until each call was decided: the denied
    ones answered (`decided`), the allowed ones waiting at the API. However slow the host, the
    allowed calls are all in flight at once, which is what a budget race needs."""
    api.hold = threading.Event()
    threads = [threading.Thread(target=call) for call in calls]
    for t in threads:
        t.start()
    deadline = time.monotonic() + HOLD_SECONDS
    while len(decided) + api.count < len(calls) and time.monotonic() < deadline:
        time.sleep(0.01)
    api.hold.set()
    for t in threads:
        t.join()


def start_api() -> FakeAPI:
    api: FakeAPI

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            api.seen.append(
                {
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": body,
                }
            )
            time.sleep(api.delay)
            if api.hold is not None:
                api.hold.wait(HOLD_SECONDS)
            canned = (
                api.queue.popleft() if api.queue else Canned(200, json.dumps(message()).encode())
            )
            self.send_response(canned.status)
            self.send_header("Content-Type", canned.content_type)
            self.send_header("request-id", f"req_{len(api.seen)}")
            self.send_header("anthropic-organization-id", "org-not-for-the-agent")
            for name, value in canned.headers.items():
                self.send_header(name, value)
            if canned.chunked:  # as the real API streams: chunked, in several pieces
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(0, len(canned.body), 97):
                    piece = canned.body[i : i + 97]
                    self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
            else:
                self.send_header("Content-Length", str(len(canned.body)))
                self.end_headers()
                self.wfile.write(canned.body)

        def log_message(self, *_args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    api = FakeAPI(server)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
    ).start()
    return api


# ---------------------------------------------------------------- fixtures


@pytest.fixture()
def api() -> Iterator[FakeAPI]:
    server = start_api()
    yield server
    server.server.shutdown()
    server.server.server_close()


@pytest.fixture()
def proxy(tmp_path: Path, api: FakeAPI) -> Iterator[Any]:
    config = proxy_mod.parse_config(
        {
            "listen": "127.0.0.1:0",
            "allow": [api.key],
            "log": str(tmp_path / "egress.jsonl"),
            "timeout_seconds": 10,
        }
    )
    running = proxy_mod.serve(config)
    yield running
    running.shutdown()


@pytest.fixture()
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "secrets" / "anthropic-key"
    path.parent.mkdir()
    path.write_text(KEY + "\n")
    return path


@pytest.fixture()
def start(
    gateway_config: Callable[..., dict[str, Any]], tmp_path: Path, short_dir: Path
) -> Iterator[Callable[..., Gateway]]:
    """Start a gateway named `name` (own socket, journal and blob dir) with a `model` section."""
    started: list[Gateway] = []

    def make(
        model: dict[str, Any] | None,
        name: str = "a",
        *,
        policy: dict[str, Any] | None = None,
        **extra: Any,
    ) -> Gateway:
        state = tmp_path / f"state-{name}"
        state.mkdir(exist_ok=True)
        raw = {
            **gateway_config(),
            "socket": str(short_dir / f"{name}.sock"),
            "journal": str(state / "journal.jsonl"),
            "ready_file": str(state / "ready"),
            **extra,
        }
        if model is not None:
            raw["model"] = {"blob_dir": str(state / "blobs"), **model}
        if policy:
            raw["policy"] = {**raw["policy"], **policy}
        gateway = serve(parse(raw))
        started.append(gateway)
        return gateway

    yield make
    for gateway in started:
        gateway.shutdown()


def anthropic_model(api: FakeAPI, key_file: Path, **more: Any) -> dict[str, Any]:
    return {
        "mode": "anthropic",
        "upstream": f"http://{api.key}",
        "allow_http": True,
        "key_file": str(key_file),
        "prices": PRICES,
        **more,
    }


def egress(proxy: Any, api: FakeAPI) -> dict[str, Any]:
    return {"proxy": f"127.0.0.1:{proxy.address[1]}", "allow": [api.key]}


@pytest.fixture()
def live(
    start: Callable[..., Gateway], api: FakeAPI, proxy: Any, key_file: Path
) -> Callable[..., Gateway]:
    """A gateway in mode `anthropic` in front of the test API, through the proxy."""

    def make(
        name: str = "a",
        policy: dict[str, Any] | None = None,
        model: dict[str, Any] | None = None,
        **extra: Any,
    ) -> Gateway:
        return start(
            anthropic_model(api, key_file, **(model or {})),
            name,
            policy=policy,
            egress=egress(proxy, api),
            **extra,
        )

    return make


def sdk(gateway: Gateway, max_retries: int = 2) -> anthropic.Anthropic:
    http_client = httpx.Client(transport=httpx.HTTPTransport(uds=gateway.config.socket))
    return anthropic.Anthropic(
        base_url="http://gateway",
        api_key=AGENT_KEY,
        http_client=http_client,
        max_retries=max_retries,
    )


def calls(gateway: Gateway) -> list[dict[str, Any]]:
    return [r for r in verify_chain(gateway.config.journal) if r["event"] == "model_call"]


def blob(gateway: Gateway, digest: str) -> bytes:
    assert gateway.config.model is not None
    return (Path(gateway.config.model.blob_dir) / digest).read_bytes()


def raw_call(client: anthropic.Anthropic, **overrides: Any) -> tuple[bytes, Any]:
    """A non-streaming call: (the response bytes the agent got, the parsed message)."""
    raw = client.messages.with_raw_response.create(**{**ASK, **overrides})
    return raw.http_response.content, raw.parse()


def raw_stream(client: anthropic.Anthropic, **overrides: Any) -> bytes:
    with client.messages.with_streaming_response.create(
        **{**ASK, **overrides}, stream=True
    ) as response:
        return b"".join(response.iter_bytes())


# ---------------------------------------------------------------- anthropic mode


def test_a_call_goes_through_the_proxy_with_the_gateways_key(
    live: Callable[..., Gateway], api: FakeAPI, tmp_path: Path
) -> None:
    gateway = live()
    client = sdk(gateway)
    data, reply = raw_call(client)
    assert reply.content[0].text == "hello" and reply.usage.input_tokens == 10
    assert api.count == 1
    seen = api.seen[0]
    assert seen["path"] == "/v1/messages"
    assert seen["headers"]["x-api-key"] == KEY
    assert "authorization" not in seen["headers"] and AGENT_KEY not in json.dumps(seen["headers"])
    assert (
        seen["headers"]["anthropic-version"] == client.default_headers["anthropic-version"]
    )  # the SDK's, forwarded
    assert seen["headers"]["via"] == "1.1 assure-egress"  # it came through the egress proxy
    assert not any(
        name.startswith("x-stainless") for name in seen["headers"]
    )  # only the version / beta headers are forwarded
    logged = wait_for_log(tmp_path / "egress.jsonl")
    assert (logged[-1]["decision"], logged[-1]["path"], logged[-1]["status"]) == (
        "allow",
        "/v1/messages",
        200,
    )

    (record,) = calls(gateway)
    sent = json.loads(seen["body"])
    assert record["request_sha256"] == hashlib.sha256(canonical(sent)).hexdigest()
    assert blob(gateway, record["request_sha256"]) == canonical(sent)
    assert blob(gateway, record["response_sha256"]) == data
    assert (
        record["served"],
        record["status"],
        record["mode"],
        record["decision"],
        record["rule"],
    ) == ("upstream", 200, "anthropic", "allow", "read_only")
    assert record["usage"] == USAGE and record["tokens"] == 20
    expected_cost = (10 * 3 + 5 * 15 + 2 * 3.75 + 3 * 0.3) / 1e6
    assert record["cost"] == pytest.approx(expected_cost) and record["priced"] == MODEL_ID
    assert record["response_headers"]["request-id"] == "req_1"
    assert "anthropic-organization-id" not in record["response_headers"]
    assert (gateway.counters.tokens, gateway.counters.cost) == (20, pytest.approx(expected_cost))
    assert record["counters"] == {"tokens": 20, "cost": pytest.approx(expected_cost)}


def test_a_stream_is_recorded_whole_and_counted_with_its_final_usage(
    live: Callable[..., Gateway], api: FakeAPI
) -> None:
    gateway = live()
    client = sdk(gateway)
    stream = sse("Hel", "lo, ", "world")
    api.push(200, stream, stream=True)
    assert raw_stream(client) == stream  # the upstream's bytes, unchanged
    api.push(200, stream, stream=True)
    with client.messages.stream(**ASK) as events:
        assert events.get_final_text() == "Hello, world"
    first, second = calls(gateway)
    assert blob(gateway, first["response_sha256"]) == stream and first["stream"] is True
    assert first["response_headers"]["content-type"] == "text/event-stream"
    # input and cache from message_start, output from the last message_delta
    assert first["usage"] == {
        "input_tokens": 7,
        "output_tokens": 9,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 4,
    }
    assert first["tokens"] == second["tokens"] == 20
    assert gateway.counters.tokens == 40


def test_count_tokens_is_forwarded_and_not_counted(
    live: Callable[..., Gateway], api: FakeAPI
) -> None:
    gateway = live()
    api.push(200, {"input_tokens": 42})
    counted = sdk(gateway).messages.count_tokens(model=MODEL_ID, messages=ASK["messages"])
    assert counted.input_tokens == 42
    assert api.seen[-1]["path"] == "/v1/messages/count_tokens"
    (record,) = calls(gateway)
    assert (record["endpoint"], record["tokens"], record["usage"]) == ("count_tokens", 0, None)
    assert gateway.counters.tokens == 0


def test_a_429_is_passed_back_and_retried_by_the_sdk(
    live: Callable[..., Gateway], api: FakeAPI
) -> None:
    gateway = live()
    api.push(
        429,
        {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
        headers={"retry-after": "0.3"},
    )
    began = time.monotonic()
    _, reply = raw_call(sdk(gateway, max_retries=2))
    assert reply.content[0].text == "hello"
    assert time.monotonic() - began >= 0.3  # the SDK honoured the upstream's retry-after
    assert api.count == 2
    limited, ok = calls(gateway)
    assert (limited["status"], ok["status"]) == (429, 200)
    assert limited["response_headers"]["retry-after"] == "0.3" and limited["tokens"] == 0
    assert limited["request_sha256"] == ok["request_sha256"]


@pytest.mark.parametrize(
    ("status", "error"), [(500, anthropic.InternalServerError), (529, anthropic.APIStatusError)]
)
def test_server_errors_are_surfaced_with_status_headers_and_body(
    live: Callable[..., Gateway], api: FakeAPI, status: int, error: type
) -> None:
    gateway = live()
    body = {
        "type": "error",
        "error": {
            "type": "api_error" if status == 500 else "overloaded_error",
            "message": "upstream trouble",
        },
    }
    api.push(status, body)
    with pytest.raises(error) as info:
        sdk(gateway, max_retries=0).messages.create(**ASK)
    assert info.value.status_code == status
    assert info.value.response.headers["request-id"] == "req_1"
    assert info.value.body == body
    assert api.count == 1 and calls(gateway)[0]["status"] == status


def test_the_key_never_reaches_the_agent_the_journal_or_the_blobs(
    live: Callable[..., Gateway], api: FakeAPI, tmp_path: Path
) -> None:
    gateway = live()
    seen_by_agent: list[bytes] = []
    leak = {
        "type": "error",
        "error": {"type": "authentication_error", "message": f"invalid x-api-key {KEY}"},
    }
    api.push(401, leak, headers={"request-id": f"req-{KEY}"})  # an upstream that echoes the key
    api.push(200, sse(f"the key is {KEY}"), stream=True)
    client = sdk(gateway, max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as info:
        client.messages.create(**ASK)
    response = info.value.response
    seen_by_agent += [
        response.content,
        json.dumps(dict(response.headers)).encode(),
        str(info.value).encode(),
    ]
    seen_by_agent.append(raw_stream(client))
    data, _ = raw_call(client)
    seen_by_agent.append(data)
    with httpx.Client(transport=httpx.HTTPTransport(uds=gateway.config.socket)) as plain:
        seen_by_agent.append(plain.get("http://gateway/v1/health").content)
        bad = plain.post(
            "http://gateway/v1/messages", content=b"{not json", headers={"x-api-key": AGENT_KEY}
        )
        seen_by_agent += [bad.content, json.dumps(dict(bad.headers)).encode()]
    assert api.seen[0]["headers"]["x-api-key"] == KEY  # the key was really used
    assert b"[redacted]" in seen_by_agent[0]
    gateway.shutdown()
    records = [Path(gateway.config.journal).read_bytes()]
    assert gateway.config.model is not None
    records += [p.read_bytes() for p in Path(gateway.config.model.blob_dir).iterdir()]
    for text in seen_by_agent + records:
        assert KEY.encode() not in text
        assert KEY[8:40].encode() not in text  # no partial copy either
    assert AGENT_KEY.encode() not in b"".join(records)  # the agent's own credential is not recorded


def test_a_token_budget_breach_denies_the_next_call(
    live: Callable[..., Gateway], api: FakeAPI, tmp_path: Path
) -> None:
    breach = tmp_path / "breach.json"
    gateway = live(policy={"tokens_limit": 100}, breach_file=str(breach))
    client = sdk(gateway, max_retries=2)
    api.push(200, message(usage={"input_tokens": 70, "output_tokens": 10}))
    client.messages.create(**ASK)  # reserves 64 + 23 (its canonical bytes / 4) of 100, spends 80
    with pytest.raises(anthropic.PermissionDeniedError) as info:
        client.messages.create(**ASK)  # 20 left, less than its input estimate of 23: no output fits
    assert info.value.status_code == 403
    assert (
        info.value.body["type"] == "error"
        and info.value.body["error"]["type"] == "permission_error"
    )
    assert (
        "(budget.tokens): tokens budget: 80 used + 87 reserved by this call"
        in info.value.body["error"]["message"]
    )
    assert api.count == 1  # the denied call never left the gateway
    assert json.loads(breach.read_text())["counter"] == "tokens"
    journal = verify_chain(gateway.config.journal)
    assert [r["event"] for r in journal if r["event"] in ("model_call", "budget_breach")] == [
        "model_call",
        "budget_breach",
        "model_call",
    ]
    denied = calls(gateway)[-1]
    assert (denied["decision"], denied["rule"], denied["status"], denied["served"]) == (
        "deny",
        "budget.tokens",
        403,
        "gateway",
    )
    assert (
        denied["inputs"]["tokens_used"],
        denied["inputs"]["tokens_reserved"],
        denied["inputs"]["tokens_limit"],
    ) == (80, 87, 100)
    assert (
        calls(gateway)[0]["reserved"] == {"tokens": 87, "cost": 0.00104625}
        and "reserved" not in denied
    )
    with pytest.raises(anthropic.PermissionDeniedError):
        client.messages.create(**ASK)
    assert (
        len([r for r in verify_chain(gateway.config.journal) if r["event"] == "budget_breach"]) == 1
    )  # reported once
    assert gateway.counters.denied == 2 and api.count == 1


def test_concurrent_calls_cannot_pass_the_token_budget_together(
    live: Callable[..., Gateway], api: FakeAPI
) -> None:
    gateway = live(policy={"tokens_limit": 100})
    statuses: list[int] = []

    def one() -> None:
        try:
            sdk(gateway, max_retries=0).messages.create(**ASK)
            statuses.append(200)
        except anthropic.APIStatusError as exc:
            statuses.append(exc.status_code)

    in_flight_together(api, [one] * 6, statuses)
    assert sorted(statuses) == [
        200,
        403,
        403,
        403,
        403,
        403,
    ]  # 87 reserved of 100: one call at a time, then 20 + 87 > 100
    assert api.count == 1 and gateway.counters.tokens == 20 <= 100
    assert gateway._calls._reserved_tokens == 0  # settled


def test_a_denied_or_refused_request_stores_no_blob(
    live: Callable[..., Gateway], api: FakeAPI
) -> None:
    gateway = live(policy={"tokens_limit": 10})  # ASK reserves 87: denied
    client = sdk(gateway, max_retries=0)
    with pytest.raises(anthropic.PermissionDeniedError):
        client.messages.create(**ASK)
    with pytest.raises(anthropic.PermissionDeniedError):
        client.messages.create(
            **ASK,
            extra_body={"mcp_servers": [{"type": "url", "url": "https://x.invalid/", "name": "x"}]},
        )
    assert gateway.config.model is not None
    assert list(Path(gateway.config.model.blob_dir).iterdir()) == [] and api.count == 0
    assert calls(gateway)[0]["decision"] == "deny" and calls(gateway)[0]["request_sha256"]


HOSTILE = [
    (
        {"mcp_servers": [{"type": "url", "url": "https://attacker.invalid/mcp", "name": "x"}]},
        {},
        "request key 'mcp_servers'",
    ),
    ({"container": "cntr_1"}, {}, "request key 'container'"),
    ({"speed": "fast"}, {}, "request key 'speed'"),
    ({"future_feature": 1}, {}, "request key 'future_feature'"),
    (
        {"tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]},
        {},
        "tools[0] of type 'web_fetch_20250910'",
    ),
    (
        {
            "tools": [
                {"name": "mine", "input_schema": {"type": "object"}},
                {"type": "web_search_20260209", "name": "web_search"},
            ]
        },
        {},
        "tools[1] of type 'web_search_20260209'",
    ),
    (
        {"tools": [{"type": "code_execution_20250825", "name": "code_execution"}]},
        {},
        "'code_execution_20250825'",
    ),
    ({"tools": [{"type": "bash_20250124", "name": "bash"}]}, {}, "'bash_20250124'"),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "url", "url": "https://attacker.invalid/x.png"},
                        }
                    ],
                }
            ]
        },
        {},
        "messages[0].content[0]: image source of type 'url'",
    ),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t",
                            "content": [
                                {
                                    "type": "document",
                                    "source": {
                                        "type": "url",
                                        "url": "https://attacker.invalid/x.pdf",
                                    },
                                }
                            ],
                        }
                    ],
                }
            ]
        },
        {},
        "document.source.url",
    ),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "document", "source": {"type": "file", "file_id": "file_1"}}
                    ],
                }
            ]
        },
        {},
        "document.source.file",
    ),
    (
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "server_tool_use",
                            "id": "s",
                            "name": "web_fetch",
                            "input": {"url": "https://x.invalid"},
                        }
                    ],
                }
            ]
        },
        {},
        "a block of type 'server_tool_use'",
    ),
    ({}, {"anthropic-beta": "mcp-client-2025-04-04"}, "anthropic-beta 'mcp-client-2025-04-04'"),
    (
        {},
        {"anthropic-beta": "prompt-caching-2024-07-31, code-execution-2025-05-22"},
        "anthropic-beta 'code-execution-2025-05-22'",
    ),
]


@pytest.mark.parametrize(("extra", "headers", "named"), HOSTILE, ids=[h[2][:40] for h in HOSTILE])
def test_what_the_provider_would_act_on_by_itself_is_refused_and_journaled(
    live: Callable[..., Gateway],
    api: FakeAPI,
    extra: dict[str, Any],
    headers: dict[str, str],
    named: str,
) -> None:
    gateway = live()
    with pytest.raises(anthropic.PermissionDeniedError) as info:
        sdk(gateway, max_retries=2).messages.create(
            **{**ASK, **{k: v for k, v in extra.items() if k in ASK}},
            extra_body={k: v for k, v in extra.items() if k not in ASK},
            extra_headers=headers,
        )
    assert named in info.value.message and "model.allow." in info.value.message
    assert api.count == 0  # nothing reached the upstream, and the SDK was told not to retry
    rejected = [r for r in verify_chain(gateway.config.journal) if r["event"] == "request_rejected"]
    assert [(r["status"], r["code"]) for r in rejected] == [
        (403, "feature_refused")
    ] and named in rejected[0]["reason"]


def test_the_default_features_pass_and_the_spec_allows_more_by_name(
    live: Callable[..., Gateway], api: FakeAPI
) -> None:
    plain = live("plain")
    ordinary = {
        "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "mine", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "auto"},
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "hi"},
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/png",
                            "data": "iVBORw0KGgo=",
                        },
                    },
                ],
            }
        ],
    }
    sdk(plain).messages.create(
        **{**ASK, **ordinary},
        extra_body={"temperature": 0.5},
        extra_headers={"anthropic-beta": "prompt-caching-2024-07-31"},
    )
    assert api.count == 1
    allowed = live(
        "allowed",
        model={
            "allow": {"tool_types": ["web_search_20250305"], "betas": ["mcp-client-2025-04-04"]}
        },
    )
    api.push(
        200,
        message(
            usage={**USAGE, "server_tool_use": {"web_search_requests": 3, "web_fetch_requests": 0}}
        ),
    )
    sdk(allowed).messages.create(
        **ASK,
        # a server tool the SDK's typed params do not list yet
        tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}],  # type: ignore[list-item]
        extra_headers={"anthropic-beta": "mcp-client-2025-04-04"},
    )
    assert api.count == 2 and api.seen[-1]["headers"]["anthropic-beta"] == "mcp-client-2025-04-04"
    record = calls(allowed)[-1]
    tokens_cost = (10 * 3 + 5 * 15 + 2 * 3.75 + 3 * 0.3) / 1_000_000
    assert record["server_tool_use"] == {"web_search_requests": 3, "web_fetch_requests": 0}
    assert record["cost"] == pytest.approx(tokens_cost + 3 * 0.01)  # the search fee is counted
    assert record["reserved"]["cost"] > 3 * 0.01  # max_uses searches were reserved


def test_with_a_cost_limit_a_fee_tool_needs_max_uses(
    live: Callable[..., Gateway], api: FakeAPI
) -> None:
    gateway = live(
        policy={"cost_limit": 10}, model={"allow": {"tool_types": ["web_search_20250305"]}}
    )
    with pytest.raises(anthropic.PermissionDeniedError) as info:
        sdk(gateway).messages.create(
            **ASK, tools=[{"type": "web_search_20250305", "name": "web_search"}]
        )  # type: ignore[list-item]  -- a server tool the SDK's params do not list yet
    assert "has no max_uses" in info.value.message and api.count == 0


def test_a_cost_budget_breach_denies_the_next_call(
    live: Callable[..., Gateway], api: FakeAPI
) -> None:
    gateway = live(policy={"cost_limit": 0.0011})
    client = sdk(gateway)
    api.push(200, message(usage={"input_tokens": 300, "output_tokens": 10}))
    client.messages.create(
        **ASK
    )  # reserves 0.00104625 (23 input tokens at the cache-write price, 64 output), costs 0.00105
    with pytest.raises(
        anthropic.PermissionDeniedError
    ) as info:  # 0.00005 left: less than its input alone
        client.messages.create(**ASK)
    assert "budget.cost" in info.value.message
    assert api.count == 1 and calls(gateway)[-1]["rule"] == "budget.cost"


def test_with_a_cost_limit_an_unpriced_model_is_denied(
    live: Callable[..., Gateway], api: FakeAPI
) -> None:
    gateway = live(policy={"cost_limit": 10})
    with pytest.raises(anthropic.PermissionDeniedError) as info:
        sdk(gateway).messages.create(**{**ASK, "model": "claude-unpriced-9"})
    assert "no price for model 'claude-unpriced-9'" in info.value.message
    assert api.count == 0 and calls(gateway)[-1]["rule"] == "model.unpriced"
    sdk(gateway).messages.create(**{**ASK, "model": f"{MODEL_ID}-20250101"})  # priced by its prefix
    assert api.count == 1


def test_an_upstream_the_proxy_refuses_is_a_gateway_error(
    start: Callable[..., Gateway], api: FakeAPI, key_file: Path, tmp_path: Path
) -> None:
    other = start_api()
    config = proxy_mod.parse_config(
        {"listen": "127.0.0.1:0", "allow": [api.key], "log": str(tmp_path / "egress2.jsonl")}
    )
    running = proxy_mod.serve(config)
    try:  # the gateway's allowlist says yes (a config mismatch); the proxy still says no
        gateway = start(
            anthropic_model(other, key_file),
            egress={"proxy": f"127.0.0.1:{running.address[1]}", "allow": [other.key]},
        )
        with pytest.raises(anthropic.APIStatusError) as info:
            sdk(gateway, max_retries=2).messages.create(**ASK)
        assert info.value.status_code == 502 and "egress proxy" in info.value.message
        assert info.value.response.headers["x-should-retry"] == "false"
        assert other.count == 0 and len(calls(gateway)) == 1  # not retried
        assert calls(gateway)[0]["error"] == "egress_denied"
    finally:
        running.shutdown()
        other.server.shutdown()
        other.server.server_close()


# ---------------------------------------------------------------- replay


def record_run(live: Callable[..., Gateway], api: FakeAPI) -> tuple[Gateway, list[bytes]]:
    """A recorded run: a 429 then its retry, a plain call, a stream and a token count."""
    gateway = live("rec")
    client = sdk(gateway)
    api.push(
        429,
        {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
        headers={"retry-after": "0.1"},
    )
    got = [raw_call(client)[0]]
    api.push(200, message("second", msg_id="msg_02"))
    got.append(raw_call(client, messages=[{"role": "user", "content": "again"}])[0])
    api.push(200, sse("a", "b"), stream=True)
    got.append(raw_stream(client))
    api.push(200, {"input_tokens": 11})
    got.append(
        client.messages.with_raw_response.count_tokens(
            model=MODEL_ID, messages=ASK["messages"]
        ).http_response.content
    )
    gateway.shutdown()
    return gateway, got


def replay_model(recorded: Gateway) -> dict[str, Any]:
    assert recorded.config.model is not None
    return {
        "mode": "replay",
        "recording": {
            "journals": [recorded.config.journal],
            "blob_dir": recorded.config.model.blob_dir,
        },
        "prices": PRICES,
    }


def test_a_recorded_run_replays_byte_for_byte_without_upstream(
    live: Callable[..., Gateway], api: FakeAPI, start: Callable[..., Gateway]
) -> None:
    recorded, got = record_run(live, api)
    upstream_requests = api.count
    assert upstream_requests == 5
    gateway = start(replay_model(recorded), "replay")  # no egress at all
    client = sdk(gateway)
    again = [
        raw_call(client)[0],
        raw_call(client, messages=[{"role": "user", "content": "again"}])[0],
        raw_stream(client),
    ]
    again.append(
        client.messages.with_raw_response.count_tokens(
            model=MODEL_ID, messages=ASK["messages"]
        ).http_response.content
    )
    assert again == got
    assert api.count == upstream_requests  # zero upstream requests
    replayed = calls(gateway)
    assert [r["served"] for r in replayed] == ["replay"] * 5
    assert [r["status"] for r in replayed] == [
        429,
        200,
        200,
        200,
        200,
    ]  # the SDK retried the recorded 429 too
    assert [r["response_sha256"] for r in replayed] == [
        r["response_sha256"] for r in calls(recorded)
    ]
    assert (
        gateway.counters.tokens == recorded.counters.tokens
        and gateway.counters.cost == pytest.approx(recorded.counters.cost)
    )
    assert (
        replayed[1]["replayed"]["position"] == 1 and replayed[1]["replayed"]["run_id"] == "run-test"
    )


def test_a_changed_request_during_replay_fails_loudly(
    live: Callable[..., Gateway], api: FakeAPI, start: Callable[..., Gateway]
) -> None:
    recorded, _ = record_run(live, api)
    gateway = start(replay_model(recorded), "replay")
    client = sdk(gateway, max_retries=2)
    changed = {**ASK, "messages": [{"role": "user", "content": "say goodbye"}]}
    with pytest.raises(anthropic.ConflictError) as info:
        client.messages.create(**changed)
    digest = hashlib.sha256(canonical({**changed, "max_tokens": 64})).hexdigest()
    message_text = info.value.message
    assert info.value.status_code == 409 and info.value.body["error"]["type"] == "replay_mismatch"
    assert (
        digest in message_text
        and "model call #1 of this run" in message_text
        and "call #1 like it (volatile parts aside)" in message_text
    )
    assert "recording has 0 response(s)" in message_text
    assert len(calls(gateway)) == 1  # not retried (x-should-retry: false), and journaled
    assert calls(gateway)[0]["error"] == "replay_mismatch" and calls(gateway)[0]["status"] == 409
    assert (
        info.value.body["error"]["differs"]
        == calls(gateway)[0]["differs"]
        == ["$.messages[0].content"]
    )  # what differs from the recording's call #1
    # the recorded calls still replay; a call more often than recorded fails too
    client.messages.create(**ASK)  # the recorded 429 ...
    client.messages.create(**{**ASK, "messages": [{"role": "user", "content": "again"}]})
    with pytest.raises(anthropic.ConflictError) as info:
        client.messages.create(**{**ASK, "messages": [{"role": "user", "content": "again"}]})
    assert (
        "call #2 like it (volatile parts aside), but the recording has 1 response(s)"
        in info.value.message
    )
    assert api.count == 5


def test_a_damaged_recording_stops_the_gateway_from_starting(
    live: Callable[..., Gateway], api: FakeAPI, start: Callable[..., Gateway]
) -> None:
    recorded, _ = record_run(live, api)
    victim = calls(recorded)[1]["response_sha256"]
    assert recorded.config.model is not None
    (Path(recorded.config.model.blob_dir) / victim).write_bytes(b"tampered")
    with pytest.raises(ModelError, match="altered"):
        start(replay_model(recorded), "replay")


# ---------------------------------------------------------------- scripted


def test_scripted_mode_serves_the_fixture_in_order(
    start: Callable[..., Gateway], tmp_path: Path
) -> None:
    stream = sse("stre", "amed").decode()
    tool = {
        **message(),
        "content": [
            {"type": "text", "text": "writing"},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "fs_write",
                "input": {"path": "a.txt", "content": "x"},
            },
        ],
        "stop_reason": "tool_use",
    }
    limited = {
        "scripted": {
            "status": 429,
            "headers": {"retry-after": "0"},
            "body": {"type": "error", "error": {"type": "rate_limit_error", "message": "scripted"}},
        }
    }
    script = tmp_path / "script.json"
    script.write_text(json.dumps([message("first"), stream, tool, limited]))
    gateway = start({"mode": "scripted", "script": str(script), "prices": PRICES})
    client = sdk(gateway, max_retries=0)
    assert client.messages.create(**ASK).content[0].text == "first"
    assert raw_stream(client) == stream.encode()
    with client.messages.stream(**ASK) as events:  # a message object, served as a stream
        final = events.get_final_message()
    assert final.content[1].type == "tool_use" and final.content[1].input == {
        "path": "a.txt",
        "content": "x",
    }
    assert final.stop_reason == "tool_use" and final.usage.output_tokens == 5
    with pytest.raises(anthropic.RateLimitError):
        client.messages.create(**ASK)
    with pytest.raises(anthropic.ConflictError) as info:
        client.messages.create(**ASK)
    assert info.value.body["error"]["type"] == "script_exhausted"
    records = calls(gateway)
    assert [(r["served"], r["status"], r.get("script_index")) for r in records] == [
        ("script", 200, 0),
        ("script", 200, 1),
        ("script", 200, 2),
        ("script", 429, 3),
        ("gateway", 409, None),
    ]
    assert gateway.counters.tokens == 20 + 20 + 20


def test_a_stream_script_item_is_not_served_to_a_plain_request(
    start: Callable[..., Gateway], tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([sse("x").decode()]))
    client = sdk(start({"mode": "scripted", "script": str(script)}), max_retries=0)
    with pytest.raises(anthropic.ConflictError) as info:
        client.messages.create(**ASK)
    assert "is an SSE stream but this request is not streaming" in info.value.message
    assert raw_stream(client) == sse("x")  # the item was not used up


# ---------------------------------------------------------------- routing and refusals


def test_without_a_model_section_the_routes_answer_404_in_anthropic_shape(
    start: Callable[..., Gateway],
) -> None:
    gateway = start(None)
    with pytest.raises(anthropic.NotFoundError) as info:
        sdk(gateway).messages.create(**ASK)
    assert info.value.body == {
        "type": "error",
        "error": {
            "type": "not_found_error",
            "message": "this run has no model access: the gateway config has no `model` section",
        },
    }
    rejected = [r for r in verify_chain(gateway.config.journal) if r["event"] == "request_rejected"]
    assert len(rejected) == 1 and rejected[0]["code"] == "no_model"  # not retried, and journaled


def test_a_malformed_body_is_refused_and_journaled(
    start: Callable[..., Gateway], tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text("[]")
    gateway = start({"mode": "scripted", "script": str(script)})
    with httpx.Client(transport=httpx.HTTPTransport(uds=gateway.config.socket)) as plain:
        bad = plain.post("http://gateway/v1/messages", content=b'{"a": 1, "a": 2}')
        assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
        assert bad.headers["x-should-retry"] == "false"
        wrong = plain.get("http://gateway/v1/messages")
        assert wrong.status_code == 405
        health = plain.get("http://gateway/v1/health").json()
    routes = [
        "/v1/chat/completions",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/models",
        "/v1/responses",
    ]
    assert health["model"] == {"mode": "scripted", "routes": routes, "models_priced": []}
    rejected = [r for r in verify_chain(gateway.config.journal) if r["event"] == "request_rejected"]
    assert [r["code"] for r in rejected] == ["bad_json", "method_not_allowed"]


def test_config_model_section(gateway_config: Callable[..., dict[str, Any]], api: FakeAPI) -> None:
    raw = gateway_config()
    assert parse(raw).model is None
    net = {"proxy": "egress-proxy:3128", "allow": ["api.anthropic.com:443"]}
    good = {
        "mode": "anthropic",
        "upstream": "https://api.anthropic.com/",
        "key_file": "/run/secrets/key",
        "blob_dir": "/state/blobs",
        "prices": PRICES,
    }
    config = parse({**raw, "egress": net, "model": good})
    assert config.model is not None
    assert (config.model.upstream, config.model.key_file, config.model.timeout_seconds) == (
        "https://api.anthropic.com",
        "/run/secrets/key",
        600.0,
    )
    assert config.model.prices[MODEL_ID] == Price(3.0, 15.0, 3.75, 0.3)
    assert (dict(config.model.allow), dict(config.model.server_tool_fees)) == (
        {},
        {"web_search_requests": 0.01, "web_fetch_requests": 0.0},
    )
    allowing = parse(
        {
            **raw,
            "egress": net,
            "model": {
                **good,
                "allow": {"betas": ["mcp-client-2025-04-04"]},
                "server_tool_fees": {"web_search_requests": 0.02},
            },
        }
    ).model
    assert allowing is not None and allowing.allow == {
        "betas": frozenset({"mcp-client-2025-04-04"})
    }
    assert allowing.server_tool_fees == {"web_search_requests": 0.02, "web_fetch_requests": 0.0}
    replay = {
        "mode": "replay",
        "recording": {"journals": ["/rec/journal.jsonl"], "blob_dir": "/rec/blobs"},
        "blob_dir": "/state/blobs",
    }
    # a replay config's model always has a recording; mypy sees the Optional
    assert parse({**raw, "model": replay}).model.recording == ("/rec/journal.jsonl",)  # type: ignore[union-attr]
    for bad, extra, field_name in [
        ({"mode": "live"}, {}, "model.mode"),
        ({**good, "blob_dir": "relative"}, {"egress": net}, "model.blob_dir"),
        ({k: v for k, v in good.items() if k != "key_file"}, {"egress": net}, "model.key_file"),
        (good, {}, "model.upstream"),  # no egress section
        (
            {**good, "upstream": "https://evil.example.com"},
            {"egress": net},
            "model.upstream",
        ),  # not on the allowlist
        (
            {**good, "upstream": "http://api.anthropic.com:443"},
            {"egress": net},
            "model.upstream",
        ),  # plain http
        ({**good, "upstream": "https://api.anthropic.com/?x=1"}, {"egress": net}, "model.upstream"),
        (
            {**good, "recording": replay["recording"]},
            {"egress": net},
            "model.recording",
        ),  # another mode's field
        ({**good, "tokens": 1}, {"egress": net}, "model.tokens"),
        (
            {**good, "prices": {MODEL_ID: {"input": 1, "output": 1, "cache_write": 1}}},
            {"egress": net},
            f"model.prices.{MODEL_ID}.cache_read",
        ),
        (
            {
                **good,
                "prices": {MODEL_ID: {"input": -1, "output": 1, "cache_write": 1, "cache_read": 1}},
            },
            {"egress": net},
            f"model.prices.{MODEL_ID}.input",
        ),
        ({**replay, "recording": {"journals": []}}, {}, "model.recording.journals"),
        ({"mode": "scripted", "blob_dir": "/b"}, {}, "model.script"),
        ({**good, "timeout_seconds": 0}, {"egress": net}, "model.timeout_seconds"),
        (
            {**good, "allow": {"tools": ["web_search_20250305"]}},
            {"egress": net},
            "model.allow.tools",
        ),
        (
            {**good, "allow": {"betas": "mcp-client-2025-04-04"}},
            {"egress": net},
            "model.allow.betas",
        ),
        (
            {**good, "server_tool_fees": {"web_search_requests": -1}},
            {"egress": net},
            "model.server_tool_fees.web_search_requests",
        ),
        (
            {**good, "server_tool_fees": {"code_execution_hours": 1}},
            {"egress": net},
            "model.server_tool_fees.code_execution_hours",
        ),
    ]:
        with pytest.raises(ConfigError) as info:
            parse({**raw, **extra, "model": bad})
        assert info.value.field == field_name, (bad, str(info.value))


@pytest.mark.parametrize(
    ("content", "why"),
    [("short", "at least 16"), ("has a space in it ok", "no spaces"), ("", "at least 16")],
)
def test_an_unusable_key_file_stops_the_gateway_without_quoting_it(
    start: Callable[..., Gateway], api: FakeAPI, proxy: Any, tmp_path: Path, content: str, why: str
) -> None:
    key = tmp_path / "bad-key"
    key.write_text(content)
    with pytest.raises(ModelError) as info:
        start(anthropic_model(api, key), egress=egress(proxy, api))
    assert why in str(info.value) and (not content or content not in str(info.value))


# --------------------------------------------------------------- the reference agent and the bridge


def test_the_reference_agent_runs_a_tool_loop_through_the_gateway(
    start: Callable[..., Gateway], tmp_path: Path
) -> None:
    turns = [
        {
            **message(),
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "fs_write",
                    "input": {"path": "notes/a.txt", "content": "hi"},
                }
            ],
            "stop_reason": "tool_use",
        },
        {
            **message(),
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "fs_write",
                    "input": {"path": "tests/t.py", "content": "x"},
                }
            ],
            "stop_reason": "tool_use",
        },
        {
            **message(),
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_3",
                    "name": "task_report",
                    "input": {"status": "done", "summary": "wrote notes/a.txt"},
                }
            ],
            "stop_reason": "tool_use",
        },
        message("All done."),
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps(turns))
    gateway = start({"mode": "scripted", "script": str(script)})
    log = tmp_path / "agent.log"
    with log.open("w") as out:
        code = claude_agent.run(
            "write hi into notes/a.txt",
            socket_path=gateway.config.socket,
            model=MODEL_ID,
            max_turns=10,
            log=out,
        )
    assert code == 0
    assert (Path(gateway.config.workspace) / "notes" / "a.txt").read_text() == "hi"
    tool_calls = [
        (r["tool"], r["status"])
        for r in verify_chain(gateway.config.journal)
        if r["event"] == "tool_call"
    ]
    assert tool_calls == [
        ("fs.write", 200),
        ("fs.write", 403),
        ("task.report", 200),
    ]  # the agent reported itself: no second report
    requests = [json.loads(blob(gateway, r["request_sha256"])) for r in calls(gateway)]
    assert len(requests) == 4 and requests[0]["model"] == MODEL_ID
    tools_offered = {t["name"]: t for t in requests[0]["tools"]}
    assert {
        "fs_read",
        "fs_write",
        "fs_list",
        "fs_delete",
        "task_report",
        "http_request",
        "db_query",
        "db_execute",
    } <= set(tools_offered)
    schema = tools_offered["fs_write"]["input_schema"]
    assert schema["required"] == ["path"] and schema["properties"]["mode"]["type"] == "integer"
    denied = requests[2]["messages"][-1]["content"][0]
    assert (
        denied["is_error"] is True
        and "protected" in denied["content"]
        and "action_id" not in denied["content"]
    )
    assert requests[1]["messages"][-1]["content"][0]["content"] == json.dumps(
        {"sha256": hashlib.sha256(b"hi").hexdigest(), "size": 2}, sort_keys=True
    )


def test_the_reference_agent_reports_when_it_stops_at_max_turns(
    start: Callable[..., Gateway], tmp_path: Path
) -> None:
    loop = {
        **message(),
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "fs_list", "input": {}}],
        "stop_reason": "tool_use",
    }
    script = tmp_path / "script.json"
    script.write_text(json.dumps([loop, loop]))
    gateway = start({"mode": "scripted", "script": str(script)})
    with (tmp_path / "agent.log").open("w") as out:
        assert (
            claude_agent.run("list", socket_path=gateway.config.socket, max_turns=2, log=out) == 3
        )
    reports = [
        r
        for r in verify_chain(gateway.config.journal)
        if r["event"] == "tool_call" and r.get("tool") == "task.report"
    ]
    assert len(reports) == 1 and reports[0]["claim"]["status"] == "max_turns"


def test_the_tcp_bridge_carries_sdk_calls_over_loopback(
    start: Callable[..., Gateway], tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([message("over tcp"), sse("str", "eam").decode()]))
    gateway = start({"mode": "scripted", "script": str(script)})
    with tcp_bridge.Bridge(gateway.config.socket, port=0) as bridge:
        assert bridge.url.startswith("http://127.0.0.1:")
        client = anthropic.Anthropic(
            base_url=bridge.url,
            api_key=AGENT_KEY,
            max_retries=0,
            http_client=httpx.Client(trust_env=False),
        )
        assert client.messages.create(**ASK).content[0].text == "over tcp"
        with client.messages.stream(**ASK) as events:
            assert events.get_final_text() == "stream"
        assert len(calls(gateway)) == 2


def test_the_tcp_bridge_listens_on_loopback_only() -> None:
    with tcp_bridge.Bridge("/nonexistent.sock", port=0) as bridge:
        assert bridge._listener.getsockname()[0] == "127.0.0.1"


def test_an_operator_halt_stops_model_spending(
    start: Callable[..., Gateway], tmp_path: Path
) -> None:
    from assure.core import control

    script = tmp_path / "script.json"
    script.write_text(json.dumps([message("first"), message("second")]))
    control_dir = tmp_path / "control"
    control_dir.mkdir()
    gateway = start(
        {"mode": "scripted", "script": str(script), "prices": PRICES}, control_dir=str(control_dir)
    )
    client = sdk(gateway, max_retries=0)
    assert client.messages.create(**ASK).content[0].text == "first"
    control.request(control_dir, run_id="run-test", actor="carol", halt=True)
    deadline = time.monotonic() + 5
    while not gateway._calls._override.halted and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(anthropic.PermissionDeniedError):
        client.messages.create(**ASK)
    assert [(r["served"], r["status"]) for r in calls(gateway)] == [
        ("script", 200),
        ("gateway", 403),
    ]
    assert calls(gateway)[-1]["rule"] == "operator_halt"


# --------------------------------------------------------------- bounded bookkeeping of model calls


def test_a_long_model_name_is_journaled_as_its_digest(
    start: Callable[..., Gateway], tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text("[]")  # every call: 409 script_exhausted, still journaled
    gateway = start({"mode": "scripted", "script": str(script)})
    name = "m" * 1_000_000
    with httpx.Client(transport=httpx.HTTPTransport(uds=gateway.config.socket)) as plain:
        answer = plain.post("http://gateway/v1/messages", json={**ASK, "model": name})
    assert answer.status_code == 409
    record = calls(gateway)[0]
    assert record["model"] == "sha256:" + hashlib.sha256(name.encode()).hexdigest()
    assert max(len(line) for line in Path(gateway.config.journal).read_text().splitlines()) < 8192


def test_model_calls_stop_at_the_journal_cap(
    start: Callable[..., Gateway], gateway_config: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text("[]")
    cap = 20_000
    gateway = start(
        {"mode": "scripted", "script": str(script)},
        limits={**gateway_config()["limits"], "max_journal_bytes": cap},
        breach_file=str(tmp_path / "breach.json"),
    )
    statuses = []
    with httpx.Client(transport=httpx.HTTPTransport(uds=gateway.config.socket)) as plain:
        for _ in range(60):
            statuses.append(plain.post("http://gateway/v1/messages", json=ASK).status_code)
    assert statuses[-1] == 503  # once full, no model call is served
    assert json.loads((tmp_path / "breach.json").read_text())["counter"] == "journal_bytes"
    gateway.shutdown()
    assert Path(gateway.config.journal).stat().st_size < cap + 8192


def test_an_answer_too_deep_to_parse_is_still_counted_journaled_and_settled(
    live: Callable[..., Gateway], api: FakeAPI
) -> None:
    # The agent steers what the model writes (a custom tool's input nested 5,000 deep): a
    # valid 200 answer, usage included, that Python's json cannot parse (RecursionError).
    reply = message()
    reply["content"] = [{"type": "tool_use", "id": "toolu_1", "name": "t", "input": {"x": "DEEP"}}]
    api.push(200, json.dumps(reply).replace('"DEEP"', "[" * 5000 + "]" * 5000).encode())
    gateway = live(policy={"tokens_limit": 1000})
    with httpx.Client(transport=httpx.HTTPTransport(uds=gateway.config.socket)) as plain:
        answer = plain.post("http://gateway/v1/messages", json=ASK)
    assert answer.status_code == 200
    record = calls(gateway)[0]  # journaled, not a 500 without a line
    assert (
        record["tokens"] == record["reserved"]["tokens"] > 0
    )  # usage it could not read counts at the reservation
    assert gateway._calls._reserved_tokens == 0 and gateway.counters.tokens == record["tokens"]


def test_an_image_reserves_what_it_may_cost_not_its_bytes(
    live: Callable[..., Gateway], api: FakeAPI
) -> None:
    # A blank 1-bit 1092 x 1092 PNG is 304 base64 bytes (76 tokens by bytes / 4) but costs
    # ~1,600 input tokens once the provider decodes it: ten of them passed a 5,000-token budget.
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    rows = b"".join(b"\0" * (1 + 1092 // 8 + 1) for _ in range(1092))
    png = base64.b64encode(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 1092, 1092, 1, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows, 9))
        + chunk(b"IEND", b"")
    ).decode()
    assert len(png) < 400
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}
    ask = {
        **ASK,
        "messages": [
            {"role": "user", "content": [image] * 10 + [{"type": "text", "text": "describe"}]}
        ],
    }
    api.push(200, message(usage={"input_tokens": 16_000, "output_tokens": 5}))
    gateway = live(policy={"tokens_limit": 5000})
    with httpx.Client(transport=httpx.HTTPTransport(uds=gateway.config.socket)) as plain:
        answer = plain.post("http://gateway/v1/messages", json=ask)
    assert answer.status_code == 403 and api.count == 0  # denied before it left: it could not fit
    assert gateway.counters.tokens <= 5000


def test_an_allowed_call_that_fails_after_the_gate_is_still_journaled_and_settled(
    live: Callable[..., Gateway], api: FakeAPI
) -> None:
    api.push(
        200,
        json.dumps(message())
        .replace('"input_tokens": 10', '"input_tokens": 1' + "0" * 400)
        .encode(),
    )  # cost_of: OverflowError
    gateway = live(policy={"tokens_limit": 1000})
    with httpx.Client(transport=httpx.HTTPTransport(uds=gateway.config.socket)) as plain:
        answer = plain.post("http://gateway/v1/messages", json=ASK)
    assert answer.status_code == 500 and answer.json()["error"]["type"] == "api_error"
    record = calls(gateway)[0]  # the call left the gateway: journaled, counted at its reservation
    assert (
        record["decision"] == "allow"
        and record["error"] == "record_failed"
        and record["tokens"] == record["reserved"]["tokens"]
    )
    assert (
        gateway._calls._reserved_tokens == 0
        and gateway.counters.tokens == record["reserved"]["tokens"]
    )


def test_an_allowed_model_call_journals_its_intent_before_it_leaves(
    live: Callable[..., Gateway], api: FakeAPI
) -> None:
    gateway = live(policy={"tokens_limit": 100})
    client = sdk(gateway, max_retries=0)
    api.push(200, message(usage={"input_tokens": 70, "output_tokens": 10}))
    client.messages.create(**ASK)
    with pytest.raises(anthropic.PermissionDeniedError):
        client.messages.create(**ASK)  # denied by the reservation: no intent
    journal = [
        r for r in verify_chain(gateway.config.journal) if r["event"] in ("intent", "model_call")
    ]
    assert [(r["event"], r["decision"]) for r in journal] == [
        ("intent", "allow"),
        ("model_call", "allow"),
        ("model_call", "deny"),
    ]
    intent, outcome = journal[0], journal[1]
    assert (
        intent["action_id"] == outcome["action_id"]
        and intent["request_sha256"] == outcome["request_sha256"]
    )
    assert (intent["tool"], intent["scope"], intent["resource_mode"]) == (
        "model.messages",
        "model:messages",
        "external",
    )


SHAPES = [  # what the allowlist cannot walk is refused, not forwarded unchecked
    {"tools": {"0": {"type": "web_fetch_20250910", "name": "web_fetch"}}},
    {
        "system": {
            "type": "document",
            "source": {"type": "url", "url": "https://attacker.invalid/x.pdf"},
        }
    },
    {"messages": {"role": "user", "content": "hi"}},
    {
        "messages": [
            {
                "role": "user",
                "content": {
                    "type": "image",
                    "source": {"type": "url", "url": "https://attacker.invalid/x.png"},
                },
            }
        ]
    },
    {
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "content": {
                            "type": "document",
                            "source": {"type": "url", "url": "https://attacker.invalid/x.pdf"},
                        },
                    }
                ],
            }
        ]
    },
    {
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "document",
                        "source": {
                            "type": "content",
                            "content": {
                                "type": "image",
                                "source": {"type": "url", "url": "https://attacker.invalid/x.png"},
                            },
                        },
                    }
                ],
            }
        ]
    },
    {
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": [{"type": "url", "url": "https://attacker.invalid/x.png"}],
                    }
                ],
            }
        ]
    },
]


@pytest.mark.parametrize("shape", SHAPES)
def test_a_request_the_allowlist_cannot_walk_is_refused(
    live: Callable[..., Gateway], api: FakeAPI, shape: dict[str, Any]
) -> None:
    gateway = live()
    with httpx.Client(transport=httpx.HTTPTransport(uds=gateway.config.socket)) as plain:
        answer = plain.post("http://gateway/v1/messages", json={**ASK, **shape})
    assert answer.status_code == 403 and api.count == 0, answer.text
    rejected = [r for r in verify_chain(gateway.config.journal) if r["event"] == "request_rejected"]
    assert [r["code"] for r in rejected] == ["feature_refused"]


def test_a_max_tokens_too_large_to_price_is_refused_and_the_journal_lives(
    live: Callable[..., Gateway], api: FakeAPI
) -> None:
    gateway = live(
        policy={"tokens_limit": 1000}
    )  # 10**308 tokens at 15 per million is inf: a journal line JSON cannot hold
    with httpx.Client(transport=httpx.HTTPTransport(uds=gateway.config.socket)) as plain:
        answer = plain.post("http://gateway/v1/messages", json={**ASK, "max_tokens": 10**308})
        assert (
            answer.status_code == 400 and answer.json()["error"]["type"] == "invalid_request_error"
        )
        assert (
            plain.post("http://gateway/v1/messages", json=ASK).status_code == 200
        )  # the journal still takes lines
    gateway.shutdown()
    assert verify_chain(gateway.config.journal)[-1]["event"] == "gateway_stopped"


def test_a_fee_tool_whose_uses_overflow_the_cost_is_denied_and_the_journal_lives(
    live: Callable[..., Gateway], api: FakeAPI
) -> None:
    gateway = live(
        policy={"cost_limit": 10},
        model={
            "allow": {"tool_types": ["web_search_20250305"]},
            "server_tool_fees": {"web_search_requests": 10},
        },
    )
    tool = {
        "type": "web_search_20250305",
        "name": "web_search",
        "max_uses": 10**308,
    }  # x 10 per use: inf
    with httpx.Client(transport=httpx.HTTPTransport(uds=gateway.config.socket)) as plain:
        assert (
            plain.post("http://gateway/v1/messages", json={**ASK, "tools": [tool]}).status_code
            == 403
        )
        assert plain.post("http://gateway/v1/messages", json=ASK).status_code == 200
    assert api.count == 1
    gateway.shutdown()
    assert verify_chain(gateway.config.journal)[-1]["event"] == "gateway_stopped"


def test_the_headers_passed_back_are_filtered_in_either_spelling() -> None:
    """Issue 21, item 7: the allowlist of response headers compares names with `_` read as `-`:
    a spelling never yields a header the list does not hold, nor a second copy of one it does."""
    from assure.gateway.modelwire import passed_headers

    got = dict(
        passed_headers(
            [
                ("Content-Type", "application/json"),
                ("Retry_After", "5"),
                ("Transfer_Encoding", "chunked"),
                ("Set_Cookie", "a=b"),
                ("request-id", "r1"),
                ("Request_Id", "r2"),
            ]
        )
    )
    assert got == {"content-type": "application/json", "retry-after": "5", "request-id": "r1, r2"}
