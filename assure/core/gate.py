"""The gate: the one decision function that every tool call passes before it has an effect.

`decide(action, context)` runs a fixed tuple of small rules in order; the first that
returns a `Decision` decides. It is pure and deterministic: no I/O, no clock (`now` is
passed in), so the same inputs always give the same frozen `Decision`, and the journal can
replay it. Any exception inside a rule denies with rule `internal_error` (fail closed), and
a call that no rule decided is denied too.

The rules implement boxes 0 and 5 of The Machine: no mutation without a contract ratified
by someone other than its proposer (with a trusted key, as the host checked), and `effective =
min(operator_dial, ceiling,
verifier_trust)` with irreversible effects needing more trust or a human-gate receipt.
Standard library only: this module runs inside the gateway image.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from assure.core import globs
from assure.core.chain import canonical
from assure.core.record import asdict, dataclass, field, fields, replace

TYPE_CHECKING = False  # typing.TYPE_CHECKING; the gateway boots without typing (core/__init__)
if TYPE_CHECKING:
    from typing import Any, TypedDict

ALLOW, DENY, ESCALATE = "allow", "deny", "escalate"

PROPOSE, COMMIT, IRREVERSIBLE = 0, 1, 2
LEVELS = {"propose": PROPOSE, "commit": COMMIT, "irreversible": IRREVERSIBLE}
SANDBOX = "sandbox"  # a per-attempt copy: reversible by construction (the PRE snapshot)
BUDGET_COUNTERS = ("tool_calls", "tokens", "cost", "wall_seconds")
BUDGET_RULE = "budget."  # + the counter: the rule of a budget denial (budget.tool_calls, ...)


# ---------------------------------------------------------------- values


@dataclass(frozen=True, kw_only=True)
class Contract:
    """A ratified move: what may be touched, and how much autonomy the worker may have.

    `terms` are the digests of every term it was ratified over (`TERMS`), `hash` the digest
    of those: the gate recomputes each from what the attempt runs under, so a term changed
    after ratification is named, not just detected."""

    id: str
    proposed_by: str
    ratified_by: str | None
    scope: tuple[str, ...]
    autonomy_ceiling: int
    irreversible_min_trust: int = IRREVERSIBLE
    expires_at: float | None = None
    revoked: bool = False
    terms: Mapping[str, str] | None = None
    hash: str | None = None
    trust: Mapping[str, Any] | None = None  # earned autonomy's policy (records/trust), as JSON
    # The hash a trusted ratifier's signature covers, and that key's id, as the host found
    # them (`run/ratifiers.check`: the gateway image has no Ed25519); else why not.
    signed: str | None = None
    key_id: str | None = None
    signature_problem: str | None = None


# What "done" means, pinned by ratification: the contract's own terms, then what the attempt
# runs under (the acceptance tests of the tasks it governs, the protected paths, the writable
# scope). `ratified_by` and `revoked` are left out on purpose: they are later events about the
# terms (journaled as `contract_ratified` / `contract_revoked`), not part of them.
TERMS = (
    "id",
    "proposed_by",
    "scope",
    "autonomy_ceiling",
    "irreversible_min_trust",
    "expires_at",
    "assertions",
    "protected",
    "writable",
    "trust",  # pinned only when the contract has a trust policy, so older ratifications stand
)


def contract_terms(
    contract: Contract,
    *,
    assertions: Any = (),
    protected: Sequence[str] = (),
    writable: Sequence[str] = (),
) -> dict[str, str]:
    """Each term's `sha256:` digest (of its canonical JSON): what the ratifier approved."""
    values = {
        "id": contract.id,
        "proposed_by": contract.proposed_by,
        "scope": list(contract.scope),
        "autonomy_ceiling": contract.autonomy_ceiling,
        "irreversible_min_trust": contract.irreversible_min_trust,
        "expires_at": contract.expires_at,
        "assertions": assertions,
        "protected": list(protected),
        "writable": list(writable),
        "trust": None if contract.trust is None else thaw(contract.trust),
    }
    return {
        name: digest(values[name])
        for name in TERMS
        if name != "trust" or contract.trust is not None
    }


