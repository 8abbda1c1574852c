"""The gate: the one decision function that every tool call passes before it has an effect.

`decide()` is pure and deterministic: no I/O, no clock, no globals. The gateway calls it
for every request and journals the returned `Decision` with the inputs it used, so the
journal shows why. Any exception inside a rule denies (fail closed).
Standard library only: this module runs inside the gateway image.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from . import globs

ALLOW, DENY, ESCALATE = "allow", "deny", "escalate"


@dataclass(frozen=True)
class Action:
    """What the caller asks for: a tool, whether it mutates, and what it touches."""

    tool: str
    mutates: bool
    path: str | None = None


@dataclass(frozen=True)
class Context:
    """Everything else the decision may depend on, as plain values."""

    known_tools: frozenset[str]
    protected: tuple[str, ...] = ()
    tool_calls_used: int = 0
    tool_calls_limit: int = 0
    halted: bool = False


@dataclass(frozen=True)
class Decision:
    outcome: str
    rule: str
    reason: str
    inputs: dict[str, Any] = field(default_factory=dict)

    @property
    def allowed(self) -> bool:
        return self.outcome == ALLOW

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


Rule = Callable[[Action, Context], "Decision | None"]


def _known_tool(action: Action, ctx: Context) -> Decision | None:
    if action.tool not in ctx.known_tools:
        return Decision(DENY, "known_tool", f"unknown tool {action.tool!r}")
    return None


def _halted(action: Action, ctx: Context) -> Decision | None:
    if ctx.halted and action.mutates:
        return Decision(DENY, "operator_halt", "the operator halted this run")
    return None


def _tool_budget(action: Action, ctx: Context) -> Decision | None:
    if ctx.tool_calls_used >= ctx.tool_calls_limit:
        return Decision(
            DENY, "budget.tool_calls", f"tool call budget exhausted ({ctx.tool_calls_used} of {ctx.tool_calls_limit} used)"
        )
    return None


def _protected_path(action: Action, ctx: Context) -> Decision | None:
    if action.mutates and action.path is not None and globs.match_any(ctx.protected, action.path):
        return Decision(DENY, "protected_path", f"{action.path!r} is protected by the spec")
    return None


RULES: tuple[Rule, ...] = (_known_tool, _halted, _tool_budget, _protected_path)


def decide(action: Action, ctx: Context) -> Decision:
    """Run the rules in order; the first that objects decides, otherwise allow."""
    inputs = {
        "mutates": action.mutates,
        "tool_calls_used": ctx.tool_calls_used,
        "tool_calls_limit": ctx.tool_calls_limit,
        "halted": ctx.halted,
    }
    try:
        for rule in RULES:
            decision = rule(action, ctx)
            if decision is not None:
                return Decision(decision.outcome, decision.rule, decision.reason, inputs)
    except Exception as exc:  # fail closed
        return Decision(DENY, "internal_error", f"gate error: {type(exc).__name__}", inputs)
    return Decision(ALLOW, "allow", "no rule objected", inputs)
