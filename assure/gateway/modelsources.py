"""Where a model call's answer comes from (config `model.mode`): the real API through the
egress proxy (`Upstream`), earlier journals (`Replay`) or a fixture (`Script`). Each has
`respond(call) -> Response` and raises `Failure` for an answer the gateway makes itself.
Standard library only (runs inside the gateway image)."""

from __future__ import annotations

import hashlib
import http.client
import json
import threading
import time
from typing import Any

from assure.core.chain import ChainError, canonical, iter_chain
from assure.core.record import dataclass, replace
from assure.gateway import http as _http
from assure.gateway import modelopenai
from assure.gateway.blobs import Blobs, read_file
from assure.gateway.config import Model
from assure.gateway.egress import Egress
from assure.gateway.modelmatch import Match, differences, parse_match, volatile
from assure.gateway.modelwire import (
    JSON,
    PATHS,
    SSE,
    Call,
    Failure,
    ModelError,
    Response,
    passed_headers,
)

READ_BYTES = 65536
# differing paths a replay mismatch names in its message (its `differs` field has up to
# modelmatch.MAX_DIFFS)
SHOWN_DIFFS = 5
REPLAYABLE = frozenset(
    ("upstream", "replay", "script")
)  # `served` values that carry a real response


class Upstream:
    """The real API, through the egress proxy: Anthropic's (mode `anthropic`, key as
    `x-api-key`) or any OpenAI-compatible one (mode `openai`, key as a bearer token)."""

    def __init__(self, model: Model, egress: Egress | None, key: str):
        if (
            egress is None or model.upstream is None
        ):  # config.py refuses this; keep the invariant here
            raise ModelError(
                f"model.upstream: mode {model.mode!r} needs an upstream and an egress section"
            )
        self._model, self._egress, self._key = model, egress, key
        self.openai = model.mode == "openai"

    def respond(self, call: Call) -> Response:
        url = f"{self._model.upstream}{PATHS[call.endpoint]}" + (
            f"?{call.query}" if call.query else ""
        )
        try:
            target = _http.parse_target(
                {"method": "GET" if call.endpoint == "models" else "POST", "url": url}
            )
            _http.check(self._egress, target)
        except _http.Refused as exc:
            raise _refusal(exc) from None
        deadline = time.monotonic() + self._model.timeout_seconds
        conn = _http._connection(self._egress, target)
        try:
            return self._exchange(conn, target, call, deadline)
        finally:
            conn.close()

    def _exchange(
        self, conn: http.client.HTTPConnection, target: _http.Target, call: Call, deadline: float
    ) -> Response:
        # http: the proxy gets the absolute URL; https: the tunnel is to the API, so origin-form.
        request_target = target.url if target.scheme == "http" else target.path
        body = b"" if call.endpoint == "models" else call.body
        try:
            conn.putrequest(
                target.method, request_target, skip_host=True, skip_accept_encoding=True
            )
            conn.putheader("Host", target.authority)
            if body:
                conn.putheader("Content-Type", JSON)
            conn.putheader("Accept", JSON)
            conn.putheader("Accept-Encoding", "identity")
            if self.openai:
                conn.putheader("Authorization", f"Bearer {self._key}")
            else:
                conn.putheader("anthropic-version", call.version)
                if call.beta:
                    conn.putheader("anthropic-beta", call.beta)
                conn.putheader("x-api-key", self._key)
            conn.putheader("User-Agent", "assure-gateway")
            conn.putheader("Content-Length", str(len(body)))
            conn.putheader("Connection", "close")
            conn.endheaders(body)
            sock = conn.sock
            self._tighten(sock, deadline)
            response = conn.getresponse()
            if _http._from_proxy(response):
                raise _http._proxy_refusal(response)
            headers = passed_headers(response.headers.items())
            data = self._read(sock, response, deadline)
        except _http.Refused as exc:
            raise _refusal(exc) from None
        except TimeoutError:
            raise Failure(
                504,
                "api_error",
                f"the model API did not answer within {self._model.timeout_seconds:g}s",
                code="upstream_timeout",
            ) from None
        except OSError as exc:
            raise _refusal(_http._connect_refusal(exc, target)) from None
        except (http.client.HTTPException, ValueError) as exc:
            raise Failure(
                502,
                "api_error",
                f"the model API's answer is unusable: {type(exc).__name__}",
                code="upstream_error",
            ) from None
        return Response(response.status, headers, data, "upstream")

    def _tighten(self, sock: Any, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("deadline")
        if (
            sock is not None and sock.fileno() != -1
        ):  # http.client closes it once the body is complete
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
                raise Failure(
                    502,
                    "api_error",
                    f"the model API's answer is over the {limit}-byte limit"
                    " (model.max_response_bytes)",
                    code="too_large",
                    retry=False,
                )


def _refusal(exc: _http.Refused) -> Failure:
    if exc.code == "egress_denied":
        return Failure(
            502,
            "api_error",
            f"the gateway cannot reach the model API: {exc.message}",
            code=exc.code,
            retry=False,
        )
    if exc.code == "upstream_timeout":
        return Failure(
            504, "api_error", f"the model API did not answer: {exc.message}", code=exc.code
        )
    return Failure(
        502,
        "api_error",
        f"the model API could not be reached: {exc.message}",
        code="upstream_error",
    )


class Replay:
    """Answers recorded in earlier gateway journals, by request and order: the n-th call that
    matches recorded request R gets the n-th response recorded for R. Requests match without
    their volatile parts (config `model.volatile`, modelmatch.Volatile: by default the ids in
    `metadata` and the date line of a system prompt), so each recorded request is read back
    from its blob; a mismatch names the JSON paths where the request differs from the one
    the recording has at that position."""

    def __init__(self, model: Model):
        if model.recording_blob_dir is None:
            raise ModelError("model.recording.blob_dir is required in mode 'replay'")
        self._blobs = Blobs(model.recording_blob_dir, create=False)
        self._volatile = volatile(*model.volatile)
        self._order: list[dict[str, Any]] = []
        self._by_key: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for path in model.recording:
            try:  # streamed: a recording of any size, one line in memory (a break refuses it whole)
                for record in iter_chain(path):
                    if record.get("event") == "model_call" and record.get("served") in REPLAYABLE:
                        self._add(path, record)
            except (ChainError, OSError, UnicodeDecodeError) as exc:
                raise ModelError(
                    f"model.recording.journals: {path} is not a usable gateway journal: {exc}"
                ) from None
        self._lock = threading.Lock()
        self._served: dict[tuple[str, str], int] = {}
        self._calls = 0

    def _add(self, path: str, record: dict[str, Any]) -> None:
        where = f"{path} line {record.get('seq')}"
        endpoint, digest, status = (
            record.get("endpoint"),
            record.get("request_sha256"),
            record.get("status"),
        )
        headers, response = record.get("response_headers"), record.get("response_sha256")
        if endpoint not in PATHS or not isinstance(digest, str) or not isinstance(response, str):
            raise ModelError(
                f"model.recording: {where}: a model_call without endpoint, request_sha256 or"
                " response_sha256"
            )
        if (
            isinstance(status, bool)
            or not isinstance(status, int)
            or not 100 <= status <= 599
            or not isinstance(headers, dict)
        ):
            raise ModelError(
                f"model.recording: {where}: status or response_headers missing or malformed"
            )
        try:
            self._blobs.get(response)
            key = self._key(endpoint, self._recorded_request(digest))
        except ModelError as exc:
            raise ModelError(f"model.recording: {where}: {exc}") from None
        self._order.append(record)
        self._by_key.setdefault((endpoint, key), []).append(record)

    def _recorded_request(self, digest: str) -> dict[str, Any]:
        try:
            parsed = json.loads(self._blobs.get(digest))
        except ValueError as exc:
            raise ModelError(f"the request blob {digest} is not JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise ModelError(f"the request blob {digest} is not a JSON object")
        return parsed

    def _key(self, endpoint: str, parsed: dict[str, Any]) -> str:
        """What a request is matched by: the digest of its canonical JSON without its volatile
        parts."""
        return hashlib.sha256(canonical(self._volatile.strip(parsed, endpoint))).hexdigest()

    def respond(self, call: Call) -> Response:
        key = (call.endpoint, self._key(call.endpoint, call.parsed))
        recorded = self._by_key.get(key, [])
        with self._lock:
            position = self._calls
            self._calls += 1
            nth = self._served.get(key, 0)
            if nth < len(recorded):
                self._served[key] = nth + 1
        if nth >= len(recorded):
            message, differs = self._mismatch(call, position, nth, len(recorded))
            raise Failure(
                409,
                "replay_mismatch",
                message,
                code="replay_mismatch",
                retry=False,
                detail={"differs": differs} if differs else None,
            )
        record = recorded[nth]
        try:
            body = self._blobs.get(record["response_sha256"])
        except ModelError as exc:
            raise Failure(
                500,
                "api_error",
                f"the recording is damaged: {exc}",
                code="replay_damaged",
                retry=False,
            ) from None
        source = {
            "position": nth,
            "call": position,
            "run_id": record.get("run_id"),
            "attempt": record.get("attempt"),
            "seq": record.get("seq"),
        }
        return Response(
            record["status"],
            passed_headers(record["response_headers"].items()),
            body,
            "replay",
            {"replayed": source},
        )

    def _mismatch(self, call: Call, position: int, nth: int, have: int) -> tuple[str, list[str]]:
        """The refusal, and the JSON paths (bounded: modelmatch.differences) where this request
        differs from the recording's call at the same position, volatile parts left out."""
        expected = self._order[position] if position < len(self._order) else None
        differs: list[str] = []
        if expected is None:
            there = f"the recording has only {len(self._order)} model call(s)"
        else:
            there = (
                f"the recording's model call #{position + 1} was {PATHS[expected['endpoint']]} with"
                f" request_sha256 {expected['request_sha256']}"
            )
            try:
                theirs = self._volatile.strip(
                    self._recorded_request(expected["request_sha256"]), expected["endpoint"]
                )
            except ModelError:
                theirs = None
            if theirs is not None and expected["endpoint"] == call.endpoint:
                differs, more = differences(
                    self._volatile.strip(call.parsed, call.endpoint), theirs
                )
                shown = (
                    ", ".join(differs[:SHOWN_DIFFS])
                    + (
                        f" and {len(differs) - SHOWN_DIFFS} more (`differs`)"
                        if len(differs) > SHOWN_DIFFS
                        else ""
                    )
                    + (" and more" if more else "")
                )
                there += (
                    f"; it differs at {shown}"
                    if differs
                    else (
                        "; it is the same request (this run repeats it more often than the"
                        " recording)"
                    )
                )
        message = (
            f"replay_mismatch: this {PATHS[call.endpoint]} request (request_sha256 {call.digest})"
            f" is model call #{position + 1} of this run and call #{nth + 1} like it (volatile"
            f" parts aside), but the recording has {have} response(s) for it; {there}. The agent's"
            " requests differ from the recorded run (volatile parts ignored: model.volatile);"
            " nothing was sent upstream."
        )
        return message, differs


@dataclass(frozen=True)
class _Scripted:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    message: dict[str, Any] | None  # a Messages response object (can also be served as a stream)
    stream: bool  # the body is an SSE stream
    match: Match | None = None  # None: served in order; else to the requests it matches
    repeat: bool = False  # a matched entry served to every request it matches, not once


class Script:
    """Responses from a fixture file: in order, and by request.

    The file is a JSON list (its schema: specs/spec.schema.json `$defs.model_script`); each
    item is a Messages response object (served as JSON, or as an SSE stream when the request
    says `stream: true`; on the OpenAI routes as a chat completion or a Responses object, text
    and `tool_use` blocks as text and function calls), a string (a raw SSE stream, for
    streaming requests only), or `{"scripted": {"status": 429, "headers": {...}, "body": ...}}`
    for any other answer (both served as they are, on any route). Those are served in order.
    An item `{"match": {...}, "response": <any of those>, "repeat": false}` answers the
    requests its matcher fits instead (modelmatch.Match: the model, tools offered, system
    prompt, last user message, last tool result, as substrings or regexes), once unless
    `repeat`: a side call (a title, a subagent, a small model) takes its matched entry and
    leaves the order alone. A request takes the first unserved matched entry that fits, else
    the next in order. `count_tokens` answers an estimate (canonical bytes / 4) and
    `/v1/models` the models the items name; neither takes an item.
    """

    def __init__(self, path: str):
        try:
            items = json.loads(read_file(path, 64 * 1024 * 1024).decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ModelError(f"model.script: cannot read {path} as JSON: {exc}") from None
        if not isinstance(items, list):
            raise ModelError(f"model.script: {path} must hold a JSON list of responses")
        self._items = [self._item(path, i, item) for i, item in enumerate(items)]
        named = [item.message.get("model") for item in self._items if item.message is not None]
        self._models = list(dict.fromkeys(m for m in named if isinstance(m, str))) or ["scripted"]
        self._order = [i for i, item in enumerate(self._items) if item.match is None]
        self._matched = [i for i, item in enumerate(self._items) if item.match is not None]
        self._lock = threading.Lock()
        self._next = 0  # into self._order
        self._used: set[int] = set()  # matched entries served (and not `repeat`)

    @classmethod
    def _item(cls, path: str, index: int, item: Any) -> _Scripted:
        where = f"model.script: {path} item {index}"
        if isinstance(item, dict) and "match" in item:
            if not set(item) <= {"match", "response", "repeat"} or "response" not in item:
                raise ModelError(
                    f'{where}: a matched entry is {{"match": {{...}}, "response": <a response>,'
                    ' "repeat": false}; '
                    f"it has {', '.join(sorted(str(k)[:40] for k in item))}"
                )
            if not isinstance(item.get("repeat", False), bool):
                raise ModelError(f"{where}.repeat: must be true or false")
            if isinstance(item["response"], dict) and "match" in item["response"]:
                raise ModelError(f"{where}.response: must be a response, not another matched entry")
            answer = cls._item(path, index, item["response"])
            return replace(
                answer, match=parse_match(item["match"], where), repeat=item.get("repeat", False)
            )
        status, headers = 200, {}
        if isinstance(item, dict) and set(item) == {"scripted"}:
            spec = item["scripted"]
            if (
                not isinstance(spec, dict)
                or not set(spec) <= {"status", "headers", "body"}
                or "body" not in spec
            ):
                raise ModelError(
                    f'{where}: "scripted" must be an object {{"status", "headers", "body"}}'
                )
            status, headers, item = spec.get("status", 200), spec.get("headers", {}), spec["body"]
            if isinstance(status, bool) or not isinstance(status, int) or not 200 <= status <= 599:
                raise ModelError(f"{where}: status must be an integer 200..599")
            if not isinstance(headers, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
            ):
                raise ModelError(f"{where}: headers must map strings to strings")
        if isinstance(item, str):
            passed = passed_headers([("content-type", SSE), *headers.items()])
            return _Scripted(status, passed, item.encode("utf-8"), None, True)
        if isinstance(item, dict):
            body = json.dumps(item, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
            message = item if status == 200 and item.get("type") == "message" else None
            return _Scripted(
                status,
                passed_headers([("content-type", JSON), *headers.items()]),
                body,
                message,
                False,
            )
        raise ModelError(
            f'{where}: must be a response object, an SSE string, {{"scripted": {{...}}}} or'
            ' {"match": {...}, "response": ...}'
        )

    def respond(self, call: Call) -> Response:
        if call.endpoint == "count_tokens":
            body = json.dumps({"input_tokens": max(1, len(call.canonical) // 4)}).encode()
            return Response(200, (("content-type", JSON),), body, "script", {"script_index": None})
        if call.endpoint == "models":  # the models the script answers as, and takes no item
            body = json.dumps(modelopenai.models_list(self._models)).encode()
            return Response(200, (("content-type", JSON),), body, "script", {"script_index": None})
        with self._lock:
            index = self._pick(call)
            item = self._items[index]
        by = "match" if item.match is not None else "order"
        if item.message is not None and (
            call.stream or call.openai
        ):  # one script format, the route's wire format
            return Response(
                200, *_wire(call, item.message), "script", {"script_index": index, "script_by": by}
            )
        return Response(
            item.status, item.headers, item.body, "script", {"script_index": index, "script_by": by}
        )

    def _pick(self, call: Call) -> int:
        """The item for `call` (under the lock): the first unserved matched entry it fits (an
        SSE-string entry fits streaming requests only), else the next in order."""
        for index in self._matched:
            item = self._items[index]
            if (
                index in self._used
                or (item.stream and not call.stream)
                or not item.match
                or not item.match.test(call.endpoint, call.parsed)
            ):
                continue
            if not item.repeat:
                self._used.add(index)
            return index
        if self._next >= len(self._order):
            also = (
                f", and none of its {len(self._matched)} matched entries (unserved, or repeat) fits"
                " this request"
                if self._matched
                else ""
            )
            message = (
                f"the model script has {len(self._order)} in-order response(s) and all were"
                f" served{also}"
            )
            raise Failure(409, "script_exhausted", message, code="script_exhausted", retry=False)
        index = self._order[self._next]
        if self._items[index].stream and not call.stream:
            message = (
                f"script item {index} is an SSE stream but this request is not streaming (stream:"
                " true)"
            )
            raise Failure(409, "script_mismatch", message, code="script_mismatch", retry=False)
        self._next += 1
        return index


def _wire(call: Call, message: dict[str, Any]) -> tuple[tuple[tuple[str, str], ...], bytes]:
    """(headers, body) of a Messages response object as `call`'s route answers it (an OpenAI
    route, or a stream: a plain Messages answer is served as the script holds it)."""
    sse, as_json = (("content-type", SSE),), (("content-type", JSON),)
    if call.endpoint == "chat_completions":
        options = call.parsed.get("stream_options")
        if call.stream:
            return sse, modelopenai.chat_stream(
                message, isinstance(options, dict) and options.get("include_usage") is True
            )
        return as_json, json.dumps(modelopenai.chat_completion(message), ensure_ascii=False).encode(
            "utf-8"
        )
    if call.endpoint == "responses":
        if call.stream:
            return sse, modelopenai.responses_stream(message)
        return as_json, json.dumps(modelopenai.response_object(message), ensure_ascii=False).encode(
            "utf-8"
        )
    return sse, message_to_sse(message)


def message_to_sse(message: dict[str, Any]) -> bytes:
    """A Messages response object as the event stream the API would have sent for it."""
    events: list[tuple[str, dict[str, Any]]] = []
    usage = usage_read if isinstance(usage_read := message.get("usage"), dict) else {}
    start_usage = {**usage, "output_tokens": min(1, int(usage.get("output_tokens", 0) or 0))}
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    events.append(("message_start", {"type": "message_start", "message": start}))
    for index, block in enumerate(message.get("content") or []):
        kind = block.get("type") if isinstance(block, dict) else None
        first: dict[str, Any]  # the block as content_block_start opens it
        delta: dict[str, Any] | None  # its content as one content_block_delta (none: whole)
        if kind == "text":
            first, delta = (
                {"type": "text", "text": ""},
                {"type": "text_delta", "text": block.get("text", "")},
            )
        elif kind == "tool_use":
            first = {
                "type": "tool_use",
                "id": block.get("id"),
                "name": block.get("name"),
                "input": {},
            }
            delta = {
                "type": "input_json_delta",
                "partial_json": json.dumps(block.get("input", {}), separators=(",", ":")),
            }
        elif kind == "thinking":
            first, delta = (
                {"type": "thinking", "thinking": ""},
                {"type": "thinking_delta", "thinking": block.get("thinking", "")},
            )
        else:
            first, delta = block, None
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": first},
            )
        )
        if delta is not None:
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        if kind == "thinking" and block.get("signature"):
            signature = {"type": "signature_delta", "signature": block["signature"]}
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": signature},
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta = {
        "stop_reason": message.get("stop_reason"),
        "stop_sequence": message.get("stop_sequence"),
    }
    events.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
    events.append(("message_stop", {"type": "message_stop"}))
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()
        for name, data in events
    )
