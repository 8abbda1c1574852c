"""The one hash-chain writer and verifier, shared by the gateway journal and the host.

Each line is a JSON object carrying `seq`, `prev` (hash of the previous line) and `hash`
(SHA-256 of the canonical encoding of the line without `hash`). A changed byte, a dropped,
inserted or reordered line breaks the chain at a line that `verify_chain` names.
Standard library only: this module runs inside the gateway image.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

GENESIS = "0" * 64


class ChainError(Exception):
    """A chain failed verification; `line` is the 1-based line where it broke."""

    def __init__(self, line: int, message: str):
        super().__init__(f"line {line}: {message}")
        self.line = line


def canonical(obj: Any) -> bytes:
    """Deterministic JSON: sorted keys, no whitespace, ASCII only, no NaN."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def seal(record: dict[str, Any]) -> dict[str, Any]:
    """Return `record` with its `hash` field computed over everything else."""
    body = {k: v for k, v in record.items() if k != "hash"}
    return {**body, "hash": sha256_hex(canonical(body))}


def utc_now() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


class ChainWriter:
    """Append-only writer. Continues an existing chain after a restart.

    Lines are flushed to the OS on every append (a killed process loses nothing) and
    fsynced on `close()`.
    """

    def __init__(self, path: str | os.PathLike[str], *, base: dict[str, Any] | None = None):
        self.path = Path(path)
        self.base = dict(base or {})
        self.seq, self.prev = 0, GENESIS
        if self.path.exists():
            records = verify_chain(self.path)
            if records:
                self.seq, self.prev = records[-1]["seq"], records[-1]["hash"]
        self._fh = open(self.path, "a", encoding="ascii")

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        record = seal({**self.base, **fields, "seq": self.seq, "ts": utc_now(), "event": event, "prev": self.prev})
        self._fh.write(canonical(record).decode() + "\n")
        self._fh.flush()
        self.prev = record["hash"]
        return record

    @property
    def head(self) -> dict[str, Any]:
        return {"seq": self.seq, "hash": self.prev}

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()


def verify_chain(source: str | os.PathLike[str] | Iterable[str]) -> list[dict[str, Any]]:
    """Check every line of a chain and return the records. Raises `ChainError`."""
    lines = Path(source).read_text(encoding="ascii", errors="strict").splitlines() if isinstance(source, (str, os.PathLike)) else list(source)
    records: list[dict[str, Any]] = []
    prev = GENESIS
    for n, line in enumerate(lines, start=1):
        # Step 1: each line is one JSON object in canonical form.
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise ChainError(n, f"not JSON ({exc})") from None
        if not isinstance(record, dict):
            raise ChainError(n, "not a JSON object")
        if canonical(record).decode() != line:
            raise ChainError(n, "not in canonical form (bytes changed)")
        # Step 2: sequence numbers are contiguous.
        if record.get("seq") != n:
            raise ChainError(n, f"expected seq {n}, found {record.get('seq')!r} (line dropped, inserted or reordered)")
        # Step 3: the line links to its predecessor.
        if record.get("prev") != prev:
            raise ChainError(n, "prev does not match the previous line's hash")
        # Step 4: the line's own hash covers its content.
        if seal(record)["hash"] != record.get("hash"):
            raise ChainError(n, "hash does not match the content (line altered)")
        prev = record["hash"]
        records.append(record)
    return records
