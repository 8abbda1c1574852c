"""Turn each tool request into one gate decision, at most one effect and its journal lines.

Decision, effect and journaling happen under one lock, so the journal order is the effect
order. Write-ahead: an allowed call journals its `intent` (decision, args digest,
action_id) and flushes it before the effect runs, then its `tool_call` outcome after it,
before the answer leaves; an intent without an outcome is a finding for the verifier.
Anything unexpected denies or answers 5xx and is journaled (fail closed); if the journal
itself fails, no further tool call is served.

Bounded bookkeeping: every request counts against `limits.requests` (replays, rejections,
connections over the cap included); the journal stops at `limits.max_journal_bytes`
(`journal_full`); both report a budget breach, so the host stops the attempt. A long agent
string is journaled as `sha256:<hex>` (hashed, not truncated: distinct values stay
distinct and a known value can be checked); reasons are truncated.

Idempotency: a key is bound to (tool, canonical arguments). The gate decides every call
first (halt, budget, scope), so a replay is never served where a fresh call would be
denied; a key reused for another call in the same attempt is refused with 409; a replay is
journaled as `decision: replay`, never as a fresh `allow`. A replay of an earlier attempt's
live call answers as the original did, unmarked; what else crosses attempts, and what does
not, is in idempotency.py. An operator override takes effect between two calls.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable

from assure.core import atomic, control, gate
from assure.core.chain import ChainWriter, canonical, sha256_hex
from assure.core.record import asdict, dataclass, replace
from assure.gateway import tools
from assure.gateway.config import Config
from assure.gateway.errors import ArgError, ToolError
from assure.gateway.fspath import PathError, Workspace
from assure.gateway.idempotency import LEGACY, Call, Prior, Store, derive_key

TYPE_CHECKING = False  # typing.TYPE_CHECKING; the gateway boots without typing (core/__init__)
if TYPE_CHECKING:
    from typing import Any

VERIFIER_FILE = "verifier.json"
HEARTBEAT_SECONDS = 1.0

MAX_DETAIL_CHARS = 256
MAX_REASON_CHARS = 1024
REPLAY = "replay"  # the journaled decision of a call answered from the idempotency store
MODEL_TOOL = (  # the gate's name for a model call (model.py); never a /v1/tools route
    "model.messages"
)
MODEL_ROUTES = {  # path -> endpoint: the Anthropic API's, then the OpenAI API's (model.py)
    "/v1/messages": "messages",
    "/v1/messages/count_tokens": "count_tokens",
    "/v1/chat/completions": "chat_completions",
    "/v1/responses": "responses",
    "/v1/models": "models",
}


@dataclass(frozen=True)
class Answer:
    """A tool call's HTTP status and JSON body."""

    status: int
    body: dict[str, Any]
    raw: bytes | None = None  # sent as-is instead of `body` (model answers: the recorded bytes)
    headers: tuple[
        tuple[str, str], ...
    ] = ()  # extra response headers; a raw answer's Content-Type is here


@dataclass
class Counters:
    """What the gateway has served so far, for its health answer and journal."""

    requests: int = 0
    tool_calls: int = 0
    denied: int = 0
    rejected: int = 0
    tokens: int = 0  # model tokens and cost, counted by the model proxy
    cost: float = 0.0


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


