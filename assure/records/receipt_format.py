"""The AAR format on disk (receipts, the seal, the seal file) and its strict checks: shared by the
issuer, which checks what it writes, and the verifier, which trusts nothing it reads."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import rfc8785

from assure.errors import AssureError
from assure.records import layout
from assure.records.keys import ALG

AAR_VERSION = "3"  # 2 added `changeset`, 3 `trust`; a version-1 receipt verifies, step 7 NOT-RUN
SEAL_VERSION = "1"
VERDICTS = ("verified", "rejected")
GROUND_TRUTHS = ("confirmed", "contradicted")
RECEIPTS_DIR = layout.RECEIPTS
SEAL_FILE = layout.SEAL

STEPS = {
    1: "receipts and seal parse and are complete",
    2: "receipt signatures verify with the key",
    3: "seal signature verifies with the key",
    4: "sealed logs verify, same lines and head",
    5: "Merkle root matches the sealed logs",
    6: "receipts carry the seal, the seal lists the receipts",
    7: "changesets match the run's workspace copies",
}

RECEIPT_FIELDS_V1 = frozenset(
    {
        "aar",
        "run_id",
        "task",
        "subject",
        "principal",
        "verdict",
        "ground_truth",
        "reason",
        "checks",
        "verifier",
        "deployment_id",
        "scope_id",
        "seal",
        "issued",
        "signature",
    }
)
RECEIPT_FIELDS_BY_VERSION = {
    "1": RECEIPT_FIELDS_V1,
    "2": RECEIPT_FIELDS_V1 | {"changeset"},
    AAR_VERSION: RECEIPT_FIELDS_V1 | {"changeset", "trust"},
}
AAR_VERSIONS = tuple(RECEIPT_FIELDS_BY_VERSION)
# What the trust ledger (records/trust) reads of a receipt: who ran, under which contract, how it
# ended, and the ledger head as it stood when the receipt was issued (rollback shows against it).
TRUST_FIELDS = frozenset({"agent", "identity", "scope", "attempt", "outcome", "policy", "ledger"})
TRUST_OUTCOMES = ("pass", "fail", "breach", "quarantine")
CHANGESET_FIELDS = frozenset({"attempt", "sha256", "changes"})
CHECK_FIELDS = frozenset({"source", "query", "observed_at", "response_sha256", "excerpt"})
SEAL_FIELDS = frozenset({"run_id", "sealed_at", "logs", "merkle_root"})
SEAL_FILE_FIELDS = frozenset({"aar_seal", "seal", "receipts", "signature"})

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_KEY_ID = re.compile(r"^ed25519:[0-9a-f]{16}$")
_TIMESTAMP = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})$"
)
LOG_PATH = re.compile(
    rf"^({re.escape(layout.EVENTS_LOG)}|{re.escape(layout.OPERATOR_LOG)}|{re.escape(layout.ATTEMPTS)}/[0-9]{{1,9}}/{re.escape(layout.JOURNAL)})$"
)
_RECEIPT_FILE = re.compile(
    rf"^[a-z0-9-]{{1,{layout.SLUG_MAX}}}-[0-9a-f]{{{layout.DIGEST_CHARS}}}\.json$"
)


class ReceiptError(AssureError):
    """A receipt, the seal or a sealed log failed; `step` is the number in `STEPS`."""

    def __init__(self, step: int, path: str, message: str, *, line: int | None = None):
        where = f"{path}: line {line}" if line is not None else path
        super().__init__(f"step {step} ({STEPS[step]}) failed: {where}: {message}")
        self.step, self.path, self.line, self.detail = step, path, line, message


def canonical(obj: Any, step: int, path: str) -> bytes:
    """RFC 8785 canonical JSON: the bytes that are signed and compared."""
    try:
        return rfc8785.dumps(obj)
    except (rfc8785.CanonicalizationError, UnicodeEncodeError) as exc:
        raise ReceiptError(step, path, f"no RFC 8785 canonical form ({exc})") from None


def inside(run_dir: Path, rel: str, step: int) -> Path:
    """`run_dir/rel`, refusing a symbolic link or anything that resolves outside the run."""
    path = run_dir / rel
    if path.is_symlink():
        raise ReceiptError(step, rel, "is a symbolic link")
    if not path.resolve().is_relative_to(run_dir.resolve()):
        raise ReceiptError(step, rel, "resolves outside the run directory")
    return path


def receipts_dir(run_dir: Path, step: int) -> Path:
    return inside(run_dir, RECEIPTS_DIR, step)


def listing(name: str, receipt: dict[str, Any]) -> dict[str, str]:
    """A receipt's entry in the seal file."""
    return {
        "file": name,
        "task_id": receipt["task"]["id"],
        "sha256": hashlib.sha256(canonical(receipt, 6, name)).hexdigest(),
    }


# Checking shapes (step 1) ----------------------------------------------------------------