def contract_hash(terms: Mapping[str, str]) -> str:
    """The contract's hash: the digest of its term digests."""
    return digest(thaw(terms))


def freeze(value: Any) -> Any:
    """A deep read-only copy of plain JSON data: mappings become `MappingProxyType` over a
    private dict, lists and tuples become tuples. Anything else is refused (TypeError)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    raise TypeError(f"not plain JSON data: {type(value).__name__}")


def freeze_contract(contract: Contract) -> Contract:
    """`contract` with every field `freeze`d (its terms and trust policy become read-only)."""
    return replace(
        contract, **{f.name: freeze(getattr(contract, f.name)) for f in fields(Contract)}
    )


def thaw(value: Any) -> Any:
    """`freeze` undone, as `canonical` digests it: mappings to dicts, tuples to lists."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value


def digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical(value)).hexdigest()


def ratify(contract: Contract, **pinned: Any) -> Contract:
    """`contract` with its term digests and hash filled in (`pinned`: `contract_terms`'s
    keywords), as the host passes a contract whose ratifier's signature it found over them."""
    terms = contract_terms(contract, **pinned)
    h = contract_hash(terms)
    return replace(contract, terms=terms, hash=h, signed=h)


def changed_terms(ratified: Mapping[str, str], current: Mapping[str, str]) -> list[str]:
    """The terms whose digest differs (missing on either side counts), in `TERMS` order."""
    names = [*TERMS, *sorted(set(ratified) - set(TERMS))]
    return [n for n in names if ratified.get(n) != current.get(n)]


@dataclass(frozen=True, kw_only=True)
class Pinned:
    """What a contract is judged against, frozen, with its term digests computed once.

    Every field is a deep read-only copy of what was passed (`freeze`; the contract's terms and
    trust policy too), and the digests are computed from those copies, so no later change to
    the caller's objects reaches them; a changed value means a new `Pinned`
    (`dataclasses.replace` recomputes). Digesting nine terms per mutation cost more than the
    rest of `decide()`; the gateway pins its config once. If freezing or digesting fails,
    `problem` says why and `contract_rule` denies every mutation (fail closed)."""

    contract: Contract | None = None
    assertions: Any = ()
    protected: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    digests: Mapping[str, str] | None = field(init=False, default=None)  # contract_terms, now
    hash_ok: bool = field(init=False, default=False)  # contract.hash digests contract.terms
    changed: tuple[str, ...] = field(init=False, default=())  # changed_terms(terms, digests)
    problem: str | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        try:
            c = None if self.contract is None else freeze_contract(self.contract)
            set_(self, "contract", c)
            for name in ("assertions", "protected", "writable"):
                set_(self, name, freeze(getattr(self, name)))
            if c is not None:
                current = contract_terms(
                    c,
                    assertions=thaw(self.assertions),
                    protected=self.protected,
                    writable=self.writable,
                )
                set_(self, "digests", MappingProxyType(current))
                set_(
                    self,
                    "hash_ok",
                    isinstance(c.terms, Mapping)
                    and c.hash is not None
                    and c.hash == contract_hash(c.terms),
                )
                if isinstance(c.terms, Mapping):
                    set_(self, "changed", tuple(changed_terms(c.terms, current)))
        except Exception as exc:  # fail closed: no digests, every mutation denied
            set_(self, "digests", None)
            set_(self, "hash_ok", False)
            set_(self, "changed", ())
            set_(self, "problem", f"cannot pin the contract's terms: {type(exc).__name__}: {exc}")


@dataclass(frozen=True, kw_only=True)
class HumanGate:
    """A human's approval receipt for one scope pattern, valid while `now < expires_at`."""

    id: str
    scope: str
    approved_by: str
    expires_at: float


@dataclass(frozen=True, kw_only=True)
class Budget:
    """Counters and their limits; a limit of None is unlimited.

    `tokens_reserved` / `cost_reserved`: what the model calls in flight may still spend, this
    call's own reservation included (its `max_tokens` plus an input estimate). A spending call
    must fit: `used + reserved <= limit`, so concurrent calls cannot pass the limit together."""

    tool_calls_used: int = 0
    tool_calls_limit: int | None = None
    tokens_used: int = 0
    tokens_limit: int | None = None
    cost_used: float = 0.0
    cost_limit: float | None = None
    wall_seconds_used: float = 0.0
    wall_seconds_limit: float | None = None
    tokens_reserved: int = 0
    cost_reserved: float = 0.0


