"""HTTP/1.1 + JSON on the gateway's unix socket: framing, limits, routing and lifecycle.

The peer is untrusted, so the HTTP layer is small and strict: Content-Length bodies only
(header names read with `_` as `-`, headers.py: `Content_Length` beside it is a duplicate),
bounded request line, headers and body, a deadline per request (not per read), a cap on
concurrent connections that answers 503 at once instead of queueing. Every refused
request gets a JSON error answer where possible and a `request_rejected` journal line,
and the server keeps serving. Keep-alive connections are reused until the client closes
or stays idle for `limits.idle_timeout_seconds`. The accept loop never takes the
dispatcher's lock (held for the whole of a tool call): connections it closes without an
answer are counted, and a helper thread journals them.
"""

from __future__ import annotations

import _json
import contextlib
import http
import json
import os
import selectors
import socket
import stat
import threading
import time
from collections.abc import Callable

from assure.core import atomic
from assure.core.record import asdict, dataclass, field
from assure.gateway import headers as header_names
from assure.gateway import jsonscan, tools
from assure.gateway.config import Config, Limits
from assure.gateway.dispatch import MODEL_ROUTES, Answer, Counters, Dispatcher
from assure.gateway.fspath import Workspace
from assure.gateway.overrides import OverrideWatcher

TYPE_CHECKING = False  # typing.TYPE_CHECKING; the gateway boots without typing (core/__init__)
if TYPE_CHECKING:
    from typing import Any

    from assure.gateway.idempotency import Store
    from assure.gateway.model import ModelProxy

REJECT_SLOTS = 4  # connections over the cap that are still read and answered 503
SHUTDOWN_JOIN_SECONDS = (
    1.0  # well inside the host's stop grace (3 s: sandbox.hardening.STOP_GRACE_SECONDS)
)
DROPS_BATCH_SECONDS = (
    0.2  # dropped connections are journaled at most this often, one line per reason
)
LISTEN_BACKLOG = 128
RECV_BYTES = 65536
TOOL_PREFIX = "/v1/tools/"
HEALTH = "/v1/health"
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class _Reject(Exception):
    """Refuse the current request with `status`; `close` drops the connection afterwards."""

    def __init__(self, status: int, code: str, message: str, *, close: bool = True):
        super().__init__(message)
        self.status, self.code, self.message, self.close = status, code, message, close


class _Timeout(Exception):
    """The request was not complete by its deadline."""


class _Closed(Exception):
    """The peer closed the connection in the middle of a request."""


@dataclass
class _Request:
    """One parsed HTTP request."""

    method: str = ""
    target: str = ""
    version: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    @property
    def keep_alive(self) -> bool:
        tokens = {t.strip().lower() for t in self.headers.get("connection", "").split(",")}
        if self.version == "HTTP/1.1":
            return "close" not in tokens
        return self.version == "HTTP/1.0" and "keep-alive" in tokens

    def detail(self) -> dict[str, str]:
        return {"method": self.method, "target": self.target}


