"""Turn each tool request into one gate decision, at most one effect and one journal line.

Decision, effect and journaling happen under one lock, so the journal order is the effect
order, and the journal line is written before the answer leaves. Anything unexpected
denies or answers 5xx and is journaled (fail closed); if the journal itself fails, no
further tool call is served.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from assure import gate
from assure.chain import ChainWriter, canonical, sha256_hex

from . import tools
from .config import Config
from .fspath import PathError, Workspace

MAX_DETAIL_CHARS = 256
MAX_REASON_CHARS = 1024


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]


@dataclass
class Counters:
    requests: int = 0
    tool_calls: int = 0
    denied: int = 0
    rejected: int = 0


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


class Dispatcher:
    """Owns the journal, the counters and the one lock that orders effects."""

    def __init__(self, config: Config, workspace: Workspace):
        self._config = config
        self._env = tools.Env(workspace, config.limits.max_file_bytes)
        self._known = frozenset(tools.BY_NAME)
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()
        self.counters = Counters()
        self._journal = ChainWriter(config.journal, base={"run_id": config.run_id, "attempt": config.attempt, "actor": "gateway"})
        self._open = True
        self._journal.append(
            "gateway_started",
            config_sha256=config.digest,
            tools=sorted(self._known),
            protected=list(config.protected),
            limits=asdict(config.limits),
        )

    def count_request(self) -> None:
        with self._count_lock:
            self.counters.requests += 1

    def reject(self, status: int, code: str, message: str, **detail: str) -> Answer:
        """Journal a request refused before reaching the gate and build its answer."""
        fields = {key: value[:MAX_DETAIL_CHARS] for key, value in detail.items() if value}
        message = message[:MAX_REASON_CHARS]
        with self._lock:
            self.counters.rejected += 1
            self._append("request_rejected", status=status, code=code, reason=message, **fields)
        return Answer(status, error_body(code, message))

    def call(self, tool: tools.Tool, body: dict[str, Any]) -> Answer:
        """Parse, decide, run and journal one tool call."""
        try:
            args, meta = tools.parse(tool, body)
            path = tools.target_path(args)
        except (tools.ArgError, PathError) as exc:
            return self.reject(400, exc.code, exc.message, tool=tool.name)
        with self._lock:
            if not self._open:
                return Answer(503, error_body("unavailable", "the gateway journal is unavailable; no tool calls are served"))
            record = {
                "action_id": uuid.uuid4().hex,
                "tool": tool.name,
                "path": path,
                "args_digest": sha256_hex(canonical(args)),
                **{name: meta.get(name) for name in tools.META_PARAMS},
                "effect": None,
            }
            answer = self._decide_and_run(tool, args, path, record)
            if not self._append("tool_call", **record):
                body = {"action_id": record["action_id"], "decision": record["decision"]}
                return Answer(500, {**body, **error_body("journal_error", "the journal could not be written")})
            return answer

    def close(self, reason: str) -> None:
        """Journal `gateway_stopped` with the counters and fsync the journal (idempotent)."""
        with self._lock:
            if self._open:
                self._append("gateway_stopped", reason=reason, counters=asdict(self.counters))
            self._open = False
            self._journal.close()

    def _decide_and_run(self, tool: tools.Tool, args: dict[str, Any], path: str | None, record: dict[str, Any]) -> Answer:
        record.update(decision=gate.DENY, rule="internal_error", reason="not decided", inputs={})
        try:
            ctx = gate.Context(
                known_tools=self._known,
                now=time.time(),
                budget=gate.Budget(tool_calls_used=self.counters.tool_calls, tool_calls_limit=self._config.limits.tool_calls),
                protected=self._config.protected,
                require_contract=False,  # legacy: gateway configs carry no contract yet; sandbox writes need only PROPOSE
            )
            self.counters.tool_calls += 1
            decision = gate.decide(gate.Action(tool.name, tool.mutates, path), ctx)
            record.update(decision=decision.outcome, rule=decision.rule, reason=decision.reason, inputs=decision.inputs)
            if not decision.allowed:
                self.counters.denied += 1
                return _finish(record, 403, error_body("denied", decision.reason))
            outcome = tools.run(tool, self._env, args)
            record.update(outcome.record)
            return _finish(record, 200, {"result": outcome.result})
        except tools.ToolError as exc:
            return _finish(record, exc.status, error_body(exc.code, exc.message))
        except Exception as exc:  # fail closed: never an allow without a finished, journaled call
            if record["decision"] != gate.ALLOW:
                self.counters.denied += 1
                record.update(reason=f"gateway error: {type(exc).__name__}")
            return _finish(record, 500, error_body("internal_error", f"gateway error: {type(exc).__name__}"))

    def _append(self, event: str, **fields: Any) -> bool:
        """Write one journal line; on failure stop serving tool calls. Caller holds the lock."""
        if not self._open:
            return False
        try:
            self._journal.append(event, **fields)
        except Exception:
            self._open = False
            return False
        return True


def _finish(record: dict[str, Any], status: int, body: dict[str, Any]) -> Answer:
    record.update(status=status, error=body["error"]["code"] if "error" in body else None)
    return Answer(status, {"action_id": record["action_id"], "decision": record["decision"], **body})
