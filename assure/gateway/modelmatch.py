"""What a model request says, read the same way on every route, for the two sources that must
recognise a request: a script entry's `match` (the model, the tools offered, the system
prompt, the last user message, the last tool result) and a replay, which compares requests
without their volatile parts (ids in `metadata`, the date line of a system prompt: they
change from run to run and not the answer) and, on a mismatch, names the JSON paths that
differ. Every read is bounded: the request is the agent's, of any size and shape. Standard
library only (runs inside the gateway image)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from assure.core.record import dataclass
from assure.gateway.modelwire import ModelError

MATCH_CHARS = 256 * 1024  # of each text a matcher reads (a longer one is read up to here)
MAX_DIFFS = 20  # differing paths named in one mismatch
MAX_PATH_CHARS = 160  # of one path named (keys are the agent's)
MATCH_FIELDS = ("endpoint", "model", "tools", "system", "user", "tool_result", "stream")
TEXT_FIELDS = ("model", "system", "user", "tool_result")
ENDPOINTS = ("messages", "chat_completions", "responses")
VOLATILE = "<volatile>"


# ---- the parts a matcher reads ----


def _text(value: Any) -> str:
    """A content value's text: a string, or the `text` of its blocks (Anthropic `text`, OpenAI
    `text`/`input_text`/`output_text` parts; a tool result's nested content too), bounded."""
    if isinstance(value, str):
        return value[:MATCH_CHARS]
    parts: list[str] = []
    size = 0
    for block in value if isinstance(value, list) else ():
        if not isinstance(block, dict):
            continue
        piece = (
            text
            if isinstance(text := block.get("text"), str)
            else _text(block.get("content"))
            if block.get("type") == "tool_result"
            else ""
        )
        parts.append(piece[: MATCH_CHARS - size])
        size += len(parts[-1])
        if size >= MATCH_CHARS:
            break
    return "\n".join(parts)


def _messages(parsed: dict[str, Any], endpoint: str) -> list[dict[str, Any]]:
    key = "input" if endpoint == "responses" else "messages"
    value = parsed.get(key)
    if endpoint == "responses" and isinstance(value, str):
        return [{"role": "user", "content": value}]
    return [m for m in value if isinstance(m, dict)] if isinstance(value, list) else []


def system_text(parsed: dict[str, Any], endpoint: str) -> str:
    """The system prompt: `system` (Messages), `instructions` (Responses) and every message of
    role system or developer."""
    parts = [_text(parsed.get("instructions" if endpoint == "responses" else "system"))]
    parts += [
        _text(m.get("content"))
        for m in _messages(parsed, endpoint)
        if m.get("role") in ("system", "developer")
    ]
    return "\n".join(p for p in parts if p)[:MATCH_CHARS]


def last_user_text(parsed: dict[str, Any], endpoint: str) -> str:
    """The text of the last user message that has any (a message of tool results only is
    skipped)."""
    for message in reversed(_messages(parsed, endpoint)):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        text = _text(
            [b for b in content if not (isinstance(b, dict) and b.get("type") == "tool_result")]
            if isinstance(content, list)
            else content
        )
        if text:
            return text
    return ""


def last_tool_result(parsed: dict[str, Any], endpoint: str) -> str | None:
    """The last tool result's text (Messages `tool_result` block, chat `role: tool` message,
    Responses `function_call_output`); None: the request carries none."""
    for message in reversed(_messages(parsed, endpoint)):
        if message.get("role") == "tool":
            return _text(message.get("content"))
        if message.get("type") == "function_call_output":
            return _text(message.get("output"))
        content = message.get("content")
        results = (
            [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
            if isinstance(content, list)
            else []
        )
        if results:
            return _text(results[-1].get("content"))
    return None


def tools_offered(parsed: dict[str, Any]) -> set[str]:
    tools = parsed.get("tools")
    names: set[str] = set()
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict):
            name = tool.get(
                "name",
                (
                    (tool.get("function") or {}).get("name")
                    if isinstance(tool.get("function"), dict)
                    else None
                ),
            )
            if isinstance(name, str):
                names.add(name)
    return names


