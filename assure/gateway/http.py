"""The `http.request` tool: outbound HTTP for the agent, through the egress proxy only.

The gateway refuses on its own, before any socket is opened: schemes other than http and
https, URLs with user information, `host:port`s that are not on the run's allowlist, and
IP literals that are loopback, link-local (incl. 169.254.169.254), private (incl. the
Docker host), unique-local, unspecified, multicast or reserved, unless the allowlist names
that exact literal. Non-canonical IPv4 forms (`127.1`, `0x7f000001`, `017700000001`) are
always refused. Names are never resolved here: the gateway's only network peer is the
proxy, which resolves, checks the addresses again and enforces the same allowlist.

Plain http goes to the proxy as an absolute-form request; https is a `CONNECT` tunnel
through the proxy with TLS (certificate checked against the URL's host) end to end.
A safe method (GET, HEAD, OPTIONS) has no effect the gate judges, so it may not carry one:
a body, or a `_method` query parameter, is refused. Method-override headers
(`X-HTTP-Method-Override`, `X-HTTP-Method`, `X-Method-Override` and any other name ending in
`-method` or holding `method-override`) are dropped whatever the method, so the upstream
acts on the method the gate decided on; the journal lists what was dropped.
Hop-by-hop, `Proxy-*`, `Host`, `Content-Length` and `Expect` headers from the agent are
dropped too; the gateway adds no credentials of its own (an `Authorization` header is sent
only if the agent set it). Names are compared as a server may read them (`headers.key`: `_`
is `-`), and two spellings are not let through where one is dropped: the call is refused
(400) if it spells one of those dropped headers with `_` (`Content_Length`, which no client
library sends and which a CGI-style upstream reads as a second Content-Length: smuggling),
or would send two names that read alike (`X-Forwarded-For` beside `X_Forwarded_For`: the
upstream picks one). A method override is dropped whatever its spelling. The response body
is capped at `Egress.max_response_bytes` (`truncated` says so) and the whole exchange at
`DEADLINE_SECONDS`.

Standard library only (this module runs inside the gateway image). Errors are `Refused`
with a code from the tool registry's STATUS table; tools.py turns them into `ToolError`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import http.client
import ipaddress
import json
import re
import socket
import ssl
import time
import urllib.parse
from typing import TYPE_CHECKING, Any

from assure.core.effects import Op
from assure.core.record import dataclass
from assure.gateway import headers as header_names

if TYPE_CHECKING:
    from assure.gateway.egress import Egress

MAX_URL_CHARS = 4096
MAX_HEADERS = 64
MAX_HEADER_BYTES = 16 * 1024
MAX_RESPONSE_HEADERS = 100
MAX_JOURNAL_URL = 512
TIMEOUT_SECONDS = 15.0  # any one connect, read or write
DEADLINE_SECONDS = 30.0  # the whole exchange
READ_BYTES = 65536

SAFE_METHODS = frozenset(("GET", "HEAD", "OPTIONS"))
METHODS = SAFE_METHODS | frozenset(("POST", "PUT", "PATCH", "DELETE"))
DEFAULT_PORTS = {"http": 80, "https": 443}
DROPPED_HEADERS = frozenset(
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
    )
)
HIDDEN_RESPONSE_HEADERS = frozenset(
    ("connection", "keep-alive", "transfer-encoding", "trailer", "upgrade", "via")
)
PROXY_STATUS_TOKEN = "assure-egress"

_METHOD_OVERRIDE = re.compile(r"(^|-)method$|method-override")  # lowercased header names
_METHOD_PARAM = re.compile(
    r"(^|[&;])_method=", re.IGNORECASE
)  # matched on the percent-decoded query
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_NAME = re.compile(r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*$")
_NUMERIC_ISH = re.compile(r"^[0-9a-fx.]+$")
_TUNNEL_FAILED = re.compile(r"Tunnel connection failed: (\d{3})")


class Refused(Exception):
    """The call cannot be carried out; `code` is a key of the registry's STATUS table."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Target:
    method: str
    scheme: str
    host: str  # lowercased; IPv6 without brackets
    port: int
    path: str  # origin-form: path + query, never empty
    literal: ipaddress.IPv4Address | ipaddress.IPv6Address | None

    @property
    def key(self) -> str:
        """`host:port` as the allowlist spells it."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def authority(self) -> str:
        """The Host header: the port only when it is not the scheme's default."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.authority}{self.path}"


