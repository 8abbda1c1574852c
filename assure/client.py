"""The agent-side client of the gateway, and the `assure-tool` CLI for shell agents.

It runs inside the sealed agent container, whose only way out is the gateway's unix
socket, so it uses the standard library only: one kept-alive HTTP/1.1 connection over
that socket, JSON in and out, non-2xx answers raised as `GatewayError`.
"""

from __future__ import annotations

import functools
import json
import os
import socket
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

    def __init__(self, socket_path: str, *, timeout: float, connect_timeout: float):
        self.socket_path, self.timeout, self.connect_timeout = socket_path, timeout, connect_timeout
        self.sock: socket.socket | None = None
        self._buffer = bytearray()

    def connect(self) -> None:
        deadline = time.monotonic() + self.connect_timeout
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
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


@functools.cache
def _unix_http_connection() -> type:
    import http.client

    class UnixHTTPConnection(http.client.HTTPConnection):
        """An http.client connection to a unix socket, connecting as `Connection` does."""

        def __init__(self, socket_path: str, *, timeout: float, connect_timeout: float):
            super().__init__("localhost", timeout=timeout)
            self._unix = Connection(socket_path, timeout=timeout, connect_timeout=connect_timeout)

        def connect(self) -> None:
            self._unix.connect()
            self.sock = self._unix.sock

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
        self.socket_path = socket_path or os.environ.get(SOCKET_ENV, DEFAULT_SOCKET)
        self._conn = Connection(self.socket_path, timeout=timeout, connect_timeout=connect_timeout)

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/v1/health", None)

    def call(self, tool: str, /, **args: Any) -> dict[str, Any]:
        """Call `tool` with `args`; return the answer (`action_id`, `decision`, `result`)."""
        return self._request("POST", f"/v1/tools/{tool}", json.dumps(args).encode("utf-8"))

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


def _decode(status: int, raw: bytes) -> dict[str, Any]:
    try:
        answer = json.loads(raw)
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
            parsed: Any = json.loads(value)
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
            print(json.dumps(exc.answer, indent=2))
        print(f"assure-tool: {tool}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"assure-tool: cannot reach the gateway at {client.socket_path}: {exc}", file=sys.stderr
        )
        return 1
    print(json.dumps(answer, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
