"""The agent-side client of the gateway, and the `assure-tool` CLI for shell agents.

It runs inside the sealed agent container, whose only way out is the gateway's unix
socket, so it uses the standard library only: one kept-alive HTTP/1.1 connection over
that socket, JSON in and out, non-2xx answers raised as `GatewayError`.

Every `assure-tool` call is a fresh `python3 -S`, and its imports were most of its start: it
takes the C halves only (`_socket`, `_json`, `posix`, all already in the interpreter or one
shared object), not socket.py, json/ and os.py with the enum, re, functools, collections and
selectors they import.
"""

from __future__ import annotations

import _json
import _socket
import posix
import sys
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING: typing would be ~a tenth of an agent's first call
if TYPE_CHECKING:
    from typing import Any

DEFAULT_SOCKET = "/run/assure/gateway.sock"
SOCKET_ENV = "ASSURE_GATEWAY_SOCKET"
USAGE = """usage: assure-tool <tool> [key=value | key:=json | key=@file] ...
  key=value   a string argument
  key:=json   a JSON argument (numbers, booleans, objects): mode:=420 reversible:=true
  key=@file   a string argument read from a UTF-8 text file (a literal @text: key:='"@text"')
Prints the gateway's answer as JSON. Exit 0: allowed and done; 1: denied or failed; 2: usage.
The gateway socket is $ASSURE_GATEWAY_SOCKET (default /run/assure/gateway.sock)."""


def _not_json(value: object) -> object:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


# json.dumps's C encoder with its default settings (", ", ": ", ASCII, NaN allowed), built once;
# no table of containers against cycles (a cycle is a RecursionError, not a ValueError).
_ENCODE = _json.make_encoder(
    None, _not_json, _json.encode_basestring_ascii, None, ": ", ", ", False, False, True
)


_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _Decoding:
    """What json's C scanner reads of a decoder: json.loads's defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


_SCAN = _json.make_scanner(_Decoding())  # type: ignore[arg-type]  # typeshed: a scanner, not a context
_SPACE = " \t\n\r"  # JSON's whitespace, allowed around a document


def dumps(value: Any) -> str:
    """json.dumps(value), with the C encoder only."""
    return "".join(_ENCODE(value, 0))


def loads(text: str) -> Any:
    """json.loads(text) of a str, with the C scanner only (ValueError if it is not one JSON
    document)."""
    start = len(text) - len(text.lstrip(_SPACE))
    try:
        value, end = _SCAN(text, start)
    except StopIteration as exc:
        raise ValueError(f"Expecting value: char {exc.value}") from None
    if text[end:].strip(_SPACE):
        raise ValueError(f"Extra data: char {end}")
    return value


def pretty(value: Any, level: int = 0) -> str:
    """json.dumps(value, indent=2) of a decoded JSON value (string keys), without json's
    pure-Python encoder (the C one has no indent)."""
    inner = "\n" + "  " * (level + 1)
    if isinstance(value, dict) and value:
        items = (dumps(str(k)) + ": " + pretty(v, level + 1) for k, v in value.items())
        return "{" + inner + ("," + inner).join(items) + "\n" + "  " * level + "}"
    if isinstance(value, list) and value:
        items = (pretty(v, level + 1) for v in value)
        return "[" + inner + ("," + inner).join(items) + "\n" + "  " * level + "]"
    return dumps(value)


class GatewayError(Exception):
    """A non-2xx answer (or no answer) from the gateway."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        action_id: str | None = None,
        answer: dict[str, Any] | None = None,
    ):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.action_id = action_id
        self.answer = answer or {}


MAX_HEAD_BYTES = 64 * 1024  # an answer's status line and headers


class BadAnswer(OSError):
    """The gateway's bytes are not an HTTP/1.1 answer with a Content-Length body."""


