"""The model routes' wire types: a parsed call, a response, and the errors the gateway
answers itself in Anthropic's shape. Standard library only (runs inside the gateway image)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from assure.gateway.dispatch import MODEL_ROUTES

PATHS = {endpoint: path for path, endpoint in MODEL_ROUTES.items()}
# Response headers passed back (and recorded): what the SDK reads, nothing about the account.
PASSED_HEADERS = frozenset(("content-type", "content-encoding", "request-id", "retry-after", "retry-after-ms", "x-should-retry"))
PASSED_PREFIXES = ("anthropic-ratelimit-",)
MAX_PASSED_HEADERS = 32
MAX_HEADER_VALUE = 1024
MAX_MESSAGE_CHARS = 1024
JSON = "application/json"
SSE = "text/event-stream"
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")


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


def passed_headers(items: Any) -> tuple[tuple[str, str], ...]:
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
