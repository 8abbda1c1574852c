"""Command assertions: the acceptance tests run in their own fresh container, never the agent's.

Under runc, as root, the checks of one phase share one container per image (`SharedChecks`):
each check is an exec as the attempt's user in a container whose own process runs as another
user, on a fresh check copy and a fresh /tmp that the host mounts for it alone, and before the
next one every process of that user is killed; one that leaves SysV IPC objects or a message
queue behind, or whose processes do not all end, costs the next check a new container. Under
another runtime (gVisor does not see mounts made after it starts) or a backend without
`CheckExec`, each check has a container of its own.

The command sees a throwaway copy of the POST workspace (made by `confined.copy_tree`: links
recreated, never followed; FIFOs, sockets and devices left out; sparse files kept sparse) in
which every protected path is put back as the fixture has it, so tests the agent edited are never
the tests that judge
it. The container has no network, a read-only root and its own limits. Results go to
`commands.json` with the digest of the POST snapshot they ran on; the verifier accepts a
result only for that exact snapshot.
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import stat
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from assure.core import confined, globs
from assure.core.chain import canonical, sha256_hex
from assure.errors import SandboxError
from assure.sandbox import hardening, runtimes, workspace_fs
from assure.sandbox.backend import ENGINE_FIX, CheckExec, SandboxBackend
from assure.spec import AGENT_IMAGE_ALIAS, Case, Spec
from assure.textsafe import display

OUTPUT_TAIL_BYTES = 8192
COPY_MAX_BYTES = confined.COPY_MAX_BYTES  # a check copy holding more data is not run
READ_CHUNK = 65536
FRAME_HEADER, STDOUT = 8, 1


def snapshot_digest(post_json: dict[str, Any]) -> str:
    return sha256_hex(canonical(post_json))


def restore_protected(copy: Path, fixture: Path, protected: tuple[str, ...]) -> None:
    """Make every protected path in `copy` exactly what the fixture has (added ones removed).
    `copy` is the host's own tree, so whatever stands in the way (a symlink where the fixture
    has a directory, say) is removed, never followed."""

    def is_protected(rel: str) -> bool:
        return globs.match_any(protected, rel)

    added = [
        rel
        for rel, _ in confined.walk(copy)
        if is_protected(rel) and confined.lstat(fixture, rel) is None
    ]
    for rel in reversed(added):
        confined.remove(copy, rel)
    for rel, st in confined.walk(fixture):
        if not is_protected(rel):
            continue
        if stat.S_ISDIR(st.st_mode):
            confined.make_dirs(copy, rel, clear_way=True)
        elif stat.S_ISREG(st.st_mode):
            confined.copy_file(fixture, rel, copy, rel, max_bytes=COPY_MAX_BYTES, clear_way=True)
        elif stat.S_ISLNK(st.st_mode):
            confined.symlink(copy, rel, os.readlink(fixture / rel), clear_way=True)


def check_workspace(
    workspace: Path, fixture: Path, protected: tuple[str, ...], copy: Path
) -> confined.CopyReport:
    """The tree a command runs on: a confined copy of the POST workspace without its protected
    paths, which are then put back from the fixture. Special files are left out (reported);
    anything else left out (a file over the copy's byte bound, a full filesystem) is in the
    report's `left_out`, and the caller must not run on the copy."""
    report = confined.copy_tree(
        workspace,
        copy,
        max_bytes=COPY_MAX_BYTES,
        include=lambda rel: not globs.match_any(protected, rel),
    )
    if not report.left_out:
        try:
            restore_protected(copy, fixture, protected)
        except (
            OSError
        ) as exc:  # the check copy's filesystem is full (the agent's hard links, copied apart)
            report.skip("(protected paths)", f"not restored: {exc.strerror or exc}")
    return report


@contextlib.contextmanager
def _throwaway_copy(
    spec: Spec, workspace: Path, scratch: Path | None, user: tuple[int, int]
) -> Iterator[tuple[Path, confined.CopyReport]]:
    """What one check container sees: `check_workspace`, owned by the check's `user`, on a
    filesystem of its own in `scratch` (the attempt directory, where `assure gc` finds what a
    kill -9 left), released afterwards. The check runs the agent's code, so its copy is
    bounded like the workspace: twice limits.disk and limits.inodes (the POST tree and the
    fixture's protected files always fit), and nothing it leaves is walked to be removed.
    A copy whose report has `left_out` entries must not be run on."""
    with contextlib.ExitStack() as stack:
        where = (
            Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="assure-check-")))
            if scratch is None
            else scratch
        )
        fs = workspace_fs.WorkspaceFs.create(
            where,
            size=2 * spec.limits.disk_bytes,
            inodes=2 * spec.limits.inodes,
            name=workspace_fs.CHECK,
        )
        stack.callback(fs.release)
        report = check_workspace(
            workspace, spec.workspace.fixture, spec.workspace.protected, fs.workspace
        )
        if not report.left_out:
            hardening.chown_tree(fs.workspace, *user)
        yield fs.workspace, report


