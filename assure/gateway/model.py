"""Model access for the agent: `POST /v1/messages` and `POST /v1/messages/count_tokens`,
compatible with the Anthropic Messages API (incl. `stream: true`), so the stock `anthropic`
SDK works with its HTTP client bound to the gateway's unix socket.

Where answers come from (config `model.mode`):
- `anthropic`: the real API at `model.upstream`, reached only through the egress proxy (the
  same checks and connection code as `http.request`, http.py). The gateway reads the API
  key from `model.key_file` and sends it as `x-api-key`; credentials the agent sends are
  dropped (only `anthropic-version` and `anthropic-beta` are forwarded). The key is scrubbed
  from everything that comes back (body, headers, error text) before it is recorded or sent.
  Upstream errors (429, 500, 529, ...) come back with their status, body and the headers the
  SDK's retry logic reads (`retry-after`, `retry-after-ms`, `x-should-retry`, `request-id`).
- `replay`: the responses recorded in earlier gateway journals (+ their blob dir), matched by
  request digest and order: the n-th call with digest D gets the n-th recorded response for
  D, byte for byte. Nothing leaves the gateway. A request the recording does not have is a
  409 `replay_mismatch` naming the digest and position, never a fallback.
- `scripted`: the responses listed in a JSON fixture, in order (demos and tests).

Recording: every call is gated (tool `model.messages`, non-mutating, so the budget rules
apply) and journaled as one `model_call` line: the request's digest (SHA-256 of its
canonical JSON, the request itself stored as the blob of that name), the decision, the
status, the headers passed back, usage, cost and the SHA-256 of the response bytes, which are
stored content-addressed as `<model.blob_dir>/<sha256>`. The blob is fsynced and the line
written BEFORE the answer is sent; a stream is read from upstream to its end first, recorded,
and then sent whole (its bytes unchanged: the SDK parses an SSE body that arrives at once
like any other). A response that cannot be recorded is not sent: the agent gets a 500.

What may be sent: features.py's allowlist of request keys, tool types, content and betas
(plus what the spec allows by name); anything else is refused before the gate, journaled
(`request_rejected`, code `feature_refused`) with what it was and how to allow it, because
the provider would act on it by itself (MCP servers, server tools, URL sources, ...). The
request blob is stored only once the gate allowed the call: a refused or denied request
leaves its digest in the journal and nothing in the blob store.

Accounting: input, output, cache-write and cache-read tokens from `usage` (streams:
`message_start`'s usage, updated by each `message_delta`'s cumulative usage) feed the
budget counter `tokens`; priced by `model.prices` (currency per million tokens), plus the
server-tool fees of `usage.server_tool_use` (`model.server_tool_fees`), they feed `cost`.
With a cost limit, a call to a model without a price is denied (the budget could not be
kept). Before the call, its most (`max_tokens` plus an input estimate of one token per
INPUT_BYTES_PER_TOKEN canonical bytes plus IMAGE_TOKENS per image, and their price) is reserved against both budgets, so
calls in flight together cannot pass a limit; after it, the reservation is settled to the
usage the answer reports (an answer whose usage cannot be read counts at its
reservation). Gateway-made errors use Anthropic's error shape
`{"type": "error", "error": {"type": ..., "message": ...}}`.

Standard library only (this module runs inside the gateway image).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import math
import os
import re
import stat
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from assure.core import gate
from assure.core.chain import ChainError, canonical, iter_chain

from assure.gateway import features
from assure.gateway import http as _http
from assure.gateway.config import Config, Model, Price
from assure.gateway.egress import Egress
from assure.gateway.dispatch import MODEL_ROUTES, MODEL_TOOL, Answer, Dispatcher

PATHS = {endpoint: path for path, endpoint in MODEL_ROUTES.items()}
DEFAULT_VERSION = "2023-06-01"
# Response headers passed back (and recorded): what the SDK reads, nothing about the account.
PASSED_HEADERS = frozenset(("content-type", "content-encoding", "request-id", "retry-after", "retry-after-ms", "x-should-retry"))
PASSED_PREFIXES = ("anthropic-ratelimit-",)
MAX_PASSED_HEADERS = 32
MAX_HEADER_VALUE = 1024
USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
MAX_TOKENS = 2**31 - 1  # a larger max_tokens is refused: priced, it overflows to inf (no journal line holds it)
INPUT_BYTES_PER_TOKEN = 4  # the input estimate a reservation uses (the answer's usage settles it)
# An image costs by its pixels, not its bytes (a blank 1092 x 1092 PNG is 304 base64 bytes
# and ~1,600 tokens): each image block reserves this on top of its bytes. ~1,600 is the most
# after the provider's resize on Claude 4.x; later models go to ~4,000 for a 12 MP photo.
IMAGE_TOKENS = 4096
FEE_TOOLS = {"web_search": "web_search_requests", "web_fetch": "web_fetch_requests"}  # tool type prefix -> usage field
REPLAYABLE = frozenset(("upstream", "replay", "script"))  # `served` values that carry a real response
REDACTED = "[redacted]"
MIN_KEY_CHARS = 16
MAX_KEY_BYTES = 4096
MAX_MESSAGE_CHARS = 1024
READ_BYTES = 65536
JSON = "application/json"
SSE = "text/event-stream"
_VERSION = re.compile(r"^[0-9A-Za-z._-]{1,64}$")
_BETA = re.compile(r"^[0-9A-Za-z._-]+( *, *[0-9A-Za-z._-]+)*$")
_QUERY = re.compile(r"^[0-9A-Za-z._=&-]{0,256}$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ModelError(Exception):
    """Model access cannot start: an unusable key file, recording or script (named)."""


class Failure(Exception):
    """A call the gateway answers itself: `status` with Anthropic's error JSON of type `kind`.
    `retry=False` adds `x-should-retry: false` (the SDK would otherwise retry a 409 or 5xx)."""

    def __init__(self, status: int, kind: str, message: str, *, code: str, retry: bool | None = None):
        super().__init__(message)
        self.status, self.kind, self.message, self.code, self.retry = status, kind, message[:MAX_MESSAGE_CHARS], code, retry


@dataclass(frozen=True)
class Call:
    """One model request, parsed."""

    endpoint: str  # messages | count_tokens
    body: bytes  # as the agent sent it (forwarded unchanged)
    canonical: bytes  # canonical JSON: its SHA-256 is the request digest
    digest: str
    parsed: dict[str, Any]
    query: str
    version: str
    beta: str | None

    @property
    def model(self) -> str | None:
        value = self.parsed.get("model")
        return value if isinstance(value, str) else None

    @property
    def stream(self) -> bool:
        return self.parsed.get("stream") is True


@dataclass(frozen=True)
class Response:
    status: int
    headers: tuple[tuple[str, str], ...]  # lowercased names, content-type included
    body: bytes
    served: str  # upstream | replay | script | gateway (an answer the gateway made itself)
    extra: dict[str, Any] = field(default_factory=dict)  # journal fields from the source
    error: str | None = None  # the gateway's error code, for `served == "gateway"`

    @property
    def content_type(self) -> str:
        return next((v for n, v in self.headers if n == "content-type"), "")


def error_json(kind: str, message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}, separators=(",", ":")).encode()


def failure_response(exc: Failure) -> Response:
    headers: tuple[tuple[str, str], ...] = (("content-type", JSON),)
    if exc.retry is not None:
        headers += (("x-should-retry", "true" if exc.retry else "false"),)
    return Response(exc.status, headers, error_json(exc.kind, exc.message), "gateway", error=exc.code)


def unavailable(dispatcher: Dispatcher, endpoint: str) -> Answer:
    """The answer when the config has no `model` section (journaled as a rejected request)."""
    message = "this run has no model access: the gateway config has no `model` section"
    dispatcher.reject(404, "no_model", message, target=PATHS[endpoint])
    return _answer(failure_response(Failure(404, "not_found_error", message, code="no_model", retry=False)), None)


def _answer(response: Response, action_id: str | None) -> Answer:
    headers = response.headers + ((("x-assure-action-id", action_id),) if action_id else ())
    return Answer(response.status, {}, raw=response.body, headers=headers)


# ---------------------------------------------------------------- blobs


class Blobs:
    """Content-addressed files `<dir>/<sha256>`, written atomically and fsynced."""

    def __init__(self, path: str, *, create: bool):
        if create:
            try:
                os.makedirs(path, exist_ok=True)
            except OSError as exc:
                raise ModelError(f"model.blob_dir: cannot create {path}: {exc.strerror}") from None
        if not os.path.isdir(path):
            raise ModelError(f"blob dir {path} is not a directory")
        self.path = path

    def put(self, data: bytes) -> str:
        """Store `data` (fsynced, then renamed into place) and return its SHA-256. Raises OSError."""
        digest = hashlib.sha256(data).hexdigest()
        final = os.path.join(self.path, digest)
        if self._intact(final, digest):
            return digest
        tmp = f"{final}.tmp-{uuid.uuid4().hex}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        os.replace(tmp, final)
        dir_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return digest

    def get(self, digest: str) -> bytes:
        """The bytes stored under `digest`, checked. Raises ModelError if missing or altered."""
        if not _SHA256.match(digest):
            raise ModelError(f"{digest[:80]!r} is not a SHA-256 hex digest")
        path = os.path.join(self.path, digest)
        try:
            data = _read_file(path)
        except OSError as exc:
            raise ModelError(f"blob {path} cannot be read: {exc.strerror or type(exc).__name__}") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise ModelError(f"blob {path} does not match its name (altered)")
        return data

    @staticmethod
    def _intact(path: str, digest: str) -> bool:
        try:
            return hashlib.sha256(_read_file(path)).hexdigest() == digest
        except OSError:
            return False


def _read_file(path: str, limit: int | None = None) -> bytes:
    """A regular file's bytes, never through a symlink."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO must not block the open
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file")
        return fh.read() if limit is None else fh.read(limit)


