"""The host's side of the in-container shim (assure/agents/inspect_shim.py): one `docker exec`
per Inspect operation, its request in, its reply out, every read bounded.

The reply comes from the agent's container, so it is data: its header is parsed as JSON of
at most MAX_HEAD_BYTES, its sizes are checked against what was read and against the limit
asked for, and nothing in it names a host path. Nothing here imports Inspect.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from assure.errors import SandboxError
from assure.sandbox import registry
from assure.sandbox.backend import Exec, SandboxBackend

SHIM = ("python3", "-S", "-P", "-m", "assure.agents.inspect_shim")
MAX_HEAD_BYTES = 64 * 1024
ENGINE_SLACK_SECONDS = 30.0  # beyond a command's own timeout: the engine's round trips

_local = threading.local()


def backend(name: str) -> SandboxBackend:
    """This thread's client of the spec's engine (`sandbox.backend`, by the registry's name;
    docker-py's client is one HTTP session: one per thread)."""
    made: dict[str, SandboxBackend] = _local.__dict__.setdefault("backends", {})
    if name not in made:
        made[name] = registry.create(name)
    return made[name]


@dataclass(frozen=True)
class Reply:
    """The shim's answer: `head` (its JSON fields) and the payload parts it announced."""

    head: dict[str, Any]
    parts: tuple[bytes, ...] = field(default=())

    @property
    def error(self) -> str | None:
        value = self.head.get("error")
        return str(value) if value is not None else None

    @property
    def message(self) -> str:
        return str(self.head.get("message", ""))[:2000]


def call(
    engine: str,
    agent: str,
    request: dict[str, Any],
    data: bytes,
    *,
    sizes: tuple[str, ...],
    limit: int,
    timeout: float | None,
) -> Reply:
    """Send `request` (and `data`, the command's stdin or the file's bytes) to the shim in
    the container `agent` of the backend named `engine`; the reply's payload is cut in `sizes`
    (header fields), each at most `limit` bytes. SandboxError: the container is gone, the backend
    runs no command in a running container (`Exec`), or the reply is not one."""
    engine_client = backend(engine)
    if not isinstance(engine_client, Exec):
        raise SandboxError(
            f"the sandbox backend {engine!r} runs no command in a running container, which an"
            " Inspect sample's tools need",
            fix="run Inspect samples on a backend with `exec` (docker)",
        )
    header = json.dumps({**request, "input_size": len(data), "limit": limit}).encode() + b"\n"
    code, out, err = engine_client.exec(
        agent,
        list(SHIM),
        header + data,
        limit=MAX_HEAD_BYTES + limit * max(1, len(sizes)),
        timeout=None if timeout is None else timeout + ENGINE_SLACK_SECONDS,
    )
    line, _, rest = out.partition(b"\n")
    try:
        if len(line) > MAX_HEAD_BYTES:
            raise ValueError("header too long")
        head = json.loads(line)
        if not isinstance(head, dict):
            raise ValueError("header is not an object")
        cut = [int(head.get(name, 0)) for name in sizes]
        if any(n < 0 or n > limit for n in cut) or sum(cut) != len(rest):
            raise ValueError("payload sizes do not match")
    except ValueError as exc:
        shown = err[-500:].decode("utf-8", "replace")
        raise SandboxError(
            f"the sandbox shim gave no reply ({exc}; exit {code}): {shown}",
            fix="the agent container may have stopped (deadline, halt, budget): see the run",
        ) from None
    parts, at = [], 0
    for n in cut:
        parts.append(rest[at : at + n])
        at += n
    return Reply(head, tuple(parts))
