"""Receipts (AAR): one Ed25519-signed record per resolved task, and the seal that binds a run's
hash-chained logs to them, so that a public key alone verifies a whole exported run.

A receipt is signed over the RFC 8785 canonical JSON of the record without its `signature`.
The seal names every hash-chained log of the run (`events.jsonl`, `control/operator.jsonl`,
`attempts/<n>/gateway/journal.jsonl`) with its line count and head hash, and a Merkle root
(RFC 6962 tree hash) over the sorted `(path, head_hash)` leaves. Every receipt carries the seal;
`receipts/seal.json` carries it too, with the list of receipts issued under it.

Issuing, in this order (sealing last: a line appended to a log afterwards fails verification):

    seal = seal_run(run_dir)
    for each resolved task:
        write_receipt(run_dir, sign(build_receipt(..., seal=seal), key))   # or unsigned: keyless
    write_seal(run_dir, seal, key)

`verify_run(run_dir, public_key)` checks it as the numbered `STEPS`, raising `ReceiptError` on
the first failure. Keyless runs (`public_key=None`) report the signature steps as NOT-RUN.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from assure.core.chain import GENESIS, ChainError, chain_head, utc_now
from assure.errors import AssureError
from assure.records import layout
from assure.records.store import write_json

__all__ = [
    "STEPS", "ReceiptError", "KeyFileError", "Outcome", "StepResult", "Report",
    "generate_keypair", "load_private", "load_public", "key_id", "default_key_dir",
    "build_receipt", "sign", "seal_run", "write_receipt", "write_seal", "receipt_filename",
    "merkle_root", "verify_run",
]

AAR_VERSION = "1"
SEAL_VERSION = "1"
ALG = "Ed25519"
VERDICTS = ("verified", "rejected")
GROUND_TRUTHS = ("confirmed", "contradicted")
RECEIPTS_DIR = layout.RECEIPTS
SEAL_FILE = layout.SEAL
PRIVATE_NAME, PUBLIC_NAME = "aar-ed25519.pem", "aar-ed25519.pub.pem"
SLUG_MAX = 40  # characters of a task id kept, after encoding, in its receipt's file name
DIGEST_CHARS = 12  # hex digits of the task id's SHA-256 that make the file name unique

STEPS = {
    1: "receipts and seal parse and are complete",
    2: "receipt signatures verify with the key",
    3: "seal signature verifies with the key",
    4: "sealed logs verify, same lines and head",
    5: "Merkle root matches the sealed logs",
    6: "receipts carry the seal, the seal lists the receipts",
}

RECEIPT_FIELDS = frozenset({"aar", "run_id", "task", "subject", "principal", "verdict", "ground_truth", "reason", "checks",
                            "verifier", "deployment_id", "scope_id", "seal", "issued", "signature"})
CHECK_FIELDS = frozenset({"source", "query", "observed_at", "response_sha256", "excerpt"})
SEAL_FIELDS = frozenset({"run_id", "sealed_at", "logs", "merkle_root"})
SEAL_FILE_FIELDS = frozenset({"aar_seal", "seal", "receipts", "signature"})

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_KEY_ID = re.compile(r"^ed25519:[0-9a-f]{16}$")
_TIMESTAMP = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})$")
_LOG_PATH = re.compile(rf"^({re.escape(layout.EVENTS_LOG)}|{re.escape(layout.OPERATOR_LOG)}|{re.escape(layout.ATTEMPTS)}/[0-9]{{1,9}}/{re.escape(layout.JOURNAL)})$")
_RECEIPT_FILE = re.compile(rf"^[a-z0-9-]{{1,{SLUG_MAX}}}-[0-9a-f]{{{DIGEST_CHARS}}}\.json$")


class ReceiptError(AssureError):
    """A receipt, the seal or a sealed log failed; `step` is the number in `STEPS`."""

    def __init__(self, step: int, path: str, message: str, *, line: int | None = None):
        where = f"{path}: line {line}" if line is not None else path
        super().__init__(f"step {step} ({STEPS[step]}) failed: {where}: {message}")
        self.step, self.path, self.line, self.detail = step, path, line, message


class KeyFileError(AssureError):
    """A key file is missing, unreadable, of the wrong kind, or would be overwritten."""


class Outcome(str, Enum):
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
            "verified": True, "run_dir": self.run_dir, "run_id": self.run_id, "key_id": self.key_id,
            "signatures": self.signatures.value, "receipts": list(self.receipts), "logs": list(self.logs),
            "merkle_root": self.merkle_root,
            "steps": [{"step": s.number, "name": s.name, "outcome": s.outcome.value, "detail": s.detail} for s in self.steps],
        }


# Keys ------------------------------------------------------------------------------------


def default_key_dir() -> Path:
    """Outside any project tree, so a key is never exported or committed with a run."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "assure" / "keys"


