"""The gate as a table: every term of boxes 0 and 5, one row each, exact rule and figures."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from assure.core import gate, record
from assure.core.gate import (
    COMMIT,
    IRREVERSIBLE,
    PROPOSE,
    Action,
    Budget,
    Context,
    Contract,
    HumanGate,
    contract_hash,
    contract_terms,
    decide,
)

NOW = 1_700_000_000.0
# what the contract pins besides its own terms, as the attempt runs them (BASE passes the same)
PINNED = dict(
    assertions=[{"task": "main", "assertions": [{"exit_code": 0}]}],
    protected=("tests/**",),
    writable=("src/**",),
)


def signed(**terms: Any) -> Contract:
    """A ratified contract whose term digests and hash match its terms and PINNED."""
    base = dict(
        id="c-1",
        proposed_by="planner",
        ratified_by="alice",
        scope=("fs:src/**", "db:shop", "http:api.example.com:443"),
        autonomy_ceiling=IRREVERSIBLE,
        expires_at=NOW + 3600,
    )
    return gate.ratify(Contract(**{**base, **terms}), **PINNED)


C = signed()
GATES = (
    HumanGate(id="hg-ok", scope="db:*", approved_by="bob", expires_at=NOW + 60),
    HumanGate(id="hg-old", scope="db:*", approved_by="bob", expires_at=NOW),
    HumanGate(id="hg-http", scope="http:*", approved_by="bob", expires_at=NOW + 60),
    HumanGate(id="hg-anon", scope="db:*", approved_by=" ", expires_at=NOW + 60),
)
SPEND = Action("model.messages", False, spends=True)
BUDGET = Budget(
    tool_calls_used=3,
    tool_calls_limit=10,
    tokens_used=10,
    tokens_limit=100,
    cost_used=1.0,
    cost_limit=2.0,
    wall_seconds_used=5,
    wall_seconds_limit=60,
)
BASE = dict(
    known_tools=frozenset({"fs.read", "fs.write", "db.execute", "http.request", "model.messages"}),
    now=NOW,
    budget=BUDGET,
    **PINNED,
    contract=C,
    operator_dial=COMMIT,
    verifier_trust=COMMIT,
    verifier_fresh=True,
    rollbacks={"rb-1": ("db:shop",), "rb-vault": ("db:vault",)},
    human_gates=GATES,
)

READ = Action("fs.read", False, path="src/calc.py")
WRITE = Action("fs.write", True, path="src/calc.py")  # sandbox: the per-attempt copy
LIVE_REV = Action(
    "db.execute", True, scope="db:shop", resource_mode="live", reversible=True, rollback_ref="rb-1"
)
LIVE_IRR = Action("db.execute", True, scope="db:shop", resource_mode="live")
EXTERNAL = Action("http.request", True, scope="http:api.example.com:443", resource_mode="external")
HIGH = dict(operator_dial=IRREVERSIBLE, verifier_trust=IRREVERSIBLE)


def live(**fields: Any) -> Action:
    return dataclasses.replace(LIVE_IRR, **fields)


def row(
    name: str, action: Action, expect: tuple[str, str, int | None, int | None], **ctx: Any
) -> Any:
    return pytest.param(action, ctx, expect, id=name)


DENY, ALLOW, ESCALATE = "deny", "allow", "escalate"

TABLE = [
    # 1 known_tool
    row("unknown_tool", Action("shell.exec", True), (DENY, "known_tool", None, None)),
    # 2 budget: every counter, reads included; NaN counts as over
    row(
        "budget_tool_calls",
        WRITE,
        (DENY, "budget.tool_calls", None, None),
        budget=dataclasses.replace(BUDGET, tool_calls_used=10),
    ),
    row(
        "budget_tokens",
        WRITE,
        (DENY, "budget.tokens", None, None),
        budget=dataclasses.replace(BUDGET, tokens_used=101),
    ),
    row(
        "budget_cost",
        WRITE,
        (DENY, "budget.cost", None, None),
        budget=dataclasses.replace(BUDGET, cost_used=2.0),
    ),
    row(
        "budget_wall_seconds",
        WRITE,
        (DENY, "budget.wall_seconds", None, None),
        budget=dataclasses.replace(BUDGET, wall_seconds_used=60),
    ),
    row(
        "budget_applies_to_reads",
        READ,
        (DENY, "budget.tokens", None, None),
        budget=dataclasses.replace(BUDGET, tokens_used=100),
    ),
    row(
        "budget_nan_is_over",
        WRITE,
        (DENY, "budget.cost", None, None),
        budget=dataclasses.replace(BUDGET, cost_used=float("nan")),
    ),
    row(
        "budget_reservation_fits",
        SPEND,
        (ALLOW, "read_only", None, None),
        budget=dataclasses.replace(BUDGET, tokens_reserved=90),
    ),
    row(
        "budget_reservation_passes_tokens",
        SPEND,
        (DENY, "budget.tokens", None, None),
        budget=dataclasses.replace(BUDGET, tokens_reserved=91),
    ),
    row(
        "budget_reservation_passes_cost",
        SPEND,
        (DENY, "budget.cost", None, None),
        budget=dataclasses.replace(BUDGET, cost_reserved=1.5),
    ),
    row(
        "budget_reservation_nan_is_over",
        SPEND,
        (DENY, "budget.cost", None, None),
        budget=dataclasses.replace(BUDGET, cost_reserved=float("nan")),
    ),
    row(
        "budget_reservation_only_for_spending",
        READ,
        (ALLOW, "read_only", None, None),
        budget=dataclasses.replace(BUDGET, tokens_reserved=10**6),
    ),
    row(
        "budget_unlimited",
        WRITE,
        (ALLOW, "autonomy", PROPOSE, COMMIT),
        budget=Budget(tool_calls_used=10**9),
    ),
    # 3 operator_halt / 4 read_only
    row("halt_blocks_mutation", WRITE, (DENY, "operator_halt", None, None), halted=True),
    row(
        "halt_blocks_spending",
        Action("model.messages", False, spends=True),
        (DENY, "operator_halt", None, None),
        halted=True,
    ),
    row(
        "spending_is_a_read_otherwise",
        Action("model.messages", False, spends=True),
        (ALLOW, "read_only", None, None),
    ),
    row("halt_allows_reads", READ, (ALLOW, "read_only", None, None), halted=True),
    row(
        "halt_blocks_safe_egress",
        Action("http.request", False, scope="http:api.example:443", resource_mode="external"),
        (DENY, "operator_halt", None, None),
        halted=True,
        known_tools=frozenset({"http.request"}),
    ),
    row(
        "safe_egress_is_a_read_otherwise",
        Action("http.request", False, scope="http:api.example:443", resource_mode="external"),
        (ALLOW, "read_only", None, None),
        known_tools=frozenset({"http.request"}),
    ),
    row("read_needs_no_contract", READ, (ALLOW, "read_only", None, None), contract=None),
    # 5 protected_path (before the contract: even a missing contract is not the reason)
    row(
        "protected_path",
        Action("fs.write", True, path="tests/test_calc.py"),
        (DENY, "protected_path", None, None),
    ),
    row(
        "protected_path_first",
        Action("fs.delete", True, path="tests/x.py"),
        (DENY, "protected_path", None, None),
        known_tools=frozenset({"fs.delete"}),
        contract=None,
    ),
    # 6 contract
    row("contract_missing", WRITE, (DENY, "contract.missing", None, None), contract=None),
    row(
        "contract_unratified_none",
        WRITE,
        (DENY, "contract.unratified", None, None),
        contract=dataclasses.replace(C, ratified_by=None),
    ),
    row(
        "contract_unratified_empty",
        WRITE,
        (DENY, "contract.unratified", None, None),
        contract=dataclasses.replace(C, ratified_by=" "),
    ),
    row(
        "contract_self_ratified",
        WRITE,
        (DENY, "contract.self_ratified", None, None),
        contract=dataclasses.replace(C, ratified_by="planner"),
    ),
    row(
        "contract_self_ratified_spelling",
        WRITE,
        (DENY, "contract.self_ratified", None, None),
        contract=dataclasses.replace(C, ratified_by=" Planner"),
    ),
    row(
        "contract_hash_missing",
        WRITE,
        (DENY, "contract.hash", None, None),
        contract=dataclasses.replace(C, hash=None),
    ),
    row(
        "contract_old_format",
        WRITE,
        (DENY, "contract.old_format", None, None),
        contract=dataclasses.replace(C, terms=None),
    ),
    row(
        "contract_hash_forged_terms",
        WRITE,
        (DENY, "contract.hash", None, None),
        contract=dataclasses.replace(C, terms={**C.terms, "scope": C.terms["id"]}),
    ),
    row(
        "contract_terms_not_a_mapping",
        WRITE,
        (DENY, "contract.hash", None, None),
        contract=dataclasses.replace(C, terms=list(C.terms)),
    ),
    row(
        "contract_forged_scope",
        WRITE,
        (DENY, "contract.terms_changed", None, None),
        contract=dataclasses.replace(C, scope=("**",)),
    ),
    row(
        "contract_forged_ceiling",
        WRITE,
        (DENY, "contract.terms_changed", None, None),
        contract=dataclasses.replace(C, autonomy_ceiling=9),
    ),
    row(
        "contract_forged_expiry",
        WRITE,
        (DENY, "contract.terms_changed", None, None),
        contract=dataclasses.replace(C, expires_at=None),
    ),
    row(
        "contract_assertions_edited",
        WRITE,
        (DENY, "contract.terms_changed", None, None),
        assertions=[{"task": "main", "assertions": []}],
    ),
    row(
        "contract_protected_edited",
        WRITE,
        (DENY, "contract.terms_changed", None, None),
        protected=(),
    ),
    row(
        "contract_writable_edited",
        WRITE,
        (DENY, "contract.terms_changed", None, None),
        writable=("**",),
    ),
    row(
        "contract_reratified_keeps_hash",
        WRITE,
        (ALLOW, "autonomy", PROPOSE, COMMIT),
        contract=dataclasses.replace(C, ratified_by="carol"),
    ),
    row(
        "contract_revoked",
        WRITE,
        (DENY, "contract.revoked", None, None),
        contract=dataclasses.replace(C, revoked=True),
    ),
    row(
        "contract_expired_at_deadline",
        WRITE,
        (DENY, "contract.expired", None, None),
        contract=signed(expires_at=NOW),
    ),
    row(
        "contract_expired_nan_clock",
        WRITE,
        (DENY, "contract.expired", None, None),
        now=float("nan"),
    ),
    row(
        "contract_no_expiry",
        WRITE,
        (ALLOW, "autonomy", PROPOSE, COMMIT),
        contract=signed(expires_at=None),
    ),
    row(
        "contract_scope_fs",
        Action("fs.write", True, path="docs/readme.md"),
        (DENY, "contract.scope", None, None),
    ),
    row(
        "contract_scope_http",
        dataclasses.replace(EXTERNAL, scope="http:evil.example:443"),
        (DENY, "contract.scope", None, None),
    ),
    row("contract_scope_none", Action("db.execute", True), (DENY, "contract.scope", None, None)),
    row(
        "contract_unhashable_terms",
        WRITE,
        (DENY, "internal_error", None, None),
        contract=dataclasses.replace(C, expires_at=float("nan")),
    ),
    # 7 autonomy: dial, ceiling, verifier
    row(
        "dial_propose_sandbox_write",
        WRITE,
        (ALLOW, "autonomy", PROPOSE, PROPOSE),
        operator_dial=PROPOSE,
    ),
    row(
        "dial_propose_live_effect",
        LIVE_REV,
        (DENY, "autonomy.insufficient", COMMIT, PROPOSE),
        operator_dial=PROPOSE,
    ),
    row(
        "ceiling_propose_live_effect",
        LIVE_REV,
        (DENY, "autonomy.insufficient", COMMIT, PROPOSE),
        contract=signed(autonomy_ceiling=PROPOSE),
    ),
    row(
        "ceiling_commit_irreversible",
        LIVE_IRR,
        (ESCALATE, "escalate.irreversible", IRREVERSIBLE, COMMIT),
        contract=signed(autonomy_ceiling=COMMIT),
        **HIGH,
    ),
    row(
        "stale_verifier_sandbox_write",
        WRITE,
        (ALLOW, "autonomy", PROPOSE, PROPOSE),
        verifier_fresh=False,
        **HIGH,
    ),
    row(
        "stale_verifier_live_reversible",
        LIVE_REV,
        (DENY, "autonomy.insufficient", COMMIT, PROPOSE),
        verifier_fresh=False,
        **HIGH,
    ),
    row(
        "verifier_trust_zero",
        LIVE_REV,
        (DENY, "autonomy.insufficient", COMMIT, PROPOSE),
        verifier_trust=PROPOSE,
    ),
    # reversibility: only a host-confirmed rollback_ref counts
    row("reversible_confirmed_needs_commit", LIVE_REV, (ALLOW, "autonomy", COMMIT, COMMIT)),
    row(
        "rollback_ref_forged",
        live(reversible=True, rollback_ref="rb-forged"),
        (ESCALATE, "escalate.irreversible", IRREVERSIBLE, COMMIT),
    ),
    row(
        "rollback_ref_missing",
        live(reversible=True),
        (ESCALATE, "escalate.irreversible", IRREVERSIBLE, COMMIT),
    ),
    row(
        "rollback_ref_for_another_scope",
        live(reversible=True, rollback_ref="rb-vault"),
        (ESCALATE, "escalate.irreversible", IRREVERSIBLE, COMMIT),
    ),
    row(
        "rollback_ref_for_an_http_effect",
        dataclasses.replace(EXTERNAL, reversible=True, rollback_ref="rb-1"),
        (ESCALATE, "escalate.irreversible", IRREVERSIBLE, COMMIT),
    ),
    row(
        "reversible_missing",
        live(rollback_ref="rb-1"),
        (ESCALATE, "escalate.irreversible", IRREVERSIBLE, COMMIT),
    ),
    row(
        "reversible_false",
        live(reversible=False, rollback_ref="rb-1"),
        (ESCALATE, "escalate.irreversible", IRREVERSIBLE, COMMIT),
    ),
    row(
        "unknown_resource_mode_is_real",
        live(resource_mode="prod"),
        (ESCALATE, "escalate.irreversible", IRREVERSIBLE, COMMIT),
    ),
    row(
        "irreversible_enough_trust",
        LIVE_IRR,
        (ALLOW, "autonomy", IRREVERSIBLE, IRREVERSIBLE),
        **HIGH,
    ),
    row("external_enough_trust", EXTERNAL, (ALLOW, "autonomy", IRREVERSIBLE, IRREVERSIBLE), **HIGH),
    row(
        "irreversible_min_trust_raises_bar",
        LIVE_IRR,
        (ESCALATE, "escalate.irreversible", 3, IRREVERSIBLE),
        contract=signed(irreversible_min_trust=3),
        **HIGH,
    ),
    row(
        "irreversible_min_trust_floor",
        LIVE_IRR,
        (ESCALATE, "escalate.irreversible", IRREVERSIBLE, COMMIT),
        contract=signed(irreversible_min_trust=PROPOSE),
    ),
    # human gates (only for irreversible effects)
    row("human_gate_valid", live(human_gate="hg-ok"), (ALLOW, "human_gate", IRREVERSIBLE, COMMIT)),
    row(
        "human_gate_expired",
        live(human_gate="hg-old"),
        (DENY, "human_gate.expired", IRREVERSIBLE, COMMIT),
    ),
    row(
        "human_gate_other_scope",
        live(human_gate="hg-http"),
        (ESCALATE, "escalate.irreversible", IRREVERSIBLE, COMMIT),
    ),
    row(
        "human_gate_unknown_id",
        live(human_gate="hg-nope"),
        (ESCALATE, "escalate.irreversible", IRREVERSIBLE, COMMIT),
    ),
    row(
        "human_gate_no_approver",
        live(human_gate="hg-anon"),
        (ESCALATE, "escalate.irreversible", IRREVERSIBLE, COMMIT),
    ),
    row(
        "human_gate_not_for_reversible",
        dataclasses.replace(LIVE_REV, human_gate="hg-ok"),
        (DENY, "autonomy.insufficient", COMMIT, PROPOSE),
        operator_dial=PROPOSE,
    ),
    # legacy specs: no contract block, ceiling PROPOSE
    row(
        "legacy_sandbox_write",
        WRITE,
        (ALLOW, "autonomy", PROPOSE, PROPOSE),
        contract=None,
        require_contract=False,
        **HIGH,
    ),
    row(
        "legacy_live_reversible",
        LIVE_REV,
        (DENY, "autonomy.insufficient", COMMIT, PROPOSE),
        contract=None,
        require_contract=False,
        **HIGH,
    ),
    row(
        "legacy_live_irreversible",
        LIVE_IRR,
        (ESCALATE, "escalate.irreversible", IRREVERSIBLE, PROPOSE),
        contract=None,
        require_contract=False,
        **HIGH,
    ),
    row(
        "legacy_presented_contract_checked",
        WRITE,
        (DENY, "contract.self_ratified", None, None),
        contract=dataclasses.replace(C, ratified_by="planner"),
        require_contract=False,
    ),
]


@pytest.mark.parametrize(("action", "overrides", "expect"), TABLE)
def test_decide_table(
    action: Action, overrides: dict[str, Any], expect: tuple[str, str, int | None, int | None]
) -> None:
    decision = decide(action, Context(**{**BASE, **overrides}))
    assert (
        decision.outcome,
        decision.rule,
        decision.required_trust,
        decision.effective_autonomy,
    ) == expect, decision.reason
    assert (decision.inputs["required_trust"], decision.inputs["effective_autonomy"]) == expect[2:]


def test_a_budget_denial_names_the_exhausted_counter() -> None:
    spent = decide(
        WRITE, Context(**{**BASE, "budget": dataclasses.replace(BUDGET, tokens_used=101)})
    )
    assert (spent.rule, spent.exhausted) == ("budget.tokens", "tokens")
    other = decide(WRITE, Context(**{**BASE, "halted": True}))
    assert not other.allowed and other.exhausted is None


def test_a_scope_denial_names_the_contract_scope_in_words() -> None:
    denied = decide(Action("fs.write", True, path="docs/readme.md"), Context(**BASE))
    assert denied.rule == "contract.scope"
    assert "[" not in denied.reason and ", ".join(BASE["contract"].scope) in denied.reason, (
        denied.reason
    )


def test_a_raising_rule_denies_with_internal_error() -> None:
    def boom(_action: Action, _ctx: Context) -> None:
        raise RuntimeError("boom")

    decision = decide(READ, Context(**BASE), rules=(boom, *gate.RULES))
    assert (decision.outcome, decision.rule, decision.reason) == (
        "deny",
        "internal_error",
        "gate error: RuntimeError",
    )
    assert decision.inputs["mutates"] is False


def test_no_rule_deciding_denies() -> None:
    decision = decide(READ, Context(**BASE), rules=())
    assert (decision.outcome, decision.rule, decision.reason) == (
        "deny",
        "internal_error",
        "no rule decided",
    )


def test_a_broken_context_denies() -> None:
    # deliberately broken: the test is that the gate denies it
    decision = decide(WRITE, Context(**{**BASE, "budget": None}))  # type: ignore[arg-type]
    assert (decision.outcome, decision.rule) == ("deny", "internal_error")


def test_decide_is_deterministic() -> None:
    ctx = Context(**{**BASE, **HIGH})
    for action in (READ, WRITE, LIVE_REV, LIVE_IRR, live(human_gate="hg-ok")):
        assert decide(action, ctx) == decide(dataclasses.replace(action), dataclasses.replace(ctx))


def test_inputs_carry_every_figure_the_journal_needs() -> None:
    decision = decide(LIVE_REV, Context(**BASE))
    assert decision.inputs == {
        "mutates": True,
        "scope": "db:shop",
        "resource_mode": "live",
        "reversible": True,
        "rollback_confirmed": True,
        "contract_id": "c-1",
        "human_gate": None,
        "operator_dial": COMMIT,
        "autonomy_ceiling": IRREVERSIBLE,
        "verifier_trust": COMMIT,
        "verifier_fresh": True,
        "required_trust": COMMIT,
        "effective_autonomy": COMMIT,
        "tool_calls_used": 3,
        "tool_calls_limit": 10,
        "tokens_used": 10,
        "tokens_limit": 100,
        "cost_used": 1.0,
        "cost_limit": 2.0,
        "wall_seconds_used": 5,
        "wall_seconds_limit": 60,
        "tokens_reserved": 0,
        "cost_reserved": 0.0,
        "halted": False,
    }
    assert (
        decide(Action("shell.exec", True), Context(**BASE)).inputs.keys() == decision.inputs.keys()
    )


def test_fs_scope_defaults_to_the_path() -> None:
    assert decide(WRITE, Context(**BASE)).inputs["scope"] == "fs:src/calc.py"


def test_decision_is_frozen_and_serializes() -> None:
    decision = decide(WRITE, Context(**BASE))
    with pytest.raises(record.FrozenInstanceError):
        # frozen: the test is that the assignment fails
        decision.outcome = "allow"  # type: ignore[misc]
    out = decision.to_json()
    assert json.loads(json.dumps(out)) == out
    assert (out["outcome"], out["rule"], out["required_trust"], out["effective_autonomy"]) == (
        "allow",
        "autonomy",
        PROPOSE,
        COMMIT,
    )


def test_contract_hash_covers_the_terms_only() -> None:
    assert (
        C.hash is not None and C.hash.startswith("sha256:") and len(C.hash) == len("sha256:") + 64
    )
    assert C.hash == contract_hash(C.terms)
    assert list(C.terms) == [t for t in gate.TERMS if t != "trust"]  # only a trust policy pins it
    assert (
        contract_terms(
            dataclasses.replace(C, ratified_by="zed", revoked=True, terms=None, hash="x"), **PINNED
        )
        == C.terms
    )
    for change in (
        {"id": "c-2"},
        {"proposed_by": "p2"},
        {"scope": ("fs:src/**",)},
        {"autonomy_ceiling": COMMIT},
        {"irreversible_min_trust": 3},
        {"expires_at": NOW},
    ):
        assert (
            contract_hash(contract_terms(dataclasses.replace(C, **change), **PINNED)) != C.hash
        ), change


CHANGES: dict[
    str, dict[str, Any]
] = {  # each term, changed after ratification: in the contract, or in what the attempt runs under
    "id": {"contract": dataclasses.replace(C, id="c-2")},
    "proposed_by": {"contract": dataclasses.replace(C, proposed_by="p2")},
    "scope": {"contract": dataclasses.replace(C, scope=("fs:**",))},
    "autonomy_ceiling": {"contract": dataclasses.replace(C, autonomy_ceiling=COMMIT)},
    "irreversible_min_trust": {"contract": dataclasses.replace(C, irreversible_min_trust=COMMIT)},
    "expires_at": {"contract": dataclasses.replace(C, expires_at=NOW + 7200)},
    "assertions": {"assertions": [{"task": "main", "assertions": [{"exit_code": 1}]}]},
    "protected": {"protected": ("tests/**", "docs/**")},
    "writable": {"writable": ("src/**", "out/**")},
    "trust": {  # a trust policy added after ratification (the ledger would raise the dial)
        "contract": dataclasses.replace(C, trust={"earn": {"after": 1}, "max": "commit"})
    },
}


def test_every_term_is_a_change_case() -> None:
    assert set(CHANGES) == set(gate.TERMS)


@pytest.mark.parametrize("term", list(CHANGES))
def test_a_term_changed_after_ratification_denies_every_mutation_naming_it(term: str) -> None:
    ctx = Context(**{**BASE, **CHANGES[term]})
    for action in (WRITE, LIVE_REV, EXTERNAL):
        d = decide(action, ctx)
        assert (d.outcome, d.rule) == (DENY, "contract.terms_changed"), (term, action, d)
        assert f"since it was ratified: {term};" in d.reason and "assure contract hash" in d.reason
    assert decide(READ, ctx).allowed  # a read needs no contract


def test_unchanged_terms_allow_and_several_changes_are_all_named() -> None:
    assert decide(WRITE, Context(**BASE)).allowed
    d = decide(
        WRITE,
        Context(
            **{
                **BASE,
                "writable": (),
                "assertions": [],
                "contract": dataclasses.replace(C, scope=("fs:**",)),
            }
        ),
    )
    assert (
        d.rule == "contract.terms_changed" and "ratified: scope, assertions, writable;" in d.reason
    )


def test_recomputing_the_hash_over_forged_digests_still_names_the_term() -> None:
    forged = {**C.terms, "assertions": gate.digest([])}
    d = decide(
        WRITE,
        Context(
            **{**BASE, "contract": dataclasses.replace(C, terms=forged, hash=contract_hash(forged))}
        ),
    )
    assert d.rule == "contract.terms_changed" and "ratified: assertions;" in d.reason
    extra = {
        **C.terms,
        "budget": gate.digest(1),
    }  # a term the gate does not know is a change, not ignored
    d = decide(
        WRITE,
        Context(
            **{**BASE, "contract": dataclasses.replace(C, terms=extra, hash=contract_hash(extra))}
        ),
    )
    assert d.rule == "contract.terms_changed" and "ratified: budget;" in d.reason


def test_an_old_format_contract_is_denied_with_the_fix() -> None:
    old = dataclasses.replace(C, terms=None)
    d = decide(WRITE, Context(**{**BASE, "contract": old}))
    assert (d.outcome, d.rule) == (
        DENY,
        "contract.old_format",
    ) and "assure contract hash" in d.reason


def test_levels() -> None:
    assert gate.LEVELS == {"propose": 0, "commit": 1, "irreversible": 2}
    assert PROPOSE < COMMIT < IRREVERSIBLE


def test_a_folder_a_scope_glob_names_may_be_created_and_nothing_else_at_that_path() -> None:
    """Promote of an added folder `src` under scope `fs:src/**`: covered as a folder, not as a
    file."""
    promote = {**BASE, **HIGH}
    folder = Action("fs.write", True, path="src", folder=True)
    assert decide(folder, Context(**promote)).rule == "autonomy"
    assert (
        decide(dataclasses.replace(folder, folder=False), Context(**promote)).rule
        == "contract.scope"
    )
    assert (
        decide(Action("fs.write", True, path="lib", folder=True), Context(**promote)).rule
        == "contract.scope"
    )
