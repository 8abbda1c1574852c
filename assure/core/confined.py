"""Confined file operations on trees an agent controlled: the one module the host uses for them.

Everything is opened relative to a directory descriptor and nothing is ever followed: a path
beneath a root is resolved with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
RESOLVE_NO_MAGICLINKS) where the kernel has it, else one O_NOFOLLOW component at a time. Only
regular files and directories are opened: a leaf is lstat-ed first, opened with O_NONBLOCK |
O_NOCTTY (a FIFO never blocks, no terminal is acquired) and fstat-ed to be the same regular
file. Names are data: `rel` is a `/`-separated str (surrogate escapes allowed) or bytes, and
`..`, `.` and empty components are refused, never interpreted.

The API: reading `open_dir`, `open_file`, `read_file`, `lstat`, `data_bytes`, `walk`;
copying `copy_tree` (with its `CopyReport`), `copy_file`; writing `make_dirs`,
`symlink`, `chown_tree`, `remove`. Errors are OSError (`NotRegular`, `TooLarge` among them),
bounded and naming the entry; a copy never raises for what it finds in the source.

A copy keeps sparse files sparse (only data extents are read and written, found with
SEEK_DATA/SEEK_HOLE) and counts data bytes against a bound; a file whose data exceeds what is
left is refused and reported, never copied in part. Symlinks are recreated as links, hard
links become separate files, FIFOs, sockets and devices are skipped and reported.
Standard library only.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import secrets
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

COPY_MAX_BYTES = 4 * 2**30  # data bytes of one host-side copy of a workspace (holes are free)
MAX_DEPTH = 256  # directory levels below a root that a copy or walk descends
MAX_ENTRIES = 200_000  # entries one copy or walk visits, of every kind
MAX_REPORTED = 100  # skipped entries a CopyReport lists by path (all are counted)
_OPENAT2_PATH_MAX = 4000  # longer paths are walked one component at a time (PATH_MAX is 4096)

OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
_KINDS = {
    stat.S_IFIFO: "fifo",
    stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "chardev",
    stat.S_IFBLK: "blockdev",
}

Rel = str | bytes
Include = Callable[[str], bool]
Modes = Callable[
    [int, bool], int
]  # (the source's st_mode, whether a folder) -> the copy's permission bits


class NotRegular(OSError):
    """The path names something other than a regular file (or directory, where one is needed)."""


class TooLarge(OSError):
    """The file holds more data than the caller's bound allows; nothing of it was used."""


# --- resolution -----------------------------------------------------------------------------

_RESOLVE = 0x08 | 0x04 | 0x02  # RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
_SYS_OPENAT2 = {"alpha": 547}.get(
    platform.machine(), 437
)  # one number on every arch since 5.6, but alpha


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


try:
    _syscall = ctypes.CDLL(None, use_errno=True).syscall
    _syscall.restype = ctypes.c_long
    _openat2_ok = platform.system() == "Linux"
except (OSError, AttributeError):  # no libc symbol: the O_NOFOLLOW walk does everything
    _openat2_ok = False