def _refusal(report: confined.CopyReport, left_behind: Sequence[str]) -> str | None:
    """Why a check must not run on this copy: it would judge a tree that POST does not describe."""
    if left_behind:  # the copy-out of the attempt's filesystem refused these: workspace/ lacks them
        return (
            "the run directory's workspace/ lacks entries of POST (a limit of the copy-out: more"
            " data than limits.disk once hard links are copied apart, or too many entries): "
            + ", ".join(display(r) for r in left_behind[:5])
        )
    if report.refused:
        return (
            f"{len(report.refused)} files hold more than the check copy's {COPY_MAX_BYTES} data"
            " bytes allow: " + ", ".join(display(r) for r in report.refused[:5])
        )
    if report.left_out:
        return (
            "the check copy left entries out (its filesystem is full: hard links are copied"
            " apart): " + "; ".join(f"{display(rel)}: {why}" for rel, why in report.skipped[:5])
        )
    return None


def _not_run(why: str) -> dict[str, Any]:
    return {
        "exit_code": None,
        "timed_out": False,
        "seconds": 0.0,
        "output_tail": "",
        "not_run": why,
    }


def _copy_record(report: confined.CopyReport) -> dict[str, Any]:
    return {
        "skipped": [[display(p), why] for p, why in report.skipped[:20]],
        "skipped_count": report.skipped_count,
        "data_bytes": report.data_bytes,
    }


def run_commands(
    spec: Spec,
    workspace: Path,
    post_json: dict[str, Any],
    backend: SandboxBackend,
    agent_image: str,
    labels: dict[str, str],
    name: str,
    scratch: Path | None = None,
    left_behind: Sequence[str] = (),
    *,
    user: tuple[int, int],
    shared: SharedChecks | None = None,
) -> list[dict[str, Any]]:
    """Each command assertion on a fresh copy, as `user` (the attempt's), in a fresh check
    container or an exec of `shared`. `left_behind`: POST's files the copy-out refused (none
    of the checks runs then)."""
    results = []
    for n, cmd in enumerate(spec.commands()):
        image = agent_image if cmd.image == AGENT_IMAGE_ALIAS else cmd.image
        with _throwaway_copy(spec, workspace, scratch, user) as (copy, report):
            if why := _refusal(report, left_behind):
                result = _not_run(why)
            else:
                run = _runner(shared, spec, image)(
                    spec,
                    copy,
                    backend,
                    image=image,
                    command=list(cmd.run),
                    env=cmd.env,
                    timeout=cmd.timeout_seconds,
                    labels=labels,
                    name=f"{name}-check{n}",
                    user=user,
                )
                result = {
                    "exit_code": run.exit_code,
                    "timed_out": run.timed_out,
                    "seconds": run.seconds,
                    "output_tail": run.tail(),
                    "runtime": run.runtime,
                }
        results.append(
            {
                **result,
                "copy": _copy_record(report),
                "index": n,
                "run": list(cmd.run),
                "post_digest": snapshot_digest(post_json),
            }
        )
    return results


