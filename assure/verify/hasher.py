"""SHA-256 of open files, in helper processes, so that hashing a big tree uses every core.

Threads do not help here: a walk over many small files spends most of its time handing the
GIL back and forth. So the snapshot walk opens and checks each file itself and passes the
open descriptor (SCM_RIGHTS over a unix socket), with the identity lstat gave it, to a helper
process. The helper checks with fstat that the descriptor is that file (same node, mode, size
and times), hashes exactly `size` bytes with pread, and checks again (nothing wrote to it).
A helper never sees a path, so nothing in the workspace can steer what it reads. The walk
keeps its own descriptors until the answer comes: if a helper dies, stalls or answers
nonsense, the walk hashes those files itself, so a failed helper costs time, never a
finding. Stdlib only: a helper runs as `python -I -S hasher.py` with its socket as stdin.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

CHUNK_BYTES = 64 << 10  # one read into a buffer that stays in cache (and, on this VM, a
# buffer of 128 KiB or more, which malloc maps apart, copies several times slower)
MAX_BATCH = 64  # descriptors in one request (the kernel allows 253)
REPLY_TIMEOUT = 120.0  # seconds for one batch (at most 64 files or one of up to max_hash_bytes)
CHANGED = "changed while reading"
Identity = tuple[
    int, int, int, int, int, int
]  # st_dev, st_ino, st_mode, st_size, st_mtime_ns, st_ctime_ns
Result = tuple[str | None, str | None]  # (sha256 hex, None) or (None, why not)
_IDENTITY = struct.Struct("<QQQQqq")
_REPLY = struct.Struct("<Bi32s")  # status, errno, digest
_OK, _CHANGED, _FAILED = 0, 1, 2


class HasherError(Exception):
    """A helper could not be started or reached."""


def identity(st: os.stat_result) -> Identity:
    return (st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def hash_here(files: list[tuple[int, Identity]]) -> list[Result]:
    """Hash each open file in this process: what a helper would answer."""
    buffer = memoryview(bytearray(CHUNK_BYTES))  # one per call: callers may be threads
    return [_decode(*_hash(fd, expected, buffer)) for fd, expected in files]


def _hash(fd: int, expected: Identity, buffer: memoryview) -> tuple[int, int, bytes]:
    """(status, errno, digest) for exactly `expected` size bytes of `fd` (never more: a file
    that grew is caught by the fstat after). Nothing is read unless fstat first shows the
    file lstat saw. pread leaves the shared file offset alone; reading into `buffer` (one
    chunk, reused) spares an allocation per read and keeps the bytes in cache for the hash."""
    try:
        if identity(os.fstat(fd)) != expected:
            return _CHANGED, 0, b""
        digest = hashlib.sha256()
        size, offset = expected[3], 0
        while offset < size:
            left = size - offset
            got = os.preadv(fd, (buffer[:left] if left < CHUNK_BYTES else buffer,), offset)
            if not got:
                return _CHANGED, 0, b""
            digest.update(buffer[:got])
            offset += got
        if identity(os.fstat(fd)) != expected:
            return _CHANGED, 0, b""
        return _OK, 0, digest.digest()
    except OSError as error:
        return _FAILED, error.errno or 0, b""


def _decode(status: int, errno_: int, digest: bytes) -> Result:
    if status == _OK:
        return digest.hex(), None
    if status == _CHANGED:
        return None, CHANGED
    return None, f"unreadable: {os.strerror(errno_)}"


class HashPool:
    """Up to `processes` helpers, started on first use and stopped by `close`.

    `submit` sends a batch of (descriptor, identity) pairs to the next helper in turn (the
    helper works on duplicates); `oldest` gives the answers to the oldest batch still out,
    or None if its helper failed. After any failure `failed` is set and nothing more is
    sent or read: the caller hashes the rest itself.
    """

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self.pid = os.getpid()
        self.failed = False
        self.helpers: list[tuple[subprocess.Popen[bytes], socket.socket]] = []
        self.turn = 0
        self.out: deque[tuple[int, int]] = deque()  # (helper index, files) per batch sent

    @property
    def usable(self) -> bool:
        return self.processes > 0 and not self.failed and bool(sys.executable)

    def submit(self, files: list[tuple[int, Identity]]) -> None:
        try:
            if not self.helpers:
                self._start()
            index = self.turn
            self.turn = (self.turn + 1) % len(self.helpers)
            request = b"".join(_IDENTITY.pack(*expected) for _, expected in files)
            socket.send_fds(self.helpers[index][1], [request], [fd for fd, _ in files])
        except OSError as error:
            self.failed = True
            raise HasherError(f"cannot use a hash helper: {error.strerror}") from error
        self.out.append((index, len(files)))

    def oldest(self) -> list[Result] | None:
        """Answers to the oldest batch out, in the order it was sent; None if its helper
        failed or took longer than REPLY_TIMEOUT. After one failure nothing more is read:
        a late answer could pass for the next one."""
        index, count = self.out.popleft()
        if self.failed:
            return None
        try:
            reply = self.helpers[index][1].recv(count * _REPLY.size + 1)
        except OSError:  # socket.timeout included
            reply = b""
        answers = list(_REPLY.iter_unpack(reply)) if len(reply) == count * _REPLY.size else []
        if not answers or any(status not in (_OK, _CHANGED, _FAILED) for status, _, _ in answers):
            self.failed = True
            return None
        return [_decode(*answer) for answer in answers]

    def close(self) -> None:
        """Stop every helper: end of input makes it exit; one that does not is killed."""
        for _, sock in self.helpers:
            sock.close()
        for process, _ in self.helpers:
            try:
                process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.helpers.clear()
        self.out.clear()

    def _start(self) -> None:
        for _ in range(self.processes):
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            ours.settimeout(REPLY_TIMEOUT)
            try:
                process = subprocess.Popen(
                    [sys.executable, "-I", "-S", os.path.abspath(__file__)],
                    stdin=theirs.fileno(),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    close_fds=True,
                )
            except OSError:
                ours.close()
                raise
            finally:
                theirs.close()
            self.helpers.append((process, ours))


_shared: HashPool | None = None
_shared_lock = threading.Lock()


@contextmanager
def lease(processes: int) -> Iterator[HashPool]:
    """This process's pool of helpers, kept between snapshots so that a run starts them once.

    A caller that finds it in use (another thread), or asks for none, gets a pool that
    hashes nothing (the caller hashes itself). A pool left with batches out (the caller
    was interrupted) or failed is stopped, so no later caller reads a stale answer.
    """
    global _shared
    if processes == 0 or not _shared_lock.acquire(blocking=False):
        yield HashPool(0)
        return
    try:
        if (
            _shared is None or _shared.pid != os.getpid()
        ):  # a forked child: the helpers are its parent's
            _shared = HashPool(processes)
        pool = _shared
        try:
            yield pool
        finally:
            if pool.out or pool.failed:
                pool.close()
                _shared = None
    finally:
        _shared_lock.release()


@atexit.register
def _stop_shared() -> None:
    if _shared is not None and _shared.pid == os.getpid():
        _shared.close()


def serve(sock: socket.socket) -> None:
    """Answer batches until the walk closes its end (or exits: the socket closes with it).
    Ctrl-C is the walk's to handle, so a helper ignores it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    buffer = memoryview(bytearray(CHUNK_BYTES))
    while True:
        request, fds, _, _ = socket.recv_fds(sock, MAX_BATCH * _IDENTITY.size, MAX_BATCH)
        try:
            if not request or len(request) != len(fds) * _IDENTITY.size:
                return  # the walk is done, or this is not our walk: either way, stop
            reply = b"".join(
                _REPLY.pack(*_hash(fd, expected, buffer))
                for fd, expected in zip(fds, _IDENTITY.iter_unpack(request), strict=False)
            )
        finally:
            for fd in fds:
                os.close(fd)
        sock.sendall(reply)


if __name__ == "__main__":
    serve(socket.socket(fileno=sys.stdin.fileno()))
