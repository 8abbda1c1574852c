"""An attempt's model exchange, read from its gateway journal and blobs: for each model call
(and each model request refused before the gate), what the agent sent that its previous call
had not (the system prompt when it changed, the new messages: text, tool calls, tool
results), what came back (text, tool calls, the error), and the journal's facts (status,
source, tokens, cost, the refusal and why). `assure show` and the HTML run page render it.

The agent wrote every request and chose what the model said: nothing here is trusted. Blob
names come from the hash-chained journal, are checked to be SHA-256 digests, read confined
and bounded, and used only if their content hashes to their name; each text is cut to
MAX_PART_CHARS and an attempt's to MAX_ATTEMPT_CHARS, the cuts counted. Strings are kept as
they were: whoever displays them escapes them (textsafe.display, html.escape).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from assure.core import confined
from assure.core.chain import ChainError, iter_chain
from assure.records.layout import AttemptPaths
from assure.textsafe import display

MAX_CALLS = 500  # model calls (and refused model requests) read per attempt
MAX_JOURNAL_LINES = 100_000  # journal lines scanned per attempt
MAX_BLOB_BYTES = (
    4 * 2**20
)  # of one request or response read; a larger one is named by size, not shown
MAX_READ_BYTES = (
    64 * 2**20
)  # of blobs read per attempt; past it, calls are shown from the journal alone
MAX_PART_CHARS = 20_000  # of one text, tool input or tool result kept
MAX_ATTEMPT_CHARS = 1_000_000  # of all texts kept per attempt
MAX_PARTS = 200  # content parts kept per message
MODEL_PATHS = ("/v1/messages", "/v1/chat/completions", "/v1/responses", "/v1/models")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Part:
    """One piece of a message: `kind` text | thinking | tool_use | tool_result | error | media |
    other."""

    kind: str
    text: str
    label: str = ""  # a tool's name, a tool result's call id (and "error"), a media type
    cut: int = 0  # characters left out of `text`


@dataclass(frozen=True)
class Message:
    role: str
    parts: tuple[Part, ...]
    parts_cut: int = 0  # parts left out


@dataclass
class Exchange:
    """One model call as the journal and blobs show it."""

    seq: Any
    ts: Any
    endpoint: str
    event: str  # model_call | request_rejected
    status: Any = None
    served: Any = None  # upstream | replay | script | gateway
    decision: Any = None
    model: Any = None
    stream: bool = False
    tokens: Any = None
    cost: Any = None
    usage: dict[str, Any] | None = None
    ms: Any = None
    refusal: str | None = None  # why the gateway refused or failed it (rule, code, reason)
    differs: list[str] = field(default_factory=list)  # a replay mismatch's differing paths
    system: Part | None = None  # the system prompt, when it differs from the previous call's
    tools: list[str] = field(default_factory=list)  # tools offered
    earlier: int = (
        0  # messages the previous call sent too (not repeated here; `cache_control` marks aside)
    )
    messages: list[Message] = field(default_factory=list)  # the request's other messages, in order
    response: Message | None = None
    notes: list[str] = field(default_factory=list)  # what could not be shown, and why

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Conversation:
    exchanges: list[Exchange]
    notes: list[str]  # about the whole attempt (journal unreadable, calls not read)
    chars_cut: int = 0


class _Reader:
    def __init__(self, paths: AttemptPaths):
        self.paths = paths
        self.read_left = MAX_READ_BYTES
        self.chars_left = MAX_ATTEMPT_CHARS
        self.cut = 0

    def part(self, kind: str, text: Any, label: Any = "") -> Part:
        text = (
            text
            if isinstance(text, str)
            else ""
            if text is None
            else json.dumps(text, ensure_ascii=False)
        )
        keep = max(0, min(MAX_PART_CHARS, self.chars_left))
        cut = max(0, len(text) - keep)
        self.chars_left -= min(len(text), keep)
        self.cut += cut
        return Part(kind, text[:keep], str(label)[:200], cut)

    def blob(self, digest: Any, what: str, notes: list[str]) -> bytes | None:
        if not isinstance(digest, str) or not _SHA256.match(digest):
            return None
        if self.read_left <= 0:
            notes.append(
                f"{what} not read: the page already read {MAX_READ_BYTES} bytes of this attempt's"
                " blobs"
            )
            return None
        try:
            data = confined.read_file(self.paths.blobs, digest, min(MAX_BLOB_BYTES, self.read_left))
        except confined.TooLarge:
            notes.append(
                f"{what} not shown: larger than {min(MAX_BLOB_BYTES, self.read_left)} bytes (blob"
                f" {digest})"
            )
            return None
        except OSError:
            notes.append(f"{what} not shown: its blob {digest} is missing or not a plain file")
            return None
        self.read_left -= len(data)
        if hashlib.sha256(data).hexdigest() != digest:
            notes.append(f"{what} not shown: its blob {digest} does not hash to its name (altered)")
            return None
        return data


def read(paths: AttemptPaths) -> Conversation:
    """The attempt's model exchange, bounded (see the module docstring)."""
    reader = _Reader(paths)
    out = Conversation([], [])
    if not paths.journal.is_file():
        out.notes.append("no gateway journal")
        return out
    previous: list[str] = []
    system_seen: str | None = None
    try:
        for n, record in enumerate(iter_chain(paths.journal)):
            if n >= MAX_JOURNAL_LINES:
                out.notes.append(f"only the first {MAX_JOURNAL_LINES} journal lines were read")
                break
            event = record.get("event")
            model_reject = event == "request_rejected" and str(record.get("target", "")).startswith(
                MODEL_PATHS
            )
            if event != "model_call" and not model_reject:
                continue
            if len(out.exchanges) >= MAX_CALLS:
                out.notes.append(f"only the first {MAX_CALLS} model calls are shown")
                break
            exchange = _exchange(record, model_reject)
            if event == "model_call":
                previous, system_seen = _request(reader, record, exchange, previous, system_seen)
                _response(reader, record, exchange)
            out.exchanges.append(exchange)
    except (ChainError, OSError, UnicodeDecodeError) as exc:
        out.notes.append(f"the journal's hash chain breaks, so nothing after it is shown: {exc}")
    out.chars_cut = reader.cut
    return out


