"""`capture`: copy a hostile database with its WAL and journal, recover, check, checkpoint
(see the package docstring)."""

from __future__ import annotations

import os
import re
import stat
import uuid
from pathlib import Path
from typing import Any

import apsw

from assure.core import confined
from assure.textsafe import display
from assure.verify.sqlite.connection import (
    TIMEOUT_SECONDS,
    DatabaseError,
    DatabaseTooLarge,
    Deadline,
    configure,
    pragma_row,
    wrap,
)

MAX_DB_BYTES = 2 * 1024**3  # database + WAL + journal; larger is refused (see error_finding)
MAX_INTEGRITY_ERRORS = 20
COPY_ATTEMPTS = 3
CHUNK_BYTES = 1 << 20
NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
SIDECARS = ("-wal", "-journal", "-shm")

_OPEN_FILE = confined.OPEN_FILE


class _ConfinedVFS(apsw.VFS):
    """The default VFS, restricted to one database's own files (no super-journals, no
    extensions)."""

    def __init__(self, database: Path):
        self.vfs_name = f"assure-confined-{uuid.uuid4().hex}"
        base = os.path.realpath(database)
        self.allowed = frozenset({base, *(base + suffix for suffix in SIDECARS)})
        self.refused: list[str] = []
        super().__init__(self.vfs_name, "")

    def _check(self, name: str | None, what: str) -> None:
        if name is not None and os.path.realpath(name) not in self.allowed:
            self.refused.append(f"{what} {display(name)[:200]}")
            raise apsw.CantOpenError(f"access to {name!r} refused")

    def xOpen(self, name: Any, flags: list[int]) -> apsw.VFSFile:  # noqa: N802 -- apsw's names
        filename = name.filename() if isinstance(name, apsw.URIFilename) else name
        self._check(filename, "open")
        return apsw.VFSFile("", name, flags)

    def xAccess(self, pathname: str, flags: int) -> bool:  # noqa: N802 -- apsw's names
        self._check(pathname, "access")
        return super().xAccess(pathname, flags)

    def xDelete(self, filename: str, syncdir: bool) -> None:  # noqa: N802 -- apsw's names
        self._check(filename, "delete")
        super().xDelete(filename, syncdir)

    def xDlOpen(self, filename: str) -> int:  # noqa: N802 -- apsw's names
        self.refused.append(f"load extension {display(filename)[:200]}")
        return 0


def _lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _copy_at(
    src_dir: int,
    name: str,
    expect: os.stat_result,
    dst_dir: int,
    target: str,
    budget: int,
    limit: int,
) -> int:
    """Copy one regular file without following symlinks, at most `budget` bytes of the `limit`;
    returns bytes copied."""
    fd = os.open(name, _OPEN_FILE, dir_fd=src_dir)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (expect.st_dev, expect.st_ino):
            raise DatabaseError(f"{display(name)} changed into something else while it was opened")
        out = os.open(
            target,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=dst_dir,
        )
        copied = 0
        try:
            while chunk := os.read(fd, CHUNK_BYTES):
                copied += len(chunk)
                if copied > budget:
                    raise DatabaseTooLarge(f"the database and its WAL/journal exceed {limit} bytes")
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]
        finally:
            os.close(out)
        return copied
    finally:
        os.close(fd)