def _openat2(dir_fd: int, path: bytes, flags: int) -> int | None:
    """An fd, or None when the kernel (or a seccomp filter) has no openat2."""
    global _openat2_ok
    if not _openat2_ok:
        return None
    how = _OpenHow(flags, 0, _RESOLVE)
    fd = _syscall(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(path),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd >= 0:
        return int(fd)  # the c_long restype comes back an int, typed Any
    err = ctypes.get_errno()
    if err == errno.EAGAIN:  # a rename raced the lookup: the component walk decides
        return None
    if err in (errno.ENOSYS, errno.EPERM, errno.E2BIG):
        _openat2_ok = False
        return None
    raise OSError(err, os.strerror(err), os.fsdecode(path))


def _parts(rel: Rel) -> list[bytes]:
    raw = os.fsencode(rel)
    parts = raw.split(b"/")
    if not raw or any(p in (b"", b".", b"..") for p in parts) or b"\0" in raw:
        raise NotRegular(errno.EINVAL, "not a plain relative path", os.fsdecode(raw[:200]))
    return parts


def _open_root(root: str | os.PathLike[str] | int) -> int:
    """A new descriptor for the root directory itself (which must not be a symlink)."""
    if isinstance(root, int):
        return os.dup(root)
    return os.open(root, OPEN_DIR)


def _open_dir_at(dir_fd: int, parts: list[bytes]) -> int:
    """The directory `parts` beneath dir_fd, never through a symlink (ELOOP / EXDEV if one is
    met)."""
    if not parts:
        return os.dup(dir_fd)
    path = b"/".join(parts)
    if len(path) < _OPENAT2_PATH_MAX:
        fd = _openat2(dir_fd, path, OPEN_DIR)
        if fd is not None:
            return fd
    return _descend(dir_fd, parts, lambda fd, part: os.open(part, OPEN_DIR, dir_fd=fd))


def _descend(dir_fd: int, parts: list[bytes], enter: Callable[[int, bytes], int]) -> int:
    """A new descriptor for `parts` beneath dir_fd, each component entered by `enter(fd, part)`."""
    fd = os.dup(dir_fd)
    try:
        for part in parts:
            nfd = enter(fd, part)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_parent(root: str | os.PathLike[str] | int, rel: Rel) -> tuple[int, bytes]:
    parts = _parts(rel)
    rfd = _open_root(root)
    try:
        return _open_dir_at(rfd, parts[:-1]), parts[-1]
    finally:
        os.close(rfd)


def _real_parent(root: str | os.PathLike[str] | int, rel: Rel) -> tuple[int, bytes] | None:
    """`_open_parent`, or None when a parent is missing or not a real directory (a file, a
    link): then nothing beneath root has the path `rel`."""
    try:
        return _open_parent(root, rel)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EXDEV):
            return None
        raise


