"""The one hash-chain writer and verifier, shared by the gateway journal and the host.

Each line is a JSON object carrying `seq`, `prev` (hash of the previous line) and `hash`
(SHA-256 of the canonical encoding of the line without `hash`). A changed byte, a dropped,
inserted or reordered line breaks the chain at a line that `iter_chain` names.
Readers stream: `iter_chain` verifies one line at a time (memory: one line, at most
MAX_LINE_BYTES), so a journal of any size is checked without loading it.
Standard library only: this module runs inside the gateway image.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator

TYPE_CHECKING = False  # typing.TYPE_CHECKING; the gateway boots without typing (core/__init__)
if TYPE_CHECKING:
    from typing import Any


GENESIS = "0" * 64
MAX_LINE_BYTES = 64 * 2**20  # a longer line is refused unread: no writer produces one


class ChainError(Exception):
    """A chain failed verification; `line` is the 1-based line where it broke."""

    def __init__(self, line: int, message: str):
        super().__init__(f"line {line}: {message}")
        self.line = line


def canonical(obj: Any) -> bytes:
    """Deterministic JSON: sorted keys, no whitespace, ASCII only, no NaN."""
    if _ENCODE is None:
        return json.dumps(
            obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
        ).encode()
    return "".join(_ENCODE(obj, 0)).encode()


# json.dumps's own C encoder with canonical's settings, built once: json.dumps builds an encoder
# per call, which was most of the cost of a small object (the gateway encodes five per call).
# No circular-reference markers (its one shared state): a cycle is a RecursionError instead of
# a ValueError, and no record has one. None: CPython without its C accelerator.
_ENCODE = (
    None
    if json.encoder.c_make_encoder is None  # type: ignore[attr-defined]  # the C half is untyped
    else json.encoder.c_make_encoder(  # type: ignore[attr-defined]  # the C half is untyped
        None,
        json.JSONEncoder().default,  # what cannot be encoded: the TypeError json.dumps raises
        json.encoder.encode_basestring_ascii,
        None,
        ":",
        ",",
        True,
        False,
        False,
    )
)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def seal(record: dict[str, Any]) -> dict[str, Any]:
    """Return `record` with its `hash` field computed over everything else."""
    body = {k: v for k, v in record.items() if k != "hash"}
    return {**body, "hash": sha256_hex(canonical(body))}


# The hash's stand-in while a line is encoded: 64 characters JSON writes as they are, as a digest.
_PLACEHOLDER = "assure-chain-hash-placeholder-" + "-" * 34
_MARK = b'"hash":"' + _PLACEHOLDER.encode() + b'"'


def _sealed_line(body: dict[str, Any]) -> tuple[str, str]:
    """(hash, line) of `body` (no "hash" key): the line is `canonical(seal(body))` plus a
    newline. Encoded once, with `_PLACEHOLDER` as the hash: the sorted keys put `"hash":...`
    between its neighbours, so the line without that member (and one comma) is exactly
    `canonical(body)`, which the hash covers, and the placeholder is then replaced by the hash.
    If the placeholder occurs anywhere else (an agent's string, a nested "hash"), where ours is
    is ambiguous: the body is encoded twice instead (`seal`), as the verifier does."""
    line = canonical({**body, "hash": _PLACEHOLDER})
    if line.count(_PLACEHOLDER.encode()) != 1:
        digest = sha256_hex(canonical(body))
        return digest, canonical({**body, "hash": digest}).decode("ascii") + "\n"
    at = line.index(_MARK)
    end = at + len(_MARK)
    if line[at - 1 : at] == b",":
        covered = line[: at - 1] + line[end:]
    elif line[end : end + 1] == b",":
        covered = line[:at] + line[end + 1 :]
    else:  # the only member
        covered = line[:at] + line[end:]
    digest = sha256_hex(covered)
    start = at + len(b'"hash":"')
    text = line.decode("ascii")
    return digest, text[:start] + digest + text[start + len(_PLACEHOLDER) :] + "\n"


def utc_now() -> str:
    global _second
    t = time.time()
    whole, text = _second  # one immutable pair: threads may replace it, never change it
    if whole != int(t):  # strftime once a second, not once a journal line
        whole, text = _second = int(t), time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(t)))
    return f"{text}.{int(t % 1 * 1e6):06d}Z"


_second: tuple[int, str] = (-1, "")  # utc_now's last whole second and its text


class ChainWriter:
    """Append-only writer. Continues an existing chain after a restart.

    Each line is one write(2) on an O_APPEND descriptor, no buffer in between (a killed
    process loses nothing it appended), and the file is fsynced on `close()`.
    """

    def __init__(self, path: str | os.PathLike[str], *, base: dict[str, Any] | None = None):
        self.path = path  # as given: pathlib is not imported (the gateway's boot, issue 25)
        self.base = dict(base or {})
        self.seq, self.prev = 0, GENESIS
        if os.path.exists(path):
            for record in iter_chain(self.path):
                self.seq, self.prev = record["seq"], record["hash"]
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        self.size = os.fstat(self._fd).st_size  # bytes in the file, kept current by `write`

    def line(self, event: str, **fields: Any) -> tuple[dict[str, Any], str]:
        """The next record and line `append` would write (to check the line's size first):
        `canonical(seal(...))`, encoded once with a placeholder for the hash (`_sealed_line`)."""
        body = {
            **self.base,
            **fields,
            "seq": self.seq + 1,
            "ts": utc_now(),
            "event": event,
            "prev": self.prev,
        }
        body.pop("hash", None)  # as seal: the hash is never part of what it covers
        digest, line = _sealed_line(body)
        return {**body, "hash": digest}, line

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        return self.write(*self.line(event, **fields))

    def write(self, record: dict[str, Any], line: str) -> dict[str, Any]:
        """Append what `line()` made (no other append in between), in one write to the OS."""
        if record["seq"] != self.seq + 1 or record["prev"] != self.prev:
            raise ValueError("the line was not made for the chain's current head")
        if self._fd is None:
            raise ValueError("the chain writer is closed")
        data = memoryview(line.encode("ascii"))
        while data:  # a regular file takes it whole; a short write is continued, never dropped
            data = data[os.write(self._fd, data) :]
        self.seq, self.prev, self.size = record["seq"], record["hash"], self.size + len(line)
        return record

    @property
    def head(self) -> dict[str, Any]:
        return {"seq": self.seq, "hash": self.prev}

    def __del__(self, _close: Any = os.close) -> None:  # os.close bound: usable at exit
        """A writer dropped unclosed closes its descriptor, as a file object would (unsynced)."""
        fd, self._fd = getattr(self, "_fd", None), None
        if fd is not None:
            _close(fd)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def verify_chain(source: str | os.PathLike[str] | Iterable[str]) -> list[dict[str, Any]]:
    """Check every line of a chain and return all the records (for small chains and tests;
    a reader of a file iterates `iter_chain` instead). Raises `ChainError`."""
    return list(iter_chain(source))


def iter_chain(source: str | os.PathLike[str] | Iterable[str]) -> Iterator[dict[str, Any]]:
    """Yield each record of a chain (a file path, or lines) once its line has verified.

    Memory is one line: a file is read line by line, and a line over MAX_LINE_BYTES is
    refused without being read whole. A consumer sees only records that verified; a break
    raises `ChainError` naming its line when the iteration reaches it."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as fh:
            yield from _verify(_file_lines(fh))
    else:
        yield from _verify(source)


def _file_lines(fh: Any) -> Iterator[str]:
    n = 0
    while raw := fh.readline(MAX_LINE_BYTES + 1):
        n += 1
        if len(raw) > MAX_LINE_BYTES:
            raise ChainError(n, f"line longer than {MAX_LINE_BYTES} bytes")
        try:
            yield raw.decode("ascii").rstrip("\n")
        except UnicodeDecodeError:
            raise ChainError(n, "not ASCII (bytes changed)") from None


def chain_head(source: str | os.PathLike[str] | Iterable[str]) -> tuple[int, dict[str, Any] | None]:
    """(number of lines, last record) of a chain, verified as a stream. Raises `ChainError`."""
    count, last = 0, None
    for record in iter_chain(source):
        count, last = count + 1, record
    return count, last


class ChainFile:
    """A chain file to iterate more than once: every pass streams and verifies it again."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = path

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter_chain(self.path)


def _verify(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    prev = GENESIS
    for n, line in enumerate(lines, start=1):
        # Step 1: each line is one JSON object in canonical form.
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise ChainError(n, f"not JSON ({exc})") from None
        if not isinstance(record, dict):
            raise ChainError(n, "not a JSON object")
        if canonical(record).decode() != line:
            raise ChainError(n, "not in canonical form (bytes changed)")
        # Step 2: sequence numbers are contiguous.
        if record.get("seq") != n:
            raise ChainError(
                n,
                f"expected seq {n}, found {record.get('seq')!r} (line dropped, inserted or"
                " reordered)",
            )
        # Step 3: the line links to its predecessor.
        if record.get("prev") != prev:
            raise ChainError(n, "prev does not match the previous line's hash")
        # Step 4: the line's own hash covers its content.
        if seal(record)["hash"] != record.get("hash"):
            raise ChainError(n, "hash does not match the content (line altered)")
        prev = record["hash"]
        yield record