@dataclass(frozen=True)
class Action:
    """What the caller asks for: a tool, whether it mutates, and what it touches.

    `resource_mode` is `sandbox` (the per-attempt copy), `live` or `external` (a real
    effect; any other value is treated as real). `reversible` counts only if `rollback_ref`
    is one the host confirmed (`Context.rollbacks`) for this action's scope; missing means False.
    """

    tool: str
    mutates: bool
    path: str | None = None
    paths: tuple[str, ...] = ()  # every workspace path the call names (`path` is the first)
    scope: str | None = None
    resource_mode: str = SANDBOX
    reversible: bool | None = None
    rollback_ref: str | None = None
    human_gate: str | None = None
    spends: bool = False  # costs money or tokens without mutating (a model call)
    folder: bool = (
        False  # creates a folder (promote of an added one): a scope glob naming it covers it
    )


@dataclass(frozen=True, kw_only=True)
class Context:
    """Everything else the decision may depend on, as plain values.

    `require_contract=False` is the legacy mode for specs without a contract block: a
    missing contract is then accepted (with ceiling PROPOSE), but a contract that *is*
    presented is still checked. `budget` has no default so every caller states it.
    """

    known_tools: frozenset[str]
    now: float
    budget: Budget
    protected: tuple[str, ...] = ()
    assertions: Any = ()  # the acceptance tests the contract pins (policy.pinned), as plain JSON
    writable: tuple[str, ...] = ()
    contract: Contract | None = None
    require_contract: bool = True
    operator_dial: int = COMMIT
    verifier_trust: int = PROPOSE
    verifier_fresh: bool = False
    rollbacks: Mapping[str, tuple[str, ...]] = field(
        default_factory=dict
    )  # confirmed ref -> scope globs it covers
    human_gates: tuple[HumanGate, ...] = ()
    halted: bool = False
    # The four fields above that a contract is judged against, frozen with their digests: give
    # either `pinned` (the gateway pins its config once) or those fields (pinned here).
    pinned: Pinned | None = None

    def __post_init__(self) -> None:
        p = self.pinned
        parts = (self.contract, self.assertions, self.protected, self.writable)
        if p is None:
            c, a, pr, w = parts
            p = Pinned(contract=c, assertions=a, protected=pr, writable=w)
            object.__setattr__(self, "pinned", p)
        else:
            pinned = (p.contract, p.assertions, p.protected, p.writable)
            defaults = (None, (), (), ())
            if not all(x is d or x is q for x, d, q in zip(parts, defaults, pinned, strict=True)):
                raise ValueError("Context: give `pinned` or the fields it pins, not both")
        set_ = object.__setattr__
        set_(self, "contract", p.contract)
        set_(self, "assertions", p.assertions)
        set_(self, "protected", p.protected)
        set_(self, "writable", p.writable)


@dataclass(frozen=True)
class Decision:
    """The outcome, the rule that decided, and the inputs it used (for the journal).

    `required_trust` and `effective_autonomy` are set only when the autonomy rule decided.
    """

    outcome: str
    rule: str
    reason: str
    required_trust: int | None = None
    effective_autonomy: int | None = None
    inputs: dict[str, Any] = field(default_factory=dict)

    @property
    def allowed(self) -> bool:
        return self.outcome == ALLOW

    @property
    def exhausted(self) -> str | None:
        """The budget counter this decision denied for (one of BUDGET_COUNTERS), else None."""
        return self.rule.removeprefix(BUDGET_RULE) if self.rule.startswith(BUDGET_RULE) else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------- derived figures


def action_scope(action: Action) -> str | None:
    """The scope string contracts and human gates match: explicit, else `fs:<path>`."""
    if action.scope is not None:
        return action.scope
    return None if action.path is None else f"fs:{action.path}"


def rollback_covers(action: Action, ctx: Context) -> bool:
    """The host confirmed `rollback_ref` resolves (no forgery) for a scope that covers this
    action's (a ref for one database makes no other effect reversible)."""
    covered = ctx.rollbacks.get(action.rollback_ref, ()) if action.rollback_ref is not None else ()
    return all(s is not None and globs.match_any(covered, s) for s in _scopes(action))