def _open_regular(dir_fd: int, name: bytes | str) -> tuple[int, os.stat_result]:
    """Open a regular file named in dir_fd: lstat says regular, fstat says the same inode."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(
            errno.EINVAL, f"not a regular file ({_kind(st.st_mode)})", os.fsdecode(name)
        )
    fd = os.open(name, OPEN_FILE, dir_fd=dir_fd)
    got = os.fstat(fd)
    if (got.st_dev, got.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(got.st_mode):
        os.close(fd)
        raise NotRegular(errno.EAGAIN, "changed while being opened", os.fsdecode(name))
    return fd, got


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    return _KINDS.get(stat.S_IFMT(mode), "file" if stat.S_ISREG(mode) else "other")


def open_dir(root: str | os.PathLike[str] | int, rel: Rel) -> int:
    """A descriptor (the caller closes it) for the directory `rel` beneath root, reached
    without following a link; OSError (ELOOP, ENOTDIR, EXDEV, ENOENT...) otherwise."""
    rfd = _open_root(root)
    try:
        return _open_dir_at(rfd, _parts(rel))
    finally:
        os.close(rfd)


def open_file(root: str | os.PathLike[str] | int, rel: Rel) -> tuple[int, os.stat_result]:
    """(descriptor, fstat) of the regular file `rel` beneath root (the caller closes it);
    NotRegular for anything else, OSError when a link or a missing part is on the way."""
    dfd, name = _open_parent(root, rel)
    try:
        return _open_regular(dfd, name)
    finally:
        os.close(dfd)


# --- reading --------------------------------------------------------------------------------


def lstat(root: str | os.PathLike[str] | int, rel: Rel) -> os.stat_result | None:
    """lstat of `rel` beneath root; None if it is missing or a parent is not a real directory."""
    if (found := _real_parent(root, rel)) is None:
        return None
    dfd, name = found
    try:
        return os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    finally:
        os.close(dfd)


def read_file(root: str | os.PathLike[str] | int, rel: Rel, max_bytes: int) -> bytes:
    """The whole content of a regular file beneath root. Raises OSError when it cannot be read
    confined (ELOOP: a symlink on the way), NotRegular, or TooLarge (more than max_bytes)."""
    dfd, name = _open_parent(root, rel)
    try:
        fd, st = _open_regular(dfd, name)
    finally:
        os.close(dfd)
    try:
        if st.st_size > max_bytes:
            raise TooLarge(errno.EFBIG, f"larger than {max_bytes} bytes", os.fsdecode(name))
        chunks, total = [], 0
        while total <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise TooLarge(errno.EFBIG, f"larger than {max_bytes} bytes", os.fsdecode(name))
        return b"".join(chunks)
    finally:
        os.close(fd)


def data_bytes(root: str | os.PathLike[str] | int, rel: Rel, max_bytes: int) -> int:
    """The data bytes (holes not counted) of a regular file beneath root; TooLarge over
    max_bytes."""
    dfd, name = _open_parent(root, rel)
    try:
        fd, st = _open_regular(dfd, name)
    finally:
        os.close(dfd)
    try:
        return sum(end - start for start, end in _extents(fd, st.st_size, max_bytes))
    finally:
        os.close(fd)


def walk(
    root: str | os.PathLike[str] | int, *, include: Include | None = None
) -> Iterator[tuple[str, os.stat_result]]:
    """(rel, lstat) of every entry beneath root, parents before children, in name order;
    symlinked directories are listed, never entered. At most MAX_ENTRIES entries and MAX_DEPTH
    levels; entries that vanish or cannot be listed are left out. `include(rel)` False prunes."""
    rfd = _open_root(root)
    try:
        yield from _walk(rfd, "", 0, include, [0])
    finally:
        os.close(rfd)


def _walk(
    fd: int, prefix: str, depth: int, include: Include | None, seen: list[int]
) -> Iterator[tuple[str, os.stat_result]]:
    try:
        names = sorted(os.listdir(fd))
    except OSError:
        return
    for name in names:
        rel = prefix + name
        if include is not None and not include(rel):
            continue
        seen[0] += 1
        if seen[0] > MAX_ENTRIES:
            return
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue
        yield rel, st
        if stat.S_ISDIR(st.st_mode) and depth + 1 < MAX_DEPTH:
            try:
                cfd = os.open(name, OPEN_DIR, dir_fd=fd)
            except OSError:
                continue
            try:
                yield from _walk(cfd, rel + "/", depth + 1, include, seen)
            finally:
                os.close(cfd)


# --- copying --------------------------------------------------------------------------------


@dataclass
class CopyReport:
    """What a copy did. `skipped` lists (rel, reason) for the first MAX_REPORTED entries that
    were not copied (special files, refused files, errors, limits); `skipped_count` counts all."""

    files: int = 0
    dirs: int = 0
    symlinks: int = 0
    data_bytes: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    skipped_count: int = 0
    refused: list[str] = field(default_factory=list)  # over the byte bound (first MAX_REPORTED)
    special: int = 0  # of skipped_count: FIFOs, sockets and devices (no copy ever holds them)

    @property
    def complete(self) -> bool:
        return self.skipped_count == 0

    @property
    def left_out(self) -> list[str]:
        """Entries (the first MAX_REPORTED skipped) when something other than special files
        was left out: a limit, a refusal or an error, so the copy is not the source minus
        its special files."""
        return (
            [rel for rel, _ in self.skipped] or ["(more)"]
            if self.skipped_count > self.special
            else []
        )

    def skip(self, rel: str, reason: str, *, special: bool = False) -> None:
        self.skipped_count += 1
        self.special += special
        if len(self.skipped) < MAX_REPORTED:
            self.skipped.append((rel, reason))

    def to_json(self) -> dict[str, object]:
        return {
            "files": self.files,
            "dirs": self.dirs,
            "symlinks": self.symlinks,
            "data_bytes": self.data_bytes,
            "skipped": [list(s) for s in self.skipped],
            "skipped_count": self.skipped_count,
            "refused": list(self.refused),
        }


def _extents(fd: int, size: int, budget: int) -> list[tuple[int, int]]:
    """The data extents of a file; TooLarge as soon as they hold more than `budget` bytes."""
    out, pos, total = [], 0, 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole from pos to the end
                break
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
            start = pos  # no SEEK_DATA on this filesystem: everything left counts as data
            end = size
        else:
            end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        if start >= size:
            break
        total += end - start
        if total > budget:
            raise TooLarge(errno.EFBIG, f"holds more than {budget} bytes of data")
        out.append((start, end))
        pos = end
    return out


def _copy_data(src: int, dst: int, size: int, extents: list[tuple[int, int]]) -> int:
    """Write only the data extents to dst (holes stay holes); the bytes written."""
    written = 0
    for start, end in extents:
        pos = start
        while pos < end:
            try:
                n = os.copy_file_range(src, dst, end - pos, pos, pos)
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    raise
                chunk = os.pread(src, min(1 << 20, end - pos), pos)
                n = os.pwrite(dst, chunk, pos) if chunk else 0
            if n <= 0:  # the file shrank under us: keep what is there
                break
            pos += n
            written += n
    os.ftruncate(dst, size)
    return written


def _copy_regular(
    src_fd: int, st: os.stat_result, dst_dir: int, name: bytes | str, budget: int, mode: int
) -> int:
    """Create `name` in dst_dir (which must not hold it) as a sparse copy; the data bytes.
    Refuses (TooLarge, nothing created) when the data exceeds `budget`."""
    extents = _extents(src_fd, st.st_size, budget)
    out = os.open(name, _CREATE, 0o600, dir_fd=dst_dir)
    try:
        written = _copy_data(src_fd, out, st.st_size, extents)
        os.fchmod(out, mode & 0o777)
        os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
        return written
    except BaseException:
        os.close(out)
        out = -1
        os.unlink(name, dir_fd=dst_dir)
        raise
    finally:
        if out >= 0:
            os.close(out)


def _same_mode(mode: int, folder: bool) -> int:
    return stat.S_IMODE(mode) & 0o777


def copy_tree(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    max_bytes: int,
    include: Include | None = None,
    modes: Modes = _same_mode,
) -> CopyReport:
    """Recreate the tree at src as a new directory dst (which must not exist): directories,
    regular files (sparse, at most `max_bytes` data bytes in all), symlinks as links. Every
    other entry, and whatever a limit or an error stops, is skipped and reported; this never
    raises for what is in src. `include(rel)` False leaves an entry (and all beneath) out;
    `modes(mode, folder)` gives each copied file and folder (dst included) its permission bits
    from the source's (by default the same, without setuid, setgid and sticky)."""
    report = CopyReport()
    sfd = _open_root(src)
    try:
        os.mkdir(dst, 0o700)
        dfd = _open_root(dst)
        try:
            left = [max_bytes, 0]  # data bytes left, entries seen
            _copy_dir(sfd, dfd, "", 0, include, modes, report, left)
            report.data_bytes = max_bytes - left[0]
            os.fchmod(dfd, modes(os.fstat(sfd).st_mode, True))
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)
    return report