def run_cases(
    spec: Spec,
    workspace: Path,
    post_json: dict[str, Any],
    backend: SandboxBackend,
    agent_image: str,
    labels: dict[str, str],
    name: str,
    scratch: Path | None = None,
    left_behind: Sequence[str] = (),
    *,
    user: tuple[int, int],
    shared: SharedChecks | None = None,
) -> list[dict[str, Any]]:
    """Each case of each `cases` assertion: the program on the case's arguments and stdin, on
    its own fresh copy, in its own check container or exec of `shared`. Only what the
    program printed is recorded; the expected output stays on the host and sets only how
    much stdout is worth reading."""
    out = []
    for n, cases in enumerate(spec.cases()):
        image = agent_image if cases.image == AGENT_IMAGE_ALIAS else cases.image
        results = []
        for i, case in enumerate(cases.each):
            with _throwaway_copy(spec, workspace, scratch, user) as (copy, report):
                if why := _refusal(report, left_behind):
                    results.append({"case": i, **_not_run(why)})
                    continue
                run = _runner(shared, spec, image)(
                    spec,
                    copy,
                    backend,
                    image=image,
                    command=[*cases.run, *case.args],
                    env=cases.env,
                    timeout=cases.timeout_seconds,
                    labels=labels,
                    name=f"{name}-case{n}-{i}",
                    user=user,
                    stdin=None if case.stdin is None else case.stdin.encode(),
                    stdout_cap=stdout_cap(case),
                )
            results.append(
                {
                    "case": i,
                    "exit_code": run.exit_code,
                    "timed_out": run.timed_out,
                    "seconds": run.seconds,
                    "stdout_b64": base64.b64encode(bytes(run.stdout)).decode(),
                    "stdout_over": run.stdout_over,
                    "output_tail": run.tail(),
                    "runtime": run.runtime,
                }
            )
        out.append(
            {
                "index": n,
                "run": list(cases.run),
                "post_digest": snapshot_digest(post_json),
                "results": results,
            }
        )
    return out


# How each check-container assertion kind (verify/assertions.py, `Where.CHECK`) is run.
RUNNERS: Mapping[str, Callable[..., list[dict[str, Any]]]] = {
    "command": run_commands,
    "cases": run_cases,
}


def stdout_cap(case: Case) -> int:
    """Bytes of stdout worth reading: one more than expected proves a mismatch."""
    return len(case.stdout.encode()) + 1


@dataclass
class CheckRun:
    """What one check container did: its exit code (None: killed at the deadline or for
    printing past the cap), its stdout up to the cap, and the tail of stdout and stderr."""

    exit_code: int | None = None
    timed_out: bool = False
    seconds: float = 0.0
    stdout: bytearray = field(default_factory=bytearray)
    stdout_over: bool = False
    combined: bytearray = field(default_factory=bytearray)
    runtime: str | None = None

    def tail(self) -> str:
        return self.combined.decode("utf-8", errors="replace")


def run_in_check(
    spec: Spec,
    copy: Path,
    backend: SandboxBackend,
    *,
    image: str,
    command: list[str],
    env: dict[str, str],
    timeout: float,
    labels: dict[str, str],
    name: str,
    user: tuple[int, int],
    stdin: bytes | None = None,
    stdout_cap: int | None = None,
) -> CheckRun:
    """Run `command` in a fresh hardened container on `copy`: the one way a check runs the
    agent's code. Output is read from the attached stream as it is written (bounded: stdout
    up to `stdout_cap`, a tail of both), never from a log the engine may rotate."""
    cid = backend.create_container(
        hardening.check_request(
            spec,
            image=image,
            name=name,
            command=command,
            env=env,
            copy=copy,
            labels=labels,
            stdin=stdin is not None,
            user=user,
        )
    )
    try:
        run = CheckRun()
        with backend.attached(cid, stdin=stdin is not None) as sock:
            backend.start(cid)
            started = time.monotonic()
            if stdin is not None:
                threading.Thread(target=_feed, args=(sock, stdin), daemon=True).start()
            _read_frames(sock, started + timeout, stdout_cap, run)
        if not (run.timed_out or run.stdout_over):
            run.exit_code = backend.wait(cid, max(started + timeout - time.monotonic(), 0.01))
            run.timed_out = run.exit_code is None
        if run.exit_code is None:
            backend.stop(cid, hardening.STOP_GRACE_SECONDS)
        run.seconds = round(time.monotonic() - started, 3)
        run.runtime = backend.observe(cid).runtime  # as the engine ran it
        return run
    finally:
        backend.remove_container(cid)


def _runner(shared: SharedChecks | None, spec: Spec, image: str) -> Callable[..., CheckRun]:
    return shared.run if shared is not None and shared.usable(spec) else run_in_check


