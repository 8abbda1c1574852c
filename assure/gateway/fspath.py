"""Workspace-confined file operations that never follow a symlink.

The agent can change the workspace while the gateway works in it, so no path string is
ever resolved by the kernel in one go: the workspace root is opened once, and every
request path is walked one component at a time with `O_NOFOLLOW` relative to the
directory fd already held. A symlink anywhere (even one swapped in mid-request) fails the
walk; it is never followed. Errors are `PathError` with a stable `code`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator

from assure.core.record import dataclass

MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255
MAX_LIST_ENTRIES = 10_000
READ_CHUNK_BYTES = 64 * 1024  # past what fstat said, a file is read on in steps this big
ROOT = "."

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_TMP_PREFIX = ".assure-tmp-"


class PathError(Exception):
    """A refused or failed file operation; `code` is what the agent sees."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Entry:
    """One entry of an fs.list answer."""

    name: str
    type: str  # file | dir | symlink | other
    size: int


def normalize(path: str) -> str:
    """Return the canonical form of a request path (`a/b`, or `.` for the root).

    Empty and `.` components collapse; absolute paths, `..`, NUL bytes, text that is not
    valid UTF-8 and over-long paths or names are refused with `bad_path`.
    """
    if "\x00" in path:
        raise PathError("bad_path", "path contains a NUL byte")
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        raise PathError("bad_path", "path is not valid UTF-8") from None
    if size == 0:
        raise PathError("bad_path", "path is empty (use '.' for the workspace root)")
    if size > MAX_PATH_BYTES:
        raise PathError("bad_path", f"path is longer than {MAX_PATH_BYTES} bytes")
    if path.startswith("/"):
        raise PathError("bad_path", f"{path!r} is absolute; paths are relative to the workspace")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    for part in parts:
        if part == "..":
            raise PathError("bad_path", f"{path!r} contains '..'; paths stay inside the workspace")
        if len(part.encode("utf-8")) > MAX_NAME_BYTES:
            raise PathError(
                "bad_path", f"a component of {path!r} is longer than {MAX_NAME_BYTES} bytes"
            )
    return "/".join(parts) or ROOT


class Workspace:
    """The workspace root, held open as a directory fd for the gateway's lifetime."""

    def __init__(self, root: str):
        self._root = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def close(self) -> None:
        if self._root >= 0:
            os.close(self._root)
            self._root = -1

    def read(self, path: str, max_bytes: int) -> bytes:
        """Contents of the regular file at `path`, refused if over `max_bytes`."""
        shown = normalize(path)
        with _errors(shown), contextlib.ExitStack() as stack:
            parent, name = self._parent(stack, shown, create=False)
            fd = _open(name, _READ_FLAGS, parent, shown)
            stack.callback(os.close, fd)
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise PathError("is_a_directory", f"{shown!r} is a directory")
            if not stat.S_ISREG(info.st_mode):
                raise PathError("not_a_regular_file", f"{shown!r} is not a regular file")
            if info.st_size > max_bytes:
                raise PathError(
                    "too_large",
                    f"{shown!r} is {info.st_size} bytes, over the {max_bytes}-byte limit",
                )
            return _read_bounded(fd, max_bytes, shown, info.st_size)

    def write(self, path: str, data: bytes, mode: int) -> None:
        """Atomically replace `path` with `data` (a symlink named `path` is replaced, not
        followed)."""
        shown = normalize(path)
        with _errors(shown), contextlib.ExitStack() as stack:
            parent, name = self._parent(stack, shown, create=True)
            if _kind(parent, name) == "dir":
                raise PathError("is_a_directory", f"{shown!r} is a directory")
            tmp = f"{_TMP_PREFIX}{os.urandom(16).hex()}"
            fd = _open(tmp, _TMP_FLAGS, parent, shown)
            renamed = False
            try:
                _write_all(fd, data)
                os.fchmod(fd, mode)
                os.fsync(fd)
                os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
                renamed = True
            finally:
                os.close(fd)
                if not renamed:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp, dir_fd=parent)

    def delete(self, path: str) -> None:
        """Remove the file or symlink at `path` (the link itself, never its target)."""
        shown = normalize(path)
        with _errors(shown), contextlib.ExitStack() as stack:
            parent, name = self._parent(stack, shown, create=False)
            kind = _kind(parent, name)
            if kind is None:
                raise PathError("not_found", f"{shown!r} does not exist")
            if kind == "dir":
                raise PathError(
                    "is_a_directory",
                    f"{shown!r} is a directory; only files and symlinks can be deleted",
                )
            if kind == "other":
                raise PathError("not_a_regular_file", f"{shown!r} is neither a file nor a symlink")
            os.unlink(name, dir_fd=parent)

    def listdir(self, path: str) -> tuple[list[Entry], bool]:
        """Entries of the directory at `path`, sorted by name, and whether the list was cut."""
        shown = normalize(path)
        with _errors(shown), contextlib.ExitStack() as stack:
            parent = self._walk(stack, _parts(shown), create=False, shown=shown)
            fd = _open(".", _DIR_FLAGS, parent, shown)
            stack.callback(os.close, fd)
            entries: list[Entry] = []
            with os.scandir(fd) as it:
                for item in it:
                    if len(entries) == MAX_LIST_ENTRIES:
                        return sorted(entries, key=lambda e: e.name), True
                    entries.append(_entry(item))
            return sorted(entries, key=lambda e: e.name), False

    def _parent(self, stack: contextlib.ExitStack, shown: str, *, create: bool) -> tuple[int, str]:
        """Walk to the directory holding the normalized path `shown`; return (its fd, the final
        name)."""
        parts = _parts(shown)
        if not parts:
            raise PathError("bad_path", "the path names the workspace root, not a file")
        return self._walk(stack, parts[:-1], create=create, shown=shown), parts[-1]

    def _walk(
        self, stack: contextlib.ExitStack, parts: list[str], *, create: bool, shown: str
    ) -> int:
        """Open each directory in `parts` below the root with O_NOFOLLOW; fds close with `stack`."""
        current = self._root
        for part in parts:
            current = _open_dir(current, part, create=create, shown=shown)
            stack.callback(os.close, current)
        return current


