"""The OpenAI API's edge of the model routes: a scripted answer (a Messages response object,
the one script format) as a chat completion or a Responses object, JSON or SSE stream, and
the usage an OpenAI answer reports, in the Messages API's fields that the budget counts.
Everything between the edges (gate, budget, journal, blobs) is the same for both APIs.
Standard library only (runs inside the gateway image)."""

from __future__ import annotations

import json
from typing import Any

FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _parts(message: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
    """(the text, the tool calls as (id, name, arguments)) of a Messages response object."""
    texts, calls = [], []
    for block in message.get("content") or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            calls.append(
                {
                    "id": str(block.get("id", "")),
                    "name": str(block.get("name", "")),
                    "arguments": _dumps(block.get("input", {})),
                }
            )
    return ("".join(texts) if texts else None), calls


def openai_usage(usage: Any, responses: bool) -> dict[str, Any]:
    """A Messages `usage` as the OpenAI API reports it (cache writes count as prompt tokens)."""
    usage = usage if isinstance(usage, dict) else {}

    def get(name: str) -> int:
        return int(usage.get(name, 0) or 0)

    prompt = (
        get("input_tokens") + get("cache_creation_input_tokens") + get("cache_read_input_tokens")
    )
    out = get("output_tokens")
    if responses:
        return {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": get("cache_read_input_tokens")},
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + out,
        }
    return {
        "prompt_tokens": prompt,
        "completion_tokens": out,
        "total_tokens": prompt + out,
        "prompt_tokens_details": {"cached_tokens": get("cache_read_input_tokens")},
    }


def chat_completion(message: dict[str, Any]) -> dict[str, Any]:
    text, calls = _parts(message)
    reply: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if calls:
        reply["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in calls
        ]
    return {
        "id": f"chatcmpl-{message.get('id', '')}",
        "object": "chat.completion",
        "created": 0,
        "model": message.get("model"),
        "choices": [
            {
                "index": 0,
                "message": reply,
                "finish_reason": FINISH.get(str(message.get("stop_reason")), "stop"),
                "logprobs": None,
            }
        ],
        "usage": openai_usage(message.get("usage"), responses=False),
    }


def chat_stream(message: dict[str, Any], include_usage: bool) -> bytes:
    """The chunks the API streams for `chat_completion(message)`, then `data: [DONE]`. The
    usage rides on the last chunk, or on a chunk of its own with `stream_options.include_usage`."""
    whole = chat_completion(message)
    head = {key: whole[key] for key in ("id", "created", "model")} | {
        "object": "chat.completion.chunk"
    }
    choice = whole["choices"][0]

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return {
            **head,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            **extra,
        }

    chunks = [chunk({"role": "assistant", "content": ""})]
    if choice["message"]["content"]:
        chunks.append(chunk({"content": choice["message"]["content"]}))
    for i, call in enumerate(choice["message"].get("tool_calls", [])):
        chunks.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        chunks.append(
            chunk(
                {
                    "tool_calls": [
                        {"index": i, "function": {"arguments": call["function"]["arguments"]}}
                    ]
                }
            )
        )
    if include_usage:
        chunks += [
            chunk({}, choice["finish_reason"]),
            {**head, "choices": [], "usage": whole["usage"]},
        ]
    else:
        chunks.append(chunk({}, choice["finish_reason"], usage=whole["usage"]))
    return b"".join(f"data: {_dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def _items(message: dict[str, Any]) -> list[dict[str, Any]]:
    text, calls = _parts(message)
    items: list[dict[str, Any]] = []
    if text is not None:
        part = {"type": "output_text", "text": text, "annotations": []}
        items.append(
            {
                "type": "message",
                "id": f"msg_{message.get('id', '')}",
                "status": "completed",
                "role": "assistant",
                "content": [part],
            }
        )
    for call in calls:
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{call['id']}",
                "call_id": call["id"],
                "name": call["name"],
                "arguments": call["arguments"],
                "status": "completed",
            }
        )
    return items


def response_object(message: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    done = status == "completed"
    return {
        "id": f"resp_{message.get('id', '')}",
        "object": "response",
        "created_at": 0,
        "status": status,
        "model": message.get("model"),
        "output": _items(message) if done else [],
        "usage": openai_usage(message.get("usage"), responses=True) if done else None,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "parallel_tool_calls": True,
        "temperature": None,
        "top_p": None,
        "tool_choice": "auto",
        "tools": [],
        "text": {"format": {"type": "text"}},
    }


def responses_stream(message: dict[str, Any]) -> bytes:
    """The events the Responses API streams for `response_object(message)`."""
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": response_object(message, "in_progress")},
        {"type": "response.in_progress", "response": response_object(message, "in_progress")},
    ]
    for index, item in enumerate(_items(message)):
        events.append(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {
                    **item,
                    "status": "in_progress",
                    **({"content": []} if item["type"] == "message" else {"arguments": ""}),
                },
            }
        )
        if item["type"] == "message":
            part = item["content"][0]
            at = {"item_id": item["id"], "output_index": index, "content_index": 0}
            events += [
                {"type": "response.content_part.added", **at, "part": {**part, "text": ""}},
                {"type": "response.output_text.delta", **at, "delta": part["text"], "logprobs": []},
                {"type": "response.output_text.done", **at, "text": part["text"], "logprobs": []},
                {"type": "response.content_part.done", **at, "part": part},
            ]
        else:
            at = {"item_id": item["id"], "output_index": index}
            events += [
                {
                    "type": "response.function_call_arguments.delta",
                    **at,
                    "delta": item["arguments"],
                },
                {
                    "type": "response.function_call_arguments.done",
                    **at,
                    "arguments": item["arguments"],
                },
            ]
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": response_object(message)})
    return b"".join(
        f"event: {e['type']}\ndata: {_dumps({**e, 'sequence_number': n})}\n\n".encode()
        for n, e in enumerate(events)
    )


def models_list(models: list[str]) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [{"id": m, "object": "model", "created": 0, "owned_by": "assure"} for m in models],
    }


def usage_fields(usage: Any) -> dict[str, int]:
    """An OpenAI `usage` (chat: prompt/completion tokens; Responses: input/output tokens) in the
    Messages API's fields: cached prompt tokens are cache reads, the rest input."""
    if not isinstance(usage, dict):
        return {}

    def whole(value: Any) -> int | None:
        return (
            value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
        )

    prompt = whole(usage.get("prompt_tokens", usage.get("input_tokens")))
    output = whole(usage.get("completion_tokens", usage.get("output_tokens")))
    details = usage.get("prompt_tokens_details", usage.get("input_tokens_details"))
    cached = whole(details.get("cached_tokens")) if isinstance(details, dict) else None
    if prompt is None and output is None:
        return {}
    cached = min(cached or 0, prompt or 0)
    return {
        "input_tokens": (prompt or 0) - cached,
        "output_tokens": output or 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    }


def usage_of(
    data: bytes, sse: bool, events: list[dict[str, Any]]
) -> tuple[dict[str, int], str | None]:
    """(usage, model) of an OpenAI answer: a JSON body, or the SSE `events` (chat chunks: the
    last `usage`; Responses: the final response event's)."""
    if sse:
        usage: dict[str, int] = {}
        model = None
        for event in events:
            found = found_read if isinstance(found_read := event.get("response"), dict) else event
            if isinstance(found.get("model"), str):
                model = found["model"]
            if found.get("usage"):
                usage = usage_fields(found["usage"]) or usage
        return usage, model
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        return {}, None
    if not isinstance(body, dict):
        return {}, None
    return usage_fields(body.get("usage")), body.get("model") if isinstance(
        body.get("model"), str
    ) else None
