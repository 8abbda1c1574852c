"""The gate's cached term digests (gate.Pinned, the gateway's Config.pinned): nothing reachable
from the snapshot can be changed in place, every change makes a new snapshot with new digests,
and a tampered contract is still denied. Mutation paths that bypass Python's rules
(`object.__setattr__`, ctypes) are in-process code, which is trusted: the agent reaches the
gateway only through its socket."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from assure.core import gate, record
from assure.core.gate import Action, Budget, Context, Pinned, decide
from assure.gateway.config import Config, Policy, parse

NOW = 1_700_000_000.0
ASSERTIONS = [{"task": "main", "assertions": [{"exit_code": 0, "cmd": ["pytest", "-q"]}]}]
PROTECTED, WRITABLE = ("tests/**",), ("src/**",)
TRUST = {"earn": {"after": 2}, "max": "commit"}
WRITE = Action("fs.write", True, path="src/app.py")
READ = Action("fs.read", False, path="src/app.py")


def ratified(**terms: Any) -> gate.Contract:
    contract = gate.Contract(
        **{
            "id": "c-1",
            "proposed_by": "alice",
            "ratified_by": "bob",
            "scope": ("fs:src/**",),
            "autonomy_ceiling": gate.COMMIT,
            "expires_at": NOW + 3600,
            "trust": TRUST,
            **terms,
        }
    )
    return gate.ratify(contract, assertions=ASSERTIONS, protected=PROTECTED, writable=WRITABLE)


def config(tmp_path: Path, contract: gate.Contract | None = None) -> Config:
    """A gateway config as the gateway reads it: from JSON text."""
    raw = {
        "run_id": "run-pinned",
        "attempt": 1,
        "socket": str(tmp_path / "gw.sock"),
        "workspace": str(tmp_path),
        "journal": str(tmp_path / "journal.jsonl"),
        "ready_file": str(tmp_path / "ready"),
        "protected": list(PROTECTED),
        "limits": {"tool_calls": 100},
        "policy": {
            "contract": dataclasses.asdict(contract or ratified()),
            "assertions": ASSERTIONS,
            "writable": list(WRITABLE),
            "operator_dial": gate.COMMIT,
            "verifier_trust": gate.COMMIT,
            "rollbacks": {"rb-1": ["db:shop"]},
        },
    }
    return parse(json.loads(json.dumps(raw)))


def ctx(pinned: Pinned) -> Context:
    return Context(
        known_tools=frozenset({"fs.read", "fs.write"}),
        now=NOW,
        budget=Budget(),
        pinned=pinned,
        operator_dial=gate.COMMIT,
        verifier_trust=gate.COMMIT,
        verifier_fresh=True,
    )


def reachable(obj: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every object reachable from `obj` through fields, items and elements, with its path."""
    out = [(path, obj)]
    if dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            out += reachable(getattr(obj, f.name), f"{path}.{f.name}")
    elif isinstance(obj, MappingProxyType):
        for k, v in obj.items():
            out += reachable(k, f"{path}<key>") + reachable(v, f"{path}[{k!r}]")
    elif isinstance(obj, (tuple, frozenset)):
        for i, v in enumerate(obj):
            out += reachable(v, f"{path}[{i}]")
    return out


SCALARS = (type(None), str, int, float, bool)


