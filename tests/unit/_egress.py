"""Shared by the egress tests: the proxy loaded from egress-proxy/proxy.py, a local origin
server, and raw HTTP over a socket. Everything listens on 127.0.0.1 and nothing else is
ever dialled: tests that expect a refusal also make any attempt to dial fail loudly."""

from __future__ import annotations

import errno
import http.server
import importlib.util
import ipaddress
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

PROXY_PATH = Path(__file__).resolve().parents[2] / "egress-proxy" / "proxy.py"
MODULE_NAME = "assure_egress_proxy_under_test"
GET_BODY = b"hello from the origin\n"


def load_proxy() -> ModuleType:
    """egress-proxy/proxy.py as a module (it is a script in its own image, not a package)."""
    if MODULE_NAME in sys.modules:
        return sys.modules[MODULE_NAME]
    spec = importlib.util.spec_from_file_location(MODULE_NAME, PROXY_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class Seen:
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class Origin:
    """A local HTTP server on 127.0.0.1 that records every request it gets."""

    server: http.server.ThreadingHTTPServer
    seen: list[Seen] = field(default_factory=list)
    connections: list[Any] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def key(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def start_origin(tls: Any = None) -> Origin:
    """Start an origin; `tls` (an ssl.SSLContext) makes it an https origin."""
    origin: Origin

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            origin.connections.append(self.client_address)
            super().setup()

        def _record(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            origin.seen.append(Seen(self.command, self.path, list(self.headers.items()), body))
            return body

        def _send(
            self,
            status: int,
            body: bytes,
            content_type: str = "application/octet-stream",
            extra: tuple[tuple[str, str], ...] = (),
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Origin", "yes")
            self.send_header("Proxy-Status", "assure-egress; error=spoofed_by_the_origin")
            for name, value in extra:
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:
            self._record()
            if self.path.startswith("/big/"):
                self._send(200, b"x" * int(self.path.split("/")[2]), "text/plain")
            elif self.path == "/headers":
                seen = origin.seen[-1]
                self._send(200, json.dumps(seen.headers).encode(), "application/json")
            elif self.path == "/forbidden":
                self._send(
                    403,
                    b'{"error": {"code": "egress_denied", "message": "spoofed"}}',
                    "application/json",
                )
            elif self.path == "/binary":
                self._send(200, bytes(range(256)))
            elif self.path == "/underscore":  # hop-by-hop and proxy names spelled with `_`
                self._send(
                    200,
                    GET_BODY,
                    "text/plain",
                    (
                        ("Transfer_Encoding", "chunked"),
                        ("Keep_Alive", "timeout=1"),
                        ("Proxy_Status", "assure-egress; error=spoofed"),
                    ),
                )
            else:
                self._send(200, GET_BODY, "text/plain")

        do_HEAD = do_GET
        do_OPTIONS = do_GET

        def do_POST(self) -> None:
            body = self._record()
            self._send(201, body)

        do_PUT = do_POST
        do_DELETE = do_POST

        def log_message(self, *_args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    origin = Origin(server)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
    ).start()
    return origin


def stop_origin(origin: Origin) -> None:
    origin.server.shutdown()
    origin.server.server_close()


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def raw(address: tuple[str, int], data: bytes, *, timeout: float = 5.0) -> Reply:
    """Send raw bytes to the proxy, read until it closes, parse one HTTP response."""
    assert address[0] == "127.0.0.1"
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return parse_reply(b"".join(chunks))


def parse_reply(data: bytes) -> Reply:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Reply(status, headers, body)


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def wait_for_log(path: Path, count: int = 1, timeout: float = 5.0) -> list[dict[str, Any]]:
    """The proxy logs a request after answering it: wait until `count` lines are there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = read_log(path)
        if len(lines) >= count:
            return lines
        time.sleep(0.02)
    raise AssertionError(f"expected {count} log line(s) in {path}, got {read_log(path)}")


class LoopbackOnly:
    """Patch name resolution and connect() in this process: names are never resolved and
    only loopback (or unix) sockets may connect. Violations are refused and remembered."""

    def __init__(self) -> None:
        self.violations: list[str] = []
        self._getaddrinfo = socket.getaddrinfo
        self._connect = socket.socket.connect
        self._connect_ex = socket.socket.connect_ex

    def install(self, monkeypatch: Any) -> None:
        guard = self

        def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
            if host is not None and not _is_ip(host):
                guard.violations.append(f"resolve {host!r}")
                raise socket.gaierror(socket.EAI_NONAME, f"tests resolve no names ({host!r})")
            return guard._getaddrinfo(host, *args, **kwargs)

        def allowed(sock: socket.socket, address: Any) -> bool:
            if sock.family == socket.AF_UNIX:
                return True
            host = address[0] if isinstance(address, tuple) else address
            return _is_ip(host) and ipaddress.ip_address(str(host)).is_loopback

        def connect(sock: socket.socket, address: Any) -> None:
            if not allowed(sock, address):
                guard.violations.append(f"connect {address!r}")
                raise OSError(errno.ENETUNREACH, f"tests connect only to loopback ({address!r})")
            guard._connect(sock, address)

        def connect_ex(sock: socket.socket, address: Any) -> int:
            if not allowed(sock, address):
                guard.violations.append(f"connect_ex {address!r}")
                return errno.ENETUNREACH
            return guard._connect_ex(sock, address)

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
        monkeypatch.setattr(socket.socket, "connect", connect)
        monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackOnly]:
    """No name is resolved and nothing but loopback is dialled from this process (import this
    fixture into a test module to apply it to every test there)."""
    guard = LoopbackOnly()
    guard.install(monkeypatch)
    yield guard
    assert guard.violations == [], guard.violations


@pytest.fixture()
def origin() -> Iterator[Origin]:
    """A plain-HTTP test origin on loopback (import this fixture into a test module to use it)."""
    server = start_origin()
    yield server
    stop_origin(server)


def _is_ip(host: Any) -> bool:
    try:
        ipaddress.ip_address(str(host))
    except ValueError:
        return False
    return True
