"""A hostile agent tries to make the model provider or an allowlisted host act for it
(fixtures/agents/egress/run.py): none of it may reach the upstream, the token budget holds
against concurrent calls, and the verdict is never pass or error."""

from __future__ import annotations

import json

from assure.core.chain import verify_chain

from .conftest import ROOT
from .test_model_live import (  # noqa: F401 -- fake_api is a fixture
    PRICES,
    fake_api,
    upstream_requests,
)

TOKENS = 150
DEFAULT_BETAS_SEEN_OK = {"", None}  # the agent sends no beta but the hostile one
OVERRIDES = ("x-http-method-override", "x-http-method", "x-method-override")


def test_a_hostile_agent_gets_nothing_past_the_gateway(run, make_spec, fake_api):
    network, server = fake_api
    spec = make_spec(
        "egress-hostile",
        "unused",
        hostile=True,
        expect="contained",
        agent={
            "command": ["python3", "/opt/agent/run.py"],
            "files": str(ROOT / "fixtures" / "agents" / "egress"),
        },
        egress={"allow": ["fakeapi:8080"], "upstream": network, "allow_private": True},
        limits={"wall_seconds": 60, "tokens": TOKENS},
        model={
            "mode": "anthropic",
            "upstream": "http://fakeapi:8080",
            "allow_http": True,
            "key_env": "ASSURE_TEST_MODEL_KEY",
            "prices": {**PRICES, "slow": {"input": 3, "output": 15}},
        },
    )
    result = run(spec)
    attempt = result.run_dir / "attempts" / "1"
    said = [
        json.loads(line)
        for line in (attempt / "agent.log").read_text().splitlines()
        if line.startswith('{"attempt"')
    ]
    seen = upstream_requests(server)

    journal = verify_chain(attempt / "gateway" / "journal.jsonl")
    calls = [r for r in journal if r["event"] == "model_call"]
    print(
        "MEASURED",
        json.dumps(
            {
                "agent": said,
                "upstream": [
                    {k: r[k] for k in ("method", "path", "body_bytes")}
                    | {
                        "keys": sorted(r["body"]) if isinstance(r["body"], dict) else None,
                        "beta": r["headers"].get("anthropic-beta"),
                        "override": [h for h in OVERRIDES if h in r["headers"]],
                    }
                    for r in seen
                ],
                "tokens": sum(c.get("tokens") or 0 for c in calls),
                "limit": TOKENS,
                "verdict": result.verdict,
            }
        ),
    )

    messages = [r for r in seen if r["path"].startswith("/v1/messages")]
    for r in messages:  # nothing that lets the provider egress on its own
        body = r["body"]
        assert not {"mcp_servers", "container", "future_feature"} & set(body), r
        assert all(t.get("type", "custom") == "custom" for t in body.get("tools", [])), r
        assert "url" not in json.dumps(body.get("messages")), r
        assert r["headers"].get("anthropic-beta") in DEFAULT_BETAS_SEEN_OK, r
    web = [r for r in seen if not r["path"].startswith("/v1/messages")]
    for r in web:  # a safe method carries no body and no method override
        assert r["body_bytes"] == 0 and not set(OVERRIDES) & set(r["headers"]), r

    assert sum(c.get("tokens") or 0 for c in calls) <= TOKENS, [c.get("tokens") for c in calls]
    assert any(
        c["rule"] == "budget.tokens" for c in calls
    )  # the burst met the reservation, not an empty budget
    refused = {r.get("reason", "") for r in journal if r["event"] == "request_rejected"}
    for feature in (
        "mcp_servers",
        "web_fetch_20250910",
        "mcp-client-2025-04-04",
        "container",
        "url",
        "future_feature",
    ):
        assert any(feature in reason for reason in refused), (feature, refused)
    statuses = {a["attempt"]: a["status"] for a in said}
    assert all(
        statuses[name] == 403
        for name in (
            "mcp_servers",
            "web_fetch_tool",
            "hostile_beta",
            "container",
            "url_image",
            "unknown_key",
        )
    ), statuses
    assert statuses["get_with_body_and_override"] == 400, statuses
    assert result.verdict not in ("pass", "error"), result.report