def _parts(normalized: str) -> list[str]:
    return [] if normalized == ROOT else normalized.split("/")


def _open_dir(parent: int, name: str, *, create: bool, shown: str) -> int:
    if create and _kind(parent, name) is None:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=parent)
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP) and _kind(parent, name) == "symlink":
            raise PathError(
                "path_escapes",
                f"{shown!r} goes through a symlink ({name!r}); symlinks are never followed",
            ) from None
        if exc.errno == errno.ENOTDIR:
            raise PathError("not_a_directory", f"{shown!r}: {name!r} is not a directory") from None
        raise _translate(exc, shown) from None


def _open(name: str, flags: int, parent: int, shown: str) -> int:
    try:
        return os.open(name, flags, 0o600, dir_fd=parent)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathError(
                "path_escapes", f"{shown!r} is a symlink; symlinks are never followed"
            ) from None
        if exc.errno == errno.ENXIO:
            raise PathError("not_a_regular_file", f"{shown!r} is not a regular file") from None
        raise _translate(exc, shown) from None


@contextlib.contextmanager
def _errors(shown: str) -> Iterator[None]:
    """Turn any OSError below into a PathError naming the request path."""
    try:
        yield
    except OSError as exc:
        raise _translate(exc, shown) from None


_ERRNO_CODES = {
    errno.ENOENT: "not_found",
    errno.EACCES: "permission_denied",
    errno.EPERM: "permission_denied",
    errno.EROFS: "permission_denied",
    errno.EISDIR: "is_a_directory",
    errno.ENOTDIR: "not_a_directory",
    errno.ENOTEMPTY: "is_a_directory",
    errno.ENAMETOOLONG: "bad_path",
    errno.ENOSPC: "no_space",
    errno.EDQUOT: "no_space",
    errno.EFBIG: "too_large",
}


def _translate(exc: OSError, shown: str) -> PathError:
    code = _ERRNO_CODES.get(exc.errno or 0, "io_error")
    return PathError(code, f"{shown!r}: {os.strerror(exc.errno or 0)}")


def _kind(parent: int, name: str) -> str | None:
    """lstat `name` in `parent`: 'file' | 'dir' | 'symlink' | 'other', or None if absent."""
    try:
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None
    return _type_of(mode)


def _type_of(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def _entry(item: os.DirEntry[str]) -> Entry:
    info = item.stat(follow_symlinks=False)
    return Entry(item.name, _type_of(info.st_mode), info.st_size)


def _read_bounded(fd: int, max_bytes: int, shown: str, expected: int) -> bytes:
    """Read to EOF, refusing more than `max_bytes`. Reads ask for the size fstat gave plus one
    byte, not for `max_bytes`: os.read allocates what it is asked for, and two 4 MiB buffers
    per 100-byte file were a tenth of an fs.read. A file that grew is read on in
    READ_CHUNK_BYTES steps."""
    chunks, total = [], 0
    want = min(expected, max_bytes) + 1
    while chunk := os.read(fd, want):
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise PathError(
                "too_large", f"{shown!r} grew past the {max_bytes}-byte limit while being read"
            )
        # the rest fstat promised and one byte (the EOF check), or a step of a file that grew
        step = READ_CHUNK_BYTES if total > expected else expected - total + 1
        want = min(step, max_bytes + 1 - total)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