# ---------------------------------------------------------------- registry hooks


def mutating(args: dict[str, Any]) -> bool:
    """GET / HEAD / OPTIONS are safe; any other (or missing, or odd) method is an external
    effect."""
    method = args.get("method")
    return not (isinstance(method, str) and method.upper() in SAFE_METHODS)


def scope(_env: Any, args: dict[str, Any]) -> tuple[str, str]:
    """(`http:<host>:<port>`, `external`). Raises `Refused('bad_args')` for an unusable URL."""
    target = parse_target(args)
    return f"http:{target.key}", "external"


# ---------------------------------------------------------------- checks


def parse_target(args: dict[str, Any]) -> Target:
    """Method and URL, checked and normalized. Raises `Refused('bad_args')`."""
    method = args.get("method")
    if not isinstance(method, str) or method.upper() not in METHODS:
        raise Refused("bad_args", f"'method' must be one of {', '.join(sorted(METHODS))}")
    url = args.get("url")
    if not isinstance(url, str) or not url:
        raise Refused("bad_args", "'url' must be an absolute http:// or https:// URL")
    if len(url) > MAX_URL_CHARS:
        raise Refused("bad_args", f"'url' is over {MAX_URL_CHARS} characters")
    if any(not 0x21 <= ord(c) <= 0x7E for c in url) or "\\" in url:
        raise Refused(
            "bad_args",
            "'url' must be printable ASCII without spaces or backslashes; percent-encode the rest",
        )
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise Refused("bad_args", f"scheme {scheme or '(none)'!r} is refused: only http and https")
    if not parts.netloc:
        raise Refused("bad_args", "'url' has no host")
    if "@" in parts.netloc:
        raise Refused(
            "bad_args",
            "user information in the URL is refused; send an Authorization header instead",
        )
    try:
        port = parts.port
    except ValueError:
        raise Refused("bad_args", "the URL's port must be 1..65535") from None
    host = parts.hostname or ""
    if port == 0:
        raise Refused("bad_args", "the URL's port must be 1..65535")
    literal = _literal(host, parts.netloc)
    if literal is None and (len(host) > 253 or not _NAME.match(host)):
        raise Refused(
            "bad_args",
            f"{host[:64]!r} is not a valid host name (use punycode for international names)",
        )
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    if method.upper() in SAFE_METHODS:
        _nothing_to_judge(method.upper(), args, parts.query)
    return Target(method.upper(), scheme, host, port or DEFAULT_PORTS[scheme], path, literal)


def _nothing_to_judge(method: str, args: dict[str, Any], query: str) -> None:
    """A safe method is allowed without a contract: it must not smuggle an effect in."""
    if "body" in args or "body_b64" in args:
        raise Refused(
            "bad_args",
            f"a {method} request carries no body (a body on a safe method is an effect the gate"
            " never judged); use POST, PUT or PATCH",
        )
    if _METHOD_PARAM.search(
        urllib.parse.unquote_plus(query)
    ):  # a server decodes `%5Fmethod` before it reads it
        raise Refused(
            "bad_args",
            f"a {method} URL may not carry a `_method` parameter (a method override); send the"
            " method itself",
        )