class Dispatcher:
    """Owns the journal, the counters and the one lock that orders effects."""

    def __init__(self, config: Config, workspace: Workspace, store: Store | None = None):
        """`store`: the idempotency store, opened at `config.idempotency_db` before the config
        came (a warm pool's gateway); else opened here."""
        self._config = config
        self._env = tools.Env(
            workspace,
            config.limits.max_file_bytes,
            databases=_databases(config),
            egress=config.egress,
        )
        self._known = frozenset(tools.BY_NAME)
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()
        self.counters = Counters()
        self._override = control.Override()
        self._reserved_tokens, self._reserved_cost = (
            0,
            0.0,
        )  # what model calls in flight may still spend
        self._model_calls: dict[
            str, dict[str, Any]
        ] = {}  # in flight, by action_id: settled at close if still there
        self._breached: set[str] = set()  # budget counters already reported
        # allowed sandbox.exec calls whose outcome is still to come: one each, so an outcome,
        # which counts against no budget, can never be journaled more often than a counted call
        self._pending_execs: set[str] = set()
        self._full = False  # the journal reached its cap
        self._last_beat = 0.0
        self._started = time.monotonic()  # the wall-clock budget counts from here
        if store is None and config.idempotency_db:
            store = Store(config.idempotency_db)
        self._idempotency = store
        self._journal = ChainWriter(
            config.journal,
            base={"run_id": config.run_id, "attempt": config.attempt, "actor": "gateway"},
        )
        self._open = True
        self._journal.append(
            "gateway_started",
            config_sha256=config.digest,
            tools=sorted(self._known),
            protected=list(config.protected),
            limits=asdict(config.limits),
        )

    def count_request(self, n: int = 1) -> Answer | None:
        """Count `n` requests against `limits.requests`. Within the budget: None. Past it:
        the breach is reported (once) and the 429 answer to send instead, never journaled."""
        limit = self._config.limits.requests
        with self._count_lock:
            self.counters.requests += n
            over = self.counters.requests > limit
        if not over:
            return None
        with self._lock:
            self._report_breach("requests")
        return Answer(
            429,
            error_body(
                "budget_exhausted",
                f"more than {limit} requests (limits.requests): the attempt is being stopped",
            ),
        )

    def reject(self, status: int, code: str, message: str, **detail: Any) -> Answer:
        """Journal a request refused before reaching the gate (unless the request budget is
        spent) and build its answer. A detail that is not a string is journaled as it is (the
        caller bounds it, e.g. features.Refused.allow)."""
        fields: dict[str, Any] = {
            key: value[:MAX_DETAIL_CHARS] if isinstance(value, str) else value
            for key, value in detail.items()
            if value
        }
        message = message[:MAX_REASON_CHARS]
        with self._lock:
            self.counters.rejected += 1
            if self.counters.requests <= self._config.limits.requests:
                self._append("request_rejected", status=status, code=code, reason=message, **fields)
        return Answer(status, error_body(code, message))

    def call(self, tool: tools.Tool, body: dict[str, Any]) -> Answer:
        """Parse, decide, run and journal one tool call."""
        try:
            args, meta = tools.parse(tool, body)
            paths = tools.target_paths(tool, args)
        except (ArgError, PathError) as exc:
            return self.reject(400, exc.code, exc.message, tool=tool.name)
        with self._lock:
            if not self._open or self._full:
                return self._unavailable()
            if tool.name == tools.EXEC_RESULT:
                return self._exec_result(tool, args)
            record = {
                "action_id": os.urandom(16).hex(),
                "tool": tool.name,
                "path": paths[0] if paths else None,
                **({"paths": list(paths)} if len(paths) > 1 else {}),
                "args_digest": sha256_hex(canonical(args)),
                **{name: self.field(meta.get(name)) for name in tools.META_PARAMS},
                "effect": None,
            }
            answer = self._decide_and_run(tool, args, meta, paths, record)
            if tool.name == "sandbox.exec" and answer.status == 200:
                self._pending_execs.add(record["action_id"])
            if not self._append("tool_call", _outcome=record.pop("_intent", False), **record):
                if self._full:
                    return self._unavailable()
                body = {"action_id": record["action_id"], "decision": record["decision"]}
                return Answer(
                    500, {**body, **error_body("journal_error", "the journal could not be written")}
                )
            return answer

    def _exec_result(self, tool: tools.Tool, args: dict[str, Any]) -> Answer:
        """Journal what came of an allowed sandbox.exec (`sandbox_exec_result`, its action_id
        the exec's), once per exec; an unknown or repeated action_id is refused. Caller holds
        the lock."""
        action_id = args["action_id"]
        if action_id not in self._pending_execs:
            self.counters.rejected += 1
            message = "no allowed sandbox.exec awaits an outcome under this action_id"
            self._append(
                "request_rejected",
                status=409,
                code="unknown_action",
                reason=message,
                tool=tool.name,
            )
            return Answer(409, error_body("unknown_action", message))
        try:
            outcome = tools.run(tool, self._env, args)
        except ToolError as exc:
            return Answer(exc.status, error_body(exc.code, exc.message))
        self._pending_execs.discard(action_id)
        if not self._append("sandbox_exec_result", action_id=action_id, **outcome.record):
            return (
                self._unavailable()
                if self._full
                else Answer(500, error_body("journal_error", "the journal could not be written"))
            )
        return Answer(200, {"action_id": action_id, "result": outcome.result})

    def _unavailable(self) -> Answer:
        if self._full:
            return Answer(
                503,
                error_body(
                    "journal_full",
                    f"the journal reached its {self._config.limits.max_journal_bytes}-byte cap; no"
                    " tool calls are served",
                ),
            )
        return Answer(
            503,
            error_body(
                "unavailable", "the gateway journal is unavailable; no tool calls are served"
            ),
        )

    def field(self, value: Any) -> Any:
        """A journaled agent string: itself up to `max_journal_field_chars`, else `sha256:<hex>`."""
        if isinstance(value, str) and len(value) > self._config.limits.max_journal_field_chars:
            return "sha256:" + sha256_hex(value.encode("utf-8", "surrogatepass"))
        return value

    def decide_model_call(
        self,
        record: dict[str, Any],
        action: gate.Action,
        unpriced: str | None,
        reserve: tuple[int, float] | Callable[[int | None, float | None], tuple[int, float]] = (
            0,
            0.0,
        ),
    ) -> gate.Decision | None:
        """Gate one model call (tool `model.messages`, non-mutating: the budget rules apply)
        and fill `record` with the decision; an allowed call's `intent` is journaled first (its
        `model_call` line, from `record_model_call`, is the outcome). `reserve` (tokens, cost) is
        the most the call may
        spend: the gate sees it on top of what calls in flight reserved, and an allowed call
        keeps it reserved until `record_model_call` settles it to what was spent. A denial by
        a budget rule is reported like a tool's. `unpriced` (why the cost cannot be counted)
        denies a call the gate allowed. None: the journal is unavailable and no call may be served.
        `reserve` may be a function of what the budgets have left (tokens, cost; None: no
        limit), called under the lock, so a call can shrink to fit what calls in flight leave."""
        with self._lock:
            if not self._open or self._full:
                return None
            ctx = self._context()
            if callable(reserve):
                b = ctx.budget
                tokens_left = (
                    None
                    if b.tokens_limit is None
                    else b.tokens_limit - b.tokens_used - self._reserved_tokens
                )
                cost_left = (
                    None
                    if b.cost_limit is None
                    else b.cost_limit - b.cost_used - self._reserved_cost
                )
                reserve = reserve(tokens_left, cost_left)
            budget = replace(
                ctx.budget,
                tokens_reserved=self._reserved_tokens + reserve[0],
                cost_reserved=self._reserved_cost + reserve[1],
            )
            decision = gate.decide(
                action, replace(ctx, known_tools=self._known | {MODEL_TOOL}, budget=budget)
            )
            if decision.allowed and unpriced:
                decision = gate.Decision(
                    gate.DENY, "model.unpriced", unpriced, inputs=decision.inputs
                )
            self._decided(record, decision)
            if decision.allowed:
                intent: dict[str, Any] = {
                    name: record.get(name)
                    for name in (
                        "action_id",
                        "tool",
                        "endpoint",
                        "request_sha256",
                        "model",
                        "decision",
                        "rule",
                    )
                }
                if not self._append(
                    "intent", scope=action.scope, resource_mode=action.resource_mode, **intent
                ):
                    return None  # write-ahead: a call the journal cannot show does not leave
                tokens, cost = reserve[0], round(reserve[1], 9)
                self._reserved_tokens += tokens
                self._reserved_cost += cost
                record["reserved"] = {"tokens": tokens, "cost": cost}
                self._model_calls[str(record.get("action_id"))] = record
            else:
                self.counters.denied += 1
                if decision.exhausted is not None:
                    self._report_breach(decision.exhausted)
            return decision

    def record_model_call(self, record: dict[str, Any], tokens: int, cost: float) -> bool:
        """Count a model call's tokens and cost, release what it reserved, and journal its
        `model_call` line (False: the journal could not be written, so the answer must not be sent).
        """
        with self._lock:
            if (
                self._model_calls.pop(str(record.get("action_id")), None) is None
                and "reserved" in record
            ):
                return False  # settled at close: the journal has its outcome, and is closed
            reserved = record.get("reserved") or {"tokens": 0, "cost": 0.0}
            self._reserved_tokens = max(0, self._reserved_tokens - reserved["tokens"])
            self._reserved_cost = max(0.0, self._reserved_cost - reserved["cost"])
            self.counters.tokens += tokens
            self.counters.cost += cost
            record["counters"] = {
                "tokens": self.counters.tokens,
                "cost": round(self.counters.cost, 9),
            }
            written = self._append(
                "model_call", _outcome=True, **record
            )  # its cost is spent: always journaled
            if self._journal.size >= self._config.limits.max_journal_bytes:
                # a model call writes no other line that would find the journal full
                self._journal_full()
            return written

    def beat(self) -> None:
        """Publish `last_success_at` for the host's monitor, at most once a second."""
        now = time.time()
        if not self._config.heartbeat_file or now - self._last_beat < HEARTBEAT_SECONDS:
            return
        self._last_beat = now
        try:
            atomic.write_json(
                self._config.heartbeat_file,
                {
                    "component": "gateway",
                    "last_success_at": now,
                    "pid": os.getpid(),
                    "detail": {"tool_calls": self.counters.tool_calls},
                },
                indent=None,
                sync=False,
            )
        except OSError:
            pass  # a missed beat shows up as staleness, which is the point

    def apply_override(self, override: control.Override) -> None:
        """Make an operator override effective from the next call on, and journal the latency."""
        with self._lock:
            self._override = override
            latency = (
                round((time.time() - override.requested_at) * 1000, 1)
                if override.requested_at
                else None
            )
            self._append(
                "override_effective",
                request_id=override.request_id,
                halted=override.halted,
                dial=override.dial,
                latency_ms=latency,
            )

    def close(self, reason: str) -> None:
        """Journal `gateway_stopped` with the counters and fsync the journal (idempotent)."""
        with self._lock:
            if self._open:
                self._settle_interrupted_model_calls()
                self._append(
                    "gateway_stopped", _outcome=True, reason=reason, counters=asdict(self.counters)
                )
            self._open = False
            self._journal.close()
            if self._idempotency is not None:
                self._idempotency.close()
            if self._env.databases is not None:
                self._env.databases.close()  # the connections kept between calls

    def _settle_interrupted_model_calls(self) -> None:
        """A model call still in flight when the gateway stops (the agent hit its deadline
        during a slow call, say) gets its outcome now, spent at its reservation: the most it
        could cost. Caller holds the lock. Its answer never reaches the agent."""
        for action_id in list(self._model_calls):
            record = self._model_calls.pop(action_id)
            reserved = record.get("reserved") or {"tokens": 0, "cost": 0.0}
            self._reserved_tokens = max(0, self._reserved_tokens - reserved["tokens"])
            self._reserved_cost = max(0.0, self._reserved_cost - reserved["cost"])
            self.counters.tokens += reserved["tokens"]
            self.counters.cost += reserved["cost"]
            outcome = {
                k: record.get(k)
                for k in (
                    "action_id",
                    "tool",
                    "endpoint",
                    "request_sha256",
                    "model",
                    "decision",
                    "rule",
                )
            }
            self._append(
                "model_call",
                _outcome=True,
                **outcome,
                status="interrupted",
                usage={"counted_at_reservation": reserved},
                reason="the gateway stopped with this call in flight: counted at its reservation",
                counters={"tokens": self.counters.tokens, "cost": round(self.counters.cost, 9)},
            )

    def _decide_and_run(
        self,
        tool: tools.Tool,
        args: dict[str, Any],
        meta: dict[str, Any],
        paths: tuple[str, ...],
        record: dict[str, Any],
    ) -> Answer:
        """Gate first (halt, budget, scope); then the idempotency store; then intent, effect."""
        record.update(decision=gate.DENY, rule="internal_error", reason="not decided", inputs={})
        key = None
        try:
            action = self._action(tool, args, meta, paths, record)
            decision = gate.decide(action, self._context())
            self.counters.tool_calls += 1
            self._decided(record, decision)
            if not decision.allowed:
                self.counters.denied += 1
                if decision.exhausted is not None:
                    self._report_breach(decision.exhausted)
                return _finish(
                    record,
                    403,
                    error_body(
                        "denied" if decision.outcome == gate.DENY else "escalated", decision.reason
                    ),
                )
            key = self._idempotency_key(tool, action, args, meta, record)
            if key is not None and (prior := self._calls.claim(key, action_id=record["action_id"])):
                derived, binding, key = (
                    key.key.startswith("derived:"),
                    key.binding,
                    None,
                )  # not ours to release
                return self._replay(prior, binding, record, derived=derived)
            intent = {
                name: record[name]
                for name in (
                    "action_id",
                    "tool",
                    "path",
                    "args_digest",
                    "scope",
                    "resource_mode",
                    "idempotency_key",
                    "decision",
                    "rule",
                )
            }
            if not self._append(
                "intent", **intent
            ):  # write-ahead: no effect the journal cannot show
                raise _JournalRefused
            record["_intent"] = True
            outcome = tools.run(tool, self._env, args)
            record.update(outcome.record)
            answer = _finish(record, 200, {"result": outcome.result})
            if key is not None:
                self._calls.complete(key, answer.status, answer.body)
                key = None
            return answer
        except ToolError as exc:
            return _finish(record, exc.status, error_body(exc.code, exc.message))
        except Exception as exc:  # fail closed: never an allow without a finished, journaled call
            if record["decision"] != gate.ALLOW or isinstance(exc, _JournalRefused):
                self.counters.denied += 1
                record.update(decision=gate.DENY, reason=f"gateway error: {type(exc).__name__}")
            return _finish(
                record, 500, error_body("internal_error", f"gateway error: {type(exc).__name__}")
            )
        finally:
            if key is not None:  # claimed, but no effect happened: a later call may try again
                self._calls.release(key)

    def _decided(self, record: dict[str, Any], decision: gate.Decision) -> None:
        """Journal a decision's fields; agent strings the gate quotes are capped like any other."""
        field = self.field
        inputs = {  # most inputs are numbers and flags: only strings can need capping
            name: field(value) if isinstance(value, str) else value
            for name, value in decision.inputs.items()
        }
        record.update(
            decision=decision.outcome,
            rule=decision.rule,
            reason=decision.reason[:MAX_REASON_CHARS],
            inputs=inputs,
        )

    def _action(
        self,
        tool: tools.Tool,
        args: dict[str, Any],
        meta: dict[str, Any],
        paths: tuple[str, ...],
        record: dict[str, Any],
    ) -> gate.Action:
        path = paths[0] if paths else None
        scope, mode = tools.scope_of(tool, self._env, args, path)
        record.update(scope=scope, resource_mode=mode)
        return gate.Action(
            tool.name,
            tools.mutates(tool, args),
            path,
            paths=paths,
            scope=scope,
            resource_mode=mode,
            reversible=meta.get("reversible"),
            rollback_ref=meta.get("rollback_ref"),
            human_gate=meta.get("human_gate"),
        )

    @property
    def _calls(self) -> Store:
        """The idempotency store: a call has a key (`_idempotency_key`) only when there is one."""
        if self._idempotency is None:
            raise RuntimeError("no idempotency store")
        return self._idempotency

    def _idempotency_key(
        self,
        tool: tools.Tool,
        action: gate.Action,
        args: dict[str, Any],
        meta: dict[str, Any],
        record: dict[str, Any],
    ) -> Call | None:
        """The caller's key (stored by its digest) for any mutation, a derived key for real
        (non-sandbox) effects, bound to this tool and these canonical arguments; a real
        effect's key is shared with later attempts (idempotency.py)."""
        if self._idempotency is None or not action.mutates:
            return None
        live = action.resource_mode != gate.SANDBOX
        if meta.get("idempotency_key"):
            key = "key:" + sha256_hex(meta["idempotency_key"].encode("utf-8", "surrogatepass"))
        elif live:
            key = record["idempotency_key"] = derive_key(self._config.goal_id, tool.name, args)
        else:
            return None
        return Call(key, f"{tool.name}:{record['args_digest']}", self._config.attempt, shared=live)

    def _replay(
        self, prior: Prior, binding: str, record: dict[str, Any], *, derived: bool
    ) -> Answer:
        """The gate allowed this call; the key was used before. Same call: the original answer,
        no second effect, journaled as a replay. Another call, or one in doubt: 409. A key
        from a store older than bindings (LEGACY) is the same call only if it was derived
        from the call itself; a caller's old key cannot be checked: 409, never a second effect."""
        record.update(original_action_id=prior.action_id)
        if prior.binding == LEGACY and not derived:
            self.counters.denied += 1
            record.update(
                decision=gate.DENY,
                rule="idempotency.unbound",
                reason=(
                    f"idempotency key used by {prior.action_id} before keys were bound to their"
                    " call: which call it was cannot be checked, so it is neither repeated nor"
                    " replayed; use a new key"
                ),
            )
            return _finish(record, 409, error_body("idempotency_unbound", record["reason"]))
        if prior.binding != binding and not (prior.binding == LEGACY and derived):
            self.counters.denied += 1
            record.update(
                decision=gate.DENY,
                rule="idempotency.mismatch",
                reason=(
                    f"idempotency key already used by {prior.action_id} for another tool or other"
                    " arguments; use a new key"
                ),
            )
            return _finish(record, 409, error_body("idempotency_mismatch", record["reason"]))
        if prior.state != "done" or prior.answer is None:
            self.counters.denied += 1
            record.update(
                decision=gate.DENY,
                rule="idempotency.in_doubt",
                reason=(
                    "an earlier call with this key was interrupted; its effect is in doubt and is"
                    " not repeated"
                ),
            )
            return _finish(record, 409, error_body("in_doubt", record["reason"]))
        record.update(
            decision=REPLAY,
            rule="idempotency",
            status=prior.status,
            error=None,
            idempotent_replay=True,
            reason=(
                f"duplicate of {prior.action_id} (attempt {prior.attempt}): original answer, no"
                " second effect"
            ),
        )
        mark = (
            {"idempotent_replay": True} if prior.attempt == self._config.attempt else {}
        )  # an earlier attempt's: as the original answered
        return Answer(
            prior.status or 200, {**prior.answer, "action_id": record["action_id"], **mark}
        )

    def _context(self) -> gate.Context:
        policy, override = self._config.policy, self._override
        dial = (
            policy.operator_dial
            if override.dial is None
            else min(policy.operator_dial, gate.LEVELS[override.dial])
        )
        return gate.Context(
            known_tools=self._known,
            now=time.time(),
            budget=gate.Budget(
                tool_calls_used=self.counters.tool_calls,
                tool_calls_limit=self._config.limits.tool_calls,
                tokens_used=self.counters.tokens,
                tokens_limit=policy.tokens_limit,
                cost_used=self.counters.cost,
                cost_limit=policy.cost_limit,
                wall_seconds_used=time.monotonic() - self._started,
                wall_seconds_limit=self._config.limits.wall_seconds,
            ),
            pinned=self._config.pinned,
            operator_dial=dial,
            verifier_trust=policy.verifier_trust,
            verifier_fresh=self._verifier_fresh(),
            rollbacks=policy.rollbacks,
            human_gates=policy.human_gates,
            halted=override.halted,
        )

    def _verifier_fresh(self) -> bool:
        """The host's verifier publishes `last_success_at`; stale or missing means no verifier."""
        if not self._config.control_dir:
            return False
        try:
            with open(
                os.path.join(self._config.control_dir, VERIFIER_FILE), encoding="utf-8"
            ) as fh:
                last = float(json.load(fh)["last_success_at"])
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return 0 <= time.time() - last < self._config.policy.verifier_stale_seconds

    def _report_breach(self, counter: str) -> None:
        """Tell the host (which halts the attempt) at the first breach, and journal each
        counter's breach once. Caller holds the lock."""
        if counter in self._breached:
            return
        first = not self._breached
        self._breached.add(counter)
        now = time.time()
        if first and self._config.breach_file:
            atomic.write_json(
                self._config.breach_file, {"counter": counter, "breach_at": now}, indent=None
            )
        self._append("budget_breach", _outcome=True, counter=counter, breach_at=now)

    def _append(self, event: str, _outcome: bool = False, **fields: Any) -> bool:
        """Write one journal line; on failure stop serving tool calls. Caller holds the lock.

        A line that would take the journal past `max_journal_bytes` is not written: the
        journal is full (`journal_full`, a budget breach). `_outcome` lines (an effect's
        outcome after its intent, the closing records) are written regardless, so the cap
        is overshot by at most one outcome and the closing records."""
        if not self._open:
            return False
        try:
            record, line = self._journal.line(event, **fields)
            if not _outcome and (
                self._full or self._journal.size + len(line) > self._config.limits.max_journal_bytes
            ):
                self._journal_full()
                return False
            self._journal.write(record, line)
        except Exception:
            self._open = False
            return False
        return True

    def _journal_full(self) -> None:
        if self._full:
            return
        self._full = True
        limit = self._config.limits.max_journal_bytes
        self._append("journal_full", _outcome=True, size=self._journal.size, limit=limit)
        self._report_breach("journal_bytes")


class _JournalRefused(Exception):
    """The intent could not be journaled (full or failing journal): the effect must not run."""


def _databases(config: Config) -> Any:
    """Open the gateway-owned databases; apsw is imported only when there are some."""
    if not config.databases:
        return None
    from assure.gateway.db import Databases

    return Databases.from_config(config.databases)


def _finish(record: dict[str, Any], status: int, body: dict[str, Any]) -> Answer:
    record.update(status=status, error=body["error"]["code"] if "error" in body else None)
    return Answer(
        status, {"action_id": record["action_id"], "decision": record["decision"], **body}
    )