def generate_keypair(directory: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write a new Ed25519 key pair as PEM (private file mode 0600); never overwrite a file."""
    directory = Path(directory)
    private_path, public_path = directory / PRIVATE_NAME, directory / PUBLIC_NAME
    for path in (private_path, public_path):
        if path.exists() or path.is_symlink():
            raise KeyFileError("a key file is already there; refusing to overwrite it", where=str(path),
                               fix="use another --dir, or move the old key away yourself")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        _create(private_path, private_pem, 0o600)
        try:
            _create(public_path, public_pem, 0o644)
        except BaseException:
            private_path.unlink()
            raise
    except FileExistsError as exc:
        raise KeyFileError("a key file appeared while writing; refusing to overwrite it", where=str(exc.filename)) from exc
    except OSError as exc:
        raise KeyFileError(f"cannot write the key pair: {exc.strerror}", where=str(directory)) from exc
    return private_path, public_path


def _create(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def load_private(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    """Load a PEM Ed25519 private key that only its owner can read."""
    path = Path(path)
    data = _read_key(path)
    if os.stat(path).st_mode & 0o077:
        raise KeyFileError("private key is readable by others", where=str(path), fix=f"chmod 600 {path}")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"not an unencrypted PEM private key ({exc})", where=str(path)) from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"not an Ed25519 key ({type(key).__name__})", where=str(path), fix="make one with `assure keys generate`")
    return key


def load_public(path: str | os.PathLike[str]) -> Ed25519PublicKey:
    """Load a PEM (SubjectPublicKeyInfo) Ed25519 public key."""
    path = Path(path)
    data = _read_key(path)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"not a PEM public key ({exc})", where=str(path)) from exc
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(f"not an Ed25519 key ({type(key).__name__})", where=str(path))
    return key


def _read_key(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise KeyFileError("no such key file", where=str(path), fix="make one with `assure keys generate`") from exc
    except OSError as exc:
        raise KeyFileError(f"unreadable key file: {exc.strerror}", where=str(path)) from exc


def key_id(public_key: Ed25519PublicKey) -> str:
    """`ed25519:` and the first 16 hex digits of the SHA-256 of the raw 32-byte public key."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]


# Building and signing --------------------------------------------------------------------


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
    issued: str | None = None,
) -> dict[str, Any]:
    """An unsigned AAR record (`signature: null`); checked as step 1 of `verify_run` would."""
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
        "issued": issued or utc_now(),
        "signature": None,
    }
    _check_receipt(record, f"receipt for task {task_id!r}")
    return record


def sign(record: dict[str, Any], private_key: Ed25519PrivateKey) -> dict[str, Any]:
    """`record` with `signature: {alg, key_id, value}` over RFC 8785 of the rest of it."""
    body = {k: v for k, v in record.items() if k != "signature"}
    _check_receipt({**body, "signature": None}, _label(body))
    return {**body, "signature": _signature(_jcs(body, 1, "receipt"), private_key)}


