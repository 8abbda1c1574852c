#!/usr/bin/env python3
"""The egress proxy: the only way out for the gateway, and only to allowlisted `host:port`s.

A small forward HTTP proxy, standard library only, that runs in its own container on an
internal Docker network shared with the gateway. It accepts

- absolute-form plain HTTP requests (`GET http://host:port/path HTTP/1.1`), forwarded with
  a fresh `Host` taken from the URL (never the client's), hop-by-hop and `Proxy-*` headers
  dropped, `Connection: close` on both sides (one request per connection). Header names are
  compared as a CGI-style server reads them (`header_key`: `_` is `-`); a request that spells
  one of those headers with `_` (`Content_Length`, `Transfer_Encoding`: a second framing to
  such a server) or carries two names that read alike (`X-A` and `X_A`) is refused (400);
- `CONNECT host:port` tunnels (for https), relayed blindly once the target passes.

Every target is checked, in this order, before any connection is made:
1. the request is a proxy request (origin-form `GET /` is addressed to the proxy itself);
2. exact `host:port` (host lowercased; default ports 80 / 443) is on the allowlist;
3. it is not the proxy itself (own name / address + listen port, or a `Via` loop);
4. the proxy resolves the name itself, and every address it resolves to must be allowed:
   loopback, link-local (incl. 169.254.169.254), multicast, unspecified and reserved
   addresses are refused, and so are private ones unless `allow_private` is set, unless
   the allowlist names `<that ip>:<port>` literally. It then connects to exactly the
   addresses it checked (no second lookup, so no DNS rebinding between check and use).

Refusals are `403` with `{"error": {"code": "egress_denied", "message": ...}}`; every
answer the proxy makes itself (refusals and failures) carries `Proxy-Status: assure-egress;
error=...`, which upstream responses can never carry (the proxy strips it from them).
Every request, allowed or not, is one JSON line in the log: ts, client, method, host,
port, path (truncated), decision, reason, status, bytes (to the client), bytes_up (from
the client), ms. If the log cannot be written the proxy refuses everything after (503).

Bounded: request head size, request body size, response size, an idle timeout on every
read, write and connect, a total time per request or tunnel, and concurrent connections
(over the cap: an immediate 503). SIGTERM / SIGINT: stop accepting, close, exit 0.

Config (JSON): listen, allow (required), log, max_body_bytes, timeout_seconds, and
optionally max_header_bytes, max_response_bytes, max_connections, max_duration_seconds,
allow_private. Unknown fields are errors.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import ipaddress
import json
import os
import re
import select
import signal
import socket
import socketserver
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

VIA_TOKEN = "assure-egress"
VIA = f"1.1 {VIA_TOKEN}"
RECV_BYTES = 65536
MAX_LOG_PATH = 256
MAX_LOG_FIELD = 255
MAX_MESSAGE = 512
OVERLOAD_SEND_SECONDS = 0.5
LINGER_SECONDS = 0.5
LINGER_BYTES = 1024 * 1024
HOP_BY_HOP = frozenset(
    (
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "expect",
        "via",
    )
)
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def header_key(name: str) -> str:
    """A header name as CGI, WSGI and PHP servers read it: lowercased, `_` as `-`. Every
    filter of header names in this proxy compares this, never the spelling sent."""
    return name.lower().replace("_", "-")


_NAME = re.compile(r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*$")
_DEFAULT_PORT = {"http": 80, "https": 443}
# RFC 9209 error types for the Proxy-Status header of the proxy's own answers.
_PROXY_STATUS = {
    "egress_denied": "http_request_denied",
    "not_allowlisted": "http_request_denied",
    "proxy_self": "proxy_loop_detected",
    "forbidden_address": "destination_ip_prohibited",
    "resolve_failed": "dns_error",
    "upstream_unreachable": "connection_refused",
    "upstream_timeout": "connection_timeout",
    "bad_upstream_response": "http_protocol_error",
}


# ---------------------------------------------------------------- config


class ConfigError(Exception):
    def __init__(self, field_name: str, message: str):
        super().__init__(f"egress proxy config field {field_name!r}: {message}")


@dataclass(frozen=True)
class Config:
    allow: frozenset[str]
    listen: str = "0.0.0.0:3128"
    log: str = "/var/log/egress/requests.jsonl"
    max_body_bytes: int = 8 * 1024 * 1024
    timeout_seconds: float = 30.0
    max_header_bytes: int = 16 * 1024
    max_response_bytes: int = 64 * 1024 * 1024
    max_connections: int = 64
    max_duration_seconds: float = 600.0
    allow_private: bool = False


_INT_FIELDS = ("max_body_bytes", "max_header_bytes", "max_response_bytes", "max_connections")
_FLOAT_FIELDS = ("timeout_seconds", "max_duration_seconds")
_FIELDS = frozenset(("allow", "listen", "log", "allow_private", *_INT_FIELDS, *_FLOAT_FIELDS))


def parse_config(raw: Any) -> Config:
    """Validate a decoded config object. Raises `ConfigError` naming the field."""
    if not isinstance(raw, dict):
        raise ConfigError("<root>", "must be a JSON object")
    for key in sorted(set(raw) - _FIELDS):
        raise ConfigError(key, f"unknown field (known: {', '.join(sorted(_FIELDS))})")
    allow = raw.get("allow")
    if not isinstance(allow, list) or not all(isinstance(item, str) for item in allow):
        raise ConfigError("allow", 'is required: a list of "host:port" strings')
    keys = set()
    for item in allow:
        try:
            host, port = split_hostport(item, None)
        except ValueError as exc:
            raise ConfigError("allow", f"{item!r}: {exc}") from None
        keys.add(hostport_key(host, port))
    values: dict[str, Any] = {"allow": frozenset(keys)}
    for name in ("listen", "log"):
        if name in raw:
            if not isinstance(raw[name], str) or not raw[name]:
                raise ConfigError(name, "must be a non-empty string")
            values[name] = raw[name]
    if "listen" in values:
        try:
            split_hostport(values["listen"], None, min_port=0)
        except ValueError as exc:
            raise ConfigError("listen", str(exc)) from None
    for name in _INT_FIELDS:
        if name in raw:
            value = raw[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, f"must be an integer >= 1, got {value!r}")
            values[name] = value
    for name in _FLOAT_FIELDS:
        if name in raw:
            value = raw[name]
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not value > 0
                or value != value
                or value == float("inf")
            ):
                raise ConfigError(name, f"must be a positive number of seconds, got {value!r}")
            values[name] = float(value)
    if "allow_private" in raw:
        if not isinstance(raw["allow_private"], bool):
            raise ConfigError("allow_private", "must be true or false")
        values["allow_private"] = raw["allow_private"]
    return Config(**values)


def load_config(path: str) -> Config:
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ConfigError("<file>", f"cannot read {path}: {exc}") from None
    return parse_config(raw)


# ---------------------------------------------------------------- addresses


def split_hostport(text: str, default_port: int | None, *, min_port: int = 1) -> tuple[str, int]:
    """`host:port` / `[v6]:port` / `host` (with a default) -> (lowercased host, port)."""
    if not text or len(text) > 300 or any(not 0x21 <= ord(c) <= 0x7E for c in text):
        raise ValueError("must be host:port in printable ASCII")
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError("unclosed '[' in an IPv6 literal")
        host, rest = text[1:end], text[end + 1 :]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv6 address") from None
        if rest and not rest.startswith(":"):
            raise ValueError("expected ':port' after ']'")
        port_text = rest[1:] if rest else None
    else:
        host, sep, port_text_ = text.rpartition(":")
        if not sep:
            host, port_text = text, None
        else:
            port_text = port_text_
        if ":" in host:
            raise ValueError("IPv6 literals must be bracketed: [addr]:port")
        host = host.lower()
        if not host or len(host) > 253 or not _NAME.match(host):
            raise ValueError(f"{host!r} is not a host name or address")
    if port_text is None:
        if default_port is None:
            raise ValueError("needs an explicit :port")
        return host.lower(), default_port
    if not port_text.isdigit() or len(port_text) > 5 or not min_port <= int(port_text) <= 65535:
        raise ValueError(f"port {port_text!r} must be {min_port}..65535")
    return host.lower(), int(port_text)


def hostport_key(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        addr = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def address_problem(
    addr: ipaddress.IPv4Address | ipaddress.IPv6Address, allow_private: bool
) -> str | None:
    """Why an address must not be dialled (None if it may)."""
    if addr.is_unspecified:
        return "unspecified"
    if addr.is_loopback:
        return "loopback"
    if addr.is_link_local:
        return "link-local"
    if addr.is_multicast:
        return "multicast"
    if addr.is_reserved:
        return "reserved"
    if isinstance(addr, ipaddress.IPv6Address) and (
        addr.sixtofour is not None or addr.teredo is not None
    ):
        return "tunnelled IPv4 (6to4/Teredo)"
    if not allow_private and (addr.is_private or not addr.is_global):
        return "private"
    return None


# ---------------------------------------------------------------- log


class RequestLog:
    """JSON lines, one per request, appended and flushed under a lock."""

    def __init__(self, path: str):
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        self._fh = os.fdopen(fd, "a", encoding="utf-8")
        self._lock = threading.Lock()
        self.broken = False

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=True, separators=(",", ":"), sort_keys=True)
        with self._lock:
            if self.broken:
                raise OSError("the request log is broken")
            try:
                self._fh.write(line + "\n")
                self._fh.flush()
            except (OSError, ValueError):
                self.broken = True
                raise

    def close(self) -> None:
        with self._lock:
            try:
                self._fh.flush()
                os.fsync(self._fh.fileno())
            except (OSError, ValueError):
                pass
            self._fh.close()


# ---------------------------------------------------------------- one request


class _Refuse(Exception):
    """Answer the client with `status` and a JSON error; `decision` is what the log says."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        decision: str = "deny",
        reason: str | None = None,
    ):
        super().__init__(message)
        self.status, self.code, self.message, self.decision = (
            status,
            code,
            message[:MAX_MESSAGE],
            decision,
        )
        self.reason = reason or code


