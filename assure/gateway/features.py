"""What of a Messages API request may reach the provider: an allowlist, because the provider
acts on some of it by itself, outside `egress.allow` and outside the gate.

The MCP connector (`mcp_servers`) connects to any URL it is given; server tools (web search,
web fetch, code execution, the browser and computer toolsets, ...) fetch and run what the
model picks; `container` reuses a code-execution sandbox; an image or document with a `url`
(or Files API `file`) source is fetched by the provider; betas switch such features on, and
some keys change who pays or what a token costs (`speed`, `service_tier`, `inference_geo`,
`fallbacks`, `workspace_id`, ...), which the budget could not count. So by default a request
may hold only the keys, tool types, content blocks and betas listed here, which do none of
that; anything else is refused with a reason that names it and the spec field that allows
it (`model.allow.request_keys | tool_types | content | betas`). Names follow the Messages
API as the anthropic SDK 2.x types it (MessageCreateParams, ToolUnionParam, ContentBlockParam,
AnthropicBetaParam). The same check applies in every model mode, so a replayed run is held
to what the recorded one was.

Standard library only (this module runs inside the gateway image).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# Top-level keys of POST /v1/messages (and /count_tokens) that the provider does not act on
# by itself: the conversation, sampling, tool definitions, thinking, caching, output format.
REQUEST_KEYS = frozenset((
    "model", "messages", "max_tokens", "system", "stop_sequences", "stream", "temperature", "top_p", "top_k",
    "metadata", "tools", "tool_choice", "thinking", "cache_control", "output_config", "output_format",
))
TOOL_TYPES = frozenset(("custom",))  # a tool without `type` is custom: the agent runs it, not the provider
CONTENT_TYPES = frozenset((
    "text", "image", "document", "search_result", "thinking", "redacted_thinking", "tool_use", "tool_result", "tool_reference",
))
INLINE_SOURCES = frozenset(("base64", "text", "content"))  # sources whose bytes are in the request itself
BETAS = frozenset((  # betas that switch on nothing the provider does by itself, and no other price
    "prompt-caching-2024-07-31", "pdfs-2024-09-25", "token-counting-2024-11-01", "token-efficient-tools-2025-02-19",
    "output-128k-2025-02-19", "interleaved-thinking-2025-05-14", "model-context-window-exceeded-2025-08-26",
    "structured-outputs-2025-11-13",
))
MAX_DEPTH = 4  # tool_result > document > content source > block: deeper is refused, not walked
MAX_NAME = 80  # a refused name is quoted at most this long


class Refused(Exception):
    """The request holds something the provider would act on by itself (the message says what, and the fix)."""


@dataclass(frozen=True)
class Allow:
    """What a spec allows beyond the defaults, by name (`model.allow` in the spec)."""

    request_keys: frozenset[str] = frozenset()
    tool_types: frozenset[str] = frozenset()
    content: frozenset[str] = frozenset()  # block types, or `<block>.source.<type>` (e.g. image.source.url)
    betas: frozenset[str] = frozenset()


def check(body: dict[str, Any], beta: str | None, allow: Allow) -> None:
    """Raise `Refused` for the first part of the request that is not allowed."""
    for key in sorted(body):
        if key not in REQUEST_KEYS and key not in allow.request_keys:
            raise _refused(f"request key {key!r}", "request_keys", key, _why_key(key))
    for name in _betas(beta):
        if name not in BETAS and name not in allow.betas:
            raise _refused(f"anthropic-beta {name!r}", "betas", name, "a beta can switch on features the provider runs by itself")
    tools = _shaped(body.get("tools"), "tools", text=False)
    for i, tool in enumerate(tools):
        kind = tool.get("type", "custom") if isinstance(tool, dict) else None
        kind = kind if isinstance(kind, str) else "(none)"
        if kind not in TOOL_TYPES and kind not in allow.tool_types:
            raise _refused(f"tools[{i}] of type {kind!r}", "tool_types", kind, "it is a server or Anthropic-defined tool, not a custom tool the agent runs itself")
    _blocks(_shaped(body.get("system"), "system"), "system", allow, 0)
    for i, message in enumerate(_shaped(body.get("messages"), "messages", text=False)):
        if not isinstance(message, dict):
            raise Refused(f"messages[{i}] must be an object; anything else is not checked, so it is not sent")
        _blocks(_shaped(message.get("content"), f"messages[{i}].content"), f"messages[{i}].content", allow, 0)


def _shaped(value: Any, where: str, *, text: bool = True) -> list[Any]:
    """The list to walk at `where` (none for a missing value or, if `text`, a string). Any
    other shape is refused: what the check cannot walk is not sent unchecked."""
    if value is None or (text and isinstance(value, str)):
        return []
    if not isinstance(value, list):
        shapes = "a string or a list" if text else "a list"
        raise Refused(f"{where} must be {shapes}, not {type(value).__name__}; anything else is not checked, so it is not sent")
    return value


def _betas(beta: str | None) -> Iterable[str]:
    return [] if not beta else [name.strip() for name in beta.split(",") if name.strip()]


def _blocks(blocks: list[Any], where: str, allow: Allow, depth: int) -> None:
    if depth > MAX_DEPTH and blocks:
        raise Refused(f"{where}: content nested deeper than {MAX_DEPTH} levels is refused")
    for i, block in enumerate(blocks):
        at = f"{where}[{i}]"
        kind = block.get("type") if isinstance(block, dict) else None
        kind = kind if isinstance(kind, str) else "(none)"
        if kind not in CONTENT_TYPES and kind not in allow.content:
            raise _refused(f"{at}: a block of type {kind!r}", "content", kind, "only text, images, documents and the agent's own tool calls and results are sent")
        source = block.get("source")
        if kind in ("image", "document") and source is not None and not isinstance(source, dict):
            raise Refused(f"{at}.source must be an object, not {type(source).__name__}; anything else is not checked, so it is not sent")
        if kind in ("image", "document") and isinstance(source, dict):
            source_type = source.get("type") if isinstance(source.get("type"), str) else "(none)"
            name = f"{kind}.source.{source_type}"
            if source_type not in INLINE_SOURCES and name not in allow.content:
                raise _refused(f"{at}: {kind} source of type {source_type!r}", "content", name, "the provider would fetch it from outside the request")
            if source_type == "content":
                _blocks(_shaped(source.get("content"), f"{at}.source.content"), f"{at}.source.content", allow, depth + 1)
        if kind in ("tool_result", "search_result"):
            _blocks(_shaped(block.get("content"), f"{at}.content"), f"{at}.content", allow, depth + 1)


def _why_key(key: str) -> str:
    known = {
        "mcp_servers": "the MCP connector makes the provider connect to the servers it names",
        "container": "it reuses a code-execution container on the provider's side",
        "betas": "betas go in the anthropic-beta header, where they are checked",
    }
    return known.get(key, "the provider may act on it by itself, or it changes what a call costs")


def _refused(what: str, field: str, name: str, why: str) -> Refused:
    shown = name if len(name) <= MAX_NAME else name[:MAX_NAME] + "..."
    return Refused(f"{what} is refused: {why}. To allow it, name it in the spec: model.allow.{field}: [{shown!r}]")