def _label(record: Any) -> str:
    task = record.get("task") if isinstance(record, dict) else None
    return f"receipt for task {task.get('id')!r}" if isinstance(task, dict) else "receipt"


def _signature(message: bytes, private_key: Ed25519PrivateKey) -> dict[str, str]:
    value = base64.b64encode(private_key.sign(message)).decode("ascii")
    return {"alg": ALG, "key_id": key_id(private_key.public_key()), "value": value}


def _jcs(obj: Any, step: int, path: str) -> bytes:
    try:
        return rfc8785.dumps(obj)
    except (rfc8785.CanonicalizationError, UnicodeEncodeError) as exc:
        raise ReceiptError(step, path, f"no RFC 8785 canonical form ({exc})") from None


# Sealing ---------------------------------------------------------------------------------


def chain_logs(run_dir: Path) -> list[str]:
    """Relative paths of the run's hash-chained logs present on disk, sorted."""
    found = [rel for rel in (layout.EVENTS_LOG, layout.OPERATOR_LOG) if (run_dir / rel).is_file() or (run_dir / rel).is_symlink()]
    attempts = run_dir / layout.ATTEMPTS
    if attempts.is_dir():
        for attempt in attempts.iterdir():
            rel = layout.journal_log(attempt.name)
            if attempt.name.isdigit() and ((run_dir / rel).is_file() or (run_dir / rel).is_symlink()):
                found.append(rel)
    return sorted(found)


def merkle_root(leaves: list[tuple[str, str]]) -> str:
    """RFC 6962 Merkle tree hash over leaves `rfc8785.dumps([path, head_hash])`, sorted."""
    nodes = [hashlib.sha256(b"\x00" + rfc8785.dumps([path, head])).digest() for path, head in sorted(leaves)]
    return _tree_hash(nodes).hex()


def _tree_hash(nodes: list[bytes]) -> bytes:
    if not nodes:
        return hashlib.sha256(b"").digest()
    if len(nodes) == 1:
        return nodes[0]
    split = 1 << ((len(nodes) - 1).bit_length() - 1)  # the largest power of two below len
    return hashlib.sha256(b"\x01" + _tree_hash(nodes[:split]) + _tree_hash(nodes[split:])).digest()


def seal_run(run_dir: str | os.PathLike[str], verified: Mapping[str, tuple[int, str]] | None = None) -> dict[str, Any]:
    """Verify every hash-chained log of the run and return the seal over their heads.

    `verified` holds the (lines, head hash) of logs this process has just verified as a
    stream (an attempt's journal, by its judge), by relative path: those are sealed as the
    judge saw them, not streamed again. A log changed since then fails `verify_run`."""
    run_dir = Path(run_dir)
    verified = verified or {}
    paths = chain_logs(run_dir)
    if layout.EVENTS_LOG not in paths:
        raise ReceiptError(4, layout.EVENTS_LOG, "missing: not a run directory, nothing to seal")
    logs = []
    for rel in paths:
        if not _LOG_PATH.match(rel):
            raise ReceiptError(4, rel, "not a log name assure writes; refusing to seal it")
        if rel in verified:
            _inside(run_dir, rel, 4)  # no link, nothing outside the run: as for a log read here
            lines, head = verified[rel]
        else:
            lines, head = _read_chain(run_dir, rel)
        logs.append({"path": rel, "lines": lines, "head_hash": head})
    return {"run_id": run_dir.resolve().name, "sealed_at": utc_now(), "logs": logs,
            "merkle_root": merkle_root([(log["path"], log["head_hash"]) for log in logs])}


def _read_chain(run_dir: Path, rel: str) -> tuple[int, str]:
    """(lines, head hash) of one log, verified as a stream (a log of any size, bounded memory)."""
    path = _inside(run_dir, rel, 4)
    try:
        lines, last = chain_head(path)
        return lines, last["hash"] if last else GENESIS
    except ChainError as exc:
        raise ReceiptError(4, rel, str(exc).split(": ", 1)[1], line=exc.line) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ReceiptError(4, rel, f"unreadable ({exc})") from None