def _fingerprint(st: os.stat_result | None) -> tuple[int, ...] | None:
    return (
        None if st is None else (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    )


def capture(source: Path, target_dir: Path, name: str, *, max_bytes: int = MAX_DB_BYTES) -> Path:
    """Copy `source` with its WAL and journal into `target_dir`, recover, check, checkpoint.

    Returns `target_dir/<name>.sqlite`: one self-contained file (journal_mode DELETE, no
    sidecar files) holding exactly what a new connection to `source` would have seen.
    Raises DatabaseError (DatabaseTooLarge over `max_bytes`) naming the problem: a
    symlink or non-regular file, a file that kept changing while copied, a journal that
    reaches outside the copy, a failed integrity check, a timeout.
    """
    if not NAME_PATTERN.fullmatch(name):
        raise DatabaseError(f"capture name {name!r} must match {NAME_PATTERN.pattern}")
    source = Path(source)
    base = source.name
    shown = display(str(source))
    try:
        src_dir = os.open(source.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise DatabaseError(f"{shown}: cannot open its directory: {exc.strerror}") from None
    try:
        dst_dir = os.open(target_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        os.close(src_dir)
        raise DatabaseError(
            f"{display(str(target_dir))}: not a usable directory: {exc.strerror}"
        ) from None
    target = Path(target_dir) / f"{name}.sqlite"
    try:
        _copy_all(src_dir, base, shown, dst_dir, target.name, max_bytes)
    except OSError as exc:
        _remove_copies(dst_dir, target.name)
        raise DatabaseError(f"{shown}: cannot copy: {exc.strerror or exc}") from None
    except BaseException:
        _remove_copies(dst_dir, target.name)
        raise
    finally:
        os.close(src_dir)
        os.close(dst_dir)
    try:
        _recover(target, shown)
    except BaseException:
        for suffix in ("", *SIDECARS):
            Path(str(target) + suffix).unlink(missing_ok=True)
        raise
    return target


def _copy_all(
    src_dir: int, base: str, shown: str, dst_dir: int, target: str, max_bytes: int
) -> None:
    """Copy the database, WAL and journal; again if any of them changed meanwhile (live
    databases)."""
    for _attempt in range(COPY_ATTEMPTS):
        stats = _source_stats(src_dir, base, shown)
        total = sum(
            st.st_size for suffix, st in stats.items() if st is not None and suffix != "-shm"
        )
        if total > max_bytes:
            raise DatabaseTooLarge(
                f"{shown}: the database and its WAL/journal are {total} bytes, over the"
                f" {max_bytes}-byte limit"
            )
        _remove_copies(dst_dir, target)
        budget = max_bytes
        for suffix in ("", "-wal", "-journal"):
            st = stats[suffix]
            if st is not None:
                try:
                    budget -= _copy_at(
                        src_dir, base + suffix, st, dst_dir, target + suffix, budget, max_bytes
                    )
                except FileNotFoundError:
                    break  # a sidecar vanished (checkpoint): copy again
        if {s: _fingerprint(st) for s, st in _source_stats(src_dir, base, shown).items()} == {
            s: _fingerprint(st) for s, st in stats.items()
        }:
            return
    _remove_copies(dst_dir, target)
    raise DatabaseError(
        f"{shown}: the database kept changing while it was copied ({COPY_ATTEMPTS} attempts)"
    )


def _source_stats(src_dir: int, base: str, shown: str) -> dict[str, os.stat_result | None]:
    stats: dict[str, os.stat_result | None] = {}
    for suffix in ("", *SIDECARS):
        st = _lstat_at(src_dir, base + suffix)
        what = f"{shown}{suffix}"
        if st is None and suffix == "":
            raise DatabaseError(f"{what}: no such file")
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise DatabaseError(f"{what} is a symlink; refusing to follow it")
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise DatabaseError(f"{what} is not a regular file")
        stats[suffix] = st
    return stats


def _remove_copies(dst_dir: int, name: str) -> None:
    for suffix in ("", *SIDECARS):
        try:
            os.unlink(name + suffix, dir_fd=dst_dir)
        except FileNotFoundError:
            pass


def _recover(target: Path, shown: str) -> None:
    """Open the copy (recovery), check it, checkpoint it into one file in rollback mode."""
    vfs = _ConfinedVFS(target)
    deadline = Deadline(TIMEOUT_SECONDS)
    conn = None
    try:
        try:
            conn = apsw.Connection(str(target), flags=apsw.SQLITE_OPEN_READWRITE, vfs=vfs.vfs_name)
            configure(conn, deadline)
            problems = [
                row[0] for row in conn.execute(f"PRAGMA integrity_check({MAX_INTEGRITY_ERRORS})")
            ]
            if problems != ["ok"]:
                listed = "; ".join(display(str(p))[:200] for p in problems)
                raise DatabaseError(f"{shown}: integrity check failed: {listed}")
            busy, _log, _done = pragma_row(conn, "PRAGMA wal_checkpoint(TRUNCATE)")
            mode = pragma_row(conn, "PRAGMA journal_mode = DELETE")[0]
            if busy or str(mode).lower() != "delete":
                raise DatabaseError(
                    f"{shown}: could not checkpoint the copy into one file (journal mode {mode})"
                )
            conn.close()
            conn = None
        except apsw.Error as exc:
            if vfs.refused:
                raise DatabaseError(
                    f"{shown}: its journal reaches outside the database's own files"
                    f" ({'; '.join(vfs.refused[:3])}); refusing to recover it"
                ) from None
            raise wrap(exc, deadline, shown) from None
        finally:
            if conn is not None:
                conn.close()
    finally:
        vfs.unregister()
    if vfs.refused:
        raise DatabaseError(
            f"{shown}: its journal reaches outside the database's own files"
            f" ({'; '.join(vfs.refused[:3])})"
        )
    left = [suffix for suffix in SIDECARS if os.path.lexists(str(target) + suffix)]
    if left:
        raise DatabaseError(f"{shown}: the copy still has {', '.join(left)} after a checkpoint")
