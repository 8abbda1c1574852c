"""The gateway's http.request tool: its own refusals (before any socket), and real requests
through the in-process egress proxy to a local origin, all on 127.0.0.1."""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from assure.gateway import http as gw_http
from assure.gateway import tools
from assure.gateway.config import ConfigError, parse
from assure.gateway.egress import Egress
from assure.gateway.errors import ToolError
from assure.gateway.fspath import Workspace
from tests.unit._egress import (  # noqa: F401  (fixtures: loopback_only applies to every test here)
    GET_BODY,
    Origin,
    load_proxy,
    loopback_only,
    origin,
    start_origin,
    stop_origin,
    wait_for_log,
)

proxy_mod = load_proxy()
TOOL = tools.BY_NAME["http.request"]
# never resolved: only the proxy resolves, and these tests never reach it with this name
ALLOWED = "allowed.invalid"


@pytest.fixture()
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    ws = Workspace(str(tmp_path))
    yield ws
    ws.close()


@pytest.fixture()
def no_sockets(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record any socket the tool opens: refusals must happen before the first one."""
    opened: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        opened.append(args)
        raise AssertionError("the gateway opened a connection for a call it must refuse")

    monkeypatch.setattr(gw_http.http.client.HTTPConnection, "connect", refuse)
    monkeypatch.setattr(gw_http.http.client.HTTPSConnection, "connect", refuse)
    return opened


@pytest.fixture()
def proxy(tmp_path: Path, origin: Origin) -> Iterator[Any]:
    config = proxy_mod.parse_config(
        {
            "listen": "127.0.0.1:0",
            "allow": [origin.key],
            "log": str(tmp_path / "egress.jsonl"),
            "max_body_bytes": 65536,
            "timeout_seconds": 5,
        }
    )
    running = proxy_mod.serve(config)
    yield running
    running.shutdown()


def env_with(
    workspace: Workspace,
    proxy_port: int = 9,
    allow: tuple[str, ...] = (f"{ALLOWED}:80", f"{ALLOWED}:443"),
    **limits: int,
) -> tools.Env:
    return tools.Env(
        workspace, 1024, egress=Egress("127.0.0.1", proxy_port, frozenset(allow), **limits)
    )


def call(env: tools.Env, **body: Any) -> tools.Outcome:
    args, _meta = tools.parse(TOOL, body)
    return tools.run(TOOL, env, args)


def refused(env: tools.Env, **body: Any) -> ToolError:
    with pytest.raises(ToolError) as info:
        call(env, **body)
    return info.value


# ---------------------------------------------------------------- registry hooks


@pytest.mark.parametrize(
    ("method", "mutates"),
    [
        ("GET", False),
        ("get", False),
        ("HEAD", False),
        ("OPTIONS", False),
        ("POST", True),
        ("PUT", True),
        ("PATCH", True),
        ("DELETE", True),
        ("BREW", True),
    ],
)
def test_mutating_is_per_call(method: str, mutates: bool) -> None:
    assert TOOL.mutating({"method": method, "url": "http://x.invalid/"}) is mutates
    assert TOOL.mutates is True  # the static flag is the fail-closed answer


def test_other_tools_keep_their_static_flag() -> None:
    assert tools.BY_NAME["fs.write"].mutating({"path": "a"}) is True
    assert tools.BY_NAME["fs.read"].mutating({"path": "a"}) is False


def test_scope_is_host_and_port_and_external(workspace: Workspace) -> None:
    env = env_with(workspace)
    assert TOOL.scope is not None
    assert TOOL.scope(env, {"method": "GET", "url": "https://API.Example.invalid/v1?q=1"}) == (
        "http:api.example.invalid:443",
        "external",
    )
    assert TOOL.scope(env, {"method": "POST", "url": "http://127.0.0.1:8080/"}) == (
        "http:127.0.0.1:8080",
        "external",
    )
    with pytest.raises(ToolError) as info:
        TOOL.scope(env, {"method": "GET", "url": "ftp://x.invalid/"})
    assert info.value.code == "bad_args"


# ---------------------------------------------------------------- the gateway's own refusals


def test_no_egress_configured(workspace: Workspace, no_sockets: list[Any]) -> None:
    error = refused(tools.Env(workspace, 1024), method="GET", url=f"http://{ALLOWED}/")
    assert (error.code, error.status, error.message) == ("no_egress", 403, "this run has no egress")


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://127.0.0.1:8080/",
        "http://10.1.2.3/",
        "http://172.17.0.1/",  # the Docker host
        "http://172.31.255.255/",
        "http://192.168.1.1/",
        "http://169.254.169.254/latest/meta-data/",  # cloud metadata
        "http://169.254.1.1/",
        "http://0.0.0.0/",
        "http://224.0.0.1/",
        "http://100.64.0.1/",
        "http://[::1]/",
        "http://[fd00::1]/",
        "http://[fe80::1]/",
        "http://[::]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:169.254.169.254]/",
        "https://127.0.0.1/",
        "http://127.1/",  # non-canonical spellings of loopback
        "http://2130706433/",
        "http://0x7f000001/",
        "http://0177.0.0.1/",
    ],
)
def test_forbidden_ip_literals_are_refused(
    workspace: Workspace, no_sockets: list[Any], url: str
) -> None:
    error = refused(env_with(workspace), method="GET", url=url)
    assert (error.code, error.status) == ("egress_denied", 403), error.message
    assert no_sockets == []


def test_metadata_address_says_what_it_is(workspace: Workspace, no_sockets: list[Any]) -> None:
    error = refused(
        env_with(workspace), method="GET", url="http://169.254.169.254/latest/meta-data/"
    )
    assert "link-local (cloud metadata)" in error.message


@pytest.mark.parametrize(
    "url",
    [
        "http://evil.invalid/",
        f"http://{ALLOWED}:8080/",  # allowlisted host, other port
        f"http://{ALLOWED}.evil.invalid/",
        f"http://sub.{ALLOWED}/",
        "http://93.184.216.34/",  # a public literal is still only what the allowlist says
    ],
)
def test_targets_not_on_the_allowlist_are_refused(
    workspace: Workspace, no_sockets: list[Any], url: str
) -> None:
    error = refused(env_with(workspace, allow=(f"{ALLOWED}:80",)), method="GET", url=url)
    assert (error.code, error.status) == ("egress_denied", 403)
    assert "is not on the allowlist" in error.message


def test_https_default_port_must_be_allowlisted(
    workspace: Workspace, no_sockets: list[Any]
) -> None:
    error = refused(
        env_with(workspace, allow=(f"{ALLOWED}:80",)), method="GET", url=f"https://{ALLOWED}/"
    )
    assert error.message == f"{ALLOWED}:443 is not on the allowlist"


@pytest.mark.parametrize(
    "url",
    [
        "ftp://allowed.invalid/",
        "file:///etc/passwd",
        "gopher://allowed.invalid:80/",
        "javascript:alert(1)",
        "//allowed.invalid/",
        "allowed.invalid/",
        f"http://{ALLOWED}:80@evil.invalid/",  # user information
        "http://user:pw@allowed.invalid/",
        "http://allowed.invalid\\@evil.invalid/",
        "http://allowed.invalid/a b",
        "http://allowed.invalid/\r\nX-Injected: 1",
        "http://allowed.invalid:0/",
        "http://allowed.invalid:99999/",
        "http://[fe80::1%25eth0]/",
        "http://bad_host!.invalid/",
        "http:///nohost",
    ],
)
def test_bad_urls_are_refused(workspace: Workspace, no_sockets: list[Any], url: str) -> None:
    error = refused(env_with(workspace), method="GET", url=url)
    assert error.code in ("bad_args", "egress_denied"), error.message
    assert error.status in (400, 403)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"method": "CONNECT"}, "'method'"),
        ({"method": "TRACE"}, "'method'"),
        ({"headers": {"X-Bad": "a\r\nInjected: 1"}}, "control"),
        ({"headers": {"Bad Name": "1"}}, "token"),
        ({"headers": {"X-Num": 1}}, "string"),
        ({"body": "a", "body_b64": "YQ=="}, "at most one"),
        ({"body_b64": "not base64!"}, "base64"),
    ],
)
def test_bad_arguments_are_refused(
    workspace: Workspace, no_sockets: list[Any], body: dict[str, Any], fragment: str
) -> None:
    error = refused(env_with(workspace), **{"method": "POST", "url": f"http://{ALLOWED}/", **body})
    assert error.code == "bad_args" and fragment in error.message


def test_an_oversize_request_body_is_refused(workspace: Workspace, no_sockets: list[Any]) -> None:
    error = refused(
        env_with(workspace, max_request_bytes=10),
        method="POST",
        url=f"http://{ALLOWED}/",
        body="x" * 11,
    )
    assert (error.code, error.status) == ("too_large", 413)


@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS", "get"])
@pytest.mark.parametrize(
    "extra", [{"body": ""}, {"body": '{"delete": true}'}, {"body_b64": "eA=="}]
)
def test_a_safe_method_carries_no_body(
    workspace: Workspace, no_sockets: list[Any], method: str, extra: dict[str, Any]
) -> None:
    error = refused(env_with(workspace), method=method, url=f"http://{ALLOWED}/records/1", **extra)
    assert error.code == "bad_args" and "carries no body" in error.message
    with pytest.raises(ToolError):  # refused already where the gate's scope is computed
        TOOL.scope(env_with(workspace), {"method": method, "url": f"http://{ALLOWED}/", **extra})


@pytest.mark.parametrize(
    "query",
    [
        "_method=DELETE",
        "a=1&_method=put",
        "_METHOD=patch",
        "%5Fmethod=DELETE",
        "a=1;_method=DELETE",
        "_m%65thod=PUT",
    ],
)
def test_a_safe_method_url_carries_no_method_parameter(
    workspace: Workspace, no_sockets: list[Any], query: str
) -> None:
    error = refused(env_with(workspace), method="GET", url=f"http://{ALLOWED}/x?{query}")
    assert error.code == "bad_args" and "_method" in error.message


# ---------------------------------------------------------------- through the proxy


def proxied_env(
    workspace: Workspace, proxy: Any, origin: Origin, *extra: str, **limits: int
) -> tools.Env:
    return env_with(workspace, proxy.address[1], allow=(origin.key, *extra), **limits)


def test_get_through_the_proxy(
    workspace: Workspace, proxy: Any, origin: Origin, tmp_path: Path
) -> None:
    outcome = call(
        proxied_env(workspace, proxy, origin), method="GET", url=origin.url("/hello?x=1")
    )
    assert outcome.result["status"] == 200
    assert outcome.result["body"] == GET_BODY.decode()
    assert outcome.result["truncated"] is False
    assert outcome.result["headers"]["x-origin"] == "yes"
    assert not any(
        name.startswith("proxy-") or name in ("via", "connection")
        for name in outcome.result["headers"]
    )
    assert origin.seen[-1].path == "/hello?x=1"
    assert "effect" not in outcome.record and outcome.record["egress"]["status"] == 200
    logged = wait_for_log(tmp_path / "egress.jsonl")
    assert logged[-1]["decision"] == "allow" and logged[-1]["path"] == "/hello?x=1"


def test_post_body_b64_round_trips_and_is_an_effect(
    workspace: Workspace, proxy: Any, origin: Origin
) -> None:
    payload = bytes(range(256)) * 4
    outcome = call(
        proxied_env(workspace, proxy, origin),
        method="POST",
        url=origin.url("/echo"),
        body_b64=base64.b64encode(payload).decode(),
    )
    assert outcome.result["status"] == 201
    assert base64.b64decode(outcome.result["body_b64"]) == payload
    assert origin.seen[-1].body == payload
    effect = outcome.record["effect"]
    assert (
        effect["op"],
        effect["method"],
        effect["status"],
        effect["request_bytes"],
        effect["scope"],
    ) == ("http", "POST", 201, len(payload), f"http:{origin.key}")


def test_headers_the_agent_sets_and_only_those(
    workspace: Workspace, proxy: Any, origin: Origin
) -> None:
    headers = {
        "Authorization": "Bearer agent-token",
        "Proxy-Authorization": "Basic c3RvbGVu",
        "Connection": "keep-alive, X-Hop",
        "Keep-Alive": "timeout=5",
        "Host": "evil.invalid",
        "Transfer-Encoding": "chunked",
        "X-Custom": "kept",
    }
    env = proxied_env(workspace, proxy, origin)
    outcome = call(env, method="GET", url=origin.url("/headers"), headers=headers)
    seen = {name.lower(): value for name, value in json.loads(outcome.result["body"])}
    assert seen["authorization"] == "Bearer agent-token"
    assert seen["x-custom"] == "kept"
    assert seen["host"] == origin.key
    assert not {"proxy-authorization", "keep-alive", "transfer-encoding"} & set(seen)
    call(env, method="GET", url=origin.url("/headers"))
    assert "authorization" not in {name.lower() for name, _ in origin.seen[-1].headers}


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_method_override_headers_are_dropped(
    workspace: Workspace, proxy: Any, origin: Origin, method: str
) -> None:
    overrides = {
        "X-HTTP-Method-Override": "DELETE",
        "X-HTTP-Method": "DELETE",
        "X-Method-Override": "DELETE",
        "X-Original-Method": "DELETE",
        "X_HTTP_Method_Override": "DELETE",
    }  # WSGI reads it as HTTP_X_HTTP_METHOD_OVERRIDE, like the dashed one
    body = {"body": "x"} if method == "POST" else {}
    outcome = call(
        proxied_env(workspace, proxy, origin),
        method=method,
        url=origin.url("/headers"),
        headers={**overrides, "X-Kept": "1"},
        **body,
    )
    sent = {name.lower() for name, _ in origin.seen[-1].headers}
    assert origin.seen[-1].method == method and "x-kept" in sent
    assert not {name.lower() for name in overrides} & sent
    summary = outcome.record["effect" if method == "POST" else "egress"]
    assert summary["dropped_method_overrides"] == sorted(name.lower() for name in overrides)


@pytest.mark.parametrize(
    "headers",
    [
        {"Transfer_Encoding": "chunked", "Content_Length": "0"},  # issue 21, item 7
        {"Content_Length": "0"},
        {"TRANSFER_ENCODING": "chunked"},
        {"Keep_Alive": "timeout=600"},
        {"Proxy_Authorization": "Basic eA=="},
        {"Content_length": "5"},
        {"Proxy_Connection": "keep-alive"},
        {
            "X-Forwarded-For": "203.0.113.9",
            "X_Forwarded_For": "127.0.0.1",
        },  # one header to a CGI server, two values
    ],
)
def test_underscore_spellings_are_refused_before_any_socket(
    workspace: Workspace, no_sockets: list[Any], headers: dict[str, str]
) -> None:
    error = refused(
        env_with(workspace), method="POST", url=f"http://{ALLOWED}/", headers=headers, body="abc"
    )
    assert (error.status, error.code) == (400, "bad_args") and "'_' as '-'" in error.message
    assert no_sockets == []


def test_what_is_sent_and_shown_is_filtered_in_either_spelling(
    workspace: Workspace, proxy: Any, origin: Origin
) -> None:
    call(
        proxied_env(workspace, proxy, origin),
        method="GET",
        url=origin.url("/headers"),
        headers={"Content-Length": "0", "X_Kept": "1", "x-other": "a", "X-Other": "b"},
    )  # a client library's own, and plain repeats
    sent = {name.lower() for name, _ in origin.seen[-1].headers}
    assert "x_kept" in sent and "x-other" in sent and "content-length" not in sent
    shown = call(
        proxied_env(workspace, proxy, origin), method="GET", url=origin.url("/underscore")
    ).result["headers"]
    assert not {"transfer_encoding", "keep_alive", "proxy_status"} & set(shown), shown


def test_head_has_no_body(workspace: Workspace, proxy: Any, origin: Origin) -> None:
    outcome = call(proxied_env(workspace, proxy, origin), method="HEAD", url=origin.url("/"))
    assert outcome.result["status"] == 200 and outcome.result["body"] == ""


def test_large_responses_are_truncated(workspace: Workspace, proxy: Any, origin: Origin) -> None:
    outcome = call(
        proxied_env(workspace, proxy, origin, max_response_bytes=1000),
        method="GET",
        url=origin.url("/big/5000"),
    )
    assert outcome.result["truncated"] is True and outcome.result["body"] == "x" * 1000


def test_the_proxy_refusal_comes_back_as_egress_denied(
    workspace: Workspace, proxy: Any, origin: Origin
) -> None:
    other = start_origin()
    try:
        # The gateway's allowlist says yes (a config mismatch); the proxy still says no.
        error = refused(
            proxied_env(workspace, proxy, origin, other.key), method="GET", url=other.url("/")
        )
        assert (error.code, error.status) == ("egress_denied", 403)
        assert error.message == f"egress proxy: {other.key} is not on the allowlist"
        assert other.connections == []
    finally:
        stop_origin(other)


def test_an_origin_cannot_pose_as_the_proxy(
    workspace: Workspace, proxy: Any, origin: Origin
) -> None:
    outcome = call(
        proxied_env(workspace, proxy, origin), method="GET", url=origin.url("/forbidden")
    )
    assert outcome.result["status"] == 403  # an ordinary answer, not a refusal of the proxy


def test_an_unreachable_proxy_is_an_upstream_error(workspace: Workspace, origin: Origin) -> None:
    error = refused(env_with(workspace, 9, allow=(origin.key,)), method="GET", url=origin.url("/"))
    assert (error.code, error.status) == ("upstream_error", 502)


def test_https_refused_by_the_proxy_is_egress_denied(
    workspace: Workspace, proxy: Any, origin: Origin
) -> None:
    other = start_origin()
    try:
        error = refused(
            proxied_env(workspace, proxy, origin, other.key),
            method="GET",
            url=f"https://{other.key}/",
        )
        assert (error.code, error.status) == ("egress_denied", 403)
        assert other.connections == []
    finally:
        stop_origin(other)


def test_https_through_a_connect_tunnel(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("needs the openssl CLI to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    tls_origin = start_origin(tls=server_context)
    config = proxy_mod.parse_config(
        {
            "listen": "127.0.0.1:0",
            "allow": [tls_origin.key],
            "log": str(tmp_path / "egress.jsonl"),
            "max_body_bytes": 65536,
            "timeout_seconds": 5,
        }
    )
    running = proxy_mod.serve(config)
    trusting = ssl.create_default_context(cafile=str(cert))
    monkeypatch.setattr(gw_http.ssl, "create_default_context", lambda *a, **k: trusting)
    try:
        env = env_with(workspace, running.address[1], allow=(tls_origin.key,))
        outcome = call(env, method="POST", url=f"https://{tls_origin.key}/secure", body="over TLS")
        assert (outcome.result["status"], outcome.result["body"]) == (201, "over TLS")
        assert tls_origin.seen[-1].path == "/secure"
        line = wait_for_log(tmp_path / "egress.jsonl")[-1]
        assert (line["method"], line["decision"], line["status"], line["port"]) == (
            "CONNECT",
            "allow",
            200,
            tls_origin.port,
        )
        # The same origin with the system trust store: the certificate is not accepted.
        monkeypatch.setattr(
            gw_http.ssl,
            "create_default_context",
            lambda *a, **k: ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT),
        )
        error = refused(env, method="GET", url=f"https://{tls_origin.key}/")
        assert error.code == "upstream_error" and "certificate" in error.message
    finally:
        running.shutdown()
        stop_origin(tls_origin)


# ---------------------------------------------------------------- config


def test_config_egress_section(gateway_config: Callable[..., dict[str, Any]]) -> None:
    raw = gateway_config()
    assert parse(raw).egress is None
    config = parse(
        {
            **raw,
            "egress": {
                "proxy": "egress-proxy:3128",
                "allow": ["API.example.com:443", "127.0.0.1:8080"],
            },
        }
    )
    assert config.egress == Egress(
        "egress-proxy", 3128, frozenset({"api.example.com:443", "127.0.0.1:8080"})
    )
    for bad, field in [
        ({"proxy": "egress-proxy:3128"}, "egress.allow"),
        ({"proxy": "egress-proxy", "allow": ["a:1"]}, "egress.proxy"),
        ({"proxy": "p:1", "allow": ["a:1", "b"]}, "egress.allow[1]"),
        ({"proxy": "p:1", "allow": ["a:1"], "extra": 1}, "egress.extra"),
        ({"proxy": "p:1", "allow": ["a:70000"]}, "egress.allow[0]"),
    ]:
        with pytest.raises(ConfigError) as info:
            parse({**raw, "egress": bad})
        assert info.value.field == field
