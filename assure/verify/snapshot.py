"""Record a hostile workspace as data: every entry's type, metadata, xattrs and content hash.

The agent wrote the workspace, so the walk trusts nothing in it. It never follows a symlink:
each directory is opened with O_NOFOLLOW relative to its parent's descriptor and listed with
`os.scandir` on that descriptor. It opens nothing that lstat did not call a regular file, and
reads nothing before fstat shows that what it opened is what it lstat-ed (hasher.py does the
reading, in helper processes for a big tree). It bounds how many entries it
lists, how deep it goes, how much path text it keeps and how many bytes it hashes. Whatever
it could not check becomes a note on the entry (or on the snapshot), never an exception.
`take` walks one directory tree; the PRE and POST snapshots of an attempt go to `diff`.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Literal, NamedTuple

from assure.core import confined
from assure.errors import AssureError
from assure.textsafe import display
from assure.verify import hasher
from assure.verify.hasher import CHANGED, HasherError, HashPool, Result, hash_here, identity

EntryKind = Literal["file", "dir", "symlink", "fifo", "socket", "chardev", "blockdev", "other"]
Xattrs = tuple[tuple[str, str], ...]

FORMAT_VERSION = 1
BATCH_FILES = (
    hasher.MAX_BATCH
)  # files hashed as one batch: one round trip to a helper, not one per file
BATCH_BYTES = 4 << 20  # ... or fewer files, once they hold this many bytes
_CPUS = len(os.sched_getaffinity(0))

_KIND_BY_FORMAT: dict[int, EntryKind] = {
    stat.S_IFREG: "file",
    stat.S_IFDIR: "dir",
    stat.S_IFLNK: "symlink",
    stat.S_IFIFO: "fifo",
    stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "chardev",
    stat.S_IFBLK: "blockdev",
}
_OPEN_FILE, _OPEN_DIR = (
    confined.OPEN_FILE,
    confined.OPEN_DIR,
)  # one definition of how agent files are opened
_GONE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENXIO})


class SnapshotError(AssureError):
    """The workspace root cannot be snapshotted at all (missing, a symlink, not a directory)."""


@dataclass(slots=True)  # not frozen: a frozen init costs more than the rest of a file's walk
class Entry:
    """One workspace entry as lstat saw it; nothing in it was reached through a symlink.
    Treat it as read-only: a later snapshot may hold the very same object (see `take`).

    `path` is workspace-relative and `/`-separated; names that are not valid UTF-8 keep their
    bytes as surrogate escapes (os.fsdecode). `mode` is stat.S_IMODE: permission bits with
    setuid, setgid and sticky. `sha256` is set for regular files that were hashed. `target` is what
    the node points at: a symlink's text (never followed) or a
    device node's "MAJOR:MINOR". `link_group` is set for regular files with nlink > 1: the
    smallest path in the snapshot with the same (st_dev, st_ino). `xattrs` holds sorted
    (name, sha256 of value) pairs. `note` says what was not checked, and why. `stamp`
    (dev, inode, size, mtime and ctime, in ns) lets a later snapshot of the same tree reuse
    this hash; it is never compared: the ctime cannot be set by anyone without the clock
    capability, so content changed with its size and mtime restored still changes the stamp.
    """

    path: str
    kind: EntryKind
    mode: int
    uid: int
    gid: int
    size: int
    sha256: str | None
    target: str | None
    nlink: int
    link_group: str | None
    xattrs: Xattrs
    note: str | None
    stamp: str | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values; dump with ensure_ascii=True so surrogate escapes survive."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["xattrs"] = [list(pair) for pair in self.xattrs]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Entry:
        """Inverse of `to_json`; raises TypeError on a missing or unknown field."""
        return cls(**{**data, "xattrs": tuple((name, digest) for name, digest in data["xattrs"])})


@dataclass(frozen=True)
class Limits:
    """Bounds on one walk. Each is stated once, here; the notes it causes quote the number."""

    max_files: int = 200_000  # entries listed, of every kind
    max_depth: int = 256  # directory levels below the root
    max_hash_bytes: int = 256 * 2**20  # per file: a bigger file is noted, not hashed
    max_total_hash_bytes: int = 8 * 2**30  # per snapshot
    max_total_path_chars: int = 64 * 2**20  # sum of all path lengths: bounds memory


@dataclass(frozen=True)
class Hashing:
    """How a walk shares its hashing with helper processes (see hasher.py)."""

    helpers: int = min(4, _CPUS) if _CPUS > 1 else 0  # processes hashing beside the walk
    helper_after_bytes: int = (
        16 << 20
    )  # until the helpers run, a tree this small is hashed by the walk alone

    @property
    def max_batches_in_flight(self) -> int:
        """Keeps every helper busy; bounds open descriptors."""
        return 2 * self.helpers


HASHING = Hashing()


@dataclass(frozen=True)
class Snapshot:
    """Entries by path (sorted, read-only). `truncated` means a limit cut the listing short,
    so entries may be missing: a caller must not treat the snapshot as complete."""

    entries: Mapping[str, Entry]
    truncated: bool
    notes: tuple[str, ...]

    def __post_init__(self) -> None:
        entries = self.entries  # sorting the keys alone is several times faster than the items
        object.__setattr__(
            self, "entries", MappingProxyType({p: entries[p] for p in sorted(entries)})
        )

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values; dump with ensure_ascii=True so surrogate escapes survive."""
        return {
            "version": FORMAT_VERSION,
            "truncated": self.truncated,
            "notes": list(self.notes),
            "entries": [entry.to_json() for entry in self.entries.values()],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Snapshot:
        """Inverse of `to_json`; raises ValueError on another version or a repeated path."""
        if data.get("version") != FORMAT_VERSION:
            raise ValueError(f"snapshot version {data.get('version')!r} is not {FORMAT_VERSION}")
        entries = [Entry.from_json(item) for item in data["entries"]]
        by_path = {entry.path: entry for entry in entries}
        if len(by_path) != len(entries):
            raise ValueError("snapshot lists a path twice")
        return cls(entries=by_path, truncated=bool(data["truncated"]), notes=tuple(data["notes"]))


def take(
    root: str | os.PathLike[str],
    limits: Limits = Limits(),
    *,
    reuse: Snapshot | None = None,
    hashing: Hashing | None = None,
) -> Snapshot:
    """Snapshot the tree under `root` (the root itself is not an entry).

    With `reuse` (an earlier snapshot of the same tree), a file whose stamp is unchanged keeps
    its earlier entry (the very object) and is not even opened. Raises SnapshotError if `root`
    is not a real directory or cannot be listed; everything below it that cannot be checked is
    noted instead. `hashing`: how it uses helper processes (default HASHING).
    """
    hashing = hashing or HASHING
    with hasher.lease(hashing.helpers) as pool:
        walk = _Walk(limits, pool, reuse.entries if reuse is not None else {}, hashing)
        try:
            walk.run(_open_root(root))
            walk.drain()
        finally:
            walk.close()
    return walk.result()


class _Frame(NamedTuple):
    fd: int
    prefix: str  # "" for the root, else "a/b/"
    depth: int  # of the directory itself; the root is 0
    subdirs: list[tuple[str, os.stat_result]]  # still to descend into


class _Walk:
    """Iterative depth-first walk holding one open descriptor per directory level.

    It opens and checks each file to hash and hashes it in batches: itself while the tree is
    small, then in helper processes (see hasher.py), at most `max_batches_in_flight` batches
    at a time, while it walks on. A file enters `entries` once its hash is known.
    """

    def __init__(
        self, limits: Limits, pool: HashPool, reuse: Mapping[str, Entry], hashing: Hashing
    ):
        self.limits = limits
        self.sharing = hashing
        self.pool = pool
        self.reuse = reuse
        self.entries: dict[str, Entry] = {}
        self.notes: list[str] = []
        self.truncated = False
        self.stopped = False
        self.listed = 0
        self.path_chars = 0
        self.hashed_bytes = 0
        self.links: dict[tuple[int, int], list[str]] = {}
        self.first_link: dict[str, str] = {}  # stamp -> the first path of that node to be hashed
        self.other_links: list[tuple[str, str]] = []  # (path, first path): entries made at the end
        self.stack: list[_Frame] = []
        self.batch: list[_Pending] = []
        self.batch_bytes = 0
        self.hashing: deque[list[_Pending]] = deque()  # batches out with the pool, oldest first

    def run(self, root_fd: int) -> None:
        self._enter(root_fd, "", 0)
        while self.stack:
            frame = self.stack[-1]
            if self.stopped or not frame.subdirs:
                os.close(self.stack.pop().fd)
            else:
                self._descend(frame, *frame.subdirs.pop())

    def drain(self) -> None:
        """Hash what is still queued and wait for every batch still out."""
        self._flush()
        self._collect(keep=0)

    def close(self) -> None:
        """Close every descriptor still open: directories, and files not yet hashed."""
        while self.stack:
            os.close(self.stack.pop().fd)
        for batch in (self.batch, *self.hashing):
            for _, fd, _, _, _ in batch:
                os.close(fd)
        self.batch, self.hashing = [], deque()

    def result(self) -> Snapshot:
        for path, first in self.other_links:
            self.entries[path] = _link_entry(path, self.entries[first])
        for paths in self.links.values():
            group = min(paths)
            for path in paths:
                entry = self.entries[path]
                if entry.link_group == group:
                    continue
                if self.reuse.get(path) is entry:  # an earlier snapshot's: never changed
                    self.entries[path] = replace(entry, link_group=group)
                else:
                    entry.link_group = group  # made by this walk, seen by no one yet
        return Snapshot(entries=self.entries, truncated=self.truncated, notes=tuple(self.notes))

    def _enter(self, fd: int, prefix: str, depth: int) -> None:
        frame = _Frame(fd, prefix, depth, [])
        self.stack.append(frame)  # from here on, close() closes fd
        frame.subdirs.extend(self._scan(fd, prefix))

    def _descend(self, parent: _Frame, name: str, st: os.stat_result) -> None:
        path = parent.prefix + name
        if parent.depth + 1 >= self.limits.max_depth:
            self._cut(f"depth limit at {display(path)}")
            self._annotate(
                path,
                f"not listed: its entries would be deeper than max_depth ({self.limits.max_depth})",
            )
            return
        try:
            fd = os.open(name, _OPEN_DIR, dir_fd=parent.fd)
        except OSError as error:
            self._annotate(path, _open_failure(error))
            return
        if identity(os.fstat(fd)) != identity(st):
            os.close(fd)
            self._annotate(path, CHANGED)
            return
        self._enter(fd, path + "/", parent.depth + 1)

    def _scan(self, dir_fd: int, prefix: str) -> list[tuple[str, os.stat_result]]:
        """Record every entry of one directory; return its subdirectories to descend into.

        An OSError while listing (or, unexpectedly, while recording) notes the directory as
        unreadable, which `diff` reports; on the root it is a SnapshotError. The loop is the
        walk's hot path (once per entry), so it keeps its lookups local.
        """
        subdirs = []
        record_file, record_other = self._record_file, self._record_other
        try:
            with os.scandir(dir_fd) as listing:
                for item in listing:
                    name = item.name
                    path = prefix + name
                    if not self._admit(path):
                        break
                    try:
                        st = item.stat(follow_symlinks=False)
                    except OSError as error:
                        self._cut(f"not listed ({_open_failure(error)}): {display(path)}")
                        continue
                    self.listed += 1
                    if stat.S_ISREG(st.st_mode):
                        record_file(dir_fd, name, path, st)
                    elif record_other(dir_fd, name, path, st):
                        subdirs.append((name, st))
        except OSError as error:
            if not prefix:
                raise SnapshotError(f"cannot list the workspace root: {error.strerror}") from error
            self._annotate(prefix[:-1], f"unreadable: {error.strerror}")
        return subdirs

    def _admit(self, path: str) -> bool:
        """Count one more entry against the limits; stop the whole walk at the first breach."""
        self.path_chars += len(path)
        if self.listed >= self.limits.max_files:
            self._stop(f"stopped after max_files ({self.limits.max_files} entries)")
        elif self.path_chars > self.limits.max_total_path_chars:
            self._stop(
                f"stopped after max_total_path_chars ({self.limits.max_total_path_chars}"
                " characters)"
            )
        return not self.stopped

    def _record_other(self, dir_fd: int, name: str, path: str, st: os.stat_result) -> bool:
        """Record anything but a regular file; True if it is a directory."""
        kind = _KIND_BY_FORMAT.get(stat.S_IFMT(st.st_mode), "other")
        target, xattrs, note = _examine_other(kind, dir_fd, name, st)
        self.entries[path] = _entry(path, kind, st, None, target, xattrs, note, None)
        return kind == "dir"

    def _record_file(self, dir_fd: int, name: str, path: str, st: os.stat_result) -> None:
        """Reuse the earlier entry if the stamp is unchanged; else open without following,
        read the xattrs and queue the file for hashing within budget (the hasher confirms
        that the descriptor is the lstat-ed file before it reads a byte).

        An unchanged stamp vouches for the xattrs, mode, owner and link count too: changing
        any of them moves the ctime. For the same reason a hard link to a node this walk has
        already queued, with the same stamp, is that node: it is not opened again, and its
        entry is the first one's under its own path (so 200,000 links to one file cost one
        hash, and cannot use up the hash budget).
        """
        stamp = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
        if st.st_nlink > 1:
            self.links.setdefault((st.st_dev, st.st_ino), []).append(path)
            first = self.first_link.setdefault(stamp, path)
            if first != path:
                self.other_links.append((path, first))
                return
        earlier = self.reuse.get(path)
        if earlier is not None and earlier.stamp == stamp and earlier.sha256 is not None:
            self.entries[path] = earlier  # its lstat fields are these: changing any moves the ctime
            return
        try:
            fd = os.open(name, _OPEN_FILE, dir_fd=dir_fd)
        except OSError as error:
            self.entries[path] = _entry(
                path, "file", st, None, None, (), _open_failure(error), stamp
            )
            return
        try:
            try:  # most files have none: one listxattr, then `_xattrs` only for those that do
                xattrs = _xattrs(fd) if os.listxattr(fd) else ()
            except OSError as error:
                if error.errno != errno.ENOTSUP:
                    raise
                xattrs = ()
            refusal = self._reserve(st.st_size)
        except OSError as error:
            xattrs, refusal = (), f"xattrs unreadable: {error.strerror}"
        except BaseException:
            os.close(fd)
            raise
        if refusal is not None:
            os.close(fd)
            self.entries[path] = _entry(path, "file", st, None, None, xattrs, refusal, stamp)
            return
        self.batch.append((path, fd, st, xattrs, stamp))
        self.batch_bytes += st.st_size
        if len(self.batch) >= BATCH_FILES or self.batch_bytes >= BATCH_BYTES:
            self._flush()

    def _reserve(self, size: int) -> str | None:
        """Take `size` bytes from the hash budget, or say why the file will not be hashed."""
        if size > self.limits.max_hash_bytes:
            return f"too large to hash ({size} bytes > {self.limits.max_hash_bytes})"
        if self.hashed_bytes + size > self.limits.max_total_hash_bytes:
            return f"not hashed: max_total_hash_bytes ({self.limits.max_total_hash_bytes}) used up"
        self.hashed_bytes += size
        return None

    def _flush(self) -> None:
        """Hash the queued batch, here while the tree is small (or the helpers failed), else
        in a helper; then wait until few enough batches are out."""
        if self.batch:
            batch, self.batch, self.batch_bytes = self.batch, [], 0
            self.hashing.append(batch)  # from here on, `close` finds its descriptors there
            if self.pool.usable and (
                self.pool.helpers or self.hashed_bytes >= self.sharing.helper_after_bytes
            ):
                try:
                    self.pool.submit([(fd, identity(st)) for _, fd, st, _, _ in batch])
                except HasherError:
                    self._finish(self.hashing.pop(), None)
            else:
                self._finish(self.hashing.pop(), None)
        self._collect(keep=self.sharing.max_batches_in_flight)

    def _collect(self, keep: int) -> None:
        """Take the answers for the oldest batches out until at most `keep` are left."""
        while len(self.hashing) > keep:
            results = self.pool.oldest()
            self._finish(self.hashing.popleft(), results)

    def _finish(self, batch: list[_Pending], results: list[Result] | None) -> None:
        """Record each file of a batch, hashing it here if no helper answered, and close it.
        The xattrs were read before the hasher checked that the descriptor is the lstat-ed
        file, so they count only if it is."""
        try:
            if results is None:
                results = hash_here([(fd, identity(st)) for _, fd, st, _, _ in batch])
            for (path, _, st, xattrs, stamp), (sha256, note) in zip(batch, results, strict=True):
                xattrs = () if note == CHANGED else xattrs
                self.entries[path] = _entry(path, "file", st, sha256, None, xattrs, note, stamp)
        finally:
            for _, fd, _, _, _ in batch:
                os.close(fd)

    def _annotate(self, path: str, note: str) -> None:
        entry = self.entries[path]
        joined = note if entry.note is None else f"{entry.note}; {note}"
        self.entries[path] = replace(entry, note=joined)

    def _cut(self, note: str) -> None:
        self.truncated = True
        self.notes.append(note)

    def _stop(self, note: str) -> None:
        self._cut(note)
        self.stopped = True


_Pending = tuple[str, int, os.stat_result, Xattrs, str]
"""A file opened and queued for hashing: (path, fd, lstat, xattrs, stamp); `fd` is closed
once its hash is recorded. A plain tuple: one is made per file hashed."""


def _entry(
    path: str,
    kind: EntryKind,
    st: os.stat_result,
    sha256: str | None,
    target: str | None,
    xattrs: Xattrs,
    note: str | None,
    stamp: str | None,
) -> Entry:
    return Entry(
        path,
        kind,
        stat.S_IMODE(st.st_mode),
        st.st_uid,
        st.st_gid,
        st.st_size,
        sha256,
        target,
        st.st_nlink,
        None,
        xattrs,
        note,
        stamp,
    )


def _link_entry(path: str, first: Entry) -> Entry:
    """The entry of another hard link to `first`'s node: every field but the path is the node's."""
    return Entry(
        path,
        first.kind,
        first.mode,
        first.uid,
        first.gid,
        first.size,
        first.sha256,
        first.target,
        first.nlink,
        None,
        first.xattrs,
        first.note,
        first.stamp,
    )


def _open_root(root: str | os.PathLike[str]) -> int:
    try:
        return os.open(root, _OPEN_DIR)
    except OSError as error:
        raise SnapshotError(
            f"cannot snapshot the workspace: {error.strerror}",
            where=display(os.fsdecode(root)),
            fix="point the snapshot at an existing directory, not a symlink or a file",
        ) from error


def _examine_other(
    kind: EntryKind, dir_fd: int, name: str, st: os.stat_result
) -> tuple[str | None, Xattrs, str | None]:
    """Target, xattrs and note of anything but a regular file; opens nothing."""
    notes = []
    target = None
    if kind == "symlink":
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError as error:
            notes.append(_open_failure(error))
    elif kind in ("chardev", "blockdev"):
        target = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    if kind not in ("dir", "symlink"):
        notes.append(f"not opened: {kind}")
    try:
        xattrs = _xattrs(f"/proc/self/fd/{dir_fd}/{name}")
    except OSError as error:
        xattrs = ()
        notes.append(f"xattrs unreadable: {error.strerror}")
    return target, xattrs, "; ".join(notes) or None


def _xattrs(node: int | str) -> Xattrs:
    """(name, sha256 of value) pairs of an open file or of a path whose last part is not
    followed."""
    options = {} if isinstance(node, int) else {"follow_symlinks": False}
    try:
        names = os.listxattr(node, **options)
    except OSError as error:
        if error.errno == errno.ENOTSUP:
            return ()
        raise
    if not names:
        return ()
    return tuple(
        sorted(
            (name, hashlib.sha256(os.getxattr(node, name, **options)).hexdigest()) for name in names
        )
    )


def _open_failure(error: OSError) -> str:
    """Note for a failed open: a node that vanished or changed type is not 'unreadable'."""
    return CHANGED if error.errno in _GONE else f"unreadable: {error.strerror}"
