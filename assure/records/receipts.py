"""Receipts (AAR): one Ed25519-signed record per resolved task, so that a public key alone
verifies what a run claims about each task. Issuing, in this order (sealing last):

    seal = seal.seal_run(run_dir)
    for each resolved task:
        write_receipt(run_dir, sign(build_receipt(..., seal=seal), key))   # or unsigned: keyless
    seal.write_seal(run_dir, seal, key)
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assure.core.chain import utc_now
from assure.records import applied, layout
from assure.records.keys import signature
from assure.records.receipt_format import (
    AAR_VERSION,
    ReceiptError,
    canonical,
    check_receipt,
    receipts_dir,
)
from assure.records.store import write_json
from assure.verify.diff import Change

if TYPE_CHECKING:  # cryptography is imported where a key is used (keys.py)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


def deployment_id() -> str:
    """The deployment a receipt (and a health document) belongs to: `ASSURE_DEPLOYMENT_ID`, else
    this host's name."""
    return os.environ.get("ASSURE_DEPLOYMENT_ID", socket.gethostname())


def build_receipt(
    *,
    run_id: str,
    task_id: str,
    claim: str | dict[str, Any],
    verdict: str,
    ground_truth: str,
    reason: str,
    checks: list[dict[str, Any]],
    subject: str,
    principal: str,
    verifier: dict[str, Any],
    deployment_id: str,
    scope_id: str,
    seal: dict[str, Any],
    changeset: dict[str, Any] | None = None,
    trust: dict[str, Any] | None = None,
    issued: str | None = None,
) -> dict[str, Any]:
    """An unsigned AAR record (`signature: null`); checked as step 1 of `verify_run` would.
    `changeset` is `changeset_of(...)` for the attempt the receipt speaks for (None: no attempt);
    `trust` what the trust ledger counts it as (`trust.receipt_trust`; None: no attempt)."""
    record = {
        "aar": AAR_VERSION,
        "run_id": run_id,
        "task": {"id": task_id, "claim": claim},
        "subject": subject,
        "principal": principal,
        "verdict": verdict,
        "ground_truth": ground_truth,
        "reason": reason,
        "checks": [dict(c) for c in checks],
        "verifier": dict(verifier),
        "deployment_id": deployment_id,
        "scope_id": scope_id,
        "seal": seal,
        "changeset": changeset,
        "trust": trust,
        "issued": issued or utc_now(),
        "signature": None,
    }
    check_receipt(record, f"receipt for task {task_id!r}")
    return record


def changeset_of(run_dir: Path, attempt: int, changes: Sequence[Change]) -> dict[str, Any]:
    """The receipt's `changeset`: the digest of what the attempt's judged changes leave behind
    (`applied.vouched`), which `assure receipts verify` recomputes from the run's workspace copy."""
    workspace = layout.RunPaths(run_dir).attempt(attempt).workspace
    return {
        "attempt": attempt,
        "sha256": applied.digest(applied.vouched(workspace, [c.to_json() for c in changes])),
        "changes": len(changes),
    }


def sign(record: dict[str, Any], private_key: Ed25519PrivateKey) -> dict[str, Any]:
    """`record` with `signature: {alg, key_id, value}` over RFC 8785 of the rest of it."""
    body = {k: v for k, v in record.items() if k != "signature"}
    check_receipt({**body, "signature": None}, _label(body))
    return {**body, "signature": signature(canonical(body, 1, "receipt"), private_key)}


def _label(record: Any) -> str:
    task = record.get("task") if isinstance(record, dict) else None
    return f"receipt for task {task.get('id')!r}" if isinstance(task, dict) else "receipt"


def write_receipt(run_dir: str | os.PathLike[str], receipt: dict[str, Any]) -> Path:
    """Write `receipt` to `receipts/<layout.receipt_filename(task id)>` (atomically)."""
    run_dir = Path(run_dir)
    check_receipt(receipt, _label(receipt))
    folder = receipts_dir(run_dir, 1)
    folder.mkdir(exist_ok=True)
    path = folder / layout.receipt_filename(receipt["task"]["id"])
    if (
        path.parent != folder or path.is_symlink()
    ):  # cannot happen with receipt_filename; fail closed anyway
        raise ReceiptError(1, str(path), "receipt file name escapes receipts/")
    write_json(path, receipt)
    return path
