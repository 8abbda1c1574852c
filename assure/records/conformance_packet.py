"""The live conformance packet: what `assure conformance` measured on this machine, keyed by
the standard's obligation ids, signed with the run's Ed25519 key, checkable offline.

The packet never asserts what did not run: every obligation is PASS or FAIL from a scenario
that ran here, or NOT-RUN with the reason. The signature covers the RFC 8785 canonical JSON
of the packet without its `signature` field, exactly as receipts are signed.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema
import rfc8785

from assure.errors import AssureError
from assure.records import keys
from assure.records.obligations import OBLIGATIONS

if TYPE_CHECKING:  # cryptography is imported where a key is used (keys.py)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

FORMAT = "assure.conformance.v1"
SCHEMA = Path(__file__).resolve().parents[2] / "specs" / "conformance-packet.schema.json"
PASS, FAIL, NOT_RUN = "PASS", "FAIL", "NOT-RUN"


class PacketError(AssureError):
    """A packet that does not verify: the reasons, one a line."""


@dataclass
class Result:
    """One obligation's outcome. `checks` are (what was checked, held) pairs: PASS needs all."""

    id: str
    status: str
    reason: str = ""
    spec: str | None = None
    seconds: float | None = None
    checks: list[tuple[str, bool]] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def judged(cls, id: str, checks: list[tuple[str, bool]], **fields: Any) -> Result:
        failed = [name for name, ok in checks if not ok]
        status = FAIL if failed or not checks else PASS
        reason = (
            "failed: " + "; ".join(failed) if failed else ("no check ran" if not checks else "")
        )
        return cls(id, status, reason, checks=checks, **fields)

    @classmethod
    def not_run(cls, id: str, reason: str, **fields: Any) -> Result:
        return cls(id, NOT_RUN, reason or "not run", **fields)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "scenario": OBLIGATIONS.get(self.id, ""),
            "reason": self.reason,
            "spec": self.spec,
            "seconds": self.seconds,
            "checks": [{"check": n, "held": ok} for n, ok in self.checks],
            "evidence": self.evidence,
        }


def build(
    results: list[Result],
    *,
    created_at: str,
    machine: dict[str, Any],
    figures: dict[str, Any],
    gate_trace: dict[str, Any],
    receipt_chain: dict[str, Any],
) -> dict[str, Any]:
    """The unsigned packet. An obligation with no result is NOT-RUN, saying so."""
    by_id = {r.id: r for r in results}
    obligations = {
        oid: (
            (
                by_id.get(oid)
                or Result.not_run(oid, "no scenario result was recorded for this obligation")
            ).to_json()
        )
        for oid in OBLIGATIONS
    }
    return {
        "format": FORMAT,
        "created_at": created_at,
        "machine": machine,
        "obligations": obligations,
        "figures": figures,
        "gate_trace": gate_trace,
        "receipt_chain": receipt_chain,
    }


def sign(packet: dict[str, Any], private_key: Ed25519PrivateKey) -> dict[str, Any]:
    body = {k: v for k, v in packet.items() if k != "signature"}
    return {**body, "signature": keys.signature(rfc8785.dumps(body), private_key)}


@functools.cache
def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA.read_text(encoding="utf-8"))
    return schema


def verify(packet: Any, public_key: Ed25519PublicKey) -> None:
    """Raise `PacketError` unless the packet has the published shape, every obligation is PASS,
    FAIL or NOT-RUN (the last two with a reason), and the public key's signature matches."""
    problems = [
        f"{'/'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}"
        for e in jsonschema.Draft202012Validator(_schema()).iter_errors(packet)
    ]
    if problems:
        raise PacketError(
            "the packet does not have the published shape:\n" + "\n".join(problems[:20])
        )
    missing = sorted(set(OBLIGATIONS) - set(packet["obligations"]))
    if missing:
        raise PacketError(f"obligations missing from the packet: {', '.join(missing)}")
    for oid, ob in packet["obligations"].items():
        if ob["status"] != PASS and not ob["reason"].strip():
            raise PacketError(f"{oid}: {ob['status']} without a reason")
    body = {k: v for k, v in packet.items() if k != "signature"}
    problem = keys.signature_problem(packet["signature"], rfc8785.dumps(body), public_key)
    if problem is not None:
        raise PacketError(problem)


def markdown(packet: dict[str, Any]) -> str:
    """The packet for people: the summary table, the figures, the gate trace, the chain."""
    lines = [
        f"# assure conformance packet, {packet['created_at']}",
        "",
        (
            f"Machine: {packet['machine'].get('hostname')} ({packet['machine'].get('platform')}),"
            f" assure {packet['machine'].get('assure')}, Docker {packet['machine'].get('docker')}."
            f" Signed by {packet.get('signature', {}).get('key_id', 'nobody')}."
        ),
        "",
        "| obligation | status | seconds | measured / reason |",
        "|---|---|---|---|",
    ]
    for oid, ob in packet["obligations"].items():
        held = f"{sum(c['held'] for c in ob['checks'])}/{len(ob['checks'])} checks held"
        shown = ob["reason"] or "; ".join(
            [held] + [f"{k}={v}" for k, v in ob["evidence"].get("measured", {}).items()]
        )
        seconds = "" if ob["seconds"] is None else f"{ob['seconds']:.1f}"
        lines.append(f"| `{oid}` | {ob['status']} | {seconds} | {_cell(shown)} |")
    lines += ["", "## Measured figures", ""]
    lines += [f"- {k}: {json.dumps(v)}" for k, v in packet["figures"].items()]
    lines += ["", "## Gate trace: effective = min(dial, ceiling, trust)", ""]
    for kind, e in packet["gate_trace"].items():
        if "decision" not in e:
            lines.append(f"- {kind}: {e.get('status')}: {e.get('reason')}")
            continue
        lines.append(
            f"- {kind}: `{e['tool']}` on `{e['scope']}` -> **{e['decision']}** ({e['rule']}):"
            f" min(dial {e['operator_dial']}, ceiling {e['autonomy_ceiling']}, trust"
            f" {e['verifier_trust']}) = {e['min(dial, ceiling, trust)']}, required"
            f" {e['required_trust']}; {_cell(str(e['reason']))} [{e['journal']} seq {e['seq']}]"
        )
    chain = packet["receipt_chain"]
    lines += [
        "",
        "## Receipt chain",
        "",
        f"- run: {chain.get('run_id')}; verified independently: {chain.get('verified')}",
        (
            f"- key {chain.get('key_id')}; logs"
            f" {', '.join((chain.get('verification') or {}).get('logs', []))}; merkle root"
            f" {(chain.get('verification') or {}).get('merkle_root')}"
        ),
        (
            "- a copy with one journal byte changed: rejected"
            f" {(chain.get('tampered_copy') or {}).get('rejected')}"
        ),
    ]
    lines += [f"- {r['file']} sha256 {r['sha256']}" for r in chain.get("receipts", [])]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:400]