def _literal(host: str, netloc: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address a host names literally (None for names). Odd IPv4 forms are refused."""
    if netloc.startswith("["):
        if "%" in host:
            raise Refused("bad_args", "IPv6 zone identifiers are refused")
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            raise Refused("bad_args", f"{host[:64]!r} is not an IPv6 address") from None
    try:
        return ipaddress.IPv4Address(host)
    except ValueError:
        pass
    if _NUMERIC_ISH.match(host):
        try:
            packed = socket.inet_aton(host)  # parses only; never resolves
        except OSError:
            return None
        canonical = ipaddress.IPv4Address(packed)
        raise Refused(
            "egress_denied",
            f"{host[:64]!r} is a non-canonical spelling of {canonical}; IP literals must be dotted"
            " quads",
        )
    return None


def address_problem(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why an IP literal is refused unless allowlisted literally (None: an ordinary public
    address)."""
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if addr.is_unspecified:
        return "an unspecified"
    if addr.is_loopback:
        return "a loopback"
    if addr.is_link_local:
        return "a link-local (cloud metadata)" if str(addr) == "169.254.169.254" else "a link-local"
    if addr.is_multicast:
        return "a multicast"
    if addr.is_reserved:
        return "a reserved"
    if isinstance(addr, ipaddress.IPv6Address) and (
        addr.sixtofour is not None or addr.teredo is not None
    ):
        return "a tunnelled-IPv4"
    if addr.is_private or not addr.is_global:
        return "a private"
    return None


def check(egress: Egress, target: Target) -> None:
    """The gateway's own refusals (before any socket). Raises `Refused('egress_denied')`."""
    allowed = target.key in egress.allow
    if target.literal is not None and not allowed:
        problem = address_problem(target.literal)
        if problem is not None:
            raise Refused(
                "egress_denied",
                f"{target.host} is {problem} address; refused unless the allowlist names"
                f" {target.key} exactly",
            )
    if not allowed:
        raise Refused("egress_denied", f"{target.key} is not on the allowlist")


def _headers(args: dict[str, Any]) -> tuple[list[tuple[str, str]], list[str]]:
    """(the headers to send, the lowercased names of method overrides dropped)."""
    raw = args.get("headers", {})
    if not isinstance(raw, dict):
        raise Refused("bad_args", "'headers' must be an object of string names to string values")
    if len(raw) > MAX_HEADERS:
        raise Refused("bad_args", f"at most {MAX_HEADERS} headers")
    out: list[tuple[str, str]] = []
    overrides: list[str] = []
    seen: dict[str, str] = {}
    size = 0
    for name, value in raw.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise Refused("bad_args", "'headers' must map string names to string values")
        if not _TOKEN.match(name):
            raise Refused("bad_args", f"header name {name[:64]!r} is not a valid token")
        if any(c in value for c in "\r\n\0") or any(ord(c) > 0xFF for c in value):
            raise Refused("bad_args", f"header {name!r} has a control or non-Latin-1 character")
        size += len(name) + len(value) + 4
        key = header_names.key(name)
        if _METHOD_OVERRIDE.search(key):
            overrides.append(name.lower())
            continue
        if key in DROPPED_HEADERS or key.startswith("proxy-"):
            if "_" in name:
                raise Refused(
                    "bad_args",
                    f"header {name[:64]!r} is {key} to a server that reads '_' as '-' (request"
                    " smuggling); the gateway frames the request itself",
                )
            continue
        if (
            seen.setdefault(key, name.lower()) != name.lower()
        ):  # one header twice in two cases is plain HTTP
            raise Refused(
                "bad_args",
                f"headers {seen[key][:64]!r} and {name[:64]!r} are one header to a server that"
                " reads '_' as '-'; send it once",
            )
        out.append((name, value))
    if size > MAX_HEADER_BYTES:
        raise Refused("bad_args", f"the headers are over {MAX_HEADER_BYTES} bytes")
    return out, sorted(set(overrides))


def _body(args: dict[str, Any], limit: int) -> bytes | None:
    if "body" in args and "body_b64" in args:
        raise Refused("bad_args", "send at most one of 'body' (UTF-8 text) or 'body_b64' (base64)")
    if "body" in args:
        try:
            data = str(args["body"]).encode("utf-8")
        except UnicodeEncodeError:
            raise Refused(
                "bad_args", "'body' is not valid UTF-8 text; send bytes as 'body_b64'"
            ) from None
    elif "body_b64" in args:
        try:
            data = base64.b64decode(str(args["body_b64"]), validate=True)
        except (binascii.Error, ValueError):
            raise Refused("bad_args", "'body_b64' is not valid base64") from None
    else:
        return None
    if len(data) > limit:
        raise Refused(
            "too_large", f"the request body is {len(data)} bytes, over the {limit}-byte limit"
        )
    return data


# ---------------------------------------------------------------- the request


def request(egress: Egress | None, args: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Carry out one call: (the answer's result, the journal record). Raises `Refused`."""
    if egress is None:
        raise Refused("no_egress", "this run has no egress")
    target = parse_target(args)
    check(egress, target)
    headers, overrides = _headers(args)
    body = _body(args, egress.max_request_bytes)
    deadline = time.monotonic() + DEADLINE_SECONDS
    conn = _connection(egress, target)
    try:
        status, reason_headers, data, truncated = _exchange(
            conn, target, headers, body, deadline, egress.max_response_bytes
        )
    finally:
        conn.close()
    result: dict[str, Any] = {"status": status, "headers": reason_headers, "truncated": truncated}
    text = _text(data, truncated)
    if text is not None:
        result["body"] = text
    else:
        result["body_b64"] = base64.b64encode(data).decode("ascii")
    summary = {
        "op": Op.HTTP,
        "method": target.method,
        "url": target.url[:MAX_JOURNAL_URL],
        "scope": f"http:{target.key}",
        "status": status,
        "request_sha256": hashlib.sha256(body or b"").hexdigest(),
        "request_bytes": len(body or b""),
        "response_sha256": hashlib.sha256(data).hexdigest(),
        "response_bytes": len(data),
        "truncated": truncated,
        "header_names": sorted({name.lower() for name, _ in headers}),
        "dropped_method_overrides": overrides,
    }
    # A safe method has no effect to attribute; it is journaled as what left, not as an effect.
    return result, ({"effect": summary} if mutating(args) else {"egress": summary})


def _connection(egress: Egress, target: Target) -> http.client.HTTPConnection:
    if target.scheme == "https":
        context = ssl.create_default_context()
        conn = http.client.HTTPSConnection(
            egress.proxy_host, egress.proxy_port, timeout=TIMEOUT_SECONDS, context=context
        )
        conn.set_tunnel(target.host, target.port)
        return conn
    return http.client.HTTPConnection(egress.proxy_host, egress.proxy_port, timeout=TIMEOUT_SECONDS)


def _exchange(
    conn: http.client.HTTPConnection,
    target: Target,
    headers: list[tuple[str, str]],
    body: bytes | None,
    deadline: float,
    limit: int,
) -> tuple[int, dict[str, str], bytes, bool]:
    # http: the proxy gets the absolute URL; https: the tunnel is to the target, so origin-form.
    request_target = target.url if target.scheme == "http" else target.path
    try:
        conn.putrequest(target.method, request_target, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", target.authority)
        for name, value in headers:
            conn.putheader(name, value)
        if body is not None or target.method in ("POST", "PUT", "PATCH"):
            conn.putheader("Content-Length", str(len(body or b"")))
        conn.putheader("Connection", "close")
        conn.endheaders(body)
        sock = conn.sock  # http.client drops conn.sock once the answer says Connection: close
        _tighten(sock, deadline)
        response = conn.getresponse()
        status = response.status
        response_headers = _response_headers(response)
        if _from_proxy(response):
            raise _proxy_refusal(response)
        data, truncated = _read(sock, response, deadline, limit)
    except Refused:
        raise
    except ssl.SSLCertVerificationError as exc:
        raise Refused(
            "upstream_error", f"TLS certificate of {target.host} not accepted: {exc.verify_message}"
        ) from None
    except TimeoutError:
        raise Refused(
            "upstream_timeout", f"{target.key} did not answer within {DEADLINE_SECONDS:g}s"
        ) from None
    except OSError as exc:
        raise _connect_refusal(exc, target) from None
    except (http.client.HTTPException, ValueError) as exc:
        raise Refused(
            "upstream_error", f"the answer from {target.key} is unusable: {type(exc).__name__}"
        ) from None
    return status, response_headers, data, truncated


def _tighten(sock: socket.socket | None, deadline: float) -> None:
    """Each read gets at most what is left of the deadline (and at most TIMEOUT_SECONDS)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("deadline")
    if sock is not None and sock.fileno() != -1:  # closed once the body is complete
        sock.settimeout(min(TIMEOUT_SECONDS, remaining))


def _read(
    sock: socket.socket | None, response: http.client.HTTPResponse, deadline: float, limit: int
) -> tuple[bytes, bool]:
    data = bytearray()
    while len(data) <= limit:
        _tighten(sock, deadline)
        chunk = response.read(min(READ_BYTES, limit + 1 - len(data)))
        if not chunk:
            return bytes(data), False
        data += chunk
    return bytes(data[:limit]), True


def _response_headers(response: http.client.HTTPResponse) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in list(response.headers.items())[:MAX_RESPONSE_HEADERS]:
        lower, key = name.lower(), header_names.key(name)
        if key in HIDDEN_RESPONSE_HEADERS or key.startswith("proxy-"):
            continue
        value = " ".join(value.split())
        out[lower] = f"{out[lower]}, {value}" if lower in out else value
    return out


def _from_proxy(response: http.client.HTTPResponse) -> bool:
    """An answer the egress proxy made itself (it strips this header from upstream answers)."""
    return response.status >= 400 and any(
        v.strip().startswith(PROXY_STATUS_TOKEN)
        for v in response.headers.get_all("Proxy-Status", [])
    )


def _proxy_refusal(response: http.client.HTTPResponse) -> Refused:
    try:
        error = json.loads(response.read(8192)).get("error", {})
        code, message = str(error.get("code", "")), str(error.get("message", ""))[:512]
    except (ValueError, AttributeError, OSError, http.client.HTTPException):
        code, message = "", ""
    message = message or f"the egress proxy answered {response.status}"
    if response.status == 403 or code == "egress_denied":
        return Refused("egress_denied", f"egress proxy: {message}")
    if response.status == 504 or code == "upstream_timeout":
        return Refused("upstream_timeout", f"egress proxy: {message}")
    return Refused("upstream_error", f"egress proxy ({code or response.status}): {message}")


def _connect_refusal(exc: OSError, target: Target) -> Refused:
    match = _TUNNEL_FAILED.search(str(exc))
    if match:  # the proxy refused the CONNECT (http.client does not expose its body)
        code = int(match.group(1))
        if code == 403:
            return Refused(
                "egress_denied", f"egress proxy refused the tunnel to {target.key} (403)"
            )
        if code == 504:
            return Refused("upstream_timeout", f"egress proxy: {target.key} did not answer (504)")
        return Refused(
            "upstream_error", f"egress proxy could not open a tunnel to {target.key} ({code})"
        )
    if isinstance(exc, ssl.SSLError):
        return Refused(
            "upstream_error", f"TLS with {target.host} failed: {exc.reason or type(exc).__name__}"
        )
    return Refused(
        "upstream_error",
        f"cannot reach {target.key} through the egress proxy: {type(exc).__name__}",
    )


def _text(data: bytes, truncated: bool) -> str | None:
    """The body as text if it is UTF-8 (a truncation may cut the last character: trimmed)."""
    for cut in range(4 if truncated else 1):
        try:
            return data[: len(data) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None
