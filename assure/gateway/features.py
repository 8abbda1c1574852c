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
AnthropicBetaParam) and, on the OpenAI routes, the openai SDK 3.x's chat and Responses params
(the provider's own tools, stored state and images or files by URL or id are refused). The
same check applies in every model mode, so a replayed run is held to what the recorded one was.
A refusal names every refused part at once, with the `model.allow` lines that would allow them,
so an agent that shows a 403 as "Failed to authenticate" still shows the whole cause.

Standard library only (this module runs inside the gateway image).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from assure.core.record import dataclass

# Top-level keys of POST /v1/messages (and /count_tokens) that the provider does not act on
# by itself: the conversation, sampling, tool definitions, thinking, caching, output format.
REQUEST_KEYS = frozenset(
    (
        "model",
        "messages",
        "max_tokens",
        "system",
        "stop_sequences",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "metadata",
        "tools",
        "tool_choice",
        "thinking",
        "cache_control",
        "output_config",
        "output_format",
    )
)
TOOL_TYPES = frozenset(
    ("custom",)
)  # a tool without `type` is custom: the agent runs it, not the provider
CONTENT_TYPES = frozenset(
    (
        "text",
        "image",
        "document",
        "search_result",
        "thinking",
        "redacted_thinking",
        "tool_use",
        "tool_result",
        "tool_reference",
    )
)
INLINE_SOURCES = frozenset(
    ("base64", "text", "content")
)  # sources whose bytes are in the request itself
BETAS = frozenset(
    (  # betas that switch on nothing the provider does by itself, and no other price
        "prompt-caching-2024-07-31",
        "pdfs-2024-09-25",
        "token-counting-2024-11-01",
        "token-efficient-tools-2025-02-19",
        "output-128k-2025-02-19",
        "interleaved-thinking-2025-05-14",
        "model-context-window-exceeded-2025-08-26",
        "structured-outputs-2025-11-13",
    )
)
# POST /v1/chat/completions and /v1/responses (the openai SDK 3.x's CompletionCreateParams and
# ResponseCreateParams): what the provider does not act on by itself. Left out on purpose:
# `web_search_options` (it searches), `previous_response_id`, `conversation`, `prompt` and
# `item_reference` items (state kept on the provider's side, which no replay holds), `background`,
# `store` (it keeps the exchange), and `n`, `audio`, `modalities`, `prediction`, `service_tier`
# (other prices, which the reservation does not count).
OPENAI_KEYS = {
    "chat_completions": frozenset(
        (
            "model",
            "messages",
            "max_tokens",
            "max_completion_tokens",
            "stream",
            "stream_options",
            "temperature",
            "top_p",
            "stop",
            "seed",
            "frequency_penalty",
            "presence_penalty",
            "logit_bias",
            "logprobs",
            "top_logprobs",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "response_format",
            "reasoning_effort",
            "verbosity",
            "user",
            "metadata",
            "functions",
            "function_call",
            "prompt_cache_key",
            "safety_identifier",
        )
    ),
    "responses": frozenset(
        (
            "model",
            "input",
            "instructions",
            "max_output_tokens",
            "stream",
            "stream_options",
            "temperature",
            "top_p",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "text",
            "reasoning",
            "truncation",
            "include",
            "user",
            "metadata",
            "prompt_cache_key",
            "safety_identifier",
            "top_logprobs",
        )
    ),
}
OPENAI_TOOL_TYPES = frozenset(
    ("function", "custom")
)  # the agent runs them; web_search, file_search, mcp, ... the provider does
OPENAI_CONTENT_TYPES = frozenset(
    (  # message content parts and Responses input items
        "text",
        "image_url",
        "input_audio",
        "file",
        "refusal",
        "input_text",
        "input_image",
        "input_file",
        "output_text",
        "message",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "reasoning",
    )
)
MAX_DEPTH = 4  # tool_result > document > content source > block: deeper is refused, not walked
MAX_NAME = 80  # a refused name is quoted at most this long
MAX_NAMES = 32  # and a refusal lists at most this many names per field (it is journaled whole)
WHY = {  # one reason per spec field, said once in a refusal however many names it lists
    "request_keys": "a request key can make the provider act by itself or change what a call costs",
    "betas": "a beta can switch on features the provider runs by itself",
    "tool_types": "a server or provider-defined tool runs on the provider's side, not in the agent",
    "content": (
        "only inline text, images, documents and the agent's own tool calls and results are sent;"
        " the provider fetches anything else itself"
    ),
}


@dataclass(frozen=True)
class Problem:
    """One refused part of a request: where it is, and the name `model.allow.<field>` takes."""

    where: str  # e.g. "request key 'mcp_servers'", "tools[1] of type 'web_search_20250305'"
    field: str  # a key of WHY
    name: str


class Refused(Exception):
    """The request holds something the provider would act on by itself. The message names
    every refused part at once and the spec lines that would allow them; `problems` lists them."""

    def __init__(self, message: str, problems: tuple[Problem, ...] = ()):
        super().__init__(message)
        self.problems = problems

    @classmethod
    def of(cls, problems: list[Problem]) -> Refused:
        fields = [f for f in WHY if any(p.field == f for p in problems)]
        lines = "; ".join(
            f"model.allow.{f}: [{', '.join(_shown(n) for n in names)}]"
            for f, names in _grouped(problems).items()
        )
        count = f"{len(problems)} part{'s' if len(problems) != 1 else ''}"
        message = (
            f"not an authentication problem: the gateway refuses {count} of this request. To allow"
            f" {'them' if len(problems) != 1 else 'it'}, add to the spec: {lines}. Refused:"
            f" {', '.join(p.where for p in problems)}. Why: {'; '.join(WHY[f] for f in fields)}."
        )
        return cls(message, tuple(problems))

    def allow(self) -> dict[str, list[str]]:
        """The `model.allow` block that would allow every refused part (for the 403 body and
        journal)."""
        return _grouped(list(self.problems))


def _grouped(problems: list[Problem]) -> dict[str, list[str]]:
    """field -> the distinct names refused under it (at most MAX_NAMES each), in WHY's order."""
    out = {
        f: list(dict.fromkeys(p.name[:MAX_NAME] for p in problems if p.field == f))[:MAX_NAMES]
        for f in WHY
    }
    return {f: names for f, names in out.items() if names}


@dataclass(frozen=True)
class Allow:
    """What a spec allows beyond the defaults, by name (`model.allow` in the spec)."""

    request_keys: frozenset[str] = frozenset()
    tool_types: frozenset[str] = frozenset()
    content: frozenset[str] = (
        frozenset()
    )  # block types, or `<block>.source.<type>` (e.g. image.source.url)
    betas: frozenset[str] = frozenset()


def check(body: dict[str, Any], beta: str | None, allow: Allow, endpoint: str = "messages") -> None:
    """Raise `Refused` naming every part of the request that is not allowed (a part whose
    shape cannot be walked is refused on its own: there is nothing a spec could allow)."""
    problems: list[Problem] = []
    known = OPENAI_KEYS.get(endpoint, REQUEST_KEYS)
    for key in sorted(body):
        if key not in known and key not in allow.request_keys:
            problems.append(Problem(f"request key {_shown(key)}", "request_keys", key))
    for name in _betas(beta):
        if name not in BETAS and name not in allow.betas:
            problems.append(Problem(f"anthropic-beta {_shown(name)}", "betas", name))
    default = "function" if endpoint in OPENAI_KEYS else "custom"
    allowed_tools = OPENAI_TOOL_TYPES if endpoint in OPENAI_KEYS else TOOL_TYPES
    for i, tool in enumerate(_shaped(body.get("tools"), "tools", text=False)):
        kind = tool.get("type", default) if isinstance(tool, dict) else None
        kind = kind if isinstance(kind, str) else "(none)"
        if kind not in allowed_tools and kind not in allow.tool_types:
            problems.append(Problem(f"tools[{i}] of type {_shown(kind)}", "tool_types", kind))
    if endpoint in OPENAI_KEYS:
        _openai(body, allow, problems)
    else:
        _blocks(_shaped(body.get("system"), "system"), "system", allow, 0, problems)
        for i, message in enumerate(_shaped(body.get("messages"), "messages", text=False)):
            if not isinstance(message, dict):
                raise Refused(
                    f"messages[{i}] must be an object; anything else is not checked, so it is not"
                    " sent"
                )
            _blocks(
                _shaped(message.get("content"), f"messages[{i}].content"),
                f"messages[{i}].content",
                allow,
                0,
                problems,
            )
    if problems:
        raise Refused.of(problems)


def _openai(body: dict[str, Any], allow: Allow, problems: list[Problem]) -> None:
    """Chat messages' content parts, or Responses input items and their content parts: inline
    only (an image or file by URL or by file id is fetched by the provider)."""
    items = (
        _shaped(body.get("messages"), "messages", text=False)
        if "messages" in body
        else _shaped(body.get("input"), "input")
    )
    where = "messages" if "messages" in body else "input"
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise Refused(
                f"{where}[{i}] must be an object; anything else is not checked, so it is not sent"
            )
        if where == "input" and "type" in item:
            _part(item, f"{where}[{i}]", allow, problems)
        for j, part in enumerate(_shaped(item.get("content"), f"{where}[{i}].content")):
            if not isinstance(part, dict):
                raise Refused(
                    f"{where}[{i}].content[{j}] must be an object; anything else is not checked, so"
                    " it is not sent"
                )
            _part(part, f"{where}[{i}].content[{j}]", allow, problems)


def _part(part: dict[str, Any], at: str, allow: Allow, problems: list[Problem]) -> None:
    kind = kind_read if isinstance(kind_read := part.get("type"), str) else "(none)"
    if kind not in OPENAI_CONTENT_TYPES and kind not in allow.content:
        problems.append(Problem(f"{at}: a part of type {_shown(kind)}", "content", kind))
        return
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if (
        kind in ("image_url", "input_image")
        and url is not None
        and not (isinstance(url, str) and url.startswith("data:"))
    ):
        name = f"{kind}.url"
        if name not in allow.content:
            problems.append(Problem(f"{at}: an image by URL", "content", name))
    file = file_read if kind == "file" and isinstance(file_read := part.get("file"), dict) else part
    for ref in ("file_id", "file_url"):
        if (
            kind in ("image_url", "input_image", "file", "input_file")
            and file.get(ref) is not None
            and f"{kind}.{ref}" not in allow.content
        ):
            problems.append(Problem(f"{at}: a file by {ref}", "content", f"{kind}.{ref}"))


def _shaped(value: Any, where: str, *, text: bool = True) -> list[Any]:
    """The list to walk at `where` (none for a missing value or, if `text`, a string). Any
    other shape is refused: what the check cannot walk is not sent unchecked."""
    if value is None or (text and isinstance(value, str)):
        return []
    if not isinstance(value, list):
        shapes = "a string or a list" if text else "a list"
        raise Refused(
            f"{where} must be {shapes}, not {type(value).__name__}; anything else is not checked,"
            " so it is not sent"
        )
    return value


def _betas(beta: str | None) -> Iterable[str]:
    return [] if not beta else [name.strip() for name in beta.split(",") if name.strip()]


def _blocks(
    blocks: list[Any], where: str, allow: Allow, depth: int, problems: list[Problem]
) -> None:
    if depth > MAX_DEPTH and blocks:
        raise Refused(f"{where}: content nested deeper than {MAX_DEPTH} levels is refused")
    for i, block in enumerate(blocks):
        at = f"{where}[{i}]"
        kind = block.get("type") if isinstance(block, dict) else None
        kind = kind if isinstance(kind, str) else "(none)"
        if kind not in CONTENT_TYPES and kind not in allow.content:
            problems.append(Problem(f"{at}: a block of type {_shown(kind)}", "content", kind))
            continue
        source = block.get("source")
        if kind in ("image", "document") and source is not None and not isinstance(source, dict):
            raise Refused(
                f"{at}.source must be an object, not {type(source).__name__}; anything else is not"
                " checked, so it is not sent"
            )
        if kind in ("image", "document") and isinstance(source, dict):
            source_type = (
                source_type_read
                if isinstance(source_type_read := source.get("type"), str)
                else "(none)"
            )
            name = f"{kind}.source.{source_type}"
            if source_type not in INLINE_SOURCES and name not in allow.content:
                problems.append(
                    Problem(f"{at}: {kind} source of type {_shown(source_type)}", "content", name)
                )
            if source_type == "content":
                _blocks(
                    _shaped(source.get("content"), f"{at}.source.content"),
                    f"{at}.source.content",
                    allow,
                    depth + 1,
                    problems,
                )
        if kind in ("tool_result", "search_result"):
            _blocks(
                _shaped(block.get("content"), f"{at}.content"),
                f"{at}.content",
                allow,
                depth + 1,
                problems,
            )


def _shown(name: str) -> str:
    return repr(name if len(name) <= MAX_NAME else name[:MAX_NAME] + "...")