# ---- a script entry's matcher ----


@dataclass(frozen=True)
class Pattern:
    """A text test: a substring, or `{"regex": ...}` (Python `re`, searched)."""

    substring: str | None = None
    regex: re.Pattern[str] | None = None

    def test(self, text: str | None) -> bool:
        if text is None:
            return False
        return (
            self.substring in text
            if self.substring is not None
            else bool(self.regex and self.regex.search(text))
        )


@dataclass(frozen=True)
class Match:
    """What a script entry answers; every field given must hold (none given: any request)."""

    endpoint: str | None = None
    model: Pattern | None = None
    tools: frozenset[str] | None = None  # each must be offered; empty: the request offers no tools
    system: Pattern | None = None
    user: Pattern | None = None
    tool_result: Pattern | None = None
    stream: bool | None = None

    def test(self, endpoint: str, parsed: dict[str, Any]) -> bool:
        if self.endpoint is not None and endpoint != self.endpoint:
            return False
        if self.stream is not None and (parsed.get("stream") is True) != self.stream:
            return False
        if self.model is not None and not self.model.test(
            parsed.get("model") if isinstance(parsed.get("model"), str) else None
        ):
            return False
        if self.tools is not None:
            offered = tools_offered(parsed)
            if (not self.tools and offered) or not self.tools <= offered:
                return False
        if self.system is not None and not self.system.test(system_text(parsed, endpoint)):
            return False
        if self.user is not None and not self.user.test(last_user_text(parsed, endpoint)):
            return False
        return self.tool_result is None or self.tool_result.test(last_tool_result(parsed, endpoint))


def parse_match(value: Any, where: str) -> Match:
    """A script entry's `match` object (the schema: specs/spec.schema.json `$defs.model_script`)."""
    fix = (
        '; e.g. {"model": "haiku", "tools": ["Edit"], "user": {"regex": "^Fix"}, "tool_result":'
        f' "return a - b"}} (fields: {", ".join(MATCH_FIELDS)})'
    )
    if not isinstance(value, dict) or not value:
        raise ModelError(f"{where}.match: must be a non-empty object{fix}")
    unknown = sorted(set(value) - set(MATCH_FIELDS))
    if unknown:
        raise ModelError(f"{where}.match.{unknown[0][:40]}: unknown field{fix}")
    out: dict[str, Any] = {}
    if "endpoint" in value:
        if value["endpoint"] not in ENDPOINTS:
            raise ModelError(f"{where}.match.endpoint: must be one of {', '.join(ENDPOINTS)}")
        out["endpoint"] = value["endpoint"]
    if "stream" in value:
        if not isinstance(value["stream"], bool):
            raise ModelError(f"{where}.match.stream: must be true or false")
        out["stream"] = value["stream"]
    if "tools" in value:
        tools = value["tools"]
        if not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools):
            raise ModelError(
                f"{where}.match.tools: must be a list of tool names, each offered by the request"
                ' ([]: it offers none), e.g. ["Edit"]'
            )
        out["tools"] = frozenset(tools)
    for name in TEXT_FIELDS:
        if name in value:
            out[name] = _pattern(value[name], f"{where}.match.{name}")
    return Match(**out)


def _pattern(value: Any, where: str) -> Pattern:
    if isinstance(value, str) and value:
        return Pattern(substring=value)
    if isinstance(value, dict) and set(value) == {"regex"} and isinstance(value["regex"], str):
        try:
            return Pattern(regex=re.compile(value["regex"]))
        except re.error as exc:
            raise ModelError(f"{where}.regex: not a valid regular expression: {exc}") from None
    raise ModelError(
        f'{where}: must be a non-empty substring, or {{"regex": "..."}} (Python re, searched)'
    )


# ---- replay: volatile parts, and where two requests differ ----