def _copy_dir(
    sfd: int,
    dfd: int,
    prefix: str,
    depth: int,
    include: Include | None,
    modes: Modes,
    report: CopyReport,
    left: list[int],
) -> None:
    try:
        names = sorted(os.listdir(sfd))
    except OSError as exc:
        report.skip(prefix.rstrip("/") or ".", f"cannot list: {exc.strerror}")
        return
    for name in names:
        rel = prefix + name
        if include is not None and not include(rel):
            continue
        left[1] += 1
        if left[1] > MAX_ENTRIES:
            report.skip(rel, f"more than {MAX_ENTRIES} entries: the rest is not copied")
            return
        try:
            st = os.stat(name, dir_fd=sfd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                if depth >= MAX_DEPTH:
                    report.skip(rel, f"deeper than {MAX_DEPTH} levels")
                    continue
                child = os.open(name, OPEN_DIR, dir_fd=sfd)
                try:
                    got = os.fstat(child)
                    if (got.st_dev, got.st_ino) != (st.st_dev, st.st_ino):
                        raise NotRegular(errno.EAGAIN, "changed while being opened")
                    os.mkdir(name, 0o700, dir_fd=dfd)
                    out = os.open(name, OPEN_DIR, dir_fd=dfd)
                    try:
                        report.dirs += 1
                        _copy_dir(child, out, rel + "/", depth + 1, include, modes, report, left)
                        os.fchmod(out, modes(st.st_mode, True))
                    finally:
                        os.close(out)
                finally:
                    os.close(child)
            elif stat.S_ISREG(st.st_mode):
                fd, st = _open_regular(sfd, name)
                try:
                    left[0] -= _copy_regular(fd, st, dfd, name, left[0], modes(st.st_mode, False))
                    report.files += 1
                except TooLarge:
                    report.skip(
                        rel, f"refused: more data than the {left[0]} bytes left of the copy's bound"
                    )
                    if len(report.refused) < MAX_REPORTED:
                        report.refused.append(rel)
                finally:
                    os.close(fd)
            elif stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(name, dir_fd=sfd), name, dir_fd=dfd)
                report.symlinks += 1
            else:
                report.skip(rel, f"{_kind(st.st_mode)}: not copied", special=True)
        except OSError as exc:
            report.skip(rel, f"not copied: {exc.strerror or exc}")


