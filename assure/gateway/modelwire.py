"""The model routes' wire types: a parsed call, a response, and the errors the gateway
answers itself, in Anthropic's shape or, on the OpenAI API's routes, in OpenAI's. Standard
library only (runs inside the gateway image)."""

from __future__ import annotations

import json
import re
from typing import Any

from assure.core.record import dataclass, field
from assure.gateway import headers as header_names
from assure.gateway.dispatch import MODEL_ROUTES

PATHS = {endpoint: path for path, endpoint in MODEL_ROUTES.items()}
OPENAI = frozenset(("chat_completions", "responses", "models"))  # the endpoints of the OpenAI API
SPENDING = frozenset(
    ("messages", "chat_completions", "responses")
)  # the endpoints that spend tokens
# The request keys that cap a call's output, per endpoint; the first is the one the gateway
# sets when it clamps a call to what the budget has left (model.py).
OUTPUT_CAPS = {
    "messages": ("max_tokens",),
    "chat_completions": ("max_completion_tokens", "max_tokens"),
    "responses": ("max_output_tokens",),
}
# Response headers passed back (and recorded): what the SDK reads, nothing about the account.
PASSED_HEADERS = frozenset(
    (
        "content-type",
        "content-encoding",
        "request-id",
        "x-request-id",
        "retry-after",
        "retry-after-ms",
        "x-should-retry",
    )
)
PASSED_PREFIXES = ("anthropic-ratelimit-", "x-ratelimit-")
MAX_PASSED_HEADERS = 32
MAX_HEADER_VALUE = 1024
MAX_MESSAGE_CHARS = 1024
JSON = "application/json"
SSE = "text/event-stream"
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")


class ModelError(Exception):
    """Model access cannot start: an unusable key file, recording or script (named)."""


class Failure(Exception):
    """A call the gateway answers itself: `status` with an error JSON of type `kind` (and the
    `detail` fields beside its message). `retry=False` adds `x-should-retry: false` (the SDKs
    would otherwise retry a 409 or 5xx)."""

    def __init__(
        self,
        status: int,
        kind: str,
        message: str,
        *,
        code: str,
        retry: bool | None = None,
        detail: dict[str, Any] | None = None,
    ):
        super().__init__(message)
        self.status, self.kind, self.message, self.code, self.retry = (
            status,
            kind,
            message[:MAX_MESSAGE_CHARS],
            code,
            retry,
        )
        self.detail = detail or {}


@dataclass(frozen=True)
class Call:
    """One model request, parsed."""

    endpoint: str  # a value of MODEL_ROUTES
    body: bytes  # what is forwarded: the agent's bytes, unless the gateway clamped its output cap
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

    @property
    def openai(self) -> bool:
        return self.endpoint in OPENAI

    @property
    def output_cap(self) -> int | None:
        """The most output tokens the agent asked for (the smallest cap it set), None: no cap."""
        caps = [
            self.parsed[key]
            for key in OUTPUT_CAPS.get(self.endpoint, ())
            if isinstance(self.parsed.get(key), int)
        ]
        return min(caps) if caps else None


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


def error_json(exc: Failure, openai: bool = False) -> bytes:
    """Anthropic's error shape, or OpenAI's (`{"error": {"message", "type", "param", "code"}}`)."""
    if openai:
        error = {
            "message": exc.message,
            "type": exc.kind,
            "param": None,
            "code": exc.code,
            **exc.detail,
        }
        return json.dumps({"error": error}, separators=(",", ":")).encode()
    return json.dumps(
        {"type": "error", "error": {"type": exc.kind, "message": exc.message, **exc.detail}},
        separators=(",", ":"),
    ).encode()


def failure_response(exc: Failure, openai: bool = False) -> Response:
    headers: tuple[tuple[str, str], ...] = (("content-type", JSON),)
    if exc.retry is not None:
        headers += (("x-should-retry", "true" if exc.retry else "false"),)
    return Response(exc.status, headers, error_json(exc, openai), "gateway", error=exc.code)


def passed_headers(items: Any) -> tuple[tuple[str, str], ...]:
    """The response headers the agent gets (and the journal records), cleaned; content-type
    first."""
    out: dict[str, str] = {}
    for name, value in items:
        lower = header_names.key(str(name))
        if lower not in PASSED_HEADERS and not lower.startswith(PASSED_PREFIXES):
            continue
        value = " ".join(str(value).split())
        if (
            not _HEADER_NAME.match(lower)
            or len(value) > MAX_HEADER_VALUE
            or any(ord(c) > 0xFF for c in value)
        ):
            continue
        out[lower] = f"{out[lower]}, {value}" if lower in out else value
        if len(out) >= MAX_PASSED_HEADERS:
            break
    out.setdefault("content-type", "application/octet-stream")
    return (("content-type", out.pop("content-type")), *sorted(out.items()))
