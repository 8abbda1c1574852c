"""The driver's side of earned autonomy (records/trust): the trust an attempt's agent has earned
under its task's contract, which `promote.decide` takes as the verifier-trust term, and the
recording of a run's receipts in the ledger, with an alert for every fall.

It fails closed: no signing key (no ledger), a ledger or checkpoint that fails its checks, or
an agent whose identity cannot be read all earn propose."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from assure.core import gate
from assure.records import alerts, keys, layout, trust
from assure.records.alerts import AlertKind
from assure.records.attempt_record import AttemptRecord
from assure.records.receipt_format import parse_strict
from assure.records.store import write_json
from assure.spec import Spec


def ledger(runs_base: Path, signing_key: Path | None) -> trust.Ledger | None:
    if signing_key is None:
        return None
    return trust.Ledger.under(runs_base, keys.load_private(signing_key).public_key())


def identity(spec: Spec, record: AttemptRecord) -> dict[str, Any]:
    return trust.identity(spec.agent, record.facts.image)


def earned(
    spec: Spec, record: AttemptRecord, runs_base: Path, signing_key: Path | None
) -> tuple[int, str]:
    """The level the agent of `record` holds under `spec.contract`'s trust policy now, and why."""
    contract = spec.contract
    if contract is None or contract.trust is None:
        raise ValueError("earned() is for a contract with a trust policy")
    book = ledger(runs_base, signing_key)
    if book is None:
        return gate.PROPOSE, "no signing key, so no trust ledger: nothing is earned"
    key = trust.key_of(gate.digest(identity(spec, record)), trust.scope_of(contract))
    try:
        state = book.state()
    except trust.TrustError as exc:
        return gate.PROPOSE, f"the trust ledger failed its checks: {exc.message}"
    found = trust.level(state["keys"].get(key), time.time())
    return min(found["level"], trust.Policy.from_json(contract.trust).max), found["why"]


def head(runs_base: Path, signing_key: Path | None) -> dict[str, Any] | None:
    """What this run's receipts pin: the ledger's length and head (None: none can be read)."""
    book = ledger(runs_base, signing_key)
    try:
        return None if book is None else book.head()
    except trust.TrustError:
        return None


def record(run_dir: Path, signing_key: Path | None, sinks: alerts.Sinks) -> list[dict[str, Any]]:
    """Append each receipt the run's receipts/ holds that the ledger does not have yet (by its
    attempt); returns the level changes. A fall raises an alert saying why; a ledger that
    cannot take an entry raises one too, and nothing is counted."""
    if signing_key is None:
        return []
    key = keys.load_private(signing_key)
    book = trust.Ledger.under(run_dir.parent, key.public_key())
    paths, changes = layout.RunPaths(run_dir), []
    folder, done_file = paths.receipts, paths.trust_recorded
    done = set(parse_strict(done_file, done_file.name)) if done_file.is_file() else set()
    for path in sorted(folder.glob("*.json")):
        if path.name == layout.SEAL or path.is_symlink():
            continue
        receipt = parse_strict(path, path.name)
        attempt = ((receipt.get("trust") or {}) if isinstance(receipt, dict) else {}).get("attempt")
        if attempt in done:
            continue
        try:
            entry, change = book.append(receipt, key)
        except trust.TrustError as exc:
            alerts.raise_alert(
                run_dir,
                AlertKind.TRUST_DROPPED,
                f"receipt {path.name} was not recorded in the trust ledger: {exc.message}",
                sinks,
            )
            continue
        done.add(attempt)
        if entry["outcome"] in trust.FALLS or (change and change["to"] < change["from"]):
            alerts.raise_alert(
                run_dir,
                AlertKind.TRUST_DROPPED,
                f"trust of agent {entry['agent'][:23]} in scope {entry['scope']} is propose: "
                f"{entry['outcome']} in {entry['attempt']} (receipt"
                f" {entry['receipt_sha256'][:16]})",
                sinks,
                detail={"entry": entry["seq"], "change": change},
            )
        if change:
            changes.append(change)
    write_json(done_file, sorted(d for d in done if isinstance(d, str)))
    return changes