KILL_SECONDS = 10  # the checks' processes not all gone by then: their container is removed
IDLE_SECONDS = 0.05  # no output this long: ask the engine whether the check's process ended
DRAIN_SECONDS = 1.0  # its process ended and the rest killed: what is in flight arrives by then
# Run by the host as root in a shared check container's pid and IPC namespaces, with the
# host's own shell, after each check (`SharedChecks._clear`): SIGKILL to every process there
# but pid 1 (the holder, `hardening.CHECK_HOLDER`), until none is left (a zombie counts
# until the holder reaps it); then the SysV IPC tables, which outlive the processes. Nothing
# the kill missed can remain: kill(-1) reaches them all at once, and a fork with SIGKILL
# pending fails. No check's process can signal, stop or trace it: it is root's.
CLEAR = (
    "while kill -9 -1 2> /dev/null; do :; done;"
    " exec cat /proc/sysvipc/shm /proc/sysvipc/msg /proc/sysvipc/sem"
)
VIEWS = f"{workspace_fs.CHECK_VIEWS}.fs"  # in the attempt directory (`assure gc` knows it)


class _NotStarted(Exception):
    """The engine refused the exec: the check's program never ran (its copy is untouched)."""


class _CheckCall(TypedDict):
    """What a check runs and how, the same as an exec or in a container of its own."""

    command: list[str]
    env: dict[str, str]
    timeout: float
    stdin: bytes | None
    stdout_cap: int | None