class _Reader:
    """Buffered reads from one socket, each bounded by an absolute deadline."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._buf = bytearray()

    def wait(self, idle: float) -> bool:
        """Wait up to `idle` seconds for the next request to start; False once the peer is
        gone or stayed silent that long (the connection is then closed, nothing journaled)."""
        if self._buf:
            return True
        try:
            return self._fill(time.monotonic() + idle)
        except _Timeout:
            return False

    def line(self, limit: int, deadline: float, too_long: _Reject) -> bytes:
        """One line without its CRLF/LF, refused with `too_long` if longer than `limit` bytes."""
        start = 0
        while (end := self._buf.find(b"\n", start)) < 0:
            if len(self._buf) > limit:
                raise too_long
            start = len(self._buf)
            if not self._fill(deadline):
                raise _Closed
        if end + 1 > limit:
            raise too_long
        line = bytes(self._buf[:end])
        del self._buf[: end + 1]
        return line[:-1] if line.endswith(b"\r") else line

    def exact(self, size: int, deadline: float) -> bytes:
        while len(self._buf) < size:
            if not self._fill(deadline):
                raise _Closed
        data = bytes(self._buf[:size])
        del self._buf[:size]
        return data

    def _fill(self, deadline: float | None) -> bool:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Timeout
            self._sock.settimeout(left)
        try:
            data = self._sock.recv(RECV_BYTES)
        except TimeoutError:
            raise _Timeout from None
        except OSError:
            return False
        self._buf += data
        return bool(data)


def _read_request(
    reader: _Reader, sock: socket.socket, limits: Limits, deadline: float, req: _Request
) -> None:
    """Read one request into `req` (filled as far as it gets, for the journal)."""
    too_long = _Reject(414, "uri_too_long", f"request line is over {limits.max_header_bytes} bytes")
    while not (line := reader.line(limits.max_header_bytes, deadline, too_long)):
        pass  # blank lines before a request line are ignored (RFC 9112 section 2.2)
    _parse_request_line(line, req)
    req.headers = _read_headers(reader, limits.max_header_bytes, deadline)
    size = _body_size(req, limits.max_body_bytes)
    if size and req.headers.get("expect", "").lower() == "100-continue":
        sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
    req.body = reader.exact(size, deadline)


def _parse_request_line(line: bytes, req: _Request) -> None:
    try:
        method, target, version = line.decode("ascii").split(" ")
    except (UnicodeDecodeError, ValueError):
        raise _Reject(400, "bad_request", "malformed request line") from None
    if not method or not set(method) <= _TOKEN or not target.startswith("/"):
        raise _Reject(400, "bad_request", "malformed request line")
    req.method, req.target = method, target
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise _Reject(
            505, "http_version_not_supported", f"{version!r} is not supported; use HTTP/1.1"
        )
    req.version = version


def _read_headers(reader: _Reader, budget: int, deadline: float) -> dict[str, str]:
    headers: dict[str, str] = {}
    too_long = _Reject(431, "headers_too_large", f"request headers are over {budget} bytes")
    while line := reader.line(budget, deadline, too_long):
        budget -= len(line) + 2
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep or not name or not set(name) <= _TOKEN:
            raise _Reject(400, "bad_header", f"malformed header line {line[:64]!r}")
        name, value = (
            header_names.key(name),
            value.strip(" \t"),
        )  # `Content_Length` is Content-Length here too
        if name in headers and name in ("content-length", "transfer-encoding"):
            raise _Reject(400, "bad_header", f"duplicate {name} header (spelled with '-' or '_')")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


def _body_size(req: _Request, max_body: int) -> int:
    if "transfer-encoding" in req.headers:
        raise _Reject(
            400,
            "transfer_encoding_not_supported",
            "Transfer-Encoding (chunked) is not supported; send Content-Length",
        )
    length = req.headers.get("content-length")
    if length is None:
        if req.method == "POST":
            raise _Reject(411, "length_required", "POST needs a Content-Length header")
        return 0
    if not (length.isascii() and length.isdigit()) or len(length) > 18:
        raise _Reject(400, "bad_header", "Content-Length must be a decimal byte count")
    if int(length) > max_body:
        raise _Reject(
            413, "body_too_large", f"body of {int(length)} bytes is over the {max_body}-byte limit"
        )
    return int(length)


def _check_json(body: bytes, limits: Limits) -> None:
    """Refuse a body too deep or too big to parse safely, before parsing it (jsonscan.py)."""
    if (
        why := jsonscan.too_complex(body, limits.max_json_depth, limits.max_json_items)
    ) is not None:
        raise _Reject(400, "json_too_complex", f"body refused unparsed: {why}", close=False)


def _json_object(body: bytes, limits: Limits) -> dict[str, Any]:
    _check_json(body, limits)
    try:
        text = body.decode("utf-8")
        if text.startswith("\ufeff"):  # as json.loads refuses it
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        value = _DECODER.decode(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _Reject(400, "bad_json", f"body is not valid JSON: {exc}", close=False) from None
    if not isinstance(value, dict):
        raise _Reject(400, "bad_json", "body must be a JSON object", close=False)
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key in object")
    return out


# json.loads(..., object_pairs_hook=...) builds this decoder for every body; it keeps no state
_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)


_FRAMING = frozenset(
    ("content-type", "content-length", "connection", "transfer-encoding", "keep-alive")
)


def _encode(answer: Answer, close: bool) -> bytes:
    """Status line, headers and body; a raw answer (model.py) carries its Content-Type in
    `headers` (checked like any header: it came from upstream)."""
    if answer.raw is None:
        payload, content_type = _answer_json(answer.body), "application/json"
    else:
        payload = answer.raw
        content_type = next(
            (v for n, v in answer.headers if header_names.key(n) == "content-type"),
            "application/octet-stream",
        )
        if not _header_safe("Content-Type", content_type):
            content_type = "application/octet-stream"
    extra = "".join(
        f"{n}: {v}\r\n"
        for n, v in answer.headers
        if header_names.key(n) not in _FRAMING and _header_safe(n, v)
    )
    connection = "Connection: close\r\n" if close else ""
    head = (
        f"HTTP/1.1 {answer.status} {_phrase(answer.status)}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(payload)}\r\n{extra}{connection}\r\n"
    )
    return head.encode("latin-1") + payload


# json's C encoder with json.dumps(separators=(",", ":"))'s settings, built once, as the client's
# `_ENCODE` is: JSONEncoder.encode builds one (and a table of the objects it is in, against
# cycles) for every answer; an answer has no cycle.
_ANSWER_ENCODER = _json.make_encoder(
    None,
    json.JSONEncoder().default,
    _json.encode_basestring_ascii,
    None,
    ":",
    ",",
    False,
    False,
    True,
)


def _answer_json(body: dict[str, Any]) -> bytes:
    return "".join(_ANSWER_ENCODER(body, 0)).encode("ascii")


_PHRASES = {status.value: status.phrase for status in http.HTTPStatus}


def _phrase(status: int) -> str:
    """The reason phrase (an upstream may answer a status Python does not name, e.g. 529)."""
    return _PHRASES.get(status) or ("Overloaded" if status == 529 else "Status")


def _header_safe(name: str, value: str) -> bool:
    return (
        bool(name)
        and set(name) <= _TOKEN
        and all(c == "\t" or (" " <= c <= "\xff" and c != "\x7f") for c in value)
    )


class Gateway:
    """The gateway server: `start()` it, `shutdown()` it. Runs in the calling process."""

    def __init__(self, config: Config):
        self.config = config
        self._stopping = threading.Event()
        self._slots = threading.BoundedSemaphore(config.limits.max_connections)
        self._reject_slots = threading.BoundedSemaphore(REJECT_SLOTS)
        self._conns: dict[socket.socket, threading.Thread] = {}
        self._conns_lock = threading.Lock()
        self._shutdown_lock = threading.Lock()
        self._waker = socket.socketpair()
        self._acceptor: threading.Thread | None = None
        self._listener: socket.socket | None = None
        self._workspace: Workspace | None = None
        self._dispatcher: Dispatcher | None = None
        self._watcher: OverrideWatcher | None = None
        self._model: ModelProxy | None = None
        self._drops: dict[
            str, int
        ] = {}  # closed without an answer, by why: journaled by `_drop_journal`
        self._drops_lock = threading.Lock()
        self._drops_ready = threading.Event()
        self._drops_final = (
            threading.Event()
        )  # the acceptor has stopped: the next flush is the last
        self._drop_journal: threading.Thread | None = None

    @property
    def counters(self) -> Counters:
        return self._calls.counters

    @property
    def _calls(self) -> Dispatcher:
        if self._dispatcher is None:
            raise RuntimeError("the gateway was not started")
        return self._dispatcher

    def start(self, listener: socket.socket | None = None, store: Store | None = None) -> Gateway:
        """Open the workspace, the idempotency store (or take `store`) and the journal
        (`gateway_started`), bind the socket (or take `listener`, bound at `config.socket`:
        `bind`), start accepting, write the ready file. `listener` and `store` were made before
        the config came (a warm pool's gateway: gateway/__main__)."""
        self._listener = listener  # closed by `shutdown`, whatever fails from here
        try:
            workspace = Workspace(self.config.workspace)
            try:
                self._dispatcher = Dispatcher(self.config, workspace, store)
            except BaseException:
                workspace.close()
                raise
        except BaseException:
            for made in (self._listener, store):
                if made is not None:
                    made.close()
            raise
        self._workspace = workspace
        try:
            if self.config.model is not None:
                from assure.gateway import (
                    model,
                    # here, not at the top: http.client and its email parser cost ~0.1 s of every
                    # boot
                )

                self._model = model.ModelProxy(self.config, self._dispatcher)
            if self.config.control_dir:
                self._watcher = OverrideWatcher(
                    self.config.control_dir, self._dispatcher.apply_override, self._dispatcher.beat
                )
                self._watcher.apply()  # before the first call is accepted
            if self._listener is None:
                self._listener = bind(self.config.socket)
            self._acceptor = threading.Thread(
                target=self._accept_loop, args=(self._listener,), name="gateway-accept", daemon=True
            )
            self._acceptor.start()
            _write_ready(self.config)
            # each start waits until its thread runs, a scheduler's round on a loaded machine:
            # these two are not in the way of the first call, nor of the host's wait for ready
            if self._watcher is not None:
                self._watcher.start()
            self._drop_journal = threading.Thread(
                target=self._journal_drops, name="gateway-drops", daemon=True
            )
            self._drop_journal.start()
        except BaseException as exc:
            self.shutdown(reason=f"start failed: {exc}")
            raise
        return self

    def shutdown(self, reason: str = "shutdown") -> None:
        """Stop accepting, end open connections, journal `gateway_stopped`, close the journal."""
        with self._shutdown_lock:
            if self._stopping.is_set() or self._dispatcher is None or self._workspace is None:
                return
            self._stopping.set()
            if self._watcher is not None:
                self._watcher.stop()
            self._waker[1].send(b"x")
            if (
                self._acceptor is not None and self._acceptor.ident is not None
            ):  # a thread that never started (start failed) cannot be joined
                self._acceptor.join()
            if self._listener is not None:
                self._listener.close()
            self._drops_final.set()
            self._drops_ready.set()
            if self._drop_journal is not None and self._drop_journal.ident is not None:
                self._drop_journal.join()
            self._end_connections()
            try:
                self._dispatcher.close(reason)
            finally:
                self._workspace.close()
                for end in self._waker:
                    end.close()

    def _end_connections(self) -> None:
        """Close every connection and give their calls SHUTDOWN_JOIN_SECONDS in all to end, so
        the journal is closed (model calls still waiting on the upstream settled at their
        reservation, `gateway_stopped` written) within the host's stop grace."""
        with self._conns_lock:
            conns = list(self._conns.items())
        for sock, _ in conns:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + SHUTDOWN_JOIN_SECONDS
        for _, thread in conns:
            thread.join(max(deadline - time.monotonic(), 0))

    def _accept_loop(self, listener: socket.socket) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(listener, selectors.EVENT_READ)
            selector.register(self._waker[0], selectors.EVENT_READ)
            while not self._stopping.is_set():
                for key, _ in selector.select():
                    if key.fileobj is listener and not self._stopping.is_set():
                        self._accept(listener)

    def _accept(self, listener: socket.socket) -> None:
        try:
            sock, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # e.g. out of file descriptors: back off instead of spinning
            time.sleep(0.05)
            return
        if self._slots.acquire(blocking=False):
            self._spawn(sock, self._serve, self._slots)
        elif self._reject_slots.acquire(blocking=False):
            self._spawn(sock, self._refuse, self._reject_slots)
        else:
            sock.close()
            self._dropped("closed without an answer")

    def _spawn(
        self,
        sock: socket.socket,
        work: Callable[[socket.socket], None],
        slot: threading.BoundedSemaphore,
    ) -> None:
        thread = threading.Thread(target=self._run_connection, args=(sock, work, slot), daemon=True)
        with self._conns_lock:
            self._conns[sock] = thread
        try:
            thread.start()
        except RuntimeError:  # cannot start a thread: refuse rather than queue
            with self._conns_lock:
                del self._conns[sock]
            slot.release()
            sock.close()
            self._dropped("closed without an answer (no thread available)")

    def _dropped(self, why: str) -> None:
        """Count a connection the acceptor closed; never waits for the dispatcher."""
        with self._drops_lock:
            self._drops[why] = self._drops.get(why, 0) + 1
        self._drops_ready.set()

    def _journal_drops(self) -> None:
        """Journal the dropped connections, one line per reason and batch (a flood of
        connections becomes a few lines, not one each), until the acceptor has stopped."""
        while True:
            self._drops_ready.wait()
            self._drops_final.wait(
                DROPS_BATCH_SECONDS
            )  # let a flood gather into one batch (shutdown ends the wait)
            self._drops_ready.clear()
            final = self._drops_final.is_set()
            with self._drops_lock:
                drops, self._drops = self._drops, {}
            for why, count in drops.items():
                self._calls.count_request(count)  # each one counts against the request budget
                self._over_capacity(_Request(), f"{count} {why}")
            if final:
                return

    def _run_connection(
        self,
        sock: socket.socket,
        work: Callable[[socket.socket], None],
        slot: threading.BoundedSemaphore,
    ) -> None:
        try:
            work(sock)
        finally:
            sock.close()
            slot.release()  # before leaving _conns: one counted gone may be replaced at once
            with self._conns_lock:
                self._conns.pop(sock, None)

    def _serve(self, sock: socket.socket) -> None:
        reader = _Reader(sock)
        while not self._stopping.is_set() and reader.wait(self.config.limits.idle_timeout_seconds):
            if not self._one_request(sock, reader):
                return

    def _one_request(self, sock: socket.socket, reader: _Reader) -> bool:
        """Read, answer and journal one request; return whether to keep the connection."""
        if (spent := self._calls.count_request()) is not None:
            self._send(sock, spent, True)  # the request budget is spent: not read, not journaled
            return False
        limits = self.config.limits
        req = _Request()
        try:
            _read_request(reader, sock, limits, time.monotonic() + limits.read_timeout_seconds, req)
            answer, close = self._route(req), not req.keep_alive
        except _Reject as exc:
            answer = self._calls.reject(exc.status, exc.code, exc.message, **req.detail())
            close = exc.close or not req.keep_alive
        except _Timeout:
            message = (
                f"request not complete within {limits.read_timeout_seconds}s; connection closed"
            )
            answer, close = self._calls.reject(408, "read_timeout", message, **req.detail()), True
        except _Closed:
            self._calls.reject(
                400,
                "incomplete_request",
                "client closed the connection mid-request",
                **req.detail(),
            )
            return False
        except Exception as exc:  # fail closed: answer 500, keep the server up
            answer = self._calls.reject(
                500, "internal_error", f"gateway error: {type(exc).__name__}", **req.detail()
            )
            close = True
        return self._send(sock, answer, close) and not close

    def _route(self, req: _Request) -> Answer:
        path = req.target.split("?", 1)[0]
        if path == HEALTH:
            _require_method(req, "GET")
            return Answer(200, self._health())
        if path in MODEL_ROUTES:
            endpoint, query = MODEL_ROUTES[path], req.target.partition("?")[2]
            _require_method(req, "GET" if endpoint == "models" else "POST")
            if endpoint != "models":
                _check_json(req.body, self.config.limits)
            if self._model is None:
                from assure.gateway import model

                return model.unavailable(self._calls, endpoint)
            return self._model.handle(endpoint, req.headers, query, req.body)
        tool = tools.BY_NAME.get(path[len(TOOL_PREFIX) :]) if path.startswith(TOOL_PREFIX) else None
        if tool is None:
            code = "unknown_tool" if path.startswith(TOOL_PREFIX) else "not_found"
            raise _Reject(404, code, f"no such route or tool: {path[:128]!r}", close=False)
        _require_method(req, "POST")
        return self._calls.call(tool, _json_object(req.body, self.config.limits))

    def _health(self) -> dict[str, Any]:
        described = [
            {
                "name": t.name,
                "mutates": t.mutates,
                "params": {
                    n: {"type": k.__name__, "required": r} for n, (k, r) in t.params.items()
                },
                "summary": t.summary,
            }
            for t in tools.TOOLS
            if t.listed
        ]
        return {
            "status": "ok",
            "run_id": self.config.run_id,
            "attempt": self.config.attempt,
            "tools": described,
            "limits": asdict(self.config.limits),
            "model": None if self._model is None else self._model.describe(),
        }

    def _refuse(self, sock: socket.socket) -> None:
        """Read the request of a connection over the cap (so the client sees the answer), answer
        503."""
        self._calls.count_request()
        req = _Request()
        with contextlib.suppress(_Reject, _Timeout, _Closed, OSError):
            limits = self.config.limits
            _read_request(
                _Reader(sock), sock, limits, time.monotonic() + limits.read_timeout_seconds, req
            )
        self._send(sock, self._over_capacity(req, "answered 503"), True)

    def _over_capacity(self, req: _Request, what: str) -> Answer:
        message = f"more than {self.config.limits.max_connections} concurrent connections; {what}"
        return self._calls.reject(503, "too_many_connections", message, **req.detail())

    def _send(self, sock: socket.socket, answer: Answer, close: bool) -> bool:
        """Send an answer; a client that does not take it within the read timeout is dropped."""
        try:
            sock.settimeout(self.config.limits.read_timeout_seconds)
            sock.sendall(_encode(answer, close))
            if close:
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            return False
        return True


def _require_method(req: _Request, method: str) -> None:
    if req.method != method:
        raise _Reject(
            405,
            "method_not_allowed",
            f"{req.target[:128]!r} takes {method}, not {req.method}",
            close=False,
        )


def bind(path: str) -> socket.socket:
    """Bind a fresh listening socket at `path` (a stale socket file is replaced), mode 0o666.
    Connections wait in its backlog until the gateway accepts them, once its journal is open."""
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise FileExistsError(f"{path} exists and is not a socket; refusing to replace it")
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)
        os.chmod(path, 0o666)
        listener.listen(LISTEN_BACKLOG)
        listener.setblocking(False)
    except BaseException:
        listener.close()
        raise
    return listener


def _write_ready(config: Config) -> None:
    """Publish the ready file whole: the host polls for it (a signal, not a record: not fsynced)."""
    atomic.write_json(
        config.ready_file,
        {
            "run_id": config.run_id,
            "attempt": config.attempt,
            "pid": os.getpid(),
            "socket": config.socket,
        },
        indent=None,
        sync=False,
    )


def serve(
    config: Config, listener: socket.socket | None = None, store: Store | None = None
) -> Gateway:
    """Start a gateway for `config` in this process and return it (call `.shutdown()` to stop);
    `listener` and `store`: its socket and idempotency store, already open at the config's
    places (`Gateway.start`)."""
    return Gateway(config).start(listener, store)