class _Quiet(Exception):
    """The client went away before sending a request: nothing to answer or log."""


@dataclass
class _Head:
    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]
    rest: bytes  # bytes already received after the head

    def values(self, name: str) -> list[str]:
        return [v for k, v in self.headers if header_key(k) == name]


@dataclass
class _Record:
    client: str
    method: str | None = None
    host: str | None = None
    port: int | None = None
    path: str | None = None
    decision: str = "deny"
    reason: str = "incomplete"
    status: int | None = None
    bytes: int = 0
    bytes_up: int = 0
    started: float = field(default_factory=time.monotonic)


class Proxy:
    """The proxy's policy and I/O; `serve()` wraps it in a threading TCP server."""

    def __init__(self, config: Config, log: RequestLog):
        self.config = config
        self.log = log
        host, port = split_hostport(config.listen, None, min_port=0)
        self.listen_host, self.listen_port = host, port  # serve() sets the bound port
        self.own_names = frozenset({"localhost", socket.gethostname().lower()})

    # ---- entry points

    def handle(self, conn: socket.socket, addr: Any) -> None:
        record = _Record(client=_peer(addr))
        deadline = record.started + self.config.max_duration_seconds
        try:
            self._serve(conn, record, deadline)
        except _Quiet:
            return
        except _Refuse as refusal:
            record.decision, record.reason, record.status = (
                refusal.decision,
                refusal.reason,
                refusal.status,
            )
            record.bytes += self._answer_error(conn, refusal)
        except TimeoutError:  # the request's total time (max_duration_seconds) or an idle timeout
            record.reason = "time_limit"
            if record.status is None:
                record.status = 504
                record.bytes += self._answer_error(
                    conn,
                    _Refuse(
                        504,
                        "upstream_timeout",
                        "the request ran out of time",
                        decision=record.decision,
                    ),
                )
        except OSError:  # the client went away while we were answering
            record.reason = "client_gone"
        except Exception as exc:  # never let one connection take the proxy down
            record.reason = f"proxy_error:{type(exc).__name__}"[:64]
            if record.status is None:
                record.decision = "error" if record.decision != "allow" else "allow"
                record.status = 500
                record.bytes += self._answer_error(
                    conn, _Refuse(500, "proxy_error", "the egress proxy failed", decision="error")
                )
        self._log(record)

    def overloaded(self, conn: socket.socket, addr: Any) -> None:
        record = _Record(
            client=_peer(addr), decision="deny", reason="too_many_connections", status=503
        )
        conn.settimeout(OVERLOAD_SEND_SECONDS)
        refusal = _Refuse(
            503,
            "too_many_connections",
            f"the egress proxy serves at most {self.config.max_connections} connections",
        )
        record.bytes = self._answer_error(
            conn, refusal, linger=False
        )  # never stall the accept loop
        self._log(record)

    # ---- the request

    def _serve(self, conn: socket.socket, record: _Record, deadline: float) -> None:
        if self.log.broken:
            raise _Refuse(
                503,
                "log_unavailable",
                "the egress proxy cannot log requests, so it forwards none",
                decision="error",
            )
        head = self._read_head(conn, deadline)
        record.method = head.method[:32]
        if head.method == "CONNECT":
            host, port = self._connect_target(head, record)
            addresses = self._check(host, port, head, conn)
            record.decision, record.reason = "allow", "allowlisted"
            self._tunnel(conn, head, host, port, addresses, record, deadline)
        else:
            host, port, path = self._http_target(head, record)
            addresses = self._check(host, port, head, conn)
            record.decision, record.reason = "allow", "allowlisted"
            self._forward(conn, head, host, port, path, addresses, record, deadline)

    def _read_head(self, conn: socket.socket, deadline: float) -> _Head:
        limit = self.config.max_header_bytes
        buf = b""
        while True:
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(buf) > limit:
                raise _Refuse(431, "header_too_large", f"the request head is over {limit} bytes")
            conn.settimeout(self._io_timeout(deadline))
            try:
                chunk = conn.recv(RECV_BYTES)
            except TimeoutError:
                if not buf:
                    raise _Quiet() from None
                raise _Refuse(
                    408, "client_timeout", "the request head did not arrive in time"
                ) from None
            except OSError:
                raise _Quiet() from None
            if not chunk:
                if not buf:
                    raise _Quiet()
                raise _Refuse(
                    400, "bad_request", "the connection closed in the middle of the request head"
                )
            buf += chunk
        if end > limit:
            raise _Refuse(431, "header_too_large", f"the request head is over {limit} bytes")
        lines = buf[:end].split(b"\r\n")
        try:
            text = [line.decode("ascii") for line in lines]
        except UnicodeDecodeError:
            raise _Refuse(400, "bad_request", "the request head must be ASCII") from None
        parts = text[0].split(" ")
        if len(parts) != 3 or not _TOKEN.match(parts[0]) or not parts[1]:
            raise _Refuse(400, "bad_request", "malformed request line")
        method, target, version = parts
        if version not in ("HTTP/1.1", "HTTP/1.0"):
            raise _Refuse(505, "bad_request", "only HTTP/1.0 and HTTP/1.1 are spoken")
        if any(not 0x21 <= ord(c) <= 0x7E for c in target):
            raise _Refuse(
                400, "bad_request", "the request target must be printable ASCII without spaces"
            )
        headers: list[tuple[str, str]] = []
        for line in text[1:]:
            if not line or line[0] in " \t":
                raise _Refuse(400, "bad_request", "folded or empty header lines are refused")
            name, sep, value = line.partition(":")
            if not sep or not _TOKEN.match(name) or any(c in value for c in "\r\n\0"):
                raise _Refuse(400, "bad_request", "malformed header line")
            headers.append((name, value.strip(" \t")))
        _one_spelling(headers)
        return _Head(method.upper(), target, version, headers, buf[end + 4 :])

    def _connect_target(self, head: _Head, record: _Record) -> tuple[str, int]:
        try:
            host, port = split_hostport(head.target, 443)
        except ValueError as exc:
            raise _Refuse(400, "bad_request", f"CONNECT needs host:port: {exc}") from None
        record.host, record.port = host, port
        return host, port

    def _http_target(self, head: _Head, record: _Record) -> tuple[str, int, str]:
        target = head.target
        if target.startswith("/") or target == "*":
            record.path = target[:MAX_LOG_PATH]
            raise _Refuse(
                403,
                "egress_denied",
                "requests to the egress proxy itself are refused; send an absolute http:// URL",
                reason="proxy_self",
            )
        parts = urllib.parse.urlsplit(target)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.netloc:
            raise _Refuse(
                400,
                "bad_request",
                "the request target must be an absolute http:// URL (or use CONNECT)",
            )
        if scheme != "http":
            raise _Refuse(
                400,
                "unsupported_scheme",
                "only plain http:// is forwarded; use CONNECT host:443 for https",
            )
        if "@" in parts.netloc:
            raise _Refuse(400, "bad_request", "user information in the URL is refused")
        try:
            host, port = split_hostport(parts.netloc, _DEFAULT_PORT[scheme])
        except ValueError as exc:
            raise _Refuse(400, "bad_request", f"bad host in the URL: {exc}") from None
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        record.host, record.port, record.path = host, port, path[:MAX_LOG_PATH]
        return host, port, path

    # ---- policy

    def _check(
        self, host: str, port: int, head: _Head, conn: socket.socket
    ) -> list[tuple[Any, ...]]:
        """Allowlist, self and address checks; the socket addresses that may be dialled."""
        key = hostport_key(host, port)
        if key not in self.config.allow:
            raise _Refuse(
                403, "egress_denied", f"{key} is not on the allowlist", reason="not_allowlisted"
            )
        if any(VIA_TOKEN in value for value in head.values("via")):
            raise _Refuse(
                403,
                "egress_denied",
                "request loop: this request already passed the egress proxy",
                reason="proxy_self",
            )
        if port == self.listen_port and host in self.own_names:
            raise _Refuse(
                403, "egress_denied", f"{key} is the egress proxy itself", reason="proxy_self"
            )
        try:
            infos = socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
            )
        except (OSError, UnicodeError) as exc:
            raise _Refuse(
                502, "resolve_failed", f"cannot resolve {host}: {exc}", decision="deny"
            ) from None
        own = self._own_addresses(conn)
        addresses: list[tuple[Any, ...]] = []
        for family, _type, _proto, _canon, sockaddr in infos:
            addr = _ip(sockaddr[0])
            if addr is None:
                raise _Refuse(
                    403,
                    "egress_denied",
                    f"{host} resolved to an unusable address",
                    reason="forbidden_address",
                )
            if port == self.listen_port and (addr in own or addr.is_unspecified):
                raise _Refuse(
                    403, "egress_denied", f"{key} is the egress proxy itself", reason="proxy_self"
                )
            problem = address_problem(addr, self.config.allow_private)
            if problem is not None and hostport_key(str(addr), port) not in self.config.allow:
                raise _Refuse(
                    403,
                    "egress_denied",
                    f"{host} resolves to {problem} address {addr}, which is not on the allowlist"
                    " literally",
                    reason="forbidden_address",
                )
            if (family, sockaddr) not in addresses:
                addresses.append((family, sockaddr))
        if not addresses:
            raise _Refuse(502, "resolve_failed", f"{host} has no addresses", decision="deny")
        return addresses

    def _own_addresses(self, conn: socket.socket) -> set[Any]:
        own: set[Any] = set()
        for text in (self.listen_host, _sockname(conn)):
            addr = _ip(text) if text else None
            if addr is not None:
                own.add(addr)
        if any(a.is_unspecified for a in own):
            own |= {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")}
        return own

    # ---- upstream

    def _dial(self, addresses: list[tuple[Any, ...]], deadline: float) -> socket.socket:
        last: Exception | None = None
        for family, sockaddr in addresses:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.settimeout(self._io_timeout(deadline))
                sock.connect(sockaddr)
                return sock
            except OSError as exc:
                sock.close()
                last = exc
        if isinstance(last, (TimeoutError, socket.timeout)):
            raise _Refuse(
                504, "upstream_timeout", "connecting to the destination timed out", decision="allow"
            )
        raise _Refuse(
            502,
            "upstream_unreachable",
            f"cannot connect to the destination: {last}",
            decision="allow",
        )

    def _forward(
        self,
        conn: socket.socket,
        head: _Head,
        host: str,
        port: int,
        path: str,
        addresses: list[tuple[Any, ...]],
        record: _Record,
        deadline: float,
    ) -> None:
        body = self._read_body(conn, head, deadline)
        record.bytes_up = len(body)
        upstream = self._dial(addresses, deadline)
        client = http.client.HTTPConnection(host, port, timeout=self.config.timeout_seconds)
        client.sock = upstream
        try:
            try:
                client.putrequest(head.method, path, skip_host=True, skip_accept_encoding=True)
                client.putheader("Host", host if port == 80 else hostport_key(host, port))
                for name, value in _forwardable(head.headers):
                    client.putheader(name, value)
                if body or head.values("content-length"):
                    client.putheader("Content-Length", str(len(body)))
                client.putheader("Via", VIA)
                client.putheader("Connection", "close")
                upstream.settimeout(self._io_timeout(deadline))
                client.endheaders(body if body else None)
                response = client.getresponse()
            except (ValueError, http.client.InvalidURL) as exc:
                raise _Refuse(
                    400, "bad_request", f"the request cannot be forwarded: {exc}"
                ) from None
            except TimeoutError:
                raise _Refuse(
                    504,
                    "upstream_timeout",
                    "the destination did not answer in time",
                    decision="allow",
                ) from None
            except (http.client.HTTPException, OSError) as exc:
                raise _Refuse(
                    502,
                    "bad_upstream_response",
                    f"the destination's answer is unusable: {type(exc).__name__}",
                    decision="allow",
                ) from None
            self._relay_response(conn, response, upstream, record, deadline)
        finally:
            client.close()

    def _read_body(self, conn: socket.socket, head: _Head, deadline: float) -> bytes:
        if head.values("transfer-encoding"):
            raise _Refuse(
                411,
                "length_required",
                "chunked request bodies are not forwarded; send Content-Length",
            )
        lengths = {v.strip() for v in head.values("content-length")}
        if not lengths:
            return b""
        if len(lengths) != 1 or not next(iter(lengths)).isdigit():
            raise _Refuse(400, "bad_request", "Content-Length must be one decimal number")
        length = int(next(iter(lengths)))
        if length > self.config.max_body_bytes:
            raise _Refuse(
                413,
                "body_too_large",
                f"the request body is {length} bytes, over the {self.config.max_body_bytes}-byte"
                " limit",
            )
        if (
            any(v.strip().lower() == "100-continue" for v in head.values("expect"))
            and len(head.rest) < length
        ):
            self._send(conn, b"HTTP/1.1 100 Continue\r\n\r\n", deadline)
        body = bytearray(head.rest[:length])
        while len(body) < length:
            conn.settimeout(self._io_timeout(deadline))
            try:
                chunk = conn.recv(min(RECV_BYTES, length - len(body)))
            except TimeoutError:
                raise _Refuse(
                    408, "client_timeout", "the request body did not arrive in time"
                ) from None
            if not chunk:
                raise _Refuse(
                    400, "bad_request", "the connection closed in the middle of the request body"
                )
            body += chunk
        return bytes(body)

    def _relay_response(
        self,
        conn: socket.socket,
        response: http.client.HTTPResponse,
        upstream: socket.socket,
        record: _Record,
        deadline: float,
    ) -> None:
        method = record.method
        record.status = response.status
        connection_tokens = {
            header_key(t.strip())
            for k, v in response.headers.items()
            if header_key(k) == "connection"
            for t in v.split(",")
        }
        lines = [f"HTTP/1.1 {response.status} {_clean(response.reason)[:128]}"]
        for name, value in response.headers.items():
            lower = header_key(name)
            if lower in HOP_BY_HOP or lower in connection_tokens or lower.startswith("proxy-"):
                continue
            if not _TOKEN.match(name):
                continue
            lines.append(f"{name}: {_clean(value)}")
        if method == "HEAD" or response.status in (204, 304) or response.status < 200:
            lines += [
                f"Content-Length: {_clean(v)}"
                for v in response.headers.get_all("Content-Length", [])[:1]
            ]
        elif response.length is not None and not response.chunked:
            lines.append(f"Content-Length: {response.length}")
        lines += [f"Via: {VIA}", "Connection: close"]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
        self._send(conn, head, deadline)
        record.bytes += len(head)
        limit = self.config.max_response_bytes
        relayed = 0
        while True:
            timeout = self._io_timeout(deadline)
            if upstream.fileno() != -1:  # http.client closes it once the body is complete
                upstream.settimeout(timeout)
            try:
                chunk = response.read(RECV_BYTES)
            except TimeoutError:
                record.reason = "upstream_timeout"
                return
            except (http.client.HTTPException, OSError):
                record.reason = "bad_upstream_response"
                return
            if not chunk:
                return
            relayed += len(chunk)
            if relayed > limit:
                record.reason = "response_too_large"
                return
            self._send(conn, chunk, deadline)
            record.bytes += len(chunk)

    def _tunnel(
        self,
        conn: socket.socket,
        head: _Head,
        host: str,
        port: int,
        addresses: list[tuple[Any, ...]],
        record: _Record,
        deadline: float,
    ) -> None:
        upstream = self._dial(addresses, deadline)
        try:
            established = (
                b"HTTP/1.1 200 Connection established\r\nVia: " + VIA.encode() + b"\r\n\r\n"
            )
            self._send(conn, established, deadline)
            record.status = 200
            if head.rest:
                upstream.settimeout(self._io_timeout(deadline))
                upstream.sendall(head.rest)
                record.bytes_up += len(head.rest)
            self._pump(conn, upstream, record, deadline)
        finally:
            upstream.close()

    def _pump(
        self, conn: socket.socket, upstream: socket.socket, record: _Record, deadline: float
    ) -> None:
        """Relay both ways until both sides are done, the tunnel is idle too long or time is up."""
        peers = {conn: upstream, upstream: conn}
        open_readers = [conn, upstream]
        while open_readers:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                record.reason = "tunnel_time_limit"
                return
            readable, _, _ = select.select(
                open_readers, [], [], min(self.config.timeout_seconds, remaining)
            )
            if not readable:
                record.reason = (
                    "tunnel_idle_timeout"
                    if remaining > self.config.timeout_seconds
                    else "tunnel_time_limit"
                )
                return
            for sock in readable:
                try:
                    data = sock.recv(RECV_BYTES)
                except OSError:
                    data = b""
                other = peers[sock]
                if not data:
                    open_readers.remove(sock)
                    try:
                        other.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    continue
                other.settimeout(self._io_timeout(deadline))
                try:
                    other.sendall(data)
                except OSError:
                    return
                if sock is conn:
                    record.bytes_up += len(data)
                else:
                    record.bytes += len(data)

    # ---- helpers

    def _io_timeout(self, deadline: float) -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request's time is up")
        return min(self.config.timeout_seconds, remaining)

    def _send(self, conn: socket.socket, data: bytes, deadline: float) -> None:
        conn.settimeout(self._io_timeout(deadline))
        conn.sendall(data)

    def _answer_error(self, conn: socket.socket, refusal: _Refuse, *, linger: bool = True) -> int:
        body = json.dumps(
            {"error": {"code": refusal.code, "message": refusal.message}}, ensure_ascii=True
        ).encode()
        reason = http.client.responses.get(refusal.status, "Error")
        status_type = _PROXY_STATUS.get(
            refusal.reason, _PROXY_STATUS.get(refusal.code, "http_request_error")
        )
        head = (
            f"HTTP/1.1 {refusal.status} {reason}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"Proxy-Status: {VIA_TOKEN}; error={status_type}\r\n"
            "Connection: close\r\n\r\n"
        ).encode("ascii")
        try:
            if conn.gettimeout() is None or conn.gettimeout() > self.config.timeout_seconds:
                conn.settimeout(self.config.timeout_seconds)
            conn.sendall(head + body)
            if linger:
                _linger(conn)
        except OSError:
            return 0
        return len(head) + len(body)

    def _log(self, record: _Record) -> None:
        entry = {
            "ts": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
            "client": record.client,
            "method": record.method,
            "host": record.host[:MAX_LOG_FIELD] if record.host else record.host,
            "port": record.port,
            "path": record.path,
            "decision": record.decision,
            "reason": record.reason,
            "status": record.status,
            "bytes": record.bytes,
            "bytes_up": record.bytes_up,
            "ms": int((time.monotonic() - record.started) * 1000),
        }
        try:
            self.log.write(entry)
        except (OSError, ValueError) as exc:
            print(
                f"egress proxy: cannot write the request log: {exc}; refusing every request from"
                " now on",
                file=sys.stderr,
                flush=True,
            )


def _forwardable(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    named = {
        header_key(t.strip())
        for k, v in headers
        if header_key(k) == "connection"
        for t in v.split(",")
    }
    out = []
    for name, value in headers:
        lower = header_key(name)
        if lower in HOP_BY_HOP or lower in named or lower.startswith("proxy-"):
            continue
        out.append((name, value))
    return out


def _one_spelling(headers: list[tuple[str, str]]) -> None:
    """Refuse a head that spells a header this proxy filters with `_`, or two names that read
    alike but are spelled apart: a server that reads `_` as `-` would see a second framing
    or a second value where this proxy sees none (request smuggling)."""
    seen: dict[str, str] = {}
    for name, _value in headers:
        key, lower = header_key(name), name.lower()
        if "_" in name and (key in HOP_BY_HOP or key.startswith("proxy-")):
            raise _Refuse(
                400,
                "bad_request",
                f"header {name[:64]!r} is {key} to a server that reads '_' as '-'; refused as"
                " request smuggling",
            )
        if seen.setdefault(key, lower) != lower:
            raise _Refuse(
                400,
                "bad_request",
                f"headers {seen[key][:64]!r} and {lower[:64]!r} are one header to a server that"
                " reads '_' as '-'; send it once",
            )


def _linger(conn: socket.socket) -> None:
    """Half-close, then briefly drain what the client still sends, so that closing with
    unread bytes does not reset the connection before the client read our answer."""
    conn.shutdown(socket.SHUT_WR)
    conn.settimeout(LINGER_SECONDS)
    drained = 0
    try:
        while drained < LINGER_BYTES and (chunk := conn.recv(RECV_BYTES)):
            drained += len(chunk)
    except OSError:
        pass


def _clean(text: str) -> str:
    return "".join(c if 0x20 <= ord(c) < 0x7F or c == "\t" else " " for c in text)


def _peer(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return hostport_key(str(addr[0]), int(addr[1]))
    return str(addr)[:MAX_LOG_FIELD]


def _sockname(conn: socket.socket) -> str | None:
    try:
        name = conn.getsockname()
    except OSError:
        return None
    return str(name[0]) if isinstance(name, tuple) else None


# ---------------------------------------------------------------- server


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], family: int, proxy: Proxy):
        self.address_family = family
        self.proxy = proxy
        self.slots = threading.BoundedSemaphore(proxy.config.max_connections)
        super().__init__(address, socketserver.BaseRequestHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            try:
                self.proxy.overloaded(request, client_address)
            finally:
                self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        self.proxy.handle(request, client_address)


class Running:
    """A proxy serving in a background thread (what `serve` returns)."""

    def __init__(self, server: _Server, log: RequestLog):
        self._server, self._log = server, log
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="egress-proxy",
            daemon=True,
        )
        self._thread.start()
        self._stopped = False

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def shutdown(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        self._log.close()


def serve(config: Config) -> Running:
    """Bind, open the log and serve in a background thread. Port 0 picks a free port."""
    host, port = split_hostport(config.listen, None, min_port=0)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    log = RequestLog(config.log)
    try:
        proxy = Proxy(config, log)
        server = _Server((host, port), family, proxy)
    except BaseException:
        log.close()
        raise
    proxy.listen_port = int(server.server_address[1])
    return Running(server, log)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="egress-proxy", description="assure's allowlisting egress proxy"
    )
    parser.add_argument("--config", required=True, help="path of the JSON config")
    options = parser.parse_args(argv)
    try:
        config = load_config(options.config)
    except ConfigError as exc:
        print(f"egress proxy: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(_signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        running = serve(config)
    except OSError as exc:
        print(
            f"egress proxy: cannot start on {config.listen} / log {config.log}: {exc}",
            file=sys.stderr,
        )
        return 1
    host, port = running.address
    print(
        f"egress proxy: listening on {hostport_key(host, port)}, {len(config.allow)} allowed"
        " destination(s)",
        file=sys.stderr,
        flush=True,
    )
    while not stop.wait(1.0):
        pass
    running.shutdown()
    print("egress proxy: stopped", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
