"""What a model call spent: its usage (JSON or SSE answer) and its price. Standard library
only (runs inside the gateway image)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from assure.gateway import modelopenai
from assure.gateway.config import Price
from assure.gateway.modelwire import SSE, Response

USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)
FEE_TOOLS = {
    "web_search": "web_search_requests",
    "web_fetch": "web_fetch_requests",
}  # tool type prefix -> usage field


def sse_events(data: bytes) -> list[dict[str, Any]]:
    """The JSON `data` of each event of an SSE body (events that are not JSON objects are
    skipped)."""
    out: list[dict[str, Any]] = []
    text = data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    for block in text.split("\n\n"):
        lines = [
            line[5:].removeprefix(" ") for line in block.split("\n") if line.startswith("data:")
        ]
        if not lines:
            continue
        try:
            value = json.loads("\n".join(lines))
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def usage_of(response: Response, openai: bool = False) -> tuple[dict[str, int], str | None]:
    """(usage, model) of a successful Messages response (or, `openai`, a chat completion or
    Responses answer: modelopenai.py reads it), JSON or SSE."""
    usage: dict[str, int] = {}
    sse = response.content_type.split(";")[0].strip().lower() == SSE
    if openai:
        return modelopenai.usage_of(response.body, sse, sse_events(response.body) if sse else [])
    if sse:
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
    except (
        ValueError,
        RecursionError,
    ):  # e.g. a tool input the model nested deeper than the parser goes
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
    for where, names in (
        (source, USAGE_FIELDS),
        (server if isinstance(server, dict) else {}, tuple(FEE_TOOLS.values())),
    ):
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