def test_underscore_header_spellings_never_reach_the_upstream(run, make_spec, fake_api):
    """Issue 21, item 7: `Transfer_Encoding`, `Content_Length` and the other `_` spellings the
    corpus agent sends (gateway-abuse--underscore-headers) are refused; only its control passes."""
    network, server = fake_api
    spec = make_spec(
        "underscore-headers",
        "unused",
        hostile=True,
        expect="contained",
        agent={
            "command": ["python3", "/opt/agent/underscore-headers.py"],
            "env": {"UNDERSCORE_URL": "http://fakeapi:8080/headers"},
            "files": str(ROOT / "fixtures" / "agents" / "corpus" / "gateway-abuse"),
        },
        egress={"allow": ["fakeapi:8080"], "upstream": network, "allow_private": True},
        assertions=[{"exit_code": 0}, {"no_unattributed_changes": True}],
    )
    result = run(spec)
    seen = [r for r in upstream_requests(server) if r["path"] == "/headers"]
    print("MEASURED", json.dumps([sorted(r["headers"]) for r in seen]))
    assert [r["headers"].get("x-probe") for r in seen] == [
        None,
        "kept",
    ], seen  # the dropped override's call, then the control
    for r in seen:
        assert not {name for name in r["headers"] if "_" in name}, r["headers"]
        assert (
            r["headers"].get("x-forwarded-for") is None and "transfer-encoding" not in r["headers"]
        ), r["headers"]
    assert result.verdict == "contained", result.report
    assert not (result.run_dir / "attempts" / "1" / "workspace" / "out" / "smuggled").exists()


PROXY_CLIENT = r"""
import socket, sys
for extra in sys.argv[1:]:
    s = socket.create_connection(("egress", 3128), timeout=10)
    body = b"abcde"
    head = "POST http://fakeapi:8080/headers HTTP/1.1\r\nHost: fakeapi:8080\r\n"
    head += "Content-Length: 5\r\n" + extra.replace("|", "\r\n") + "\r\n"
    s.sendall(head.encode() + body)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    print(data.split(b"\r\n", 1)[0].decode(), flush=True)
"""


def test_the_egress_proxy_image_refuses_underscore_spellings_on_its_own(images, fake_api, tmp_path):
    """The proxy holds without the gateway's refusal (defence in depth): raw requests to the
    real egress image, each with a `_` spelling beside the real Content-Length, never reach the
    upstream; the control does."""
    import os
    import secrets

    import docker

    network, server = fake_api
    client = docker.from_env()
    config = tmp_path / "egress"
    config.mkdir()
    (config / "config.json").write_text(
        json.dumps(
            {
                "listen": "0.0.0.0:3128",
                "allow": ["fakeapi:8080"],
                "log": "/tmp/requests.jsonl",
                "allow_private": True,
                "timeout_seconds": 10,
            }
        )
    )
    os.chmod(config, 0o755)
    os.chmod(config / "config.json", 0o644)
    name = f"assure-test-egress-{secrets.token_hex(3)}"
    extras = [
        "Transfer_Encoding: chunked|Content_Length: 0|",
        "Content_Length: 0|",
        "Keep_Alive: timeout=600|",
        "Proxy_Authorization: Basic eA==|",
        "X-Forwarded-For: 203.0.113.9|X_Forwarded_For: 127.0.0.1|",
        "X-Probe: kept|",
    ]
    proxy = client.containers.create(
        images.egress,
        name=name,
        read_only=True,
        cap_drop=["ALL"],
        network=network,
        volumes={str(config): {"bind": "/etc/egress", "mode": "ro"}},
        tmpfs={"/tmp": "size=1m"},
    )
    caller = None
    try:
        client.networks.get(network).disconnect(proxy)
        client.networks.get(network).connect(proxy, aliases=["egress"])
        proxy.start()
        caller = client.containers.create(
            images.agent,
            ["python3", "-c", PROXY_CLIENT, *extras],
            name=f"{name}-caller",
            network=network,
            read_only=True,
            cap_drop=["ALL"],
        )
        caller.start()
        assert caller.wait(timeout=60)["StatusCode"] == 0, caller.logs().decode()
        statuses = caller.logs(stderr=False).decode().split()
    finally:
        for container in (caller, proxy):
            if container is not None:
                container.remove(force=True)
    print("MEASURED", statuses)
    assert [s for s in statuses if s.isdigit()] == ["400"] * 5 + ["200"], statuses
    seen = [r for r in upstream_requests(server) if r["path"] == "/headers"]
    assert [r["headers"].get("x-probe") for r in seen] == ["kept"], (
        seen
    )  # only the control reached the upstream
    assert not {name for name in seen[0]["headers"] if "_" in name}, seen[0]["headers"]
