"""Waiting for a file to appear in a folder without polling it: the gateway's ready file.

A 5 ms stat loop costs the host ~25 ms of CPU per attempt while a gateway boots on a loaded
machine (each wake-up takes the GIL from the other specs' threads); inotify wakes the waiter
only when an entry is created or renamed into the folder, with no lag. Where inotify is not
available (not Linux, no instances left, a filesystem that does not report changes made
through a container's mount), `Appearance.wait` sleeps `FALLBACK_SECONDS` instead, and a
watched wait is never longer than `WATCHED_SECONDS`: the caller still decides by looking at the
file itself, so a missed event only costs latency.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import time
from pathlib import Path

FALLBACK_SECONDS = 0.005  # the poll where inotify cannot watch the folder
# the longest a watched wait sleeps: a filesystem that takes the watch but never reports an
# entry made through a container's mount costs at most this much lag, never a hang
WATCHED_SECONDS = 0.05
IN_CREATE, IN_MOVED_TO = 0x100, 0x80  # <sys/inotify.h>; an atomic write is renamed into place


class Appearance:
    """A watch on `folder` for new entries, made before the caller first looks for its file
    (so the file's arrival between that look and `wait` is not missed)."""

    def __init__(self, folder: Path):
        self._fd: int | None = None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)  # IN_NONBLOCK, IN_CLOEXEC
        except (OSError, AttributeError):
            return
        if fd < 0:
            return
        if libc.inotify_add_watch(fd, os.fsencode(folder), IN_CREATE | IN_MOVED_TO) < 0:
            os.close(fd)
            return
        self._fd = fd

    def wait(self, seconds: float) -> bool:
        """Return True when an entry was created in the folder (events drained), False after
        `seconds` (at most `WATCHED_SECONDS`, or `FALLBACK_SECONDS` unwatched) without one."""
        if self._fd is None:
            time.sleep(max(min(seconds, FALLBACK_SECONDS), 0.0))
            return False
        if not select.select([self._fd], [], [], min(max(seconds, 0.0), WATCHED_SECONDS))[0]:
            return False
        with contextlib.suppress(BlockingIOError):
            while os.read(self._fd, 4096):
                pass
        return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Appearance:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
