"""`assure receipts verify`: an exported run's receipts, seal and sealed logs checked as numbered
steps with nothing but a public key, trusting nothing the run directory says."""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assure.records import applied, layout
from assure.records.keys import key_id, signature_problem
from assure.records.receipt_format import (
    RECEIPTS_DIR,
    SEAL_FILE,
    STEPS,
    ReceiptError,
    canonical,
    check_seal_file,
    fail_unless,
    inside,
    listing,
    load_receipts,
    parse_strict,
    receipts_dir,
)
from assure.records.seal import chain_logs, merkle_root, read_chain
from assure.textsafe import display

if TYPE_CHECKING:  # cryptography is imported where a key is used (keys.py)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


class Outcome(str, Enum):  # noqa: UP042 -- StrEnum's str() and format() differ; reports print these
    PASSED = "passed"
    NOT_RUN = "NOT-RUN"


@dataclass(frozen=True)
class StepResult:
    number: int
    name: str
    outcome: Outcome
    detail: str


@dataclass(frozen=True)
class Report:
    """A run whose receipts and sealed logs verified. Only `verify_run` makes one."""

    run_dir: str
    run_id: str
    key_id: str | None
    receipts: tuple[str, ...]
    logs: tuple[str, ...]
    merkle_root: str
    steps: tuple[StepResult, ...]

    @property
    def signatures(self) -> Outcome:
        return Outcome.NOT_RUN if self.key_id is None else Outcome.PASSED

    def to_json(self) -> dict[str, Any]:
        return {
            "verified": True,
            "run_dir": self.run_dir,
            "run_id": self.run_id,
            "key_id": self.key_id,
            "signatures": self.signatures.value,
            "receipts": list(self.receipts),
            "logs": list(self.logs),
            "merkle_root": self.merkle_root,
            "steps": [
                {"step": s.number, "name": s.name, "outcome": s.outcome.value, "detail": s.detail}
                for s in self.steps
            ],
        }


def _verify_signature(
    doc: dict[str, Any], public_key: Ed25519PublicKey, step: int, rel: str
) -> None:
    expected = key_id(public_key)
    sig = doc["signature"]
    if sig is None:
        raise ReceiptError(step, rel, f"unsigned, but a public key ({expected}) was given")
    body = {k: v for k, v in doc.items() if k != "signature"}
    problem = signature_problem(sig, canonical(body, step, rel), public_key)
    if problem is not None:
        raise ReceiptError(step, rel, problem)


def _verify_changeset(run_dir: Path, rel: str, changeset: dict[str, Any]) -> None:
    """The attempt's judged changes (its `verdict.json`) and the bytes its workspace copy holds
    for them digest to the receipt's `changeset`; the first path that differs is named."""
    attempt = layout.AttemptPaths(Path(layout.ATTEMPTS) / str(changeset["attempt"]))
    verdict_rel, workspace_rel = attempt.verdict.as_posix(), attempt.workspace.as_posix()
    workspace = inside(run_dir, workspace_rel, 7)
    try:
        changes = parse_strict(inside(run_dir, verdict_rel, 7), verdict_rel)["changes"]
        said, now = applied.judged(changes), applied.found(workspace, changes)
    except ReceiptError as exc:
        raise ReceiptError(7, verdict_rel, exc.detail) from None
    except (KeyError, TypeError, AttributeError, ValueError, OSError) as exc:
        raise ReceiptError(
            7, verdict_rel, f"its changes cannot be read ({type(exc).__name__}: {exc})"
        ) from None
    if applied.digest(now) == changeset["sha256"] and len(changes) == changeset["changes"]:
        return
    # some differences may be the copy-out's own gaps (NOT_COPIED then too): name a changed entry
    # first
    differs = sorted(
        ((then, there) for then, there in zip(said, now, strict=False) if then != there),
        key=lambda pair: pair[1].kind == applied.NOT_COPIED,
    )
    if not differs:
        raise ReceiptError(
            7,
            verdict_rel,
            f"its changes are not the ones {rel} vouches for (rewritten after the receipt)",
        )
    then, there = differs[0]
    raise ReceiptError(
        7,
        f"{workspace_rel}/{display(then.path)}",
        f"differs from what {rel} vouches for ({_said(then)} then, {_said(there)} now): the"
        " workspace copy was changed",
    )


def _said(item: applied.Item) -> str:
    if item.kind != "file":
        return item.kind
    return (
        f"file sha256 {(item.sha256 or 'unhashed')[:16]}{', executable' if item.executable else ''}"
    )