def _exchange(record: dict[str, Any], rejected: bool) -> Exchange:
    if rejected:
        target = str(record.get("target"))
        endpoint = {
            "/v1/messages": "messages",
            "/v1/chat/completions": "chat_completions",
            "/v1/responses": "responses",
            "/v1/models": "models",
        }.get(target, target)
        why = f"refused before the gate ({record.get('code')}): {record.get('reason')}"
        return Exchange(
            record.get("seq"),
            record.get("ts"),
            endpoint,
            "request_rejected",
            status=record.get("status"),
            refusal=why,
        )
    exchange = Exchange(
        record.get("seq"),
        record.get("ts"),
        str(record.get("endpoint")),
        "model_call",
        status=record.get("status"),
        served=record.get("served"),
        decision=record.get("decision"),
        model=record.get("model"),
        stream=record.get("stream") is True,
        tokens=record.get("tokens"),
        cost=record.get("cost"),
        usage=record.get("usage") if isinstance(record.get("usage"), dict) else None,
        ms=record.get("ms"),
    )
    if record.get("decision") not in (None, "allow"):
        exchange.refusal = f"denied by the gate ({record.get('rule')}): {record.get('reason')}"
    elif record.get("error"):
        exchange.refusal = f"{record.get('error')}" + (
            f": {record['reason']}" if record.get("reason") else ""
        )
    if isinstance(record.get("differs"), list):
        exchange.differs = [str(p)[:200] for p in record["differs"][:50]]
    return exchange


def _object(value: Any) -> dict[str, Any]:
    """A JSON object the agent or model wrote, or {} for anything else."""
    return value if isinstance(value, dict) else {}


def _array(value: Any) -> list[Any]:
    """A JSON array the agent or model wrote, or [] for anything else."""
    return value if isinstance(value, list) else []


