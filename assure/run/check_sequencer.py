"""The process of a shared check container (run/checks.py `SharedChecks`), run as its pid 1 by
the image's `python3 -I -S` (no environment, no user site, no working folder on the path:
stdlib only, from the read-only root). Never imported by assure: its source is the command.

It runs as root in the container with CAP_SETUID and CAP_SETGID only, so that it can start
each check as the attempt's user (argv: uid gid) without an exec through the engine. A check's
processes run as that user with no capability and no-new-privileges: they cannot signal,
trace, renice or re-limit a process of another user, nor read its memory, files or fds.

Protocol, one check at a time: the host writes a request on stdin only when the check before
it is over (so this process never holds a later check): a line of three decimal sizes, then
that many bytes of argv (each NUL-terminated), of env (`NAME=value`, each NUL-terminated) and
of the check's stdin (few imports, so the container is ready sooner);
it answers with records on stdout, each a kind byte and a 4-byte big-endian length:
`R` ready, `1`/`2` the check's stdout/stderr, `X` its first process's exit code (128+signal
when killed), `D` the end of both of its streams (every process holding them is gone: the
host kills them after `X`). It reaps every process (pid 1 adopts the orphans).
"""

import errno
import os
import select
import signal
import struct
import sys


def environ() -> dict[bytes, bytes]:
    """The environment the engine gave this process (the image's and the container's), as
    /proc reads it: not os.environ, where Python's C-locale coercion may have set LC_CTYPE."""
    with open("/proc/self/environ", "rb") as fh:
        return dict(item.split(b"=", 1) for item in fh.read().split(b"\0") if b"=" in item)


ENVIRON = environ()


def send(kind: bytes, data: bytes = b"") -> None:
    view = memoryview(kind + struct.pack(">I", len(data)) + data)
    while view:
        view = view[os.write(1, view) :]


def reap(child: int | None) -> int | None:
    """Reap every exited process; the exit code of `child` if it is one of them."""
    code = None
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return code
        if pid == 0:
            return code
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code


def start(argv: list[bytes], env: dict[bytes, bytes], uid: int, gid: int) -> tuple[int, ...]:
    """Fork the check: its stdio pipes, its user's identity, /workspace, then its program."""
    pipes = [os.pipe() for _ in range(3)]  # stdin, stdout, stderr
    pid = os.fork()
    if pid == 0:
        try:
            for fd, (r, w) in enumerate(pipes):
                os.dup2(r if fd == 0 else w, fd)
            os.closerange(3, 65536)
            for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            os.chdir("/workspace")
            os.execvpe(argv[0], argv, env)
        except OSError as exc:
            os.write(2, b"cannot run " + argv[0] + b": " + os.fsencode(exc.strerror or "") + b"\n")
            os._exit(127 if exc.errno == errno.ENOENT else 126)
        except BaseException:
            os._exit(126)
    for fd, (r, w) in enumerate(pipes):
        os.close(w if fd else r)
    return pid, pipes[0][1], pipes[1][0], pipes[2][0]


def check(request: bytes, sizes: list[int], uid: int, gid: int, wake: int) -> None:
    argv = request[: sizes[0]].split(b"\0")[:-1]
    pairs = (p.split(b"=", 1) for p in request[sizes[0] : sizes[0] + sizes[1]].split(b"\0")[:-1])
    data = request[sizes[0] + sizes[1] :]
    pid, fd, out, err = start(argv, {**ENVIRON, **dict(pairs)}, uid, gid)
    child: int | None = pid
    stdin: int | None = fd
    streams = {out: b"1", err: b"2"}
    os.set_blocking(fd, False)
    while child is not None or streams:
        writing = [stdin] if stdin is not None else []
        ready, can_write, _ = select.select([*streams, wake], writing, [])
        if stdin in can_write:
            try:
                data = data[os.write(stdin, data[:65536]) :]
            except OSError:
                data = b""
            if not data:
                os.close(stdin)
                stdin = None
        for fd in ready:
            if fd == wake:
                os.read(wake, 4096)
                code = reap(child)
                if code is not None:
                    send(b"X", str(code).encode())
                    child = None
                continue
            chunk = os.read(fd, 65536)
            if chunk:
                send(streams[fd], chunk)
            else:
                os.close(fd)
                del streams[fd]
    if stdin is not None:
        os.close(stdin)
    send(b"D")


def main() -> None:
    uid, gid = int(sys.argv[1]), int(sys.argv[2])
    wake, woken = os.pipe()
    os.set_blocking(woken, False)
    signal.set_wakeup_fd(woken)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    send(b"R")
    buffer = b""
    while True:
        ready, _, _ = select.select([0, wake], [], [])
        if wake in ready:
            os.read(wake, 4096)
            reap(None)
        if 0 in ready:
            chunk = os.read(0, 65536)
            if not chunk:
                return
            buffer += chunk
            while b"\n" in buffer:
                line, rest = buffer.split(b"\n", 1)
                sizes = [int(n) for n in line.split()]
                if len(rest) < sum(sizes):
                    break
                buffer = rest[sum(sizes) :]
                check(rest[: sum(sizes)], sizes, uid, gid, wake)


main()