def verify_run(run_dir: str | os.PathLike[str], public_key: Ed25519PublicKey | None) -> Report:
    """Verify an exported run's receipts, seal and sealed logs with nothing but `public_key`.

    Raises `ReceiptError` naming the step at the first failure. With `public_key=None` (a
    keyless run) steps 2 and 3 are reported NOT-RUN; every other step still runs.
    """
    run_dir = Path(run_dir)
    expected = key_id(public_key) if public_key is not None else None
    results: list[StepResult] = []

    def passed(step: int, detail: str) -> None:
        results.append(StepResult(step, STEPS[step], Outcome.PASSED, detail))

    def not_run(step: int) -> None:
        results.append(
            StepResult(step, STEPS[step], Outcome.NOT_RUN, "no public key given (keyless run)")
        )

    # Step 1: every receipt and the seal file parse and have exactly the required fields.
    folder = receipts_dir(run_dir, 1)
    if not folder.is_dir():
        raise ReceiptError(1, RECEIPTS_DIR, "missing: the run issued no receipts")
    seal_rel = f"{RECEIPTS_DIR}/{SEAL_FILE}"
    fail_unless(not (folder / SEAL_FILE).is_symlink(), seal_rel, "is a symbolic link")
    seal_doc = parse_strict(folder / SEAL_FILE, seal_rel)
    check_seal_file(seal_doc, seal_rel)
    receipts = load_receipts(folder)
    passed(1, f"{len(receipts)} receipts and {SEAL_FILE}")

    # Step 2: each receipt's signature is by this key (key id first) and verifies.
    # Step 3: the seal file's signature likewise.
    if public_key is None:
        not_run(2)
        not_run(3)
    else:
        for name, receipt in receipts:
            _verify_signature(receipt, public_key, 2, f"{RECEIPTS_DIR}/{name}")
        passed(2, f"{len(receipts)} signed by {expected}")
        _verify_signature(seal_doc, public_key, 3, seal_rel)
        passed(3, f"signed by {expected}")

    # Step 4: every sealed log verifies as a chain, with exactly the sealed lines and head,
    # and no hash-chained log of the run is left out of the seal.
    seal = seal_doc["seal"]
    for log in seal["logs"]:
        rel = log["path"]
        if not (run_dir / rel).exists() and not (run_dir / rel).is_symlink():
            raise ReceiptError(4, rel, "missing (named in the seal)")
        lines, head = read_chain(run_dir, rel)
        if lines > log["lines"]:
            raise ReceiptError(
                4,
                rel,
                f"appended after sealing (sealed {log['lines']} lines, found {lines})",
                line=log["lines"] + 1,
            )
        if lines < log["lines"]:
            raise ReceiptError(
                4, rel, f"missing (sealed {log['lines']} lines, found {lines})", line=lines + 1
            )
        if head != log["head_hash"]:
            raise ReceiptError(
                4, rel, "head hash differs from the sealed one (log rewritten)", line=log["lines"]
            )
    unsealed = sorted(set(chain_logs(run_dir)) - {log["path"] for log in seal["logs"]})
    if unsealed:
        raise ReceiptError(
            4, unsealed[0], "a hash-chained log the seal does not name (written after sealing)"
        )
    passed(4, f"{len(seal['logs'])} logs, {sum(log['lines'] for log in seal['logs'])} lines")

    # Step 5: the Merkle root is the one over the sealed (path, head_hash) leaves.
    root = merkle_root([(log["path"], log["head_hash"]) for log in seal["logs"]])
    if root != seal["merkle_root"]:
        raise ReceiptError(
            5,
            seal_rel,
            f"Merkle root {seal['merkle_root']} does not match the sealed logs ({root})",
        )
    passed(5, root)

    # Step 6: every receipt carries this seal and run id; the seal lists exactly these receipts.
    sealed_bytes = canonical(seal, 6, seal_rel)
    for name, receipt in receipts:
        rel = f"{RECEIPTS_DIR}/{name}"
        if canonical(receipt["seal"], 6, rel) != sealed_bytes:
            raise ReceiptError(6, rel, f"its seal differs from {seal_rel}")
        if receipt["run_id"] != seal["run_id"]:
            raise ReceiptError(
                6, rel, f"run_id {receipt['run_id']!r} differs from the seal's {seal['run_id']!r}"
            )
    listed = {item["file"]: item for item in seal_doc["receipts"]}
    present = {name: receipt for name, receipt in receipts}
    removed, added = sorted(listed.keys() - present.keys()), sorted(present.keys() - listed.keys())
    if removed:
        raise ReceiptError(
            6,
            f"{RECEIPTS_DIR}/{removed[0]}",
            f"listed in {SEAL_FILE} but missing (receipt removed)",
        )
    if added:
        raise ReceiptError(
            6,
            f"{RECEIPTS_DIR}/{added[0]}",
            f"not listed in {SEAL_FILE} (receipt added after sealing)",
        )
    for name, receipt in receipts:
        if listing(name, receipt) != listed[name]:
            raise ReceiptError(
                6,
                f"{RECEIPTS_DIR}/{name}",
                f"differs from its entry in {SEAL_FILE} (replaced after sealing)",
            )
    passed(6, f"{len(receipts)} receipts under one seal")

    # Step 7: each receipt's changeset is what the run's workspace copy of that attempt holds
    # now (every changed file re-hashed); a version-1 receipt carries none.
    vouched = [
        (name, receipt) for name, receipt in receipts if receipt.get("changeset") is not None
    ]
    if not vouched:
        results.append(
            StepResult(
                7,
                STEPS[7],
                Outcome.NOT_RUN,
                "no receipt carries a changeset (aar 1, or no attempt ran)",
            )
        )
    else:
        for name, receipt in vouched:
            _verify_changeset(run_dir, f"{RECEIPTS_DIR}/{name}", receipt["changeset"])
        passed(
            7,
            f"{len(vouched)} changesets, {sum(r['changeset']['changes'] for _, r in vouched)}"
            " changed paths",
        )

    return Report(
        run_dir=str(run_dir),
        run_id=seal["run_id"],
        key_id=expected,
        receipts=tuple(f"{RECEIPTS_DIR}/{n}" for n, _ in receipts),
        logs=tuple(log["path"] for log in seal["logs"]),
        merkle_root=root,
        steps=tuple(results),
    )