def fail_unless(ok: bool, path: str, message: str) -> None:
    if not ok:
        raise ReceiptError(1, path, message)


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _exact_fields(obj: Any, fields: frozenset[str], path: str, what: str) -> None:
    fail_unless(isinstance(obj, dict), path, f"{what} is not a JSON object")
    missing, extra = sorted(fields - obj.keys()), sorted(obj.keys() - fields)
    fail_unless(not missing, path, f"{what} lacks {', '.join(missing)}")
    fail_unless(
        not extra, path, f"{what} has unexpected field(s) {', '.join(repr(e) for e in extra)}"
    )


def check_receipt(r: Any, path: str) -> None:
    fail_unless(isinstance(r, dict), path, "receipt is not a JSON object")
    fail_unless(
        r.get("aar") in AAR_VERSIONS,
        path,
        f"aar version {r.get('aar')!r}, expected one of {', '.join(map(repr, AAR_VERSIONS))}",
    )
    _exact_fields(r, RECEIPT_FIELDS_BY_VERSION[r["aar"]], path, "receipt")
    if r.get("trust") is not None:
        _check_trust(r["trust"], path)
    if r.get("changeset") is not None:
        _exact_fields(r["changeset"], CHANGESET_FIELDS, path, "changeset")
        fail_unless(
            type(r["changeset"]["attempt"]) is int and r["changeset"]["attempt"] >= 1,
            path,
            "changeset.attempt must be an attempt number",
        )
        fail_unless(
            type(r["changeset"]["changes"]) is int and r["changeset"]["changes"] >= 0,
            path,
            "changeset.changes must be a count",
        )
        fail_unless(
            isinstance(r["changeset"]["sha256"], str)
            and bool(_HEX64.match(r["changeset"]["sha256"])),
            path,
            "changeset.sha256 must be 64 lowercase hex digits",
        )
    for name in ("run_id", "subject", "principal", "reason", "deployment_id", "scope_id"):
        fail_unless(_is_text(r[name]), path, f"{name} must be a non-empty string")
    _exact_fields(r["task"], frozenset({"id", "claim"}), path, "task")
    fail_unless(_is_text(r["task"]["id"]), path, "task.id must be a non-empty string")
    fail_unless(
        _is_text(r["task"]["claim"]) or isinstance(r["task"]["claim"], dict),
        path,
        "task.claim must be a non-empty string or an object",
    )
    fail_unless(r["verdict"] in VERDICTS, path, f"verdict must be one of {', '.join(VERDICTS)}")
    fail_unless(
        r["ground_truth"] in GROUND_TRUTHS,
        path,
        f"ground_truth must be one of {', '.join(GROUND_TRUTHS)}",
    )
    fail_unless(
        isinstance(r["checks"], list) and len(r["checks"]) > 0,
        path,
        "checks must list at least one ground-truth check",
    )
    for n, check in enumerate(r["checks"], start=1):
        _exact_fields(check, CHECK_FIELDS, path, f"checks[{n}]")
        for name in ("source", "query"):
            fail_unless(
                _is_text(check[name]), path, f"checks[{n}].{name} must be a non-empty string"
            )
        fail_unless(
            isinstance(check["excerpt"], str), path, f"checks[{n}].excerpt must be a string"
        )
        fail_unless(
            _is_timestamp(check["observed_at"]),
            path,
            f"checks[{n}].observed_at must be an RFC 3339 UTC time",
        )
        fail_unless(
            isinstance(check["response_sha256"], str)
            and bool(_HEX64.match(check["response_sha256"])),
            path,
            f"checks[{n}].response_sha256 must be 64 lowercase hex digits",
        )
    _exact_fields(r["verifier"], frozenset({"id", "independence"}), path, "verifier")
    fail_unless(
        _is_text(r["verifier"]["id"]) and _is_text(r["verifier"]["independence"]),
        path,
        "verifier.id and verifier.independence must be non-empty strings",
    )
    fail_unless(
        r["verifier"]["id"] != r["subject"],
        path,
        "verifier.id equals subject: a worker cannot verify itself",
    )
    fail_unless(_is_timestamp(r["issued"]), path, "issued must be an RFC 3339 time")
    check_seal(r["seal"], path)
    _check_signature_shape(r["signature"], path)
    canonical(r, 1, path)


def _check_trust(t: Any, path: str) -> None:
    _exact_fields(t, TRUST_FIELDS, path, "trust")
    for name in ("agent", "scope", "attempt"):
        fail_unless(_is_text(t[name]), path, f"trust.{name} must be a non-empty string")
    fail_unless(isinstance(t["identity"], dict), path, "trust.identity must be an object")
    fail_unless(
        t["outcome"] in TRUST_OUTCOMES,
        path,
        f"trust.outcome must be one of {', '.join(TRUST_OUTCOMES)}",
    )
    fail_unless(
        t["policy"] is None or isinstance(t["policy"], dict), path, "trust.policy must be an object"
    )
    if t["ledger"] is None:  # unsigned, or the ledger could not be read: nothing is counted
        return
    _exact_fields(t["ledger"], frozenset({"entries", "head"}), path, "trust.ledger")
    entries, head = t["ledger"]["entries"], t["ledger"]["head"]
    fail_unless(type(entries) is int and entries >= 0, path, "trust.ledger.entries must be a count")
    fail_unless(
        (entries == 0 and head is None)
        or (entries > 0 and isinstance(head, str) and bool(_HEX64.match(head))),
        path,
        "trust.ledger.head must be 64 hex digits (null for an empty ledger)",
    )


