"""Where the gateway's outbound HTTP may go: its own module so that the config (which builds
it) and http.py (which enforces it) do not import each other."""

from __future__ import annotations

from assure.core.record import dataclass


@dataclass(frozen=True)
class Egress:
    """Outbound HTTP for `http.request`: the egress proxy to send through, the exact
    `host:port`s (host lowercased) the gateway itself lets pass, and how large a request
    body may be and a response body is kept (beyond it: `truncated`). Absent: no egress."""

    proxy_host: str
    proxy_port: int
    allow: frozenset[str]
    max_request_bytes: int = 1024 * 1024
    max_response_bytes: int = 1024 * 1024