def _json(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def _request(
    reader: _Reader,
    record: dict[str, Any],
    exchange: Exchange,
    previous: list[str],
    system_seen: str | None,
) -> tuple[list[str], str | None]:
    """The request's new parts into `exchange`; (its messages' digests, its system prompt's) for the
    next."""
    if record.get("decision") not in (None, "allow"):
        exchange.notes.append("the request was not stored (the gate denied it)")
        return previous, system_seen
    parsed = _json(reader.blob(record.get("request_sha256"), "the request", exchange.notes))
    if not isinstance(parsed, dict):
        if not exchange.notes:
            exchange.notes.append("the request is not stored or not JSON")
        return previous, system_seen
    endpoint = exchange.endpoint
    system, messages = _request_messages(parsed, endpoint)
    tools = parsed.get("tools")
    for tool in (tools if isinstance(tools, list) else [])[:MAX_PARTS]:
        if isinstance(tool, dict):
            function = _object(tool.get("function"))
            exchange.tools.append(
                str(tool.get("name") or function.get("name") or tool.get("type") or "?")[:200]
            )
    digests = [_digest(_sans_cache(m)) for m in messages]
    seen = set(previous)
    exchange.earlier = sum(d in seen for d in digests)
    system_digest = _digest(_sans_cache(system)) if system is not None else None
    if system is not None and system_digest != system_seen:
        exchange.system = reader.part("text", _plain_text(system))
    for message, digest in zip(messages, digests, strict=False):
        if digest not in seen:
            exchange.messages.append(_message(reader, message, endpoint))
    return digests, system_digest


def _digest(value: Any) -> str:
    return hashlib.sha256(
        json.dumps(value, sort_keys=True).encode("utf-8", "surrogatepass")
    ).hexdigest()


def _sans_cache(value: Any) -> Any:
    """`value` without `cache_control` marks: an agent moves them to its newest message, and a
    message is the same one without them."""
    if isinstance(value, dict):
        return {k: _sans_cache(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_sans_cache(v) for v in value]
    return value


def _request_messages(parsed: dict[str, Any], endpoint: str) -> tuple[Any, list[Any]]:
    if endpoint == "responses":
        items = parsed.get("input")
        return parsed.get("instructions"), (
            [{"role": "user", "content": items}]
            if isinstance(items, str)
            else items
            if isinstance(items, list)
            else []
        )
    messages = parsed.get("messages")
    return parsed.get("system") if endpoint == "messages" else None, (
        messages if isinstance(messages, list) else []
    )


def _plain_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(
            b["text"] for b in value if isinstance(b, dict) and isinstance(b.get("text"), str)
        )
    return json.dumps(value, ensure_ascii=False)


def _message(reader: _Reader, message: Any, endpoint: str) -> Message:
    """One request message (any API's shape) as role and parts."""
    if not isinstance(message, dict):
        return Message("?", (reader.part("other", message),))
    kind = message.get("type")
    if kind == "function_call":  # Responses items
        return Message(
            "assistant", (reader.part("tool_use", message.get("arguments"), message.get("name")),)
        )
    if kind == "function_call_output":
        return Message(
            "tool",
            (
                reader.part(
                    "tool_result", _plain_text(message.get("output")), message.get("call_id")
                ),
            ),
        )
    role = str(message.get("role") or kind or "?")[:40]
    parts = _parts(reader, message.get("content"))
    for call in (
        message.get("tool_calls") or [] if isinstance(message.get("tool_calls"), list) else []
    ):  # chat: assistant's calls
        function = _object(call.get("function")) if isinstance(call, dict) else {}
        parts.append(reader.part("tool_use", function.get("arguments"), function.get("name")))
    if role == "tool":
        parts = [
            (
                Part("tool_result", p.text, str(message.get("tool_call_id") or "")[:200], p.cut)
                if p.kind == "text"
                else p
            )
            for p in parts
        ]
    return _bounded(role, parts)


def _bounded(role: str, parts: list[Part]) -> Message:
    return Message(role, tuple(parts[:MAX_PARTS]), max(0, len(parts) - MAX_PARTS))


def _parts(reader: _Reader, content: Any) -> list[Part]:
    """Content (a string, or blocks of any API) as parts."""
    if content is None:
        return []
    if isinstance(content, str):
        return [reader.part("text", content)]
    if not isinstance(content, list):
        return [reader.part("other", content)]
    out = [_block(reader, block) for block in content[:MAX_PARTS]]
    if len(content) > MAX_PARTS:
        out.append(Part("other", f"[{len(content) - MAX_PARTS} more blocks not read]"))
    return out


def _block(reader: _Reader, block: Any) -> Part:
    if not isinstance(block, dict):
        return reader.part("other", block)
    kind = block.get("type")
    if kind in ("text", "input_text", "output_text"):
        return reader.part("text", block.get("text"))
    if kind == "thinking":
        return reader.part("thinking", block.get("thinking"))
    if kind in ("tool_use", "server_tool_use"):
        return reader.part("tool_use", block.get("input"), block.get("name"))
    if kind == "tool_result":
        label = str(block.get("tool_use_id") or "") + (" error" if block.get("is_error") else "")
        content = block.get("content")
        return reader.part(
            "tool_result",
            (
                content
                if isinstance(content, str)
                else _plain_text(content)
                if isinstance(content, list)
                else content
            ),
            label,
        )
    if kind in ("image", "document", "image_url", "input_image", "input_file"):
        source = _object(block.get("source"))
        data = source.get("data")
        return reader.part(
            "media",
            f"[{kind}: {source.get('type', 'inline')}"
            + (f", {len(data)} base64 characters" if isinstance(data, str) else "")
            + "]",
            kind,
        )
    return reader.part("other", f"[{str(kind)[:40]} block]")


def _response(reader: _Reader, record: dict[str, Any], exchange: Exchange) -> None:
    if record.get("decision") not in (None, "allow"):
        return
    data = reader.blob(record.get("response_sha256"), "the response", exchange.notes)
    if data is None:
        return
    headers = _object(record.get("response_headers"))
    sse = str(headers.get("content-type", "")).startswith("text/event-stream") or data.startswith(
        (b"event:", b"data:")
    )
    body = _from_stream(data, exchange.endpoint) if sse else _json(data)
    if not isinstance(body, dict):
        exchange.notes.append("the response is not JSON")
        return
    error = body.get("error")
    if isinstance(error, dict):
        exchange.response = Message(
            "error",
            (reader.part("error", error.get("message"), error.get("type") or error.get("code")),),
        )
        return
    if exchange.endpoint == "chat_completions":
        choices = body.get("choices")
        first = (
            choices[0]
            if isinstance(choices, list) and choices and isinstance(choices[0], dict)
            else {}
        )
        message = _object(first.get("message"))
        exchange.response = _message(reader, {"role": "assistant", **message}, exchange.endpoint)
    elif exchange.endpoint == "responses":
        parts: list[Part] = []
        for item in _array(body.get("output"))[:MAX_PARTS]:
            parts += list(_message(reader, item, "responses").parts)
        exchange.response = _bounded("assistant", parts)
    elif exchange.endpoint == "messages":
        exchange.response = _bounded(
            str(body.get("role") or "assistant")[:40], _parts(reader, body.get("content"))
        )


def _events(data: bytes) -> list[dict[str, Any]]:
    out = []
    for block in data.decode("utf-8", "replace").replace("\r\n", "\n").split("\n\n"):
        lines = [line[5:].lstrip() for line in block.split("\n") if line.startswith("data:")]
        if lines and lines != ["[DONE]"]:
            try:
                out.append(json.loads("\n".join(lines)))
            except (ValueError, RecursionError):
                continue
    return [e for e in out if isinstance(e, dict)]


def _from_stream(data: bytes, endpoint: str) -> dict[str, Any] | None:
    """A streamed answer put back together as the JSON answer it stands for."""
    events = _events(data)
    if endpoint == "responses":
        done = [
            e["response"]
            for e in events
            if e.get("type") == "response.completed" and isinstance(e.get("response"), dict)
        ]
        return (
            done[-1]
            if done
            else next((e for e in events if isinstance(e.get("error"), dict)), None)
        )
    if endpoint == "chat_completions":
        text, calls = "", dict[Any, dict[str, str]]()  # each call by its index
        for event in events:
            for choice in event.get("choices") or []:
                delta = _object(choice.get("delta")) if isinstance(choice, dict) else {}
                text += str(delta.get("content") or "")
                for call in delta.get("tool_calls") or []:
                    if isinstance(call, dict):
                        slot = calls.setdefault(call.get("index"), {"name": "", "arguments": ""})
                        function = _object(call.get("function"))
                        slot["name"] += str(function.get("name") or "")
                        slot["arguments"] += str(function.get("arguments") or "")
        return {
            "choices": [
                {
                    "message": {
                        "content": text or None,
                        "tool_calls": [{"function": c} for c in calls.values()],
                    }
                }
            ]
        }
    blocks: dict[Any, dict[str, Any]] = {}
    for event in events:
        if event.get("type") == "error":
            return event
        index = event.get("index")
        if event.get("type") == "content_block_start" and isinstance(
            event.get("content_block"), dict
        ):
            blocks[index] = {**event["content_block"], "_json": ""}
        elif (
            event.get("type") == "content_block_delta"
            and index in blocks
            and isinstance(event.get("delta"), dict)
        ):
            delta, block = event["delta"], blocks[index]
            for key, into in (
                ("text", "text"),
                ("thinking", "thinking"),
                ("partial_json", "_json"),
            ):
                if isinstance(delta.get(key), str):
                    block[into] = str(block.get(into) or "") + delta[key]
    content = []
    for block in blocks.values():
        raw = block.pop("_json")
        if block.get("type") == "tool_use" and raw:
            parsed = _json(raw.encode())
            block["input"] = raw if parsed is None else parsed
        content.append(block)
    return {"role": "assistant", "content": content}


# ---- the terminal's form (`assure show`) ----

TERMINAL_PART_CHARS = 400  # of one text shown in the terminal; the rest is counted
TERMINAL_SYSTEM_CHARS = 120


def _cut(text: str, keep: int, more: int = 0) -> str:
    """`text` escaped for a terminal (textsafe.display), cut to `keep`, the cut said."""
    shown = display(text)
    left = max(0, len(shown) - keep) + more
    shown = shown[:keep]
    return shown + (
        f" … ({left} more characters: assure show --json, or the HTML page)" if left else ""
    )


def lines(n: int, conversation: Conversation) -> list[str]:
    """The exchange as terminal lines: every string the agent or model wrote escaped and cut."""
    out = [f"attempt {n}: model exchange, {len(conversation.exchanges)} call(s)"]
    out += [f"  note: {display(note)}" for note in conversation.notes]
    for i, x in enumerate(conversation.exchanges, 1):
        out.append("  " + headline(i, x))
        if x.refusal:
            out.append(f"    refused: {_cut(x.refusal, TERMINAL_PART_CHARS)}")
        if x.differs:
            out.append(
                "    differs from the recording at:"
                f" {_cut(', '.join(x.differs), TERMINAL_PART_CHARS)}"
            )
        if x.system is not None:
            out.append(
                f"    system ({len(x.system.text) + x.system.cut} characters):"
                f" {_cut(x.system.text, TERMINAL_SYSTEM_CHARS, x.system.cut)}"
            )
        if x.tools and (i == 1 or x.system is not None):
            out.append(f"    tools offered: {_cut(', '.join(x.tools), TERMINAL_PART_CHARS)}")
        if x.earlier:
            out.append(f"    ({x.earlier} message(s) as in the call before)")
        for message in x.messages:
            out += _message_lines(message, "    ")
        if x.response is not None:
            out += _message_lines(x.response, "    => ")
        out += [f"    note: {display(note)}" for note in x.notes]
    if conversation.chars_cut:
        out.append(
            f"  ({conversation.chars_cut} characters of this exchange were over the read bounds and"
            " are not kept)"
        )
    return out


def headline(i: int, x: Exchange) -> str:
    """`#1 messages claude-opus-5-5 200 script 980 tokens (in 900, out 80) $0.004 248ms`: the
    journal's facts."""
    parts = [
        f"#{i} line {display(str(x.seq))}",
        display(str(x.endpoint)),
        display(str(x.model or "-"))[:80],
        f"status {display(str(x.status))}",
    ]
    if x.served:
        parts.append(f"served {display(str(x.served))}")
    if x.stream:
        parts.append("stream")
    if x.tokens is not None:
        usage = x.usage or {}
        detail = ", ".join(
            f"{short} {usage[key]}"
            for key, short in (
                ("input_tokens", "in"),
                ("output_tokens", "out"),
                ("cache_creation_input_tokens", "cache write"),
                ("cache_read_input_tokens", "cache read"),
            )
            if usage.get(key)
        )
        parts.append(f"{display(str(x.tokens))} tokens" + (f" ({detail})" if detail else ""))
    if isinstance(x.cost, (int, float)) and not isinstance(x.cost, bool):
        parts.append(f"cost {x.cost:.6f}")
    if x.ms is not None:
        parts.append(f"{display(str(x.ms))} ms")
    return " · ".join(parts)


def _message_lines(message: Message, indent: str) -> list[str]:
    out = []
    for part in message.parts:
        label = f" {display(part.label)}" if part.label else ""
        out.append(
            f"{indent}{display(message.role)} {part.kind}{label}:"
            f" {_cut(part.text, TERMINAL_PART_CHARS, part.cut)}"
        )
    if message.parts_cut:
        out.append(f"{indent}({message.parts_cut} more parts not kept)")
    return out