def _inside(run_dir: Path, rel: str, step: int) -> Path:
    """`run_dir/rel`, refusing a symbolic link or anything that resolves outside the run."""
    path = run_dir / rel
    if path.is_symlink():
        raise ReceiptError(step, rel, "is a symbolic link")
    if not path.resolve().is_relative_to(run_dir.resolve()):
        raise ReceiptError(step, rel, "resolves outside the run directory")
    return path


# Writing ---------------------------------------------------------------------------------


def receipt_filename(task_id: str) -> str:
    """`<readable slug>-<sha256(task id)[:12]>.json`: unique per id, never a path, never hidden.

    The same slug as `promote.slug`, so a commit's `receipt:` trailer names this file.
    """
    readable = re.sub(r"[^a-z0-9]+", "-", task_id.lower()).strip("-")[:SLUG_MAX] or "task"
    return f"{readable}-{hashlib.sha256(task_id.encode('utf-8', 'surrogatepass')).hexdigest()[:DIGEST_CHARS]}.json"


def _receipts_dir(run_dir: Path, step: int) -> Path:
    return _inside(run_dir, RECEIPTS_DIR, step)


def write_receipt(run_dir: str | os.PathLike[str], receipt: dict[str, Any]) -> Path:
    """Write `receipt` to `receipts/<receipt_filename(task id)>` (atomically)."""
    run_dir = Path(run_dir)
    _check_receipt(receipt, _label(receipt))
    folder = _receipts_dir(run_dir, 1)
    folder.mkdir(exist_ok=True)
    path = folder / receipt_filename(receipt["task"]["id"])
    if path.parent != folder or path.is_symlink():  # cannot happen with receipt_filename; fail closed anyway
        raise ReceiptError(1, str(path), "receipt file name escapes receipts/")
    write_json(path, receipt)
    return path


def write_seal(run_dir: str | os.PathLike[str], seal: dict[str, Any], private_key: Ed25519PrivateKey | None = None) -> Path:
    """Write `receipts/seal.json`: the seal and the receipts issued under it, signed if a key is given.

    Call it after the last `write_receipt`: it lists every receipt in `receipts/` and refuses
    one that does not carry this seal.
    """
    run_dir = Path(run_dir)
    _check_seal(seal, SEAL_FILE)
    folder = _receipts_dir(run_dir, 1)
    folder.mkdir(exist_ok=True)
    receipts = _load_receipts(folder)
    for name, receipt in receipts:
        if _jcs(receipt["seal"], 6, name) != _jcs(seal, 6, SEAL_FILE):
            raise ReceiptError(6, f"{RECEIPTS_DIR}/{name}", "carries another seal; issue it again under this one")
    body = {"aar_seal": SEAL_VERSION, "seal": seal, "receipts": [_listing(name, r) for name, r in receipts]}
    signature = _signature(_jcs(body, 1, SEAL_FILE), private_key) if private_key is not None else None
    path = folder / SEAL_FILE
    write_json(path, {**body, "signature": signature})
    return path


def _listing(name: str, receipt: dict[str, Any]) -> dict[str, str]:
    return {"file": name, "task_id": receipt["task"]["id"], "sha256": hashlib.sha256(_jcs(receipt, 6, name)).hexdigest()}


# Checking shapes (step 1) ----------------------------------------------------------------


def _fail_unless(ok: bool, path: str, message: str) -> None:
    if not ok:
        raise ReceiptError(1, path, message)


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _exact_fields(obj: Any, fields: frozenset[str], path: str, what: str) -> None:
    _fail_unless(isinstance(obj, dict), path, f"{what} is not a JSON object")
    missing, extra = sorted(fields - obj.keys()), sorted(obj.keys() - fields)
    _fail_unless(not missing, path, f"{what} lacks {', '.join(missing)}")
    _fail_unless(not extra, path, f"{what} has unexpected field(s) {', '.join(repr(e) for e in extra)}")