@dataclass(frozen=True)
class Volatile:
    """The request parts a replay ignores: `fields`, dotted JSON paths (`*`: any key or list
    item) dropped wherever they are; `text`, regular expressions whose matches are blanked in
    every text of the prompt: the system prompt and each message, whatever its role (the run's
    facts go where the agent puts them: mini-swe-agent's uname in its first user message)."""

    fields: tuple[tuple[str, ...], ...]
    text: tuple[re.Pattern[str], ...]

    def strip(self, parsed: dict[str, Any], endpoint: str) -> dict[str, Any]:
        """A copy of `parsed` without its volatile parts (the input is left as it is)."""
        out: dict[str, Any] = json.loads(json.dumps(parsed))  # a deep copy of plain JSON
        for path in self.fields:
            _drop(out, path)
        if self.text:
            _blank_texts(out, endpoint, self.text)
        return out


def volatile(fields: tuple[str, ...], text: tuple[str, ...]) -> Volatile:
    """The Volatile of config `model.volatile` (checked there; defaults:
    config.DEFAULT_VOLATILE_*)."""
    return Volatile(tuple(tuple(f.split(".")) for f in fields), tuple(re.compile(t) for t in text))


def _drop(value: Any, path: tuple[str, ...]) -> None:
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        keys = list(value) if head == "*" else [head] if head in value else []
        for key in keys:
            if rest:
                _drop(value[key], rest)
            else:
                del value[key]
    elif isinstance(value, list) and (head == "*" or head.isdigit()):
        indexes = (
            range(len(value)) if head == "*" else [int(head)] if int(head) < len(value) else []
        )
        if not rest:
            for i in sorted(indexes, reverse=True):
                del value[i]
            return
        for i in indexes:
            _drop(value[i], rest)


def _blank(value: Any, patterns: tuple[re.Pattern[str], ...]) -> Any:
    if isinstance(value, str):
        for pattern in patterns:
            value = pattern.sub(VOLATILE, value)
        return value
    if isinstance(value, list):
        for block in value:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                block["text"] = _blank(block["text"], patterns)
    return value


def _blank_texts(
    parsed: dict[str, Any], endpoint: str, patterns: tuple[re.Pattern[str], ...]
) -> None:
    top = "instructions" if endpoint == "responses" else "system"
    if top in parsed:
        parsed[top] = _blank(parsed[top], patterns)
    messages = parsed.get("input" if endpoint == "responses" else "messages")
    if isinstance(messages, str):  # a Responses `input` given as one text
        parsed["input"] = _blank(messages, patterns)
    for message in messages if isinstance(messages, list) else ():
        if isinstance(message, dict) and "content" in message:
            message["content"] = _blank(message["content"], patterns)


def differences(a: Any, b: Any) -> tuple[list[str], bool]:
    """(the JSON paths where `a` and `b` differ, at most MAX_DIFFS, each cut to MAX_PATH_CHARS;
    True if there were more). A path ends where the two part ways: a changed value, a key one
    side lacks, a list of another length."""
    found: list[str] = []
    for path in _walk(a, b, "$"):
        if len(found) == MAX_DIFFS:
            return found, True
        found.append(path if len(path) <= MAX_PATH_CHARS else path[: MAX_PATH_CHARS - 1] + "…")
    return found, False


def _walk(a: Any, b: Any, at: str) -> Iterator[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            here = (
                f"{at}.{key}"
                if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", key)
                else f"{at}[{json.dumps(key[:64])}{'…' if len(key) > 64 else ''}]"
            )
            if key not in a or key not in b:
                yield here + (" (only in this request)" if key in a else " (only in the recording)")
            else:
                yield from _walk(a[key], b[key], here)
    elif isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            yield from _walk(x, y, f"{at}[{i}]")
        if len(a) != len(b):
            yield f"{at} ({len(a)} items here, {len(b)} in the recording)"
    elif a != b or type(a) is not type(b):
        yield at