def rollback_confirmed(action: Action, ctx: Context) -> bool:
    """A claimed rollback counts only if it is confirmed for this action's scope."""
    return action.reversible is True and rollback_covers(action, ctx)


def autonomy_ceiling(ctx: Context) -> int:
    """No contract (legacy specs) means the worker may only propose."""
    return PROPOSE if ctx.contract is None else ctx.contract.autonomy_ceiling


def effective_autonomy(ctx: Context) -> int:
    """min(dial, ceiling, verifier trust); an absent or stale verifier earns trust 0."""
    verifier = ctx.verifier_trust if ctx.verifier_fresh else PROPOSE
    return min(ctx.operator_dial, autonomy_ceiling(ctx), verifier)


def required_trust(action: Action, ctx: Context) -> int:
    """Sandbox: PROPOSE. Real effect: COMMIT if rollback is confirmed, else the irreversible bar.

    The irreversible bar is the contract's `irreversible_min_trust`, never below
    IRREVERSIBLE: an irreversible effect needs more trust than a reversible one.
    """
    if action.resource_mode == SANDBOX:
        return PROPOSE
    if rollback_confirmed(action, ctx):
        return COMMIT
    bar = IRREVERSIBLE if ctx.contract is None else ctx.contract.irreversible_min_trust
    return max(bar, IRREVERSIBLE)


def _expired(now: float, expires_at: float | None) -> bool:
    """Written as `not now < expires_at` so a NaN clock or deadline counts as expired."""
    return expires_at is not None and not now < expires_at


_LEVEL_NAMES = {v: k for k, v in LEVELS.items()}


def _level(n: int) -> str:
    return f"{n} ({_LEVEL_NAMES[n]})" if n in _LEVEL_NAMES else str(n)


# ---------------------------------------------------------------- rules, in order

Rule = Callable[[Action, Context], "Decision | None"]


def _known_tool(action: Action, ctx: Context) -> Decision | None:
    """Only registered tools exist; anything else is a probe."""
    if action.tool not in ctx.known_tools:
        return Decision(DENY, "known_tool", f"unknown tool {action.tool!r}")
    return None


def _budget(action: Action, ctx: Context) -> Decision | None:
    """Every call, read or write, stops once a counter reaches its limit (NaN counts as over)."""
    for name in BUDGET_COUNTERS:
        used, limit = getattr(ctx.budget, f"{name}_used"), getattr(ctx.budget, f"{name}_limit")
        if limit is not None and not used < limit:
            return Decision(
                DENY, BUDGET_RULE + name, f"{name} budget exhausted ({used} of {limit} used)"
            )
    if action.spends:
        for name in ("tokens", "cost"):
            used, limit, reserved = (
                getattr(ctx.budget, f"{name}_{part}") for part in ("used", "limit", "reserved")
            )
            if limit is not None and reserved and not used + reserved <= limit:
                reason = (
                    f"{name} budget: {used} used + {reserved} reserved by this call and the calls"
                    f" in flight would pass the limit of {limit}"
                )
                return Decision(DENY, BUDGET_RULE + name, reason)
    return None


def _operator_halt(action: Action, ctx: Context) -> Decision | None:
    """After an operator halt nothing more may start that leaves the sandbox: no mutation, no
    spending (model calls), no call to a real resource (a safe HTTP GET is still egress).
    Reads of the per-attempt sandbox still answer."""
    if ctx.halted and (action.mutates or action.spends or action.resource_mode != SANDBOX):
        return Decision(DENY, "operator_halt", "the operator halted this run")
    return None


def _read_only(action: Action, ctx: Context) -> Decision | None:
    """A call without an effect needs no contract and no trust."""
    if not action.mutates:
        return Decision(ALLOW, "read_only", "the call does not mutate")
    return None


def action_paths(action: Action) -> tuple[str, ...]:
    """Every workspace path the call names: all of them are matched, never the first alone."""
    return action.paths or (() if action.path is None else (action.path,))