class SharedChecks:
    """The check containers of one check phase: one per image, started at its first check
    (or by `warm`). Each check (`run`, called as `run_in_check` is) is an exec as the
    attempt's user, on its copy bind-mounted at <views>/workspace and a fresh tmpfs at
    <views>/tmp, which the container sees at /workspace and /tmp
    (`hardening.shared_check_request`). After it, every process but the holder is killed
    (`CLEAR`) before both are unmounted. A check that leaves something that outlives its
    processes (a SysV IPC object, a POSIX message queue), or whose processes do not all
    end, costs its container: the next check starts another. A container that cannot be
    had (an image without /bin/bash for the holder) or an exec the engine refuses: that
    check runs in a container of its own (`run_in_check`)."""

    def __init__(
        self,
        backend: SandboxBackend,
        scratch: Path,
        labels: dict[str, str],
        name: str,
        user: tuple[int, int],
    ):
        self.backend, self.labels, self.name, self.user = backend, labels, name, user
        self.views = scratch / VIEWS
        self._containers: dict[str, tuple[str, int, str | None]] = {}  # image -> (cid, pid, rt)
        self._lock = threading.Lock()  # `_container`: `warm`'s thread and the checks
        self._warming: threading.Thread | None = None
        self._made = 0
        self._mounted = False

    @staticmethod
    def possible(backend: SandboxBackend, user: tuple[int, int]) -> bool:
        return (
            isinstance(backend, CheckExec)
            and os.geteuid() == 0
            and user[0] not in (0, hardening.CHECK_HOLDER_UID)
        )

    def usable(self, spec: Spec) -> bool:
        """gVisor's gofer does not see what the host mounts after the sandbox starts."""
        return (spec.sandbox.runtime or runtimes.RUNC) == runtimes.RUNC

    def _mount_views(self) -> None:
        if self._mounted:
            return
        self.views.mkdir(mode=0o755)
        for sub in hardening.CHECK_VIEWS:
            (self.views / sub).mkdir(mode=0o755)
        self._mounted = True
        workspace_fs.mount_call(str(self.views), self.views, None, workspace_fs.MS_BIND)
        workspace_fs.mount_call("none", self.views, None, workspace_fs.MS_SHARED)

    def warm(self, spec: Spec, image: str) -> None:
        """Start `image`'s container while the first check's copy is made (its failure is the
        first check's to meet: that one starts it again)."""
        if self.usable(spec):
            self._warming = threading.Thread(target=self._warm, args=(spec, image), daemon=True)
            self._warming.start()

    def _warm(self, spec: Spec, image: str) -> None:
        with contextlib.suppress(SandboxError):
            self._container(spec, image)

    def _container(self, spec: Spec, image: str) -> tuple[str, int, str | None] | None:
        """(id, its holder's host pid, runtime) of `image`'s running container; None when
        its holder does not run."""
        with self._lock:
            if image not in self._containers:
                self._mount_views()
                request = hardening.shared_check_request(
                    spec,
                    image=image,
                    name=f"{self.name}-checks{self._made}",
                    views=self.views,
                    labels=self.labels,
                )
                self._made += 1
                cid = self.backend.start_container(request)
                self._containers[image] = (cid, 0, None)
                seen = self.backend.observe(cid)
                pid = (seen.host_pid or 0) if seen.running else 0
                self._containers[image] = (cid, pid, seen.runtime)
            got = self._containers[image]
            if got[1] <= 0:
                return None
            return got

    def _discard(self, image: str) -> None:
        cid = self._containers.pop(image, (None,))[0]
        if cid is not None:
            self.backend.remove_container(cid)

    def run(
        self,
        spec: Spec,
        copy: Path,
        backend: SandboxBackend,
        *,
        image: str,
        command: list[str],
        env: dict[str, str],
        timeout: float,
        labels: dict[str, str],
        name: str,
        user: tuple[int, int],
        stdin: bytes | None = None,
        stdout_cap: int | None = None,
    ) -> CheckRun:
        """`run_in_check`, as an exec of this phase's container for `image`."""
        assert user == self.user
        own: _CheckCall = {
            "command": command,
            "env": env,
            "timeout": timeout,
            "stdin": stdin,
            "stdout_cap": stdout_cap,
        }
        got = self._container(spec, image)
        if got is None:
            self._discard(image)
            return run_in_check(
                spec, copy, backend, image=image, labels=labels, name=name, user=user, **own
            )
        cid, pid, runtime = got
        ws, tmp = (self.views / sub for sub in hardening.CHECK_VIEWS)
        run = CheckRun(runtime=runtime)
        clean = refused = False
        fs = workspace_fs
        fs.mount_call(str(copy), ws, None, fs.MS_BIND)
        try:
            fs.mount_call(
                "tmpfs",
                tmp,
                "tmpfs",
                fs.MS_NOSUID | fs.MS_NODEV | fs.MS_NOEXEC,  # hardening.tmpfs_options
                f"size={spec.limits.tmpfs_bytes},mode=1777",
            )
            try:
                cleared = self._exec(cid, pid, run, **own)
                clean = cleared if cleared is not None else _clear(pid)
            except _NotStarted:
                clean = _clear(pid)
                refused = True
            finally:
                if not clean:
                    self._discard(image)
                fs.unmount_call(tmp)
        finally:
            fs.unmount_call(ws)
        if refused:  # the engine refused the exec: the check runs in a container of its own
            return run_in_check(
                spec, copy, backend, image=image, labels=labels, name=name, user=user, **own
            )
        return run

    def _exec(
        self,
        cid: str,
        pid: int,
        run: CheckRun,
        *,
        command: list[str],
        env: dict[str, str],
        timeout: float,
        stdin: bytes | None,
        stdout_cap: int | None,
    ) -> bool | None:
        """The check as an exec; once its process exited, `_clear` (its answer is returned;
        None: not cleared, the deadline or the stdout cap came first)."""
        assert isinstance(self.backend, CheckExec)
        backend = self.backend
        cleared: list[bool] = []
        uid, gid = self.user
        try:
            execution = backend.exec_attached(
                cid,
                command,
                user=f"{uid}:{gid}",
                workdir=hardening.WORKSPACE,
                env={**env, "HOME": "/tmp"},
            )
            sock, exec_id = execution.__enter__()
        except SandboxError as exc:
            raise _NotStarted() from exc
        try:
            started = time.monotonic()
            threading.Thread(target=_feed, args=(sock, stdin or b""), daemon=True).start()
            deadline = started + timeout

            def ended() -> bool:  # its process exited (what it started may hold the stream)
                running, code = backend.exec_state(exec_id)
                if not running and not cleared:
                    run.exit_code = code
                    cleared.append(_clear(pid))  # the rest is killed: the stream ends
                return not running

            _read_frames(sock, deadline, stdout_cap, run, ended)
            while not (run.timed_out or run.stdout_over) and not ended():
                if time.monotonic() >= deadline:
                    run.timed_out = True
                    break
                time.sleep(0.01)
            if run.timed_out or run.stdout_over:
                run.exit_code = None
            run.seconds = round(time.monotonic() - started, 3)
        finally:
            execution.__exit__(None, None, None)
        return cleared[0] if cleared else None

    def close(self) -> None:
        if self._warming is not None:
            self._warming.join()
        for image in list(self._containers):
            self._discard(image)
        if self._mounted:
            if workspace_fs.mounted_under(self.views):
                workspace_fs.unmount(self.views)
            for sub in hardening.CHECK_VIEWS:
                (self.views / sub).rmdir()
            self.views.rmdir()
            self._mounted = False


