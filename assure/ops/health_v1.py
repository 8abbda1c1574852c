"""The standard's runtime-health document, `frontier.machine.health.v1`, and its aggregate.

A document (schema: `specs/health.schema.json`) is `{schema_version, deployment_id,
checked_at, layers, aggregate}`; `layers` holds one array of checks for each of `process`,
`scheduler`, `execution` and `governance`. A check is `{id, status, observed_at,
stale_after_seconds, summary}` plus, optionally, `critical`, `reason_code` and `evidence`.

`aggregate` is a pure function of the document (and, optionally, of a later clock): each
check that is not a fresh `pass` gives an outcome, and the worst outcome wins, in the
standard's precedence halted > blocked > propose_only > degraded > pass. Where the standard
is silent, assure decides, failing closed:
- a check whose status is `unknown`, or is not one of the three, counts as failed;
- so does a `pass` older than its `stale_after_seconds` (age measured at `checked_at`, or at
  `now` when a reader re-judges an old document), or whose `observed_at` is unreadable or
  more than `MAX_CLOCK_SKEW_SECONDS` in the future;
- a failed check's outcome comes from its `reason_code` when `REASON_OUTCOMES` registers it
  (an operator halt halts; a missing or stale verifier and a dial at `propose` leave only
  proposals), otherwise from `critical`: critical blocks, optional (`"critical": false`)
  degrades. `critical` defaults to true: a check is optional only when it says so;
- a document that is not one (wrong `schema_version`, a layer missing or empty, a check
  without an id, two checks with one id) blocks.
Standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

SCHEMA_VERSION = "frontier.machine.health.v1"
LAYERS = ("process", "scheduler", "execution", "governance")
PASS, FAIL, UNKNOWN = "pass", "fail", "unknown"
STATUSES = (PASS, FAIL, UNKNOWN)
HALTED, BLOCKED, PROPOSE_ONLY, DEGRADED = "halted", "blocked", "propose_only", "degraded"
PRECEDENCE = (PASS, DEGRADED, PROPOSE_ONLY, BLOCKED, HALTED)  # ascending: the last one present wins
MAX_CLOCK_SKEW_SECONDS = 5.0  # an observed_at further ahead of the clock than this is unusable

# reason codes whose failure means more than "critical blocks, optional degrades"
OPERATOR_HALT = "operator_halt"  # the operator halted the run (or its control record is unreadable)
RUN_HALTED = "run_halted"  # the run stopped under an operator halt
OPERATOR_DIAL_PROPOSE = "operator_dial_propose"  # the operator dialled the run down to propose
VERIFIER_MISSING = "verifier_missing"  # no assertion to check, or verifier_trust propose: trust 0
VERIFIER_STALE = "verifier_stale"  # the verifier's heartbeat is stale while an attempt runs
REASON_OUTCOMES = {
    OPERATOR_HALT: HALTED,
    RUN_HALTED: HALTED,
    OPERATOR_DIAL_PROPOSE: PROPOSE_ONLY,
    VERIFIER_MISSING: PROPOSE_ONLY,
    VERIFIER_STALE: PROPOSE_ONLY,
}


@dataclass(frozen=True)
class Check:
    """One check of one layer, as the document spells it (times in Unix seconds here)."""

    id: str
    status: str
    observed_at: float
    stale_after_seconds: float
    summary: str
    critical: bool = True
    reason_code: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "status": self.status,
            "observed_at": iso(self.observed_at),
            "stale_after_seconds": self.stale_after_seconds,
            "summary": self.summary,
            "critical": self.critical,
        }
        if self.reason_code is not None:
            out["reason_code"] = self.reason_code
        if self.evidence:
            out["evidence"] = self.evidence
        return out


def document(
    deployment_id: str, checked_at: float, layers: dict[str, list[Check]]
) -> dict[str, Any]:
    """The document for `layers` (every layer of `LAYERS`), with its aggregate."""
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "deployment_id": deployment_id,
        "checked_at": iso(checked_at),
        "layers": {layer: [c.to_json() for c in layers.get(layer, [])] for layer in LAYERS},
    }
    doc["aggregate"] = aggregate(doc)
    return doc


def aggregate(doc: Any, now: float | None = None) -> dict[str, Any]:
    """`{status, causes}`: the worst outcome of the document's checks, and every check (or
    defect of the document) that is not a pass, with its outcome. Never raises."""
    causes: list[dict[str, Any]] = []

    def cause(where: str, outcome: str, why: str) -> None:
        causes.append({"id": where, "outcome": outcome, "why": why})

    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
        cause("<document>", BLOCKED, f"not a {SCHEMA_VERSION} document")
        return _result(causes)
    checked_at = parse_time(doc.get("checked_at"))
    clock = now if now is not None else checked_at
    if clock is None:
        cause("<document>", BLOCKED, "no usable checked_at")
        return _result(causes)
    layers = doc.get("layers")
    if not isinstance(layers, dict):
        cause("<document>", BLOCKED, "no layers")
        return _result(causes)
    seen: set[str] = set()
    for layer in LAYERS:
        checks = layers.get(layer)
        if not isinstance(checks, list) or not checks:
            cause(f"<{layer}>", BLOCKED, "layer missing or empty: nothing says it is healthy")
            continue
        for n, check in enumerate(checks):
            if (
                not isinstance(check, dict)
                or not isinstance(check.get("id"), str)
                or not check["id"]
            ):
                cause(f"<{layer}[{n}]>", BLOCKED, "a check without an id")
                continue
            if check["id"] in seen:
                cause(check["id"], BLOCKED, "two checks with this id")
                continue
            seen.add(check["id"])
            judged = _judge(check, clock)
            if judged is not None:
                cause(check["id"], *judged)
    return _result(causes)


def _judge(check: dict[str, Any], clock: float) -> tuple[str, str] | None:
    """(outcome, why) of a check that is not a fresh pass; None for a fresh pass."""
    status = check.get("status")
    observed = parse_time(check.get("observed_at"))
    stale = check.get("stale_after_seconds")
    if status not in STATUSES:
        why = f"status {str(status)[:32]!r} is not one of {', '.join(STATUSES)}"
    elif (
        isinstance(stale, bool)
        or not isinstance(stale, (int, float))
        or not math.isfinite(stale)
        or stale < 0
    ):
        why = "no usable stale_after_seconds"
    elif observed is None:
        why = "no usable observed_at"
    elif observed > clock + MAX_CLOCK_SKEW_SECONDS:
        why = "observed_at is in the future"
    elif clock - observed > stale:
        why = f"{status}, observed {clock - observed:.0f} s ago (stale after {stale:g} s)"
    elif status == PASS:
        return None
    else:
        why = status
    reason = check.get("reason_code")
    if status != PASS and isinstance(reason, str) and reason in REASON_OUTCOMES:
        return REASON_OUTCOMES[reason], why
    return (DEGRADED if check.get("critical") is False else BLOCKED), why


def _result(causes: list[dict[str, Any]]) -> dict[str, Any]:
    status = max((c["outcome"] for c in causes), key=PRECEDENCE.index, default=PASS)
    return {"status": status, "causes": causes}


def iso(t: float) -> str:
    """RFC 3339 UTC with microseconds, as `chain.utc_now` writes times."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: Any) -> float | None:
    """Unix seconds of an RFC 3339 time with a zone; None for anything else."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.timestamp() if parsed.tzinfo is not None else None