class Connection:
    """HTTP/1.1 over the gateway's unix socket, one exchange at a time, kept alive; connecting
    retries until `connect_timeout`. Plain sockets: http.client (and the email parser it
    imports) would be ~65 ms of every agent's first call, and the gateway answers with
    Content-Length bodies only."""

    socket_type: Any = _socket.socket  # socket.socket for http.client (UnixHTTPConnection)

    def __init__(self, socket_path: str, *, timeout: float, connect_timeout: float):
        self.socket_path, self.timeout, self.connect_timeout = socket_path, timeout, connect_timeout
        self.sock: Any = None
        self._buffer = bytearray()

    def connect(self) -> None:
        deadline = time.monotonic() + self.connect_timeout
        while True:
            sock = self.socket_type(_socket.AF_UNIX, _socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(self.socket_path)
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)
                continue
            except BaseException:
                sock.close()
                raise
            self.sock, self._buffer = sock, bytearray()
            return

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def exchange(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        """Send one request, return (status, body). EOF before the answer's first byte is a
        ConnectionResetError (a kept-alive connection the gateway had closed)."""
        if self.sock is None:
            self.connect()
        assert self.sock is not None
        head = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        # The gateway may answer early (e.g. 413) and close before the body is sent: read that
        # answer.
        try:
            self.sock.sendall(head.encode("ascii") + b"\r\n" + (body or b""))
        except (BrokenPipeError, ConnectionResetError):
            pass
        status, headers = self._head()
        length = headers.get("content-length", "")
        if not length.isdigit():
            raise BadAnswer(f"the gateway's answer has no Content-Length (status {status})")
        raw = self._take(int(length))
        if "close" in headers.get("connection", "").lower():
            self.close()
        return status, raw

    def _head(self) -> tuple[int, dict[str, str]]:
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise BadAnswer("the gateway's answer headers are too long")
            if not self._fill():
                if not self._buffer:
                    raise ConnectionResetError(
                        "the gateway closed the connection without an answer"
                    )
                raise BadAnswer("the gateway's answer ended inside its headers")
        lines = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
        del self._buffer[: end + 4]
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise BadAnswer(f"not an HTTP/1.1 status line: {lines[0][:100]!r}")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(code), headers

    def _take(self, size: int) -> bytes:
        while len(self._buffer) < size:
            if not self._fill():
                raise BadAnswer(
                    f"the gateway's answer ended after {len(self._buffer)} of {size} bytes"
                )
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def _fill(self) -> bool:
        assert self.sock is not None
        chunk = self.sock.recv(65536)
        self._buffer += chunk
        return bool(chunk)


def __getattr__(name: str) -> Any:
    """`UnixHTTPConnection` (http.client over the socket, for probes that send raw requests),
    built on first use so that no agent pays http.client's import unless it asks for it."""
    if name == "UnixHTTPConnection":
        return _unix_http_connection()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_UNIX_HTTP: list[type] = []  # UnixHTTPConnection, once built


def _unix_http_connection() -> type:
    if _UNIX_HTTP:
        return _UNIX_HTTP[0]
    import http.client
    import socket

    class _PySocketConnection(Connection):
        socket_type = socket.socket  # http.client reads its answer through makefile()

    class UnixHTTPConnection(http.client.HTTPConnection):
        """An http.client connection to a unix socket, connecting as `Connection` does."""

        def __init__(self, socket_path: str, *, timeout: float, connect_timeout: float):
            super().__init__("localhost", timeout=timeout)
            self._unix = _PySocketConnection(
                socket_path, timeout=timeout, connect_timeout=connect_timeout
            )

        def connect(self) -> None:
            self._unix.connect()
            self.sock = self._unix.sock

    _UNIX_HTTP.append(UnixHTTPConnection)
    return UnixHTTPConnection


class Client:
    """Calls gateway tools over one kept-alive connection (reconnects once if it was dropped)."""

    def __init__(
        self,
        socket_path: str | None = None,
        *,
        connect_timeout: float = 10.0,
        timeout: float = 60.0,
    ):
        self.socket_path = socket_path or _environ(SOCKET_ENV) or DEFAULT_SOCKET
        self._conn = Connection(self.socket_path, timeout=timeout, connect_timeout=connect_timeout)

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/v1/health", None)

    def call(self, tool: str, /, **args: Any) -> dict[str, Any]:
        """Call `tool` with `args`; return the answer (`action_id`, `decision`, `result`)."""
        return self._request("POST", f"/v1/tools/{tool}", dumps(args).encode("utf-8"))

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, body: bytes | None) -> dict[str, Any]:
        reused = self._conn.sock is not None
        try:
            status, raw = self._exchange(method, path, body)
        except ConnectionError:
            if not reused:
                raise
            status, raw = self._exchange(
                method, path, body
            )  # the kept-alive connection had been closed
        return _decode(status, raw)

    def _exchange(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        try:
            return self._conn.exchange(method, path, body)
        except BaseException:
            self._conn.close()  # leave the connection reusable: the next request reconnects
            raise


def _environ(name: str) -> str | None:
    """os.environ.get(name) without os.py: the environment's bytes, decoded as os decodes them."""
    value = posix.environ.get(name.encode())
    return None if value is None else value.decode(sys.getfilesystemencoding(), "surrogateescape")


def _decode(status: int, raw: bytes) -> dict[str, Any]:
    try:
        answer = loads(raw.decode("utf-8"))
    except ValueError:
        raise GatewayError(
            status, "bad_answer", f"the gateway's answer is not JSON: {raw[:200]!r}"
        ) from None
    if not isinstance(answer, dict):
        raise GatewayError(status, "bad_answer", "the gateway's answer is not a JSON object")
    if not 200 <= status < 300:
        error = answer.get("error")
        if not isinstance(error, dict):
            error = {}
        code, message = str(error.get("code", "error")), str(error.get("message", ""))
        raise GatewayError(status, code, message, answer.get("action_id"), answer)
    return answer


class UsageError(Exception):
    """The command line is wrong (exit code 2)."""


def parse_args(argv: list[str]) -> tuple[str, dict[str, Any]]:
    """`<tool> key=value key:=json key=@file ...` -> (tool, args)."""
    if not argv or argv[0].startswith("-") or "=" in argv[0]:
        raise UsageError("the first argument must be a tool name, e.g. fs.read")
    args: dict[str, Any] = {}
    for item in argv[1:]:
        key, value = _parse_item(item)
        if key in args:
            raise UsageError(f"argument {key!r} given twice")
        args[key] = value
    return argv[0], args


def _parse_item(item: str) -> tuple[str, Any]:
    key, sep, value = item.partition("=")
    if not sep:
        raise UsageError(f"{item!r} is not key=value, key:=json or key=@file")
    if key.endswith(":"):
        key = key[:-1]
        try:
            parsed: Any = loads(value)
        except ValueError as exc:
            raise UsageError(f"{key}:= needs a JSON value ({exc})") from None
    elif value.startswith("@"):
        try:
            with open(value[1:], encoding="utf-8") as fh:
                parsed = fh.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{key}=@: cannot read {value[1:]!r} as UTF-8 text ({exc})") from None
    else:
        parsed = value
    if not key:
        raise UsageError(f"{item!r} has an empty key")
    return key, parsed


def main(argv: list[str] | None = None) -> int:
    """The `assure-tool` CLI. Returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    if argv in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    try:
        tool, args = parse_args(argv)
    except UsageError as exc:
        print(f"assure-tool: {exc}\n{USAGE}", file=sys.stderr)
        return 2
    client = Client()
    try:
        with client:
            answer = client.call(tool, **args)
    except GatewayError as exc:
        if exc.answer:
            print(pretty(exc.answer))
        print(f"assure-tool: {tool}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"assure-tool: cannot reach the gateway at {client.socket_path}: {exc}", file=sys.stderr
        )
        return 1
    print(pretty(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
