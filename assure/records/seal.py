"""The seal: what binds a run's hash-chained logs to its receipts, so that a line appended to a
log, or a log rewritten, after the run was sealed fails verification.

The seal names every hash-chained log of the run (`events.jsonl`, `control/operator.jsonl`,
`attempts/<n>/gateway/journal.jsonl`) with its line count and head hash, and a Merkle root
(RFC 6962 tree hash) over the sorted `(path, head_hash)` leaves. Every receipt carries it;
`receipts/seal.json` carries it too, with the list of receipts issued under it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import rfc8785

from assure.core.chain import GENESIS, ChainError, chain_head, utc_now
from assure.records import layout
from assure.records.keys import signature
from assure.records.receipt_format import (
    LOG_PATH,
    RECEIPTS_DIR,
    SEAL_FILE,
    SEAL_VERSION,
    ReceiptError,
    canonical,
    check_seal,
    inside,
    listing,
    load_receipts,
    receipts_dir,
)
from assure.records.store import write_json

if TYPE_CHECKING:  # cryptography is imported where a key is used (keys.py)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


def chain_logs(run_dir: Path) -> list[str]:
    """Relative paths of the run's hash-chained logs present on disk, sorted."""
    found = [
        rel
        for rel in (layout.EVENTS_LOG, layout.OPERATOR_LOG)
        if (run_dir / rel).is_file() or (run_dir / rel).is_symlink()
    ]
    attempts = run_dir / layout.ATTEMPTS
    if attempts.is_dir():
        for attempt in attempts.iterdir():
            rel = layout.journal_log(attempt.name)
            if attempt.name.isdigit() and (
                (run_dir / rel).is_file() or (run_dir / rel).is_symlink()
            ):
                found.append(rel)
    return sorted(found)


def merkle_root(leaves: list[tuple[str, str]]) -> str:
    """RFC 6962 Merkle tree hash over leaves `rfc8785.dumps([path, head_hash])`, sorted."""
    nodes = [
        hashlib.sha256(b"\x00" + rfc8785.dumps([path, head])).digest()
        for path, head in sorted(leaves)
    ]
    return _tree_hash(nodes).hex()


def _tree_hash(nodes: list[bytes]) -> bytes:
    if not nodes:
        return hashlib.sha256(b"").digest()
    if len(nodes) == 1:
        return nodes[0]
    split = 1 << ((len(nodes) - 1).bit_length() - 1)  # the largest power of two below len
    return hashlib.sha256(b"\x01" + _tree_hash(nodes[:split]) + _tree_hash(nodes[split:])).digest()


class _Log(TypedDict):
    """One sealed log as the seal lists it (`logs` of seal.json)."""

    path: str
    lines: int
    head_hash: str


def seal_run(
    run_dir: str | os.PathLike[str], verified: Mapping[str, tuple[int, str]] | None = None
) -> dict[str, Any]:
    """Verify every hash-chained log of the run and return the seal over their heads.

    `verified` holds the (lines, head hash) of logs this process has just verified as a
    stream (an attempt's journal, by its judge), by relative path: those are sealed as the
    judge saw them, not streamed again. A log changed since then fails `verify_run`."""
    run_dir = Path(run_dir)
    verified = verified or {}
    paths = chain_logs(run_dir)
    if layout.EVENTS_LOG not in paths:
        raise ReceiptError(4, layout.EVENTS_LOG, "missing: not a run directory, nothing to seal")
    logs: list[_Log] = []
    for rel in paths:
        if not LOG_PATH.match(rel):
            raise ReceiptError(4, rel, "not a log name assure writes; refusing to seal it")
        if rel in verified:
            inside(run_dir, rel, 4)  # no link, nothing outside the run: as for a log read here
            lines, head = verified[rel]
        else:
            lines, head = read_chain(run_dir, rel)
        logs.append(_Log(path=rel, lines=lines, head_hash=head))
    return {
        "run_id": run_dir.resolve().name,
        "sealed_at": utc_now(),
        "logs": logs,
        "merkle_root": merkle_root([(log["path"], log["head_hash"]) for log in logs]),
    }


def read_chain(run_dir: Path, rel: str) -> tuple[int, str]:
    """(lines, head hash) of one log, verified as a stream (a log of any size, bounded memory)."""
    path = inside(run_dir, rel, 4)
    try:
        lines, last = chain_head(path)
        return lines, last["hash"] if last else GENESIS
    except ChainError as exc:
        raise ReceiptError(4, rel, str(exc).split(": ", 1)[1], line=exc.line) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ReceiptError(4, rel, f"unreadable ({exc})") from None


def write_seal(
    run_dir: str | os.PathLike[str],
    seal: dict[str, Any],
    private_key: Ed25519PrivateKey | None = None,
) -> Path:
    """Write `receipts/seal.json`: the seal and the receipts issued under it, signed if a key is
    given.

    Call it after the last `write_receipt`: it lists every receipt in `receipts/` and refuses
    one that does not carry this seal.
    """
    run_dir = Path(run_dir)
    check_seal(seal, SEAL_FILE)
    folder = receipts_dir(run_dir, 1)
    folder.mkdir(exist_ok=True)
    receipts = load_receipts(folder)
    for name, receipt in receipts:
        if canonical(receipt["seal"], 6, name) != canonical(seal, 6, SEAL_FILE):
            raise ReceiptError(
                6, f"{RECEIPTS_DIR}/{name}", "carries another seal; issue it again under this one"
            )
    body = {
        "aar_seal": SEAL_VERSION,
        "seal": seal,
        "receipts": [listing(name, r) for name, r in receipts],
    }
    sig = signature(canonical(body, 1, SEAL_FILE), private_key) if private_key is not None else None
    path = folder / SEAL_FILE
    write_json(path, {**body, "signature": sig})
    return path