def _clear(pid: int) -> bool:
    """`CLEAR` in the namespaces of the container whose holder is `pid` on the host: whether
    no process but the holder is left, within KILL_SECONDS, and no SysV IPC object nor POSIX
    message queue. An answer it cannot get counts as no."""
    try:
        done = subprocess.run(
            ["nsenter", f"--target={pid}", "--pid", "--ipc", "--", "/bin/sh", "-c", CLEAR],
            capture_output=True,
            text=True,
            timeout=KILL_SECONDS,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
        )
        return (
            done.returncode == 0
            and len(done.stdout.splitlines()) == 3  # each table's header, and no object
            and not os.listdir(f"/proc/{pid}/root/dev/mqueue")
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


@contextlib.contextmanager
def shared_checks(
    backend: SandboxBackend,
    scratch: Path,
    labels: dict[str, str],
    name: str,
    user: tuple[int, int],
    warm: tuple[Spec, str] | None = None,
) -> Iterator[SharedChecks | None]:
    """The phase's `SharedChecks`, closed afterwards; None where the checks cannot share.
    `warm`: (spec, image) whose container to start at once (`SharedChecks.warm`)."""
    if not SharedChecks.possible(backend, user):
        yield None
        return
    shared = SharedChecks(backend, scratch, labels, name, user)
    try:
        if warm is not None:
            shared.warm(*warm)
        yield shared
    finally:
        shared.close()


def _feed(sock: socket.socket, data: bytes) -> None:
    """Write stdin, then close it; a program that never reads it is ended by the deadline."""
    with contextlib.suppress(OSError):
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)


def _read_frames(
    sock: socket.socket,
    deadline: float,
    stdout_cap: int | None,
    run: CheckRun,
    ended: Callable[[], bool] | None = None,
) -> None:
    """Demultiplex the engine's frames until EOF, the deadline, or stdout past its cap. An
    exec's stream stays open while anything it started holds it: after IDLE_SECONDS without
    output `ended()` is asked whether its process exited (and, if so, has ended the rest),
    and what is still in flight is then read to EOF, for at most DRAIN_SECONDS. Memory
    stays bounded whatever frame sizes the stream announces."""
    header, stream, left = b"", 0, 0
    drained = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            run.timed_out = not drained
            return
        try:
            sock.settimeout(remaining if ended is None else min(remaining, IDLE_SECONDS))
            data = sock.recv(READ_CHUNK)
        except TimeoutError:
            if ended is not None and ended():
                ended, drained = None, True
                deadline = min(deadline, time.monotonic() + DRAIN_SECONDS)
                continue
            if ended is None and not drained or time.monotonic() >= deadline:
                run.timed_out = not drained
                return
            continue
        except OSError as exc:  # the engine's stream broke: no result, never a partial one
            raise SandboxError(
                f"reading a check container's output: {exc}", fix=ENGINE_FIX
            ) from exc
        if not data:
            return
        while data:
            if left == 0:
                need = FRAME_HEADER - len(header)
                header, data = header + data[:need], data[need:]
                if len(header) == FRAME_HEADER:
                    stream, left, header = header[0], struct.unpack(">I", header[4:])[0], b""
                continue
            payload, data = data[:left], data[left:]
            left -= len(payload)
            run.combined += payload
            del run.combined[:-OUTPUT_TAIL_BYTES]
            if stream == STDOUT and stdout_cap is not None:
                run.stdout += payload[: stdout_cap - len(run.stdout)]
                if len(run.stdout) >= stdout_cap:
                    run.stdout_over = True
                    return
