"""Write-then-rename: a reader sees the old file or the new one, never half of either.

The one way the host and the gateway publish a file that another process reads while it may
be rewritten (state, verdicts, heartbeats, the operator's control record, blobs). The
temporary name is unique per call, so two writers of one file in one folder (two runs, two
threads) never rename each other's half-written file; the last rename wins, whole.
"""

from __future__ import annotations

import json
import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING; the gateway boots without typing (core/__init__)
if TYPE_CHECKING:
    from typing import Any


FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write_bytes(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    mode: int = 0o644,
    sync_dir: bool = False,
    sync: bool = True,
) -> None:
    """Replace `path` with `data`, fsynced; with `sync_dir` the rename itself is made durable.
    `sync=False` for a signal, not a record (a heartbeat, the gateway's ready file): still
    whole or absent to a reader, but lost in a crash, where a stale or missing one is the truth."""
    final = os.fspath(path)
    folder, name = os.path.split(final)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}-{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, FLAGS, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)  # not narrowed by the umask: readers in other containers need it
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    try:
        os.replace(tmp, final)
    except BaseException:
        os.unlink(tmp)
        raise
    if sync_dir:
        dir_fd = os.open(folder or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def write_json(
    path: str | os.PathLike[str],
    data: Any,
    *,
    indent: int | None = 2,
    mode: int = 0o644,
    sync: bool = True,
) -> None:
    """`data` as sorted, ASCII-only JSON (one line with `indent=None`), written atomically."""
    text = json.dumps(data, indent=indent, sort_keys=True, ensure_ascii=True)
    write_bytes(path, (text + "\n").encode("ascii"), mode=mode, sync=sync)