def test_everything_reachable_from_the_snapshot_is_read_only(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    for where, obj in reachable(cfg.pinned, "pinned") + reachable(cfg.policy, "policy"):
        if dataclasses.is_dataclass(obj):
            assert record.is_frozen(type(obj)), where  # the gate's are assure.core.record's
            for f in dataclasses.fields(obj):
                with pytest.raises(record.FrozenInstanceError):
                    setattr(obj, f.name, None)
                with pytest.raises(record.FrozenInstanceError):
                    delattr(obj, f.name)
        elif isinstance(obj, MappingProxyType):
            key = next(iter(obj), "k")
            with pytest.raises(TypeError):
                # read-only: the test is that the change fails
                obj[key] = "changed"  # type: ignore[index]
            with pytest.raises(TypeError):
                # read-only: the test is that the change fails
                del obj[key]  # type: ignore[attr-defined]
            before = dict(obj)
            with pytest.raises(TypeError):
                # read-only: the test is that the change fails
                obj |= {key: "changed"}  # type: ignore[misc]
            for method in ("update", "pop", "popitem", "clear", "setdefault", "__setitem__"):
                assert not hasattr(obj, method), (where, method)
            assert dict(obj) == before
        else:  # a tuple or frozenset has no mutating method at all
            assert isinstance(obj, (*SCALARS, tuple, frozenset)), (where, type(obj))
    # the contract's mutable-looking parts in particular
    c = cfg.pinned.contract
    assert c is not None and c == cfg.policy.contract
    assert isinstance(c.terms, MappingProxyType) and isinstance(c.trust, MappingProxyType)
    assert isinstance(c.scope, tuple) and isinstance(cfg.pinned.assertions, tuple)
    assert isinstance(cfg.pinned.digests, MappingProxyType)


def test_the_cached_digests_are_the_ratified_ones(tmp_path: Path) -> None:
    cfg, contract = config(tmp_path), ratified()
    assert dict(cfg.pinned.digests or {}) == contract.terms
    assert cfg.pinned.hash_ok and cfg.pinned.changed == () and cfg.pinned.problem is None
    assert decide(WRITE, ctx(cfg.pinned)).rule == "autonomy"


def test_changing_the_objects_it_was_pinned_from_changes_nothing() -> None:
    assertions = json.loads(json.dumps(ASSERTIONS))
    terms = dict(ratified().terms or {})
    contract = dataclasses.replace(ratified(), terms=terms)
    pinned = Pinned(
        contract=contract, assertions=assertions, protected=PROTECTED, writable=WRITABLE
    )
    before = dict(pinned.digests or {})
    assertions[0]["assertions"].append({"exit_code": 1})
    assertions.append({"task": "other"})
    terms["scope"] = gate.digest(["fs:**"])
    assert dict(pinned.digests or {}) == before and pinned.contract is not None
    assert pinned.contract.terms == ratified().terms
    assert decide(WRITE, ctx(pinned)).allowed
    # the same changes, pinned anew, are judged: the gate was not just ignoring them
    again = Pinned(contract=contract, assertions=assertions, protected=PROTECTED, writable=WRITABLE)
    assert decide(WRITE, ctx(again)).rule == "contract.hash"


CHANGES: dict[str, dict[str, Any]] = {  # each term, changed in a new snapshot
    "id": {"contract": {"id": "c-2"}},
    "proposed_by": {"contract": {"proposed_by": "mallory"}},
    "scope": {"contract": {"scope": ("fs:**",)}},
    "autonomy_ceiling": {"contract": {"autonomy_ceiling": gate.IRREVERSIBLE}},
    "irreversible_min_trust": {"contract": {"irreversible_min_trust": 3}},
    "expires_at": {"contract": {"expires_at": NOW + 7200}},
    "trust": {"contract": {"trust": {"earn": {"after": 0}, "max": "irreversible"}}},
    "assertions": {"assertions": [{"task": "main", "assertions": []}]},
    "protected": {"protected": ()},
    "writable": {"writable": ("**",)},
}


def test_every_term_is_a_change_case() -> None:
    assert set(CHANGES) == set(gate.TERMS)


@pytest.mark.parametrize("term", list(CHANGES))
def test_a_changed_term_is_a_new_snapshot_whose_digest_changed(term: str, tmp_path: Path) -> None:
    cfg = config(tmp_path)
    change = dict(CHANGES[term])
    if "contract" in change:
        change["contract"] = dataclasses.replace(cfg.pinned.contract, **change["contract"])
    pinned = dataclasses.replace(cfg.pinned, **change)
    assert pinned is not cfg.pinned and cfg.pinned.changed == ()
    assert pinned.digests is not None and cfg.pinned.digests is not None
    assert [t for t in gate.TERMS if pinned.digests[t] != cfg.pinned.digests[t]] == [term]
    assert pinned.changed == (term,)
    d = decide(WRITE, ctx(pinned))
    assert (d.outcome, d.rule) == (gate.DENY, "contract.terms_changed") and term in d.reason
    # the config itself: changing a field gives a new Config with a new snapshot
    if term in ("protected",):
        other = dataclasses.replace(cfg, protected=())
    elif term in ("assertions", "writable"):
        other = dataclasses.replace(cfg, policy=dataclasses.replace(cfg.policy, **change))
    else:
        other = dataclasses.replace(
            cfg, policy=dataclasses.replace(cfg.policy, contract=change["contract"])
        )
    assert other.pinned is not cfg.pinned and other.pinned.changed == (term,)
    assert decide(WRITE, ctx(other.pinned)).rule == "contract.terms_changed"
    assert decide(WRITE, ctx(cfg.pinned)).allowed  # the original snapshot is untouched


def test_a_tampered_contract_is_still_denied_through_the_cache(tmp_path: Path) -> None:
    good = ratified()
    forged_hash = dataclasses.replace(good, hash=gate.digest("x"), signed=gate.digest("x"))
    assert decide(WRITE, ctx(config(tmp_path, forged_hash).pinned)).rule == "contract.hash"
    unsigned = dataclasses.replace(good, signed=None, signature_problem="no trusted key")
    assert decide(WRITE, ctx(config(tmp_path, unsigned).pinned)).rule == "contract.signature"
    forged_terms = {**(good.terms or {}), "scope": gate.digest(["fs:**"])}
    wider = dataclasses.replace(
        good,
        scope=("fs:**",),
        terms=forged_terms,
        hash=gate.contract_hash(forged_terms),
        signed=good.hash,  # the ratifier signed the old hash
    )
    assert decide(WRITE, ctx(config(tmp_path, wider).pinned)).rule == "contract.signature"
    # deliberately a list: the test is that its hash no longer matches
    terms_list = dataclasses.replace(good, terms=[["scope", "x"]])  # type: ignore[arg-type]
    assert decide(WRITE, ctx(Pinned(contract=terms_list))).rule == "contract.hash"


def test_a_snapshot_that_cannot_be_pinned_denies_every_mutation() -> None:
    pinned = Pinned(contract=ratified(), assertions=[{"x": object()}])
    assert pinned.digests is None and pinned.problem and "TypeError" in pinned.problem
    d = decide(WRITE, ctx(pinned))
    assert (d.outcome, d.rule) == (gate.DENY, "internal_error")
    assert decide(READ, ctx(pinned)).allowed  # a read needs no contract
    nan = Pinned(contract=dataclasses.replace(ratified(), expires_at=float("nan")))  # no JSON
    assert nan.digests is None and decide(WRITE, ctx(nan)).rule == "internal_error"


def test_a_context_takes_the_snapshot_or_its_parts_never_two_views() -> None:
    pinned = Pinned(
        contract=ratified(), assertions=ASSERTIONS, protected=PROTECTED, writable=WRITABLE
    )
    with pytest.raises(ValueError, match="not both"):
        Context(known_tools=frozenset(), now=NOW, budget=Budget(), pinned=pinned, protected=("x",))
    with pytest.raises(ValueError, match="not both"):
        Context(known_tools=frozenset(), now=NOW, budget=Budget(), pinned=pinned, writable=("x",))
    c = ctx(pinned)
    assert (c.contract, c.protected, c.assertions) == (
        pinned.contract,
        pinned.protected,
        pinned.assertions,
    )
    assert dataclasses.replace(c).pinned is pinned  # a copy keeps the one snapshot
    # parts alone are pinned on the spot, as the host's callers (promote, health) pass them
    parts = Context(
        known_tools=frozenset({"fs.write"}),
        now=NOW,
        budget=Budget(),
        contract=ratified(),
        assertions=ASSERTIONS,
        protected=PROTECTED,
        writable=WRITABLE,
        verifier_trust=gate.COMMIT,
        verifier_fresh=True,
    )
    assert parts.pinned is not None and parts.pinned.digests == pinned.digests
    assert decide(WRITE, parts).allowed


def test_a_context_whose_contract_was_swapped_behind_the_snapshot_denies() -> None:
    c = ctx(Pinned(contract=ratified(), assertions=ASSERTIONS, protected=PROTECTED))
    object.__setattr__(c, "contract", dataclasses.replace(ratified(), scope=("fs:**",)))
    assert decide(WRITE, c).rule == "internal_error"


def test_policy_is_frozen_all_the_way_down() -> None:
    policy = Policy(assertions=[{"a": [1]}], rollbacks={"rb": ["db:x"]})
    assert policy.assertions == (MappingProxyType({"a": (1,)}),)
    assert isinstance(policy.rollbacks, MappingProxyType)
    assert policy.rollbacks["rb"] == ("db:x",)