def _check_receipt(r: Any, path: str) -> None:
    _exact_fields(r, RECEIPT_FIELDS, path, "receipt")
    _fail_unless(r["aar"] == AAR_VERSION, path, f"aar version {r['aar']!r}, expected {AAR_VERSION!r}")
    for name in ("run_id", "subject", "principal", "reason", "deployment_id", "scope_id"):
        _fail_unless(_is_text(r[name]), path, f"{name} must be a non-empty string")
    _exact_fields(r["task"], frozenset({"id", "claim"}), path, "task")
    _fail_unless(_is_text(r["task"]["id"]), path, "task.id must be a non-empty string")
    _fail_unless(_is_text(r["task"]["claim"]) or isinstance(r["task"]["claim"], dict), path, "task.claim must be a non-empty string or an object")
    _fail_unless(r["verdict"] in VERDICTS, path, f"verdict must be one of {', '.join(VERDICTS)}")
    _fail_unless(r["ground_truth"] in GROUND_TRUTHS, path, f"ground_truth must be one of {', '.join(GROUND_TRUTHS)}")
    _fail_unless(isinstance(r["checks"], list) and len(r["checks"]) > 0, path, "checks must list at least one ground-truth check")
    for n, check in enumerate(r["checks"], start=1):
        _exact_fields(check, CHECK_FIELDS, path, f"checks[{n}]")
        for name in ("source", "query"):
            _fail_unless(_is_text(check[name]), path, f"checks[{n}].{name} must be a non-empty string")
        _fail_unless(isinstance(check["excerpt"], str), path, f"checks[{n}].excerpt must be a string")
        _fail_unless(_is_timestamp(check["observed_at"]), path, f"checks[{n}].observed_at must be an RFC 3339 UTC time")
        _fail_unless(isinstance(check["response_sha256"], str) and bool(_HEX64.match(check["response_sha256"])), path,
                     f"checks[{n}].response_sha256 must be 64 lowercase hex digits")
    _exact_fields(r["verifier"], frozenset({"id", "independence"}), path, "verifier")
    _fail_unless(_is_text(r["verifier"]["id"]) and _is_text(r["verifier"]["independence"]), path,
                 "verifier.id and verifier.independence must be non-empty strings")
    _fail_unless(r["verifier"]["id"] != r["subject"], path, "verifier.id equals subject: a worker cannot verify itself")
    _fail_unless(_is_timestamp(r["issued"]), path, "issued must be an RFC 3339 time")
    _check_seal(r["seal"], path)
    _check_signature_shape(r["signature"], path)
    _jcs(r, 1, path)


def _is_timestamp(value: Any) -> bool:
    return isinstance(value, str) and bool(_TIMESTAMP.match(value))


def _check_signature_shape(sig: Any, path: str) -> None:
    if sig is None:
        return
    _exact_fields(sig, frozenset({"alg", "key_id", "value"}), path, "signature")
    _fail_unless(sig["alg"] == ALG, path, f"signature.alg must be {ALG!r}")
    _fail_unless(isinstance(sig["key_id"], str) and bool(_KEY_ID.match(sig["key_id"])), path, "signature.key_id must be ed25519:<16 hex>")
    _fail_unless(isinstance(sig["value"], str), path, "signature.value must be a base64 string")


