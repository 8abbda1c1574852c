"""Where the gateway's outbound HTTP may go: its own module so that the config (which builds
it) and http.py (which enforces it) do not import each other."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Egress:
    """Outbound HTTP for `http.request`: the egress proxy to send through and the exact
    `host:port`s (host lowercased) the gateway itself lets pass. Absent: no egress."""

    proxy_host: str
    proxy_port: int
    allow: frozenset[str]