def _protected_path(action: Action, ctx: Context) -> Decision | None:
    """The acceptance tests (and whatever else the spec protects) are immutable during the move."""
    for path in action_paths(action):
        if globs.match_any(ctx.protected, path):
            return Decision(DENY, "protected_path", f"{path!r} is protected by the spec")
    return None


def _scopes(action: Action) -> list[str | None]:
    """The scopes a contract must cover: the explicit one, else `fs:<path>` of every path."""
    if action.scope is not None or len(action_paths(action)) < 2:
        return [action_scope(action)]
    return [f"fs:{path}" for path in action_paths(action)]


def contract_rule(action: Action, ctx: Context) -> Decision | None:
    """Box 0: no mutation without a valid contract ratified by someone other than its proposer.

    Checked whenever a contract is required or presented; only a legacy spec may go without.
    Public because `assure health` judges a run's contract with this same rule.
    """
    c = ctx.contract
    if c is None:
        return (
            Decision(DENY, "contract.missing", "no contract covers this move")
            if ctx.require_contract
            else None
        )
    ratifier, proposer = (
        (c.ratified_by or "").strip().casefold(),
        (c.proposed_by or "").strip().casefold(),
    )
    if not ratifier:
        return Decision(DENY, "contract.unratified", f"contract {c.id!r} is not ratified")
    if ratifier == proposer:
        return Decision(
            DENY,
            "contract.self_ratified",
            f"contract {c.id!r} was ratified by its own proposer {c.proposed_by!r}",
        )
    if c.hash is None:
        return Decision(
            DENY,
            "contract.hash",
            f"contract {c.id!r} has no hash: run `assure contract hash SPEC` and have it ratified",
        )
    if c.terms is None:
        return Decision(
            DENY,
            "contract.old_format",
            f"contract {c.id!r} has a hash but no term digests (an older format): "
            "run `assure contract hash SPEC` and have it re-ratified",
        )
    pinned = ctx.pinned
    if pinned is None or pinned.contract is not c or pinned.digests is None:
        raise ValueError(pinned.problem if pinned else "the context has no pinned terms")
    if not pinned.hash_ok:
        return Decision(
            DENY, "contract.hash", f"contract {c.id!r} hash does not match its term digests"
        )
    changed = pinned.changed
    if changed:
        return Decision(
            DENY,
            "contract.terms_changed",
            f"contract {c.id!r} terms changed since it was ratified: {', '.join(changed)}; "
            "re-ratify (`assure contract hash SPEC` prints the new hash)",
        )
    if c.signed is None or c.signed != c.hash:
        return Decision(
            DENY,
            "contract.signature",
            f"contract {c.id!r} is not signed by its ratifier {c.ratified_by!r} with a trusted "
            f"key: {c.signature_problem or 'the signature covers other terms'}",
        )
    if c.revoked:
        return Decision(DENY, "contract.revoked", f"contract {c.id!r} was revoked")
    if _expired(ctx.now, c.expires_at):
        return Decision(DENY, "contract.expired", f"contract {c.id!r} expired at {c.expires_at}")
    for scope in _scopes(action):
        covered = scope is not None and (
            globs.match_any(c.scope, scope)
            or (action.folder and any(globs.names_folder(g, scope) for g in c.scope))
        )
        if not covered:
            return Decision(
                DENY,
                "contract.scope",
                f"{scope!r} is outside contract {c.id!r} scope ({', '.join(c.scope) or 'empty'})",
            )
    return None


if TYPE_CHECKING:

    class _Figures(TypedDict):
        """What the autonomy rule decided by: `Decision`'s two optional fields, as keywords."""

        required_trust: int
        effective_autonomy: int