def _check_seal(seal: Any, path: str) -> None:
    _exact_fields(seal, SEAL_FIELDS, path, "seal")
    _fail_unless(_is_text(seal["run_id"]), path, "seal.run_id must be a non-empty string")
    _fail_unless(_is_timestamp(seal["sealed_at"]), path, "seal.sealed_at must be an RFC 3339 time")
    _fail_unless(isinstance(seal["merkle_root"], str) and bool(_HEX64.match(seal["merkle_root"])), path, "seal.merkle_root must be 64 hex digits")
    _fail_unless(isinstance(seal["logs"], list), path, "seal.logs must be a list")
    names = []
    for n, log in enumerate(seal["logs"], start=1):
        _exact_fields(log, frozenset({"path", "lines", "head_hash"}), path, f"seal.logs[{n}]")
        _fail_unless(isinstance(log["path"], str) and bool(_LOG_PATH.match(log["path"])), path,
                     f"seal.logs[{n}].path {log['path']!r} is not a log name assure writes")
        _fail_unless(type(log["lines"]) is int and log["lines"] >= 0, path, f"seal.logs[{n}].lines must be a count")
        _fail_unless(isinstance(log["head_hash"], str) and bool(_HEX64.match(log["head_hash"])), path, f"seal.logs[{n}].head_hash must be 64 hex digits")
        names.append(log["path"])
    _fail_unless(names == sorted(set(names)), path, "seal.logs must be sorted by path, each path once")
    _fail_unless(layout.EVENTS_LOG in names, path, f"seal.logs must name {layout.EVENTS_LOG}")


def _check_seal_file(doc: Any, path: str) -> None:
    _exact_fields(doc, SEAL_FILE_FIELDS, path, "seal file")
    _fail_unless(doc["aar_seal"] == SEAL_VERSION, path, f"aar_seal version {doc['aar_seal']!r}, expected {SEAL_VERSION!r}")
    _check_seal(doc["seal"], path)
    _fail_unless(isinstance(doc["receipts"], list), path, "receipts must be a list")
    for n, item in enumerate(doc["receipts"], start=1):
        _exact_fields(item, frozenset({"file", "task_id", "sha256"}), path, f"receipts[{n}]")
        _fail_unless(all(isinstance(item[k], str) for k in ("file", "task_id", "sha256")), path, f"receipts[{n}] fields must be strings")
    _check_signature_shape(doc["signature"], path)
    _jcs(doc, 1, path)


def _parse(path: Path, rel: str) -> Any:
    """Strict JSON: UTF-8, no duplicate keys, no NaN or Infinity."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        _fail_unless(not dupes, rel, f"duplicate key(s) {', '.join(repr(d) for d in dupes)}")
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


def _load_receipts(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every receipt in `folder` (not seal.json), parsed and shape-checked, by file name."""
    found = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        rel = f"{RECEIPTS_DIR}/{entry.name}"
        if entry.name == SEAL_FILE:
            continue
        _fail_unless(bool(_RECEIPT_FILE.match(entry.name)) and entry.is_file() and not entry.is_symlink(), rel,
                     "not a receipt file (unexpected entry in receipts/)")
        receipt = _parse(entry, rel)
        _check_receipt(receipt, rel)
        _fail_unless(entry.name == receipt_filename(receipt["task"]["id"]), rel,
                     f"file name does not match task.id (expected {receipt_filename(receipt['task']['id'])})")
        found.append((entry.name, receipt))
    return found


# Verifying -------------------------------------------------------------------------------