def copy_file(
    src_root: str | os.PathLike[str] | int,
    src_rel: Rel,
    dst_root: str | os.PathLike[str] | int,
    dst_rel: Rel,
    *,
    max_bytes: int,
    mode: int | None = None,
    make_parents: bool = True,
    clear_way: bool = False,
) -> int:
    """Copy one regular file (sparse) from beneath src_root to beneath dst_root, through a
    temporary name and a rename in the destination directory; the data bytes copied.
    TooLarge when its data exceeds max_bytes (nothing is written). Missing parents are created
    (fd-relative) when `make_parents`; a parent that is not a real directory raises
    NotADirectoryError, or is removed and replaced by one when `clear_way` (for trees the host
    owns, like a check copy), which also lets a directory at `dst_rel` itself be replaced."""
    sdir, sname = _open_parent(src_root, src_rel)
    try:
        fd, st = _open_regular(sdir, sname)
    finally:
        os.close(sdir)
    try:
        ddir, dname = _open_dest(dst_root, dst_rel, make_parents, clear_way)
        try:
            tmp = _tmp_name(dname)
            written = _copy_regular(
                fd, st, ddir, tmp, max_bytes, st.st_mode if mode is None else mode
            )
            _rename_into(ddir, tmp, dname, clear_way)
            return written
        finally:
            os.close(ddir)
    finally:
        os.close(fd)


# --- writing and removing -------------------------------------------------------------------


def make_dirs(root: str | os.PathLike[str] | int, rel: Rel, *, clear_way: bool = False) -> None:
    """The directory `rel` beneath root and its parents (see `copy_file` for `clear_way`)."""
    parts = _parts(rel)
    rfd = _open_root(root)
    try:
        os.close(_make_parents(rfd, parts, clear_way))
    finally:
        os.close(rfd)


def parents(rel: str) -> list[str]:
    """The folders on the way to the relative path `rel`, outermost first (`a/b/c`: `a`,
    `a/b`)."""
    parts = rel.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def chown(root: str | os.PathLike[str] | int, rel: Rel, uid: int, gid: int) -> None:
    """Give the entry `rel` beneath root (a link itself, never its target) to uid:gid."""
    dfd, name = _open_parent(root, rel)
    try:
        os.chown(name, uid, gid, dir_fd=dfd, follow_symlinks=False)
    finally:
        os.close(dfd)


