"""The changeset a receipt vouches for, as one digest: what each changed path of an attempt
leaves behind (a file's bytes and executable bit, a folder, a link, a deletion).

The issuer computes it from the judged changes (POST's digests: nothing is hashed twice),
marking what the copy-out left out of the workspace copy (a limit, a special file);
`assure receipts verify` recomputes it from the run directory's workspace copy, re-hashing
every changed file, so a copy whose bytes were swapped after the run no longer matches the
signed receipt. A file POST could not hash counts by its change's word (the digest binds
that word, and promote refuses such a file).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from assure.core import confined, private
from assure.core.chain import canonical, sha256_hex
from assure.verify.snapshot import Limits

MAX_FILE_BYTES = (
    Limits().max_hash_bytes
)  # POST hashes no bigger file, so none bigger is vouched for
CHUNK_BYTES = 1 << 20
DELETED = "deleted"
NOT_COPIED = (
    "not-copied"  # POST has it; the workspace copy does not (the copy-out's limits, a FIFO)
)
OVERSIZE = "over-" + str(MAX_FILE_BYTES)  # the digest of a copy that grew past what POST hashes


@dataclass(frozen=True)
class Item:
    """One changed path: `kind` is what is there after (an entry kind, DELETED or NOT_COPIED)."""

    path: str
    kind: str
    executable: bool = False
    sha256: str | None = None


def judged(changes: Iterable[Mapping[str, Any]]) -> list[Item]:
    """The judged changes (`verdict.json`'s) as items, each as POST saw it."""
    out = []
    for change in changes:
        after = change.get("after")
        if after is None:
            out.append(Item(change["path"], DELETED))
        elif after["kind"] == "file":
            out.append(
                Item(change["path"], "file", private.executable(after["mode"]), after.get("sha256"))
            )
        else:
            out.append(Item(change["path"], after["kind"]))
    return out


def vouched(workspace: Path, changes: Iterable[Mapping[str, Any]]) -> list[Item]:
    """The changeset as the verifier saw it: the judged changes (`verdict.json`'s, from POST),
    each path the workspace copy lacks marked NOT_COPIED (looked up, never hashed)."""
    return [
        want
        if want.kind == DELETED or confined.lstat(workspace, want.path) is not None
        else Item(want.path, NOT_COPIED)
        for want in judged(changes)
    ]


def found(workspace: Path, changes: Iterable[Mapping[str, Any]]) -> list[Item]:
    """The changeset as the workspace copy holds it now: each changed path looked at, and each
    file POST hashed hashed again, confined beneath `workspace` and never following a link."""
    out = []
    for want in judged(changes):
        st = confined.lstat(workspace, want.path)
        if st is None:
            out.append(Item(want.path, DELETED if want.kind == DELETED else NOT_COPIED))
        elif stat.S_ISREG(st.st_mode):
            digest = file_digest(workspace, want.path) if want.sha256 is not None else None
            out.append(Item(want.path, "file", private.executable(st.st_mode), digest))
        else:
            out.append(
                Item(
                    want.path,
                    "dir"
                    if stat.S_ISDIR(st.st_mode)
                    else "symlink"
                    if stat.S_ISLNK(st.st_mode)
                    else "other",
                )
            )
    return out


def file_digest(root: Path, rel: str) -> str:
    """SHA-256 of a regular file beneath root, read through one confined descriptor; OVERSIZE
    past MAX_FILE_BYTES (nothing more is read), or the error's name if it cannot be read."""
    try:
        fd, st = confined.open_file(root, rel)
    except OSError as exc:
        return f"unreadable: {exc.strerror or type(exc).__name__}"
    try:
        if st.st_size > MAX_FILE_BYTES:
            return OVERSIZE
        digest, seen = hashlib.sha256(), 0
        while chunk := os.read(fd, min(CHUNK_BYTES, MAX_FILE_BYTES + 1 - seen)):
            seen += len(chunk)
            if seen > MAX_FILE_BYTES:  # grew since the fstat: never read on to its end
                return OVERSIZE
            digest.update(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)


def digest(items: Iterable[Item]) -> str:
    """SHA-256 over the canonical JSON (`chain.canonical`) of the items, sorted by path."""
    return sha256_hex(canonical(sorted((asdict(i) for i in items), key=lambda d: d["path"])))
