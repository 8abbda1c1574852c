"""Turn a spec's contract, autonomy settings and resources into the gate's plain values.

The host uses this twice: to write the gateway's policy (JSON) and, later, to decide a
promotion with the same `gate.decide()`. Times become epoch seconds, levels become ints.
"""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import datetime
from typing import Any, overload

from assure.core import gate
from assure.errors import SpecError
from assure.gateway import config as gwconfig
from assure.run import ratifiers
from assure.spec import Contract, Spec, Task


def epoch(text: str) -> float:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError as exc:
        raise SpecError(
            [f"{text!r} is not an ISO 8601 date-time (e.g. 2027-01-31T12:00:00Z)"]
        ) from exc


@overload
def contract(spec: Spec, c: Contract) -> gate.Contract: ...
@overload
def contract(spec: Spec, c: None) -> None: ...
@overload
def contract(spec: Spec, c: Contract | None) -> gate.Contract | None: ...
def contract(spec: Spec, c: Contract | None) -> gate.Contract | None:
    """`c` (one of `spec`'s contracts) as the gate takes it, with its ratifier's signature
    checked against the trusted keyring here on the host."""
    if c is None:
        return None
    signed = ratifiers.check(spec.name, c)
    return gate.Contract(
        id=c.id,
        proposed_by=c.proposed_by,
        ratified_by=c.ratified_by,
        scope=c.scope,
        autonomy_ceiling=gate.LEVELS[c.autonomy_ceiling],
        irreversible_min_trust=gate.LEVELS[c.irreversible_min_trust],
        expires_at=epoch(c.expires_at) if c.expires_at else None,
        revoked=c.revoked,
        terms=c.terms,
        hash=c.hash,
        trust=c.trust,
        signed=c.hash if signed.key_id else None,
        key_id=signed.key_id,
        signature_problem=signed.problem,
    )


def pinned(spec: Spec) -> dict[str, Any]:
    """What `spec.contract`'s ratification pins besides its own terms, as this spec runs them:
    the acceptance tests of every task it governs (by task id), the protected paths and the
    writable scope. `gate.contract_terms` takes these as keywords."""
    governed = [
        {"task": t.id, "assertions": list(t.assertions)}
        for t in spec.tasks
        if t.contract == spec.contract
    ]
    return {
        "assertions": governed,
        "protected": list(spec.workspace.protected),
        "writable": list(spec.workspace.writable),
    }


def contract_denial(spec: Spec, task: Task, now: float) -> gate.Decision | None:
    """How the gate judges `task`'s contract, before any move: its own contract rule on a
    mutation inside the contract's scope, under what the task's attempts run with (a missing
    contract, unratified, self-ratified, hash or terms changed, revoked, expired). None: valid.
    Scope is left out: it is a property of a move, not of the contract."""
    c = contract(spec, task.contract)
    pins = pinned(dataclasses.replace(spec, contract=task.contract))
    action = gate.Action(
        "contract.check", mutates=True, scope=c.scope[0] if c and c.scope else None
    )
    decision = gate.contract_rule(
        action,
        gate.Context(
            known_tools=frozenset(),
            now=now,
            budget=gate.Budget(),
            contract=c,
            assertions=pins["assertions"],
            protected=tuple(pins["protected"]),
            writable=tuple(pins["writable"]),
        ),
    )
    return None if decision is None or decision.rule == "contract.scope" else decision


def confirmed_rollbacks(spec: Spec) -> dict[str, str]:
    """Rollback refs the host can confirm: a declared rollback file that exists, by its digest."""
    found = {}
    for db in spec.databases:
        if db.rollback:
            path = spec.path.parent / db.rollback
            if path.is_file():
                found[db.rollback] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def rollback_scopes(spec: Spec) -> dict[str, list[str]]:
    """Each confirmed rollback ref and the scopes it covers: the databases that declared it
    (a ref restores those databases, so it makes no other effect reversible)."""
    confirmed = confirmed_rollbacks(spec)
    scopes: dict[str, list[str]] = {}
    for db in spec.databases:
        if db.rollback in confirmed:
            scopes.setdefault(db.rollback, []).append(f"db:{db.name}")
    return scopes


def verifier_trust(spec: Spec) -> int:
    """The trust the host's verifier is granted: none without an assertion to check."""
    return gate.LEVELS[spec.autonomy.verifier_trust] if spec.assertions else gate.PROPOSE


def gateway_policy(spec: Spec) -> gwconfig.Policy:
    """The policy of the gateway config: everything `gate.Context` needs but the clock."""
    pins = pinned(spec)
    return gwconfig.Policy(
        contract=contract(spec, spec.contract),
        assertions=pins["assertions"],
        writable=tuple(pins["writable"]),
        operator_dial=gate.LEVELS[spec.autonomy.dial],
        # under a trust policy, trust is earned per agent in the host's ledger (run/earned), which
        # promote consults; an attempt's own live effects get none of it yet: fail closed
        verifier_trust=gate.PROPOSE
        if spec.contract is not None and spec.contract.trust is not None
        else verifier_trust(spec),
        human_gates=tuple(
            gate.HumanGate(
                id=g.id, scope=g.scope, approved_by=g.approved_by, expires_at=epoch(g.expires_at)
            )
            for g in spec.autonomy.human_gates
        ),
        rollbacks={ref: tuple(scopes) for ref, scopes in rollback_scopes(spec).items()},
        tokens_limit=spec.limits.tokens,
        cost_limit=spec.limits.cost,
    )