# ---------------------------------------------------------------- sources


class Upstream:
    """The real API, through the egress proxy."""

    def __init__(self, model: Model, egress: Egress | None, key: str):
        if egress is None or model.upstream is None:  # config.py refuses this; keep the invariant here
            raise ModelError("model.upstream: mode 'anthropic' needs an upstream and an egress section")
        self._model, self._egress, self._key = model, egress, key

    def respond(self, call: Call) -> Response:
        url = f"{self._model.upstream}{PATHS[call.endpoint]}" + (f"?{call.query}" if call.query else "")
        try:
            target = _http.parse_target({"method": "POST", "url": url})
            _http.check(self._egress, target)
        except _http.Refused as exc:
            raise _refusal(exc) from None
        deadline = time.monotonic() + self._model.timeout_seconds
        conn = _http._connection(self._egress, target)
        try:
            return self._exchange(conn, target, call, deadline)
        finally:
            conn.close()

    def _exchange(self, conn: http.client.HTTPConnection, target: _http.Target, call: Call, deadline: float) -> Response:
        # http: the proxy gets the absolute URL; https: the tunnel is to the API, so origin-form.
        request_target = target.url if target.scheme == "http" else target.path
        try:
            conn.putrequest("POST", request_target, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", target.authority)
            conn.putheader("Content-Type", JSON)
            conn.putheader("Accept", JSON)
            conn.putheader("Accept-Encoding", "identity")
            conn.putheader("anthropic-version", call.version)
            if call.beta:
                conn.putheader("anthropic-beta", call.beta)
            conn.putheader("x-api-key", self._key)
            conn.putheader("User-Agent", "assure-gateway")
            conn.putheader("Content-Length", str(len(call.body)))
            conn.putheader("Connection", "close")
            conn.endheaders(call.body)
            sock = conn.sock
            self._tighten(sock, deadline)
            response = conn.getresponse()
            if _http._from_proxy(response):
                raise _http._proxy_refusal(response)
            headers = _passed_headers(response.headers.items())
            data = self._read(sock, response, deadline)
        except _http.Refused as exc:
            raise _refusal(exc) from None
        except TimeoutError:
            raise Failure(504, "api_error", f"the model API did not answer within {self._model.timeout_seconds:g}s", code="upstream_timeout") from None
        except OSError as exc:
            raise _refusal(_http._connect_refusal(exc, target)) from None
        except (http.client.HTTPException, ValueError) as exc:
            raise Failure(502, "api_error", f"the model API's answer is unusable: {type(exc).__name__}", code="upstream_error") from None
        return Response(response.status, headers, data, "upstream")

    def _tighten(self, sock: Any, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("deadline")
        if sock is not None and sock.fileno() != -1:  # http.client closes it once the body is complete
            sock.settimeout(remaining)

    def _read(self, sock: Any, response: http.client.HTTPResponse, deadline: float) -> bytes:
        limit = self._model.max_response_bytes
        data = bytearray()
        while True:
            self._tighten(sock, deadline)
            chunk = response.read(READ_BYTES)
            if not chunk:
                return bytes(data)
            data += chunk
            if len(data) > limit:
                raise Failure(502, "api_error", f"the model API's answer is over the {limit}-byte limit (model.max_response_bytes)", code="too_large", retry=False)


def _refusal(exc: _http.Refused) -> Failure:
    if exc.code == "egress_denied":
        return Failure(502, "api_error", f"the gateway cannot reach the model API: {exc.message}", code=exc.code, retry=False)
    if exc.code == "upstream_timeout":
        return Failure(504, "api_error", f"the model API did not answer: {exc.message}", code=exc.code)
    return Failure(502, "api_error", f"the model API could not be reached: {exc.message}", code="upstream_error")


def _passed_headers(items: Any) -> tuple[tuple[str, str], ...]:
    """The response headers the agent gets (and the journal records), cleaned; content-type first."""
    out: dict[str, str] = {}
    for name, value in items:
        lower = str(name).lower()
        if lower not in PASSED_HEADERS and not lower.startswith(PASSED_PREFIXES):
            continue
        value = " ".join(str(value).split())
        if not _HEADER_NAME.match(lower) or len(value) > MAX_HEADER_VALUE or any(ord(c) > 0xFF for c in value):
            continue
        out[lower] = f"{out[lower]}, {value}" if lower in out else value
        if len(out) >= MAX_PASSED_HEADERS:
            break
    out.setdefault("content-type", "application/octet-stream")
    return (("content-type", out.pop("content-type")), *sorted(out.items()))


class Replay:
    """Answers recorded in earlier gateway journals, by request digest and order."""

    def __init__(self, model: Model):
        if model.recording_blob_dir is None:
            raise ModelError("model.recording.blob_dir is required in mode 'replay'")
        self._blobs = Blobs(model.recording_blob_dir, create=False)
        self._order: list[dict[str, Any]] = []
        self._by_key: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for path in model.recording:
            try:  # streamed: a recording of any size, one line in memory (a break refuses it whole)
                for record in iter_chain(path):
                    if record.get("event") == "model_call" and record.get("served") in REPLAYABLE:
                        self._add(path, record)
            except (ChainError, OSError, UnicodeDecodeError) as exc:
                raise ModelError(f"model.recording.journals: {path} is not a usable gateway journal: {exc}") from None
        self._lock = threading.Lock()
        self._served: dict[tuple[str, str], int] = {}
        self._calls = 0

    def _add(self, path: str, record: dict[str, Any]) -> None:
        where = f"{path} line {record.get('seq')}"
        endpoint, digest, status = record.get("endpoint"), record.get("request_sha256"), record.get("status")
        headers, response = record.get("response_headers"), record.get("response_sha256")
        if endpoint not in PATHS or not isinstance(digest, str) or not isinstance(response, str):
            raise ModelError(f"model.recording: {where}: a model_call without endpoint, request_sha256 or response_sha256")
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599 or not isinstance(headers, dict):
            raise ModelError(f"model.recording: {where}: status or response_headers missing or malformed")
        try:
            self._blobs.get(response)
        except ModelError as exc:
            raise ModelError(f"model.recording: {where}: {exc}") from None
        self._order.append(record)
        self._by_key.setdefault((endpoint, digest), []).append(record)

    def respond(self, call: Call) -> Response:
        key = (call.endpoint, call.digest)
        recorded = self._by_key.get(key, [])
        with self._lock:
            position = self._calls
            self._calls += 1
            nth = self._served.get(key, 0)
            if nth < len(recorded):
                self._served[key] = nth + 1
        if nth >= len(recorded):
            raise Failure(409, "replay_mismatch", self._mismatch(call, position, nth, len(recorded)), code="replay_mismatch", retry=False)
        record = recorded[nth]
        try:
            body = self._blobs.get(record["response_sha256"])
        except ModelError as exc:
            raise Failure(500, "api_error", f"the recording is damaged: {exc}", code="replay_damaged", retry=False) from None
        source = {"position": nth, "call": position, "run_id": record.get("run_id"), "attempt": record.get("attempt"), "seq": record.get("seq")}
        return Response(record["status"], _passed_headers(record["response_headers"].items()), body, "replay", {"replayed": source})

    def _mismatch(self, call: Call, position: int, nth: int, have: int) -> str:
        expected = self._order[position] if position < len(self._order) else None
        if expected is None:
            there = f"the recording has only {len(self._order)} model call(s)"
        else:
            there = f"the recording's model call #{position + 1} was {PATHS[expected['endpoint']]} with request_sha256 {expected['request_sha256']}"
        return (
            f"replay_mismatch: this {PATHS[call.endpoint]} request (request_sha256 {call.digest}) is model call #{position + 1} of this run "
            f"and call #{nth + 1} with that digest, but the recording has {have} response(s) for it; {there}. "
            "The agent's requests differ from the recorded run; nothing was sent upstream."
        )


@dataclass(frozen=True)
class _Scripted:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    message: dict[str, Any] | None  # a Messages response object (can also be served as a stream)
    stream: bool  # the body is an SSE stream


class Script:
    """Responses from a fixture file, served in order.

    The file is a JSON list; each item is a Messages response object (served as JSON, or as
    an SSE stream when the request says `stream: true`), a string (a raw SSE stream, for
    streaming requests only), or `{"scripted": {"status": 429, "headers": {...}, "body": ...}}`
    for any other answer. `count_tokens` answers an estimate (canonical bytes / 4) and takes no item.
    """

    def __init__(self, path: str):
        try:
            items = json.loads(_read_file(path, 64 * 1024 * 1024).decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ModelError(f"model.script: cannot read {path} as JSON: {exc}") from None
        if not isinstance(items, list):
            raise ModelError(f"model.script: {path} must hold a JSON list of responses")
        self._items = [self._item(path, i, item) for i, item in enumerate(items)]
        self._lock = threading.Lock()
        self._next = 0

    @staticmethod
    def _item(path: str, index: int, item: Any) -> _Scripted:
        where = f"model.script: {path} item {index}"
        status, headers = 200, {}
        if isinstance(item, dict) and set(item) == {"scripted"}:
            spec = item["scripted"]
            if not isinstance(spec, dict) or not set(spec) <= {"status", "headers", "body"} or "body" not in spec:
                raise ModelError(f'{where}: "scripted" must be an object {{"status", "headers", "body"}}')
            status, headers, item = spec.get("status", 200), spec.get("headers", {}), spec["body"]
            if isinstance(status, bool) or not isinstance(status, int) or not 200 <= status <= 599:
                raise ModelError(f"{where}: status must be an integer 200..599")
            if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
                raise ModelError(f"{where}: headers must map strings to strings")
        if isinstance(item, str):
            passed = _passed_headers([("content-type", SSE), *headers.items()])
            return _Scripted(status, passed, item.encode("utf-8"), None, True)
        if isinstance(item, dict):
            body = json.dumps(item, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
            message = item if status == 200 and item.get("type") == "message" else None
            return _Scripted(status, _passed_headers([("content-type", JSON), *headers.items()]), body, message, False)
        raise ModelError(f"{where}: must be a response object, an SSE string or {{\"scripted\": {{...}}}}")

    def respond(self, call: Call) -> Response:
        if call.endpoint == "count_tokens":
            body = json.dumps({"input_tokens": max(1, len(call.canonical) // 4)}).encode()
            return Response(200, (("content-type", JSON),), body, "script", {"script_index": None})
        with self._lock:
            index = self._next
            if index >= len(self._items):
                raise Failure(409, "script_exhausted", f"the model script has {len(self._items)} response(s) and all were served", code="script_exhausted", retry=False)
            item = self._items[index]
            if item.stream and not call.stream:
                message = f"script item {index} is an SSE stream but this request is not streaming (stream: true)"
                raise Failure(409, "script_mismatch", message, code="script_mismatch", retry=False)
            self._next += 1
        if call.stream and item.message is not None:
            return Response(200, (("content-type", SSE),), message_to_sse(item.message), "script", {"script_index": index})
        return Response(item.status, item.headers, item.body, "script", {"script_index": index})


def message_to_sse(message: dict[str, Any]) -> bytes:
    """A Messages response object as the event stream the API would have sent for it."""
    events: list[tuple[str, dict[str, Any]]] = []
    usage = message.get("usage") if isinstance(message.get("usage"), dict) else {}
    start_usage = {**usage, "output_tokens": min(1, int(usage.get("output_tokens", 0) or 0))}
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None, "usage": start_usage}
    events.append(("message_start", {"type": "message_start", "message": start}))
    for index, block in enumerate(message.get("content") or []):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            first, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block.get("text", "")}
        elif kind == "tool_use":
            first = {"type": "tool_use", "id": block.get("id"), "name": block.get("name"), "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block.get("input", {}), separators=(",", ":"))}
        elif kind == "thinking":
            first, delta = {"type": "thinking", "thinking": ""}, {"type": "thinking_delta", "thinking": block.get("thinking", "")}
        else:
            first, delta = block, None
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": first}))
        if delta is not None:
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        if kind == "thinking" and block.get("signature"):
            signature = {"type": "signature_delta", "signature": block["signature"]}
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": signature}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta = {"stop_reason": message.get("stop_reason"), "stop_sequence": message.get("stop_sequence")}
    events.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
    events.append(("message_stop", {"type": "message_stop"}))
    return b"".join(f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode() for name, data in events)


# ---------------------------------------------------------------- usage and cost


def sse_events(data: bytes) -> list[dict[str, Any]]:
    """The JSON `data` of each event of an SSE body (events that are not JSON objects are skipped)."""
    out: list[dict[str, Any]] = []
    text = data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    for block in text.split("\n\n"):
        lines = [line[5:].removeprefix(" ") for line in block.split("\n") if line.startswith("data:")]
        if not lines:
            continue
        try:
            value = json.loads("\n".join(lines))
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def usage_of(response: Response) -> tuple[dict[str, int], str | None]:
    """(usage, model) of a successful Messages response, JSON or SSE."""
    usage: dict[str, int] = {}
    if response.content_type.split(";")[0].strip().lower() == SSE:
        model = None
        for event in sse_events(response.body):
            if event.get("type") == "message_start" and isinstance(event.get("message"), dict):
                model = event["message"].get("model")
                _merge(usage, event["message"].get("usage"))
            elif event.get("type") == "message_delta":
                _merge(usage, event.get("usage"))  # cumulative counts: the latest wins
        return usage, model if isinstance(model, str) else None
    try:
        body = json.loads(response.body)
    except (ValueError, RecursionError):  # e.g. a tool input the model nested deeper than the parser goes
        return usage, None
    if not isinstance(body, dict):
        return usage, None
    _merge(usage, body.get("usage"))
    return usage, body.get("model") if isinstance(body.get("model"), str) else None


def _merge(usage: dict[str, int], source: Any) -> None:
    """Token counts, and the server-tool request counts of `server_tool_use` (same field names)."""
    if not isinstance(source, dict):
        return
    server = source.get("server_tool_use")
    for where, names in ((source, USAGE_FIELDS), (server if isinstance(server, dict) else {}, tuple(FEE_TOOLS.values()))):
        for name in names:
            value = where.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                usage[name] = value


def price_for(prices: Mapping[str, Price], *models: str | None) -> tuple[str, Price] | None:
    """The price of the first model that has one: exact id, else the longest id that is a
    `-`-separated prefix (`claude-sonnet-4-5` prices `claude-sonnet-4-5-20250929`)."""
    for model in models:
        if not model:
            continue
        if model in prices:
            return model, prices[model]
        prefixes = [key for key in prices if model.startswith(key + "-")]
        if prefixes:
            key = max(prefixes, key=len)
            return key, prices[key]
    return None


def cost_of(usage: Mapping[str, int], price: Price) -> float:
    per_million = (
        usage.get("input_tokens", 0) * price.input
        + usage.get("output_tokens", 0) * price.output
        + usage.get("cache_creation_input_tokens", 0) * price.cache_write
        + usage.get("cache_read_input_tokens", 0) * price.cache_read
    )
    return per_million / 1_000_000


def fees_of(usage: Mapping[str, int], fees: Mapping[str, float]) -> float:
    """What the server-tool requests of `usage` cost (web searches, ...)."""
    return sum(usage.get(name, 0) * fee for name, fee in fees.items())


# ---------------------------------------------------------------- the proxy


def read_key(path: str) -> str:
    """The API key: one line of printable ASCII. Errors never quote the file's content."""
    try:
        data = _read_file(path, MAX_KEY_BYTES + 1)
    except OSError as exc:
        raise ModelError(f"model.key_file: cannot read {path}: {exc.strerror or type(exc).__name__}") from None
    if len(data) > MAX_KEY_BYTES:
        raise ModelError(f"model.key_file: {path} is over {MAX_KEY_BYTES} bytes; it must hold only the API key")
    key = data.strip()
    if len(key) < MIN_KEY_CHARS or any(not 0x21 <= b <= 0x7E for b in key):
        raise ModelError(f"model.key_file: {path} must hold one API key: at least {MIN_KEY_CHARS} printable ASCII characters, no spaces")
    return key.decode("ascii")


class ModelProxy:
    """Serves the model routes for one gateway: parse, gate, answer, record, then send."""

    def __init__(self, config: Config, dispatcher: Dispatcher):
        if config.model is None:
            raise ModelError("the gateway config has no `model` section")
        self._model = config.model
        self._allow = features.Allow(**config.model.allow)
        self._cost_limited = config.policy.cost_limit is not None
        self._dispatcher = dispatcher
        self._blobs = Blobs(self._model.blob_dir, create=True)
        self._key: str | None = None
        self._source: Upstream | Replay | Script
        if self._model.mode == "anthropic":
            self._key = read_key(self._model.key_file or "")
            self._source = Upstream(self._model, config.egress, self._key)
        elif self._model.mode == "replay":
            self._source = Replay(self._model)
        else:
            self._source = Script(self._model.script or "")

    def describe(self) -> dict[str, Any]:
        """For `GET /v1/health`."""
        return {"mode": self._model.mode, "routes": sorted(MODEL_ROUTES), "models_priced": sorted(self._model.prices)}

    def handle(self, endpoint: str, headers: Mapping[str, str], query: str, body: bytes) -> Answer:
        """Answer one request to a model route (`endpoint` is a value of MODEL_ROUTES)."""
        started = time.monotonic()
        try:
            call = self._parse(endpoint, headers, query, body)
            features.check(call.parsed, call.beta, self._allow)
        except features.Refused as exc:  # something the provider would act on by itself
            failure = Failure(403, "permission_error", f"refused by the gateway: {exc}", code="feature_refused", retry=False)
            self._dispatcher.reject(failure.status, failure.code, failure.message, target=PATHS[endpoint])
            return _answer(failure_response(failure), None)
        except Failure as exc:  # refused before the gate, like any malformed request
            self._dispatcher.reject(exc.status, exc.code, exc.message, target=PATHS[endpoint])
            return _answer(failure_response(exc), None)
        record: dict[str, Any] = {
            "action_id": uuid.uuid4().hex,
            "tool": MODEL_TOOL,
            "endpoint": endpoint,
            "mode": self._model.mode,
            "request_sha256": call.digest,
            "request_bytes": len(call.body),
            "model": self._dispatcher.field(call.model),  # the agent's string: long ones by digest
            "stream": call.stream,
            "anthropic_version": call.version,
            "anthropic_beta": call.beta,
            "query": call.query or None,
        }
        action = gate.Action(MODEL_TOOL, False, scope=f"model:{endpoint}", resource_mode="external" if self._key else gate.SANDBOX, spends=True)
        reserve, uncountable = self._reservation(call)
        decision = self._dispatcher.decide_model_call(record, action, self._unpriced(call) or uncountable, reserve)
        if decision is None:
            message = "the gateway journal is unavailable; no model calls are served"
            return _answer(failure_response(Failure(503, "api_error", message, code="unavailable", retry=False)), None)
        if decision.allowed:
            try:
                self._blobs.put(call.canonical)  # the request, under its digest: only once allowed
            except OSError as exc:
                return self._unrecorded(record, f"the request could not be stored: {type(exc).__name__}", 0, 0.0)
            response = self._scrub(self._respond(call))
        else:
            message = f"model call denied by the gateway ({decision.rule}): {decision.reason}"
            response = failure_response(Failure(403, "permission_error", message, code="denied", retry=False))
        try:
            tokens, cost = self._account(call, response, record)
        except Exception as exc:  # fail closed: journaled, and what it reserved counts as spent
            reserved = record.get("reserved") or {"tokens": 0, "cost": 0.0}
            record.update(tokens=reserved["tokens"], cost=reserved["cost"])
            return self._unrecorded(record, f"its usage could not be counted: {type(exc).__name__}", reserved["tokens"], reserved["cost"])
        record.update(
            served=response.served,
            status=response.status,
            error=response.error,
            response_headers=dict(response.headers),
            response_bytes=len(response.body),
            ms=round((time.monotonic() - started) * 1000, 1),
            **response.extra,
        )
        try:  # a denied call's answer is the gateway's own error: its digest is journaled, nothing stored
            record["response_sha256"] = self._blobs.put(response.body) if decision.allowed else hashlib.sha256(response.body).hexdigest()
        except OSError as exc:
            return self._unrecorded(record, f"the response could not be stored: {type(exc).__name__}", tokens, cost)
        if not self._dispatcher.record_model_call(record, tokens, cost):
            message = "the journal could not be written; the response is withheld"
            return _answer(failure_response(Failure(500, "api_error", message, code="journal_error", retry=False)), record["action_id"])
        return _answer(response, record["action_id"])

    def _parse(self, endpoint: str, headers: Mapping[str, str], query: str, body: bytes) -> Call:
        def bad(code: str, message: str) -> Failure:
            return Failure(400, "invalid_request_error", message, code=code, retry=False)

        try:
            parsed = json.loads(body.decode("utf-8"), object_pairs_hook=_unique_keys)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise bad("bad_json", f"body is not valid JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise bad("bad_json", "body must be a JSON object")
        try:
            canon = canonical(parsed)
        except ValueError as exc:
            raise bad("bad_json", f"body is not plain JSON (NaN or Infinity): {exc}") from None
        version = headers.get("anthropic-version", DEFAULT_VERSION)
        if not _VERSION.match(version):
            raise bad("bad_header", "anthropic-version must be a version like 2023-06-01")
        beta = headers.get("anthropic-beta")
        if beta is not None and (len(beta) > 1024 or not _BETA.match(beta)):
            raise bad("bad_header", "anthropic-beta must be a comma-separated list of beta names")
        if not _QUERY.match(query):
            raise bad("bad_query", "the query string may hold only letters, digits and ._=&-")
        max_tokens = parsed.get("max_tokens")
        if endpoint == "messages" and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 0 <= max_tokens <= MAX_TOKENS):
            raise bad("bad_max_tokens", f"max_tokens is required: a whole number 0..{MAX_TOKENS} (it is reserved against the token budget before the call)")
        return Call(endpoint, body, canon, hashlib.sha256(canon).hexdigest(), parsed, query, version, beta or None)

    def _unpriced(self, call: Call) -> str | None:
        """Why this call's cost could not be counted against the run's cost limit (None: it can)."""
        if not self._cost_limited or call.endpoint != "messages" or price_for(self._model.prices, call.model):
            return None
        return f"no price for model {call.model!r} in model.prices, and this run has a cost limit: its cost could not be counted"

    def _reservation(self, call: Call) -> tuple[tuple[int, float], str | None]:
        """((tokens, cost), why the cost cannot be reserved) for the most this call may spend:
        `max_tokens` out, an input estimate in (priced as a cache write if that costs more),
        and `max_uses` of each fee-charging server tool. count_tokens spends nothing."""
        if call.endpoint != "messages":
            return (0, 0.0), None
        output = call.parsed["max_tokens"]
        estimate = -(-len(call.canonical) // INPUT_BYTES_PER_TOKEN) + IMAGE_TOKENS * _images(call.parsed)
        found = price_for(self._model.prices, call.model)
        cost = 0.0 if found is None else (estimate * max(found[1].input, found[1].cache_write) + output * found[1].output) / 1_000_000
        tools = call.parsed.get("tools")
        for tool in tools if isinstance(tools, list) else ():
            kind = tool.get("type") if isinstance(tool, dict) else None
            field_name = next((f for prefix, f in FEE_TOOLS.items() if isinstance(kind, str) and kind.startswith(prefix)), None)
            fee = self._model.server_tool_fees.get(field_name, 0.0) if field_name else 0.0
            if not fee:
                continue
            uses = tool.get("max_uses")
            if isinstance(uses, bool) or not isinstance(uses, int) or uses < 0:
                if self._cost_limited:
                    return (estimate + output, cost), f"tool {kind!r} has no max_uses, so its fees cannot be reserved against this run's cost limit"
                continue
            cost += uses * fee
        if not math.isfinite(cost):  # e.g. max_uses of 10**308: no journal line holds inf, and no limit can be kept
            return (estimate + output, 0.0), "its cost cannot be reserved: it is larger than a float can hold"
        return (estimate + output, cost), None

    def _respond(self, call: Call) -> Response:
        try:
            return self._source.respond(call)
        except Failure as exc:
            return failure_response(exc)
        except Exception as exc:  # fail closed: an answer, never a crash
            return failure_response(Failure(500, "api_error", f"gateway error: {type(exc).__name__}", code="internal_error"))

    def _scrub(self, response: Response) -> Response:
        """The API key must never reach the agent, the journal or a blob."""
        if self._key is None:
            return response
        key = self._key
        if key.encode("ascii") not in response.body and not any(key in v for _, v in response.headers):
            return response
        headers = tuple((n, v.replace(key, REDACTED)) for n, v in response.headers)
        body = response.body.replace(key.encode("ascii"), REDACTED.encode("ascii"))
        return Response(response.status, headers, body, response.served, response.extra, response.error)

    def _account(self, call: Call, response: Response, record: dict[str, Any]) -> tuple[int, float]:
        """Tokens and cost of a successful Messages response (else none); usage into `record`."""
        if call.endpoint != "messages" or response.status != 200 or response.served == "gateway":
            record.update(usage=None, tokens=0, cost=0.0, priced=None)
            return 0, 0.0
        reported, answered_model = usage_of(response)
        if not reported and record.get("reserved"):  # an answer whose usage cannot be read costs the most it could
            tokens, cost = record["reserved"]["tokens"], record["reserved"]["cost"]
            record.update(usage=None, tokens=tokens, cost=cost, priced=None, usage_unread=True)
            return tokens, cost
        usage = {name: reported.get(name, 0) for name in USAGE_FIELDS}
        server = {name: reported.get(name, 0) for name in FEE_TOOLS.values()}
        tokens = sum(usage.values())
        found = price_for(self._model.prices, answered_model, call.model)
        cost = (cost_of(usage, found[1]) if found else 0.0) + fees_of(server, self._model.server_tool_fees)
        record.update(usage=usage, server_tool_use=server, tokens=tokens, cost=round(cost, 9), priced=found[0] if found else None, response_model=self._dispatcher.field(answered_model))
        return tokens, cost

    def _unrecorded(self, record: dict[str, Any], why: str, tokens: int, cost: float) -> Answer:
        """A call whose request or response could not be stored: journaled (tokens counted),
        and the agent gets a 500 instead of an unrecorded answer."""
        record.setdefault("decision", gate.DENY)
        record.update(served="gateway", status=500, error="record_failed", reason=why, response_sha256=None)
        self._dispatcher.record_model_call(record, tokens, cost)
        message = f"the gateway could not record this call ({why}); nothing is returned"
        return _answer(failure_response(Failure(500, "api_error", message, code="record_failed", retry=False)), record["action_id"])


def _images(value: Any) -> int:
    """The objects of `"type": "image"` anywhere in a request (depth bounded by the pre-scan)."""
    if isinstance(value, dict):
        return (value.get("type") == "image") + sum(_images(v) for v in value.values())
    if isinstance(value, list):
        return sum(_images(v) for v in value)
    return 0


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key in object")
    return out