def _autonomy(action: Action, ctx: Context) -> Decision | None:
    """Box 5: allow if effective autonomy reaches the trust the effect needs.

    Short of that, an irreversible effect may still pass on a human-gate receipt that covers
    its scope and is inside its window (expired: deny; none: escalate to a human); a
    reversible one is denied.
    """
    effective, required = effective_autonomy(ctx), required_trust(action, ctx)
    figures: _Figures = {"required_trust": required, "effective_autonomy": effective}
    if effective >= required:
        return Decision(
            ALLOW,
            "autonomy",
            f"effective autonomy {_level(effective)} >= required {_level(required)}",
            **figures,
        )
    if action.resource_mode != SANDBOX and not rollback_confirmed(action, ctx):
        return _human_gate(action, ctx, figures)
    verifier = ctx.verifier_trust if ctx.verifier_fresh else f"{PROPOSE} (absent or stale)"
    reason = (
        f"effective autonomy {_level(effective)} = min(dial {ctx.operator_dial}, ceiling"
        f" {autonomy_ceiling(ctx)}, verifier {verifier}) is below the {_level(required)} this"
        f" {action.resource_mode} effect needs"
    )
    return Decision(DENY, "autonomy.insufficient", reason, **figures)


def _human_gate(action: Action, ctx: Context, figures: _Figures) -> Decision:
    """Match the presented receipt by id, scope coverage and a named approver; check its window."""
    scope = action_scope(action)
    presented = [
        g for g in ctx.human_gates if action.human_gate is not None and g.id == action.human_gate
    ]
    covering = [
        g
        for g in presented
        if (g.approved_by or "").strip()
        and all(s is not None and globs.match(g.scope, s) for s in _scopes(action))
    ]
    if any(not _expired(ctx.now, g.expires_at) for g in covering):
        return Decision(
            ALLOW,
            "human_gate",
            f"irreversible effect approved by human gate {action.human_gate!r}",
            **figures,
        )
    if covering:
        return Decision(
            DENY, "human_gate.expired", f"human gate {action.human_gate!r} has expired", **figures
        )
    needed = _level(figures["required_trust"])
    return Decision(
        ESCALATE,
        "escalate.irreversible",
        f"irreversible effect on {scope!r} needs trust {needed} or a human gate",
        **figures,
    )


RULES: tuple[Rule, ...] = (
    _known_tool,
    _budget,
    _operator_halt,
    _read_only,
    _protected_path,
    contract_rule,
    _autonomy,
)


# ---------------------------------------------------------------- decide


def _inputs(action: Action, ctx: Context) -> dict[str, Any]:
    """The plain values the journal records with every decision."""
    b = ctx.budget
    covers = rollback_covers(action, ctx)
    return {
        "mutates": action.mutates,
        "scope": action_scope(action),
        "resource_mode": action.resource_mode,
        "reversible": action.reversible is True and covers,  # rollback_confirmed
        "rollback_confirmed": covers,
        "contract_id": None if ctx.contract is None else ctx.contract.id,
        "human_gate": action.human_gate,
        "operator_dial": ctx.operator_dial,
        "autonomy_ceiling": autonomy_ceiling(ctx),
        "verifier_trust": ctx.verifier_trust,
        "verifier_fresh": ctx.verifier_fresh,
        "required_trust": None,
        "effective_autonomy": None,
        "tool_calls_used": b.tool_calls_used,  # every BUDGET_COUNTERS' used and limit
        "tool_calls_limit": b.tool_calls_limit,
        "tokens_used": b.tokens_used,
        "tokens_limit": b.tokens_limit,
        "cost_used": b.cost_used,
        "cost_limit": b.cost_limit,
        "wall_seconds_used": b.wall_seconds_used,
        "wall_seconds_limit": b.wall_seconds_limit,
        "tokens_reserved": b.tokens_reserved,
        "cost_reserved": b.cost_reserved,
        "halted": ctx.halted,
    }


def decide(action: Action, ctx: Context, rules: Sequence[Rule] = RULES) -> Decision:
    """Run `rules` (the gate's RULES) in order; the first that returns a Decision decides. Fail
    closed."""
    inputs: dict[str, Any] = {}
    try:
        inputs = _inputs(action, ctx)
        for rule in rules:
            decision = rule(action, ctx)
            if decision is not None:
                required, effective = decision.required_trust, decision.effective_autonomy
                inputs["required_trust"], inputs["effective_autonomy"] = required, effective
                return Decision(
                    decision.outcome, decision.rule, decision.reason, required, effective, inputs
                )
    except Exception as exc:  # fail closed
        return Decision(DENY, "internal_error", f"gate error: {type(exc).__name__}", inputs=inputs)
    return Decision(DENY, "internal_error", "no rule decided", inputs=inputs)
