"""The egress proxy, in-process on 127.0.0.1, against a local origin server on 127.0.0.1.

Nothing here ever dials anything but 127.0.0.1: destinations that must be refused are
either other 127.0.0.1 ports (with a second origin that must see no connection) or names
given to a fake resolver, with dialling itself made to fail the test.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit._egress import (  # noqa: F401  (fixtures: loopback_only applies to every test here)
    GET_BODY,
    PROXY_PATH,
    Origin,
    Reply,
    load_proxy,
    loopback_only,
    origin,
    parse_reply,
    raw,
    read_log,
    start_origin,
    stop_origin,
    wait_for_log,
)

proxy_mod = load_proxy()
LOG_FIELDS = {
    "ts",
    "client",
    "method",
    "host",
    "port",
    "path",
    "decision",
    "reason",
    "status",
    "bytes",
}


@pytest.fixture()
def other_origin() -> Iterator[Origin]:
    """A second origin that is never on the allowlist: it must never see a connection."""
    server = start_origin()
    yield server
    assert server.connections == [], "a refused destination was contacted"
    stop_origin(server)


@pytest.fixture()
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "log" / "requests.jsonl"


@pytest.fixture()
def start_proxy(log_path: Path) -> Iterator[Callable[..., Any]]:
    running: list[Any] = []

    def start(allow: list[str], **overrides: Any) -> Any:
        raw_config = {
            "listen": "127.0.0.1:0",
            "allow": allow,
            "log": str(log_path),
            "max_body_bytes": 4096,
            "timeout_seconds": 5,
            **overrides,
        }
        proxy = proxy_mod.serve(proxy_mod.parse_config(raw_config))
        running.append(proxy)
        return proxy

    yield start
    for proxy in running:
        proxy.shutdown()


@pytest.fixture()
def no_dialling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any attempt by the proxy to dial a destination fail the test (before a packet)."""

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("the proxy tried to dial a destination it must refuse")

    monkeypatch.setattr(proxy_mod.Proxy, "_dial", refuse)