def _is_timestamp(value: Any) -> bool:
    return isinstance(value, str) and bool(_TIMESTAMP.match(value))


def _check_signature_shape(sig: Any, path: str) -> None:
    if sig is None:
        return
    _exact_fields(sig, frozenset({"alg", "key_id", "value"}), path, "signature")
    fail_unless(sig["alg"] == ALG, path, f"signature.alg must be {ALG!r}")
    fail_unless(
        isinstance(sig["key_id"], str) and bool(_KEY_ID.match(sig["key_id"])),
        path,
        "signature.key_id must be ed25519:<16 hex>",
    )
    fail_unless(isinstance(sig["value"], str), path, "signature.value must be a base64 string")


def check_seal(seal: Any, path: str) -> None:
    _exact_fields(seal, SEAL_FIELDS, path, "seal")
    fail_unless(_is_text(seal["run_id"]), path, "seal.run_id must be a non-empty string")
    fail_unless(_is_timestamp(seal["sealed_at"]), path, "seal.sealed_at must be an RFC 3339 time")
    fail_unless(
        isinstance(seal["merkle_root"], str) and bool(_HEX64.match(seal["merkle_root"])),
        path,
        "seal.merkle_root must be 64 hex digits",
    )
    fail_unless(isinstance(seal["logs"], list), path, "seal.logs must be a list")
    names = []
    for n, log in enumerate(seal["logs"], start=1):
        _exact_fields(log, frozenset({"path", "lines", "head_hash"}), path, f"seal.logs[{n}]")
        fail_unless(
            isinstance(log["path"], str) and bool(LOG_PATH.match(log["path"])),
            path,
            f"seal.logs[{n}].path {log['path']!r} is not a log name assure writes",
        )
        fail_unless(
            type(log["lines"]) is int and log["lines"] >= 0,
            path,
            f"seal.logs[{n}].lines must be a count",
        )
        fail_unless(
            isinstance(log["head_hash"], str) and bool(_HEX64.match(log["head_hash"])),
            path,
            f"seal.logs[{n}].head_hash must be 64 hex digits",
        )
        names.append(log["path"])
    fail_unless(
        names == sorted(set(names)), path, "seal.logs must be sorted by path, each path once"
    )
    fail_unless(layout.EVENTS_LOG in names, path, f"seal.logs must name {layout.EVENTS_LOG}")


def check_seal_file(doc: Any, path: str) -> None:
    _exact_fields(doc, SEAL_FILE_FIELDS, path, "seal file")
    fail_unless(
        doc["aar_seal"] == SEAL_VERSION,
        path,
        f"aar_seal version {doc['aar_seal']!r}, expected {SEAL_VERSION!r}",
    )
    check_seal(doc["seal"], path)
    fail_unless(isinstance(doc["receipts"], list), path, "receipts must be a list")
    for n, item in enumerate(doc["receipts"], start=1):
        _exact_fields(item, frozenset({"file", "task_id", "sha256"}), path, f"receipts[{n}]")
        fail_unless(
            all(isinstance(item[k], str) for k in ("file", "task_id", "sha256")),
            path,
            f"receipts[{n}] fields must be strings",
        )
    _check_signature_shape(doc["signature"], path)
    canonical(doc, 1, path)


def parse_strict(path: Path, rel: str) -> Any:
    """Strict JSON: UTF-8, no duplicate keys, no NaN or Infinity."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        fail_unless(not dupes, rel, f"duplicate key(s) {', '.join(repr(d) for d in dupes)}")
        return dict(pairs)

    def no_constant(name: str) -> Any:
        raise ReceiptError(1, rel, f"{name} is not JSON")

    try:
        text = path.read_bytes().decode("utf-8")
        return json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constant)
    except FileNotFoundError:
        raise ReceiptError(1, rel, "missing") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ReceiptError(1, rel, f"unreadable JSON ({exc})") from None


def load_receipts(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every receipt in `folder` (not seal.json), parsed and shape-checked, by file name."""
    found = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        rel = f"{RECEIPTS_DIR}/{entry.name}"
        if entry.name == SEAL_FILE:
            continue
        fail_unless(
            bool(_RECEIPT_FILE.match(entry.name)) and entry.is_file() and not entry.is_symlink(),
            rel,
            "not a receipt file (unexpected entry in receipts/)",
        )
        receipt = parse_strict(entry, rel)
        check_receipt(receipt, rel)
        fail_unless(
            entry.name == layout.receipt_filename(receipt["task"]["id"]),
            rel,
            "file name does not match task.id (expected"
            f" {layout.receipt_filename(receipt['task']['id'])})",
        )
        found.append((entry.name, receipt))
    return found
