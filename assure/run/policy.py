"""Turn a spec's contract, autonomy settings and resources into the gate's plain values.

The host uses this twice: to write the gateway's policy (JSON) and, later, to decide a
promotion with the same `gate.decide()`. Times become epoch seconds, levels become ints.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from pathlib import Path
from typing import Any

from assure.core import gate
from assure.errors import SpecError


def epoch(text: str) -> float:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError as exc:
        raise SpecError([f"{text!r} is not an ISO 8601 date-time (e.g. 2027-01-31T12:00:00Z)"]) from exc


def contract(data: dict[str, Any] | None) -> gate.Contract | None:
    if not data:
        return None
    return gate.Contract(
        id=data["id"],
        proposed_by=data["proposed_by"],
        ratified_by=data.get("ratified_by"),
        scope=tuple(data["scope"]),
        autonomy_ceiling=gate.LEVELS[data["autonomy_ceiling"]],
        irreversible_min_trust=gate.LEVELS[data.get("irreversible_min_trust", "irreversible")],
        expires_at=epoch(data["expires_at"]) if data.get("expires_at") else None,
        revoked=bool(data.get("revoked", False)),
        hash=data.get("hash"),
    )


def confirmed_rollbacks(spec_data: dict[str, Any]) -> dict[str, str]:
    """Rollback refs the host can confirm: a declared rollback file that exists, by its digest."""
    found = {}
    for db in spec_data.get("databases", []):
        ref = db.get("rollback")
        if ref:
            path = Path(spec_data["_source"]).parent / ref
            if path.is_file():
                found[ref] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def rollback_scopes(spec_data: dict[str, Any]) -> dict[str, list[str]]:
    """Each confirmed rollback ref and the scopes it covers: the databases that declared it
    (a ref restores those databases, so it makes no other effect reversible)."""
    confirmed = confirmed_rollbacks(spec_data)
    scopes: dict[str, list[str]] = {}
    for db in spec_data.get("databases", []):
        if db.get("rollback") in confirmed:
            scopes.setdefault(db["rollback"], []).append(f"db:{db['name']}")
    return scopes


def gateway_policy(spec_data: dict[str, Any]) -> dict[str, Any]:
    """The policy block of the gateway config: everything `gate.Context` needs but the clock."""
    autonomy = spec_data.get("autonomy", {})
    c = contract(spec_data.get("contract"))
    has_verifier = bool(spec_data.get("assertions"))
    return {
        "contract": None if c is None else {**gate.contract_terms(c), "ratified_by": c.ratified_by, "revoked": c.revoked, "hash": c.hash},
        "operator_dial": gate.LEVELS[autonomy.get("dial", "commit")],
        "verifier_trust": gate.LEVELS[autonomy.get("verifier_trust", "commit")] if has_verifier else gate.PROPOSE,
        "human_gates": [{**g, "expires_at": epoch(g["expires_at"])} for g in autonomy.get("human_gates", [])],
        "rollbacks": rollback_scopes(spec_data),
        "tokens_limit": spec_data["limits"].get("tokens"),
        "cost_limit": spec_data["limits"].get("cost"),
    }