@pytest.fixture()
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Names the proxy resolves, answered without any DNS traffic."""
    names = {
        "loop.test": "127.0.0.1",
        "metadata.test": "169.254.169.254",
        "private.test": "10.0.0.5",
        "mcast.test": "224.0.0.1",
        "zero.test": "0.0.0.0",
    }
    guarded = socket.getaddrinfo  # the loopback-only guard: IP literals only

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host in names:
            return [
                (
                    socket.AF_INET,
                    socket.SOCK_STREAM,
                    socket.IPPROTO_TCP,
                    "",
                    (names[host], int(port)),
                )
            ]
        return guarded(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return names


def get(proxy: Any, url: str, headers: str = "") -> Reply:
    return raw(
        proxy.address, f"GET {url} HTTP/1.1\r\nHost: ignored.example\r\n{headers}\r\n".encode()
    )


def assert_denied(reply: Reply, reason_fragment: str = "") -> None:
    assert reply.status == 403, reply
    assert reply.json()["error"]["code"] == "egress_denied"
    assert reason_fragment in reply.json()["error"]["message"]
    assert reply.headers["proxy-status"].startswith("assure-egress; error=")


def last_log(log_path: Path) -> dict[str, Any]:
    return wait_for_log(log_path)[-1]


def wait_for_lines(log_path: Path, count: int) -> list[dict[str, Any]]:
    return wait_for_log(log_path, count)


# ---------------------------------------------------------------- allowed traffic


def test_allowed_get_passes_with_the_exact_body_and_a_fresh_host(
    start_proxy: Any, origin: Origin, log_path: Path
) -> None:
    proxy = start_proxy([origin.key])
    reply = get(
        proxy,
        origin.url("/hello?q=1"),
        "Proxy-Authorization: Basic c2VjcmV0\r\nConnection: X-Drop-Me\r\nX-Drop-Me: 1\r\nX-Keep:"
        " 2\r\n",
    )
    assert reply.status == 200
    assert reply.body == GET_BODY
    assert reply.headers["x-origin"] == "yes"
    assert "proxy-status" not in reply.headers, "an origin must not be able to speak for the proxy"
    seen = origin.seen[-1]
    names = {k.lower(): v for k, v in seen.headers}
    assert (seen.method, seen.path) == ("GET", "/hello?q=1")
    assert names["host"] == origin.key, "the client's Host must never reach the origin"
    assert "proxy-authorization" not in names and "x-drop-me" not in names
    assert names["x-keep"] == "2" and "assure-egress" in names["via"]
    line = last_log(log_path)
    assert (
        line["decision"],
        line["status"],
        line["method"],
        line["host"],
        line["port"],
        line["path"],
    ) == ("allow", 200, "GET", "127.0.0.1", origin.port, "/hello?q=1")
    assert line["bytes"] > len(GET_BODY)


def test_allowed_post_passes_the_exact_body_both_ways(
    start_proxy: Any, origin: Origin, log_path: Path
) -> None:
    proxy = start_proxy([origin.key])
    body = b"\x00binary\r\n\r\nGET / HTTP/1.1\r\n\xff" * 10
    head = (
        f"POST {origin.url('/echo')} HTTP/1.1\r\nHost: {origin.key}\r\nContent-Length:"
        f" {len(body)}\r\nContent-Type: application/octet-stream\r\n\r\n"
    )
    reply = raw(proxy.address, head.encode() + body)
    assert reply.status == 201
    assert reply.body == body
    assert origin.seen[-1].body == body and len(origin.seen) == 1
    line = last_log(log_path)
    assert (line["decision"], line["status"], line["bytes_up"]) == ("allow", 201, len(body))


def test_connect_to_an_allowed_target_tunnels(
    start_proxy: Any, origin: Origin, log_path: Path
) -> None:
    proxy = start_proxy([origin.key])
    with socket.create_connection(proxy.address, timeout=5) as sock:
        sock.sendall(f"CONNECT {origin.key} HTTP/1.1\r\nHost: {origin.key}\r\n\r\n".encode())
        established = b""
        while b"\r\n\r\n" not in established:
            established += sock.recv(1)
        assert established.startswith(b"HTTP/1.1 200")
        sock.sendall(
            (
                f"GET /through-the-tunnel HTTP/1.1\r\nHost: {origin.key}\r\n"
                "Connection: close\r\n\r\n"
            ).encode()
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert parse_reply(data).body == GET_BODY
    assert origin.seen[-1].path == "/through-the-tunnel"
    line = last_log(log_path)
    assert (line["method"], line["decision"], line["status"], line["port"]) == (
        "CONNECT",
        "allow",
        200,
        origin.port,
    )


# ---------------------------------------------------------------- refusals


def test_a_port_not_on_the_allowlist_is_refused_and_logged(
    start_proxy: Any, origin: Origin, other_origin: Origin, log_path: Path
) -> None:
    proxy = start_proxy([origin.key])
    reply = get(proxy, other_origin.url("/secret"))
    assert_denied(reply, f"{other_origin.key} is not on the allowlist")
    assert reply.json() == {
        "error": {"code": "egress_denied", "message": f"{other_origin.key} is not on the allowlist"}
    }
    line = last_log(log_path)
    assert (line["decision"], line["reason"], line["status"], line["port"], line["path"]) == (
        "deny",
        "not_allowlisted",
        403,
        other_origin.port,
        "/secret",
    )


def test_hosts_match_exactly_and_case_insensitively(
    start_proxy: Any, origin: Origin, fake_dns: dict[str, str], no_dialling: None
) -> None:
    proxy = start_proxy([f"LOOP.test:{origin.port}"])
    # On the allowlist (case-insensitively), so it gets as far as the address check.
    assert_denied(
        get(proxy, f"http://Loop.TEST:{origin.port}/"), "resolves to loopback address 127.0.0.1"
    )
    assert_denied(
        get(proxy, "http://loop.test/"), "loop.test:80 is not on the allowlist"
    )  # default port 80
    assert (
        get(proxy, f"http://loop.test.:{origin.port}/").status == 400
    )  # a trailing dot is not a name we match


def test_requests_to_the_proxy_itself_are_refused(
    start_proxy: Any, origin: Origin, log_path: Path
) -> None:
    proxy = start_proxy([origin.key])
    own = f"127.0.0.1:{proxy.address[1]}"
    proxy.shutdown()
    proxy = start_proxy([origin.key, own], listen=own)  # even with its own address allowlisted
    assert_denied(
        raw(proxy.address, b"GET / HTTP/1.1\r\nHost: whatever\r\n\r\n"), "egress proxy itself"
    )
    assert_denied(get(proxy, f"http://{own}/"), "egress proxy itself")
    assert_denied(get(proxy, origin.url("/"), "Via: 1.1 assure-egress\r\n"), "loop")
    assert origin.seen == []
    reasons = [line["reason"] for line in wait_for_lines(log_path, 3)[-3:]]
    assert reasons == ["proxy_self"] * 3


def test_connect_to_a_target_not_on_the_allowlist_is_refused(
    start_proxy: Any, origin: Origin, other_origin: Origin, log_path: Path
) -> None:
    proxy = start_proxy([origin.key])
    reply = raw(
        proxy.address,
        f"CONNECT {other_origin.key} HTTP/1.1\r\nHost: {other_origin.key}\r\n\r\n".encode(),
    )
    assert_denied(reply, "not on the allowlist")
    line = last_log(log_path)
    assert (line["method"], line["decision"], line["reason"], line["status"]) == (
        "CONNECT",
        "deny",
        "not_allowlisted",
        403,
    )


@pytest.mark.parametrize(
    "name", ["loop.test", "metadata.test", "private.test", "mcast.test", "zero.test"]
)
def test_allowlisted_names_resolving_to_forbidden_addresses_are_refused(
    start_proxy: Any, fake_dns: dict[str, str], no_dialling: None, log_path: Path, name: str
) -> None:
    proxy = start_proxy([f"{name}:80", f"{name}:443"])
    assert_denied(get(proxy, f"http://{name}/"), fake_dns[name])
    assert_denied(
        raw(proxy.address, f"CONNECT {name}:443 HTTP/1.1\r\n\r\n".encode()), fake_dns[name]
    )
    assert {line["reason"] for line in wait_for_lines(log_path, 2)} == {"forbidden_address"}


def test_a_forbidden_address_passes_only_if_allowlisted_literally(
    start_proxy: Any, origin: Origin, fake_dns: dict[str, str]
) -> None:
    proxy = start_proxy([f"loop.test:{origin.port}", origin.key])
    reply = get(proxy, f"http://loop.test:{origin.port}/by-name")
    assert reply.status == 200 and reply.body == GET_BODY
    assert {k.lower(): v for k, v in origin.seen[-1].headers}["host"] == f"loop.test:{origin.port}"


def test_an_oversize_body_is_refused_before_any_forwarding(
    start_proxy: Any, origin: Origin, log_path: Path
) -> None:
    proxy = start_proxy([origin.key], max_body_bytes=100)
    reply = raw(
        proxy.address,
        f"POST {origin.url('/')} HTTP/1.1\r\nContent-Length: 101\r\n\r\n".encode() + b"x" * 101,
    )
    assert reply.status == 413 and reply.json()["error"]["code"] == "body_too_large"
    assert origin.connections == []
    line = last_log(log_path)
    assert (line["decision"], line["reason"], line["status"]) == ("deny", "body_too_large", 413)


def test_chunked_request_bodies_and_oversize_heads_are_refused(
    start_proxy: Any, origin: Origin
) -> None:
    proxy = start_proxy([origin.key], max_header_bytes=512)
    chunked = raw(
        proxy.address,
        f"POST {origin.url('/')} HTTP/1.1\r\nTransfer-Encoding:"
        " chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n".encode(),
    )
    assert chunked.status == 411
    big = raw(
        proxy.address, f"GET {origin.url('/')} HTTP/1.1\r\nX-Big: {'a' * 1000}\r\n\r\n".encode()
    )
    assert big.status == 431
    assert origin.connections == []


@pytest.mark.parametrize(
    "extra",
    [
        # issue 21, item 7: both beside the real Content-Length
        "Transfer_Encoding: chunked\r\nContent_Length: 0\r\n",
        "Content_Length: 0\r\n",
        "TRANSFER_ENCODING: chunked\r\n",
        "Keep_Alive: timeout=600\r\n",
        "Proxy_Authorization: Basic eA==\r\n",
        # two names one CGI server reads as one
        "X-Forwarded-For: 203.0.113.9\r\nX_Forwarded_For: 127.0.0.1\r\n",
    ],
)
def test_underscore_spellings_of_what_the_proxy_filters_are_refused_before_any_forwarding(
    start_proxy: Any, origin: Origin, extra: str
) -> None:
    proxy = start_proxy([origin.key])
    body = b"abcde"
    head = f"POST {origin.url('/echo')} HTTP/1.1\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    reply = raw(proxy.address, head.encode() + body)
    assert reply.status == 400 and "'_' as '-'" in reply.json()["error"]["message"]
    assert origin.connections == []


def test_connection_tokens_and_upstream_headers_are_filtered_in_either_spelling(
    start_proxy: Any, origin: Origin
) -> None:
    proxy = start_proxy([origin.key])
    reply = get(
        proxy, origin.url("/headers"), "Connection: X_Drop_Me\r\nX-Drop-Me: 1\r\nX-Keep: 2\r\n"
    )
    assert reply.status == 200
    names = {k.lower() for k, _ in origin.seen[-1].headers}
    assert "x-drop-me" not in names and "x-keep" in names
    answer = get(proxy, origin.url("/underscore"))
    assert answer.status == 200 and answer.body == GET_BODY
    assert not {"transfer_encoding", "keep_alive", "proxy_status"} & set(answer.headers), (
        answer.headers
    )


def test_https_absolute_form_and_userinfo_are_refused(start_proxy: Any, origin: Origin) -> None:
    proxy = start_proxy([origin.key])
    assert get(proxy, f"https://{origin.key}/").status == 400
    assert get(proxy, f"http://user:pw@{origin.key}/").status == 400
    assert origin.connections == []


def test_connections_over_the_cap_get_503(start_proxy: Any, origin: Origin) -> None:
    proxy = start_proxy([origin.key], max_connections=1)
    with socket.create_connection(proxy.address, timeout=5) as holder:
        holder.sendall(b"GET ")  # holds the only slot
        time.sleep(0.3)
        reply = raw(proxy.address, f"GET {origin.url('/')} HTTP/1.1\r\n\r\n".encode())
        assert reply.status == 503 and reply.json()["error"]["code"] == "too_many_connections"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the slot comes back once the holder is gone
        if get(proxy, origin.url("/")).status == 200:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the connection slot was never released")


def test_every_log_line_has_the_fields(
    start_proxy: Any, origin: Origin, other_origin: Origin, log_path: Path
) -> None:
    proxy = start_proxy([origin.key])
    get(proxy, origin.url("/" + "p" * 1000))
    get(proxy, other_origin.url("/"))
    raw(proxy.address, b"GET / HTTP/1.1\r\n\r\n")
    raw(proxy.address, b"BROKEN\r\n\r\n")
    lines = wait_for_lines(log_path, 4)
    for line in lines:
        assert LOG_FIELDS <= set(line), line
        assert line["decision"] in ("allow", "deny", "error")
    assert len(lines[0]["path"]) <= 256
    # each connection is served on its own thread and logged when it ends: the order of the
    # lines is the order the connections finished, not the order they were made
    assert sorted(line["status"] for line in lines) == [200, 400, 403, 403]


def test_config_errors_name_the_field() -> None:
    with pytest.raises(proxy_mod.ConfigError, match="'allow'"):
        proxy_mod.parse_config({"listen": "127.0.0.1:3128"})
    with pytest.raises(proxy_mod.ConfigError, match="'allow'"):
        proxy_mod.parse_config({"allow": ["no-port"]})
    with pytest.raises(proxy_mod.ConfigError, match="'alow'"):
        proxy_mod.parse_config({"allow": ["a:1"], "alow": []})
    with pytest.raises(proxy_mod.ConfigError, match="'timeout_seconds'"):
        proxy_mod.parse_config({"allow": ["a:1"], "timeout_seconds": 0})
    assert proxy_mod.parse_config({"allow": ["API.Example.com:443"]}).allow == frozenset(
        {"api.example.com:443"}
    )


def test_sigterm_stops_the_proxy_cleanly(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "listen": "127.0.0.1:0",
                "allow": ["allowed.invalid:443"],
                "log": str(tmp_path / "requests.jsonl"),
                "max_body_bytes": 1024,
                "timeout_seconds": 5,
            }
        )
    )
    proc = subprocess.Popen(
        [sys.executable, str(PROXY_PATH), "--config", str(config)],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    try:
        assert proc.stderr is not None
        banner = proc.stderr.readline()
        assert "listening on 127.0.0.1:" in banner, banner
        port = int(banner.split("listening on 127.0.0.1:")[1].split(",")[0])
        assert (
            raw(("127.0.0.1", port), b"GET http://allowed.invalid/ HTTP/1.1\r\n\r\n").status == 403
        )  # port 80: refused before any resolve
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = read_log(tmp_path / "requests.jsonl")
    assert len(lines) == 1 and lines[0]["reason"] == "not_allowlisted"