def chown_tree(root: str | os.PathLike[str], uid: int, gid: int) -> None:
    """Give root and everything beneath it (MAX_DEPTH levels) to uid:gid, fd-relative: links
    are chowned themselves, never their targets, and no path is ever longer than a name."""
    rfd = _open_root(root)
    try:
        os.chown(rfd, uid, gid)
        _chown_dir(rfd, uid, gid, 0)
    finally:
        os.close(rfd)


def _chown_dir(fd: int, uid: int, gid: int, depth: int) -> None:
    for name in os.listdir(fd):
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        os.chown(name, uid, gid, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode) and depth + 1 < MAX_DEPTH:
            child = os.open(name, OPEN_DIR, dir_fd=fd)
            try:
                _chown_dir(child, uid, gid, depth + 1)
            finally:
                os.close(child)


def symlink(
    root: str | os.PathLike[str] | int, rel: Rel, target: str | bytes, *, clear_way: bool = False
) -> None:
    """Create (or replace) the symlink `rel` beneath root; see `copy_file` for `clear_way`."""
    dfd, name = _open_dest(root, rel, True, clear_way)
    try:
        tmp = _tmp_name(name)
        os.symlink(target, tmp, dir_fd=dfd)
        _rename_into(dfd, tmp, name, clear_way)
    finally:
        os.close(dfd)


def remove(root: str | os.PathLike[str] | int, rel: Rel) -> bool:
    """Remove `rel` beneath root (a directory with all it holds), never following a link: a
    symlink is removed, not its target. False if nothing was there (or a parent is not a real
    directory, so nothing beneath root has that path)."""
    if (found := _real_parent(root, rel)) is None:
        return False
    dfd, name = found
    try:
        return _remove_at(dfd, name)
    finally:
        os.close(dfd)


def _remove_at(dfd: int, name: bytes | str) -> bool:
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dfd)
        return True
    stack = [(dfd, name, os.open(name, OPEN_DIR, dir_fd=dfd))]  # iterative: no recursion limit
    try:
        while stack:
            parent, dname, fd = stack[-1]
            for child in os.listdir(fd):
                if stat.S_ISDIR(os.stat(child, dir_fd=fd, follow_symlinks=False).st_mode):
                    stack.append((fd, child, os.open(child, OPEN_DIR, dir_fd=fd)))
                    break
                os.unlink(child, dir_fd=fd)
            else:
                stack.pop()
                os.close(fd)
                os.rmdir(dname, dir_fd=parent)
    finally:
        for _, _, fd in stack:
            os.close(fd)
    return True


def _tmp_name(name: bytes | str) -> bytes:
    return b"." + os.fsencode(name)[:200] + b".assure-" + secrets.token_hex(4).encode()


def _open_dest(
    root: str | os.PathLike[str] | int, rel: Rel, make_parents: bool, clear_way: bool
) -> tuple[int, bytes]:
    parts = _parts(rel)
    rfd = _open_root(root)
    try:
        if make_parents:
            return _make_parents(rfd, parts[:-1], clear_way), parts[-1]
        return _open_dir_at(rfd, parts[:-1]), parts[-1]
    finally:
        os.close(rfd)


def _make_parents(rfd: int, parts: list[bytes], clear_way: bool) -> int:
    def enter(fd: int, part: bytes) -> int:
        try:
            return os.open(part, OPEN_DIR, dir_fd=fd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            if not clear_way:
                raise NotADirectoryError(
                    errno.ENOTDIR, "a parent is not a directory", os.fsdecode(part)
                ) from exc
            _remove_at(fd, part)
        os.mkdir(part, 0o755, dir_fd=fd)
        return os.open(part, OPEN_DIR, dir_fd=fd)

    return _descend(rfd, parts, enter)


def _rename_into(dfd: int, tmp: bytes, name: bytes, clear_way: bool) -> None:
    try:
        if clear_way:
            st = lstat(dfd, name)
            if st is not None and stat.S_ISDIR(st.st_mode):
                _remove_at(dfd, name)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        os.unlink(tmp, dir_fd=dfd)
        raise