def _verify_signature(doc: dict[str, Any], public_key: Ed25519PublicKey, step: int, rel: str) -> None:
    expected = key_id(public_key)
    sig = doc["signature"]
    if sig is None:
        raise ReceiptError(step, rel, f"unsigned, but a public key ({expected}) was given")
    if sig["key_id"] != expected:
        raise ReceiptError(step, rel, f"signed by key {sig['key_id']}, not by {expected} (the public key given)")
    try:
        value = base64.b64decode(sig["value"], validate=True)
    except (binascii.Error, ValueError):
        raise ReceiptError(step, rel, "signature.value is not base64") from None
    body = {k: v for k, v in doc.items() if k != "signature"}
    try:
        public_key.verify(value, _jcs(body, step, rel))
    except InvalidSignature:
        raise ReceiptError(step, rel, f"signature by {expected} does not match the content (changed after signing)") from None


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
        results.append(StepResult(step, STEPS[step], Outcome.NOT_RUN, "no public key given (keyless run)"))

    # Step 1: every receipt and the seal file parse and have exactly the required fields.
    folder = _receipts_dir(run_dir, 1)
    if not folder.is_dir():
        raise ReceiptError(1, RECEIPTS_DIR, "missing: the run issued no receipts")
    seal_rel = f"{RECEIPTS_DIR}/{SEAL_FILE}"
    _fail_unless(not (folder / SEAL_FILE).is_symlink(), seal_rel, "is a symbolic link")
    seal_doc = _parse(folder / SEAL_FILE, seal_rel)
    _check_seal_file(seal_doc, seal_rel)
    receipts = _load_receipts(folder)
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
        lines, head = _read_chain(run_dir, rel)
        if lines > log["lines"]:
            raise ReceiptError(4, rel, f"appended after sealing (sealed {log['lines']} lines, found {lines})", line=log["lines"] + 1)
        if lines < log["lines"]:
            raise ReceiptError(4, rel, f"missing (sealed {log['lines']} lines, found {lines})", line=lines + 1)
        if head != log["head_hash"]:
            raise ReceiptError(4, rel, "head hash differs from the sealed one (log rewritten)", line=log["lines"])
    unsealed = sorted(set(chain_logs(run_dir)) - {log["path"] for log in seal["logs"]})
    if unsealed:
        raise ReceiptError(4, unsealed[0], "a hash-chained log the seal does not name (written after sealing)")
    passed(4, f"{len(seal['logs'])} logs, {sum(log['lines'] for log in seal['logs'])} lines")

    # Step 5: the Merkle root is the one over the sealed (path, head_hash) leaves.
    root = merkle_root([(log["path"], log["head_hash"]) for log in seal["logs"]])
    if root != seal["merkle_root"]:
        raise ReceiptError(5, seal_rel, f"Merkle root {seal['merkle_root']} does not match the sealed logs ({root})")
    passed(5, root)

    # Step 6: every receipt carries this seal and run id; the seal lists exactly these receipts.
    sealed_bytes = _jcs(seal, 6, seal_rel)
    for name, receipt in receipts:
        rel = f"{RECEIPTS_DIR}/{name}"
        if _jcs(receipt["seal"], 6, rel) != sealed_bytes:
            raise ReceiptError(6, rel, f"its seal differs from {seal_rel}")
        if receipt["run_id"] != seal["run_id"]:
            raise ReceiptError(6, rel, f"run_id {receipt['run_id']!r} differs from the seal's {seal['run_id']!r}")
    listed = {item["file"]: item for item in seal_doc["receipts"]}
    present = {name: receipt for name, receipt in receipts}
    removed, added = sorted(listed.keys() - present.keys()), sorted(present.keys() - listed.keys())
    if removed:
        raise ReceiptError(6, f"{RECEIPTS_DIR}/{removed[0]}", f"listed in {SEAL_FILE} but missing (receipt removed)")
    if added:
        raise ReceiptError(6, f"{RECEIPTS_DIR}/{added[0]}", f"not listed in {SEAL_FILE} (receipt added after sealing)")
    for name, receipt in receipts:
        if _listing(name, receipt) != listed[name]:
            raise ReceiptError(6, f"{RECEIPTS_DIR}/{name}", f"differs from its entry in {SEAL_FILE} (replaced after sealing)")
    passed(6, f"{len(receipts)} receipts under one seal")

    return Report(
        run_dir=str(run_dir), run_id=seal["run_id"], key_id=expected, receipts=tuple(f"{RECEIPTS_DIR}/{n}" for n, _ in receipts),
        logs=tuple(log["path"] for log in seal["logs"]), merkle_root=root, steps=tuple(results),
    )
