"""The model calls' blob store: requests and responses kept content-addressed, so a journal
line names them by digest and a replay gets them back byte for byte. Standard library only."""

from __future__ import annotations

import hashlib
import os
import re
import stat

from assure.core import atomic
from assure.gateway.modelwire import ModelError

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class Blobs:
    """Content-addressed files `<dir>/<sha256>`, written atomically and fsynced."""

    def __init__(self, path: str, *, create: bool):
        if create:
            try:
                os.makedirs(path, exist_ok=True)
            except OSError as exc:
                raise ModelError(f"model.blob_dir: cannot create {path}: {exc.strerror}") from None
        if not os.path.isdir(path):
            raise ModelError(f"blob dir {path} is not a directory")
        self.path = path

    def put(self, data: bytes) -> str:
        """Store `data` (fsynced, then renamed into place) and return its SHA-256. Raises
        OSError."""
        digest = hashlib.sha256(data).hexdigest()
        final = os.path.join(self.path, digest)
        if self._intact(final, digest):
            return digest
        atomic.write_bytes(final, data, sync_dir=True)
        return digest

    def get(self, digest: str) -> bytes:
        """The bytes stored under `digest`, checked. Raises ModelError if missing or altered."""
        if not _SHA256.match(digest):
            raise ModelError(f"{digest[:80]!r} is not a SHA-256 hex digest")
        path = os.path.join(self.path, digest)
        try:
            data = read_file(path)
        except OSError as exc:
            raise ModelError(
                f"blob {path} cannot be read: {exc.strerror or type(exc).__name__}"
            ) from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise ModelError(f"blob {path} does not match its name (altered)")
        return data

    @staticmethod
    def _intact(path: str, digest: str) -> bool:
        try:
            return hashlib.sha256(read_file(path)).hexdigest() == digest
        except OSError:
            return False


def read_file(path: str, limit: int | None = None) -> bytes:
    """A regular file's bytes, never through a symlink."""
    fd = os.open(
        path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
    )  # a FIFO must not block the open
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file")
        return fh.read() if limit is None else fh.read(limit)
