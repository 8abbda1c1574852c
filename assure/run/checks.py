"""Command assertions: the acceptance tests run in their own fresh container, never the agent's.

Under runc, as root, the checks of one phase share one container per image (`SharedChecks`):
its pid 1, the sequencer (run/check_sequencer.py, as root with CAP_SETUID and CAP_SETGID only),
starts each check as the attempt's user on a fresh check view and a fresh /tmp that the host
mounts for it alone, and before the next one the host kills every other process; one that
leaves SysV IPC objects or a message queue behind, or whose processes do not all end, costs
the next check a new container. Under another runtime (gVisor does not see mounts made after
it starts), with an image without python3 or a backend that runs no real program (no `Exec`),
each check has a container of its own.

The command sees a throwaway copy-on-write view of the sealed POST workspace (an overlay whose
upper layer is the check's own bounded filesystem: nothing is copied but what the check writes)
in which every protected path is put back as the fixture has it, so tests the agent edited are
never the tests that judge it. The container has no network, a read-only root and its own
limits. Results go to `commands.json` with the digest of the POST snapshot they ran on; the
verifier accepts a result only for that exact snapshot.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import itertools
import os
import socket
import stat
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from assure.core import confined, globs
from assure.core.chain import canonical, sha256_hex
from assure.errors import SandboxError
from assure.run import failpoints
from assure.sandbox import hardening, runtimes, workspace_fs
from assure.sandbox.backend import ENGINE_FIX, Exec, SandboxBackend
from assure.spec import AGENT_IMAGE_ALIAS, Case, Spec
from assure.textsafe import display

OUTPUT_TAIL_BYTES = 8192
COPY_MAX_BYTES = confined.COPY_MAX_BYTES  # a protected fixture file larger is not put back
READ_CHUNK = 65536
FRAME_HEADER, STDOUT = 8, 1


def snapshot_digest(post_json: dict[str, Any]) -> str:
    return sha256_hex(canonical(post_json))


def restore_protected(
    copy: Path, fixture: Path, protected: tuple[str, ...], present: Iterable[str]
) -> list[str]:
    """Make every protected path in `copy` exactly what the fixture has: each protected entry
    of `present` (the paths `copy` holds) removed, then the fixture's put back. `copy` is the
    host's own (a check's view), so whatever stands in the way (a symlink where the fixture
    has a directory, say) is removed, never followed. Returns the paths it made."""

    def is_protected(rel: str) -> bool:
        return globs.match_any(protected, rel)

    removed: set[str] = set()
    for rel in sorted(present):  # parents first: a removed folder takes what it holds
        if is_protected(rel) and removed.isdisjoint(confined.parents(rel)):
            confined.remove(copy, rel)
            removed.add(rel)
    made = []
    for rel, st in confined.walk(fixture):
        if not is_protected(rel):
            continue
        if stat.S_ISDIR(st.st_mode):
            confined.make_dirs(copy, rel, clear_way=True)
        elif stat.S_ISREG(st.st_mode):
            confined.copy_file(fixture, rel, copy, rel, max_bytes=COPY_MAX_BYTES, clear_way=True)
        elif stat.S_ISLNK(st.st_mode):
            confined.symlink(copy, rel, os.readlink(fixture / rel), clear_way=True)
        else:
            continue
        made.append(rel)
    return made


def check_view(
    view: Path,
    post_json: dict[str, Any],
    fixture: Path,
    protected: tuple[str, ...],
    user: tuple[int, int],
) -> confined.CopyReport:
    """The tree a command runs on, made in `view` (a copy-on-write view of the POST
    workspace, `WorkspaceFs.overlay`): every protected path POST lists removed, the fixture's
    put back and given to `user` (with the folders made on their way). A POST cut short by
    the verifier's limits may not list every protected path: then, as when the fixture's
    cannot be put back, the report's `left_out` says so, and the caller must not run on it."""
    report = confined.CopyReport()
    if post_json.get("truncated"):
        report.skip("(workspace)", "POST is incomplete: its protected paths are not all known")
        return report
    present = {e["path"] for e in post_json["entries"]}
    try:
        made = restore_protected(view, fixture, protected, present)
        owned = set(made).union(*(set(confined.parents(rel)) - present for rel in made))
        for rel in sorted(owned):
            confined.chown(view, rel, *user)
    except OSError as exc:  # the view's filesystem is full, or a fixture file over the bound
        report.skip("(protected paths)", f"not restored: {exc.strerror or exc}")
    return report


@contextlib.contextmanager
def _throwaway_copy(
    spec: Spec,
    workspace: Path,
    post_json: dict[str, Any],
    scratch: Path | None,
    user: tuple[int, int],
) -> Iterator[tuple[Path, confined.CopyReport]]:
    """`_make_copy` in `scratch` (or a temporary folder), released afterwards."""
    with contextlib.ExitStack() as stack:
        where = (
            Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="assure-check-")))
            if scratch is None
            else scratch
        )
        fs, report = _make_copy(spec, workspace, post_json, where, user, workspace_fs.CHECK)
        stack.callback(fs.release)
        yield fs.workspace, report


def _make_copy(
    spec: Spec,
    workspace: Path,
    post_json: dict[str, Any],
    where: Path,
    user: tuple[int, int],
    name: str,
) -> tuple[workspace_fs.WorkspaceFs, confined.CopyReport]:
    """What one check sees: `check_view` of the sealed `workspace` (nothing of it is copied:
    the kernel copies up what the check writes), on a filesystem `name` of its own in `where`
    (the attempt directory, where `assure gc` finds what a kill -9 left), for the caller to
    release. The check runs the agent's code, so what it writes is bounded like the
    workspace: twice limits.disk and limits.inodes (a check that rewrites every file, with
    the fixture's protected ones), and nothing it leaves is walked to be removed. A view
    whose report has `left_out` entries must not be run on."""
    fs = workspace_fs.WorkspaceFs.create(
        where, size=2 * spec.limits.disk_bytes, inodes=2 * spec.limits.inodes, name=name
    )
    try:
        fs.overlay(workspace, user)
        report = check_view(
            fs.workspace, post_json, spec.workspace.fixture, spec.workspace.protected, user
        )
    except BaseException:
        fs.release()
        raise
    return fs, report


class _CopiesAhead:
    """A shared phase's check views (`_make_copy`), each made on one worker thread while the
    check before it runs, and released there after it: the next view is ready when a check
    ends. The worker runs in order, and the two names alternate, so a name is made again only
    once released, and at most two views exist. Every check views the same POST."""

    def __init__(self, scratch: Path, user: tuple[int, int], views: int | None = None):
        self.scratch, self.user = scratch, user
        self._left = views  # views the phase will still take, when known: none is made past it
        self._worker = concurrent.futures.ThreadPoolExecutor(1, "assure-check-copy")
        self._ahead: tuple[tuple[Spec, Path], Future[Any]] | None = None
        self._releases: list[Future[None]] = []
        self._names = itertools.cycle((workspace_fs.CHECK, workspace_fs.CHECK_AHEAD))

    def _make(self, spec: Spec, workspace: Path, post_json: dict[str, Any]) -> Future[Any]:
        return self._worker.submit(
            _make_copy, spec, workspace, post_json, self.scratch, self.user, next(self._names)
        )

    @contextlib.contextmanager
    def take(
        self, spec: Spec, workspace: Path, post_json: dict[str, Any]
    ) -> Iterator[tuple[Path, confined.CopyReport]]:
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] != (spec, workspace):  # never so in one phase
            self._releases.append(self._worker.submit(ahead[1].result()[0].release))
            ahead = None
        fs, report = (ahead[1] if ahead else self._make(spec, workspace, post_json)).result()
        if self._left is not None:
            self._left -= 1
        if self._left is None or self._left > 0:
            self._ahead = ((spec, workspace), self._make(spec, workspace, post_json))
        try:
            yield fs.workspace, report
        finally:
            self._releases.append(self._worker.submit(fs.release))

    def close(self) -> None:
        """Release the copy made ahead (no check came for it), and raise what a release did."""
        if self._ahead is not None:
            with contextlib.suppress(Exception):
                self._releases.append(self._worker.submit(self._ahead[1].result()[0].release))
            self._ahead = None
        self._worker.shutdown(wait=True)
        for done in self._releases:
            done.result()


def _refusal(report: confined.CopyReport) -> str | None:
    """Why a check must not run on this view: it would judge a tree that POST does not
    describe, or one whose protected paths are not the fixture's."""
    if report.left_out:
        return "the check's view is not POST with the fixture's protected paths: " + "; ".join(
            f"{display(rel)}: {why}" for rel, why in report.skipped[:5]
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
    *,
    user: tuple[int, int],
    shared: SharedChecks | None = None,
) -> list[dict[str, Any]]:
    """Each command assertion on a fresh view of the sealed `workspace`, as `user` (the
    attempt's), in a fresh check container or an exec of `shared`."""
    results = []
    for n, cmd in enumerate(spec.commands()):
        image = agent_image if cmd.image == AGENT_IMAGE_ALIAS else cmd.image
        with _copy(shared, spec, workspace, post_json, scratch, user) as (copy, report):
            failpoints.hit("checks")
            if why := _refusal(report):
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
            with _copy(shared, spec, workspace, post_json, scratch, user) as (copy, report):
                if why := _refusal(report):
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


def _copy(
    shared: SharedChecks | None,
    spec: Spec,
    workspace: Path,
    post_json: dict[str, Any],
    scratch: Path | None,
    user: tuple[int, int],
) -> contextlib.AbstractContextManager[tuple[Path, confined.CopyReport]]:
    if shared is not None and scratch is not None:
        return shared.copies.take(spec, workspace, post_json)
    return _throwaway_copy(spec, workspace, post_json, scratch, user)


def _runner(shared: SharedChecks | None, spec: Spec, image: str) -> Callable[..., CheckRun]:
    return shared.run if shared is not None and shared.usable(spec) else run_in_check


KILL_SECONDS = 10  # the checks' processes not all gone by then: their container is removed
DRAIN_SECONDS = 1.0  # its processes killed: the end of its streams arrives by then
READY_SECONDS = 30  # the sequencer not ready by then (no python3 in the image): no sharing
# Run by the host as root in a shared check container's pid and IPC namespaces, with the
# host's own shell, after each check (`SharedChecks._clear`): SIGKILL to every process there
# but pid 1 (the sequencer), until none is left (a zombie counts until the sequencer reaps
# it); then the SysV IPC tables, which outlive the processes. Nothing the kill missed can
# remain: kill(-1) reaches them all at once, and a fork with SIGKILL pending fails. No
# check's process can signal, stop or trace it: it is root's.
CLEAR = (
    "while kill -9 -1 2> /dev/null; do :; done;"
    " exec cat /proc/sysvipc/shm /proc/sysvipc/msg /proc/sysvipc/sem"
)
VIEWS = f"{workspace_fs.CHECK_VIEWS}.fs"  # in the attempt directory (`assure gc` knows it)
SEQUENCER = (Path(__file__).parent / "check_sequencer.py").read_text()
RECORD_HEADER = 5  # the sequencer's records: a kind byte, a 4-byte big-endian length
RECORD_MAX = 65536 + RECORD_HEADER  # the most it writes at once


class _CheckCall(TypedDict):
    """What a check runs and how, the same in a shared container or in one of its own."""

    command: list[str]
    env: dict[str, str]
    timeout: float
    stdin: bytes | None
    stdout_cap: int | None


class _Sequencer:
    """The attached stream of a shared check container's sequencer (run/check_sequencer.py):
    requests written, its records read out of the engine's frames, memory bounded."""

    def __init__(self, sock: socket.socket, pid: int, runtime: str | None):
        self.sock, self.pid, self.runtime = sock, pid, runtime
        self._frames = bytearray()  # the engine's stream, not yet demultiplexed
        self._records = bytearray()  # the sequencer's stdout, not yet split into records

    def send(self, argv: list[str], env: dict[str, str], stdin: bytes) -> None:
        """One check's request (run/check_sequencer.py's protocol)."""
        items = [[os.fsencode(a) for a in argv], [os.fsencode(f"{k}={v}") for k, v in env.items()]]
        if any(b"\0" in item for part in items for item in part):  # execve cannot take it
            raise SandboxError("a check's command or environment holds a NUL byte")
        parts = [*(b"".join(item + b"\0" for item in part) for part in items), stdin]
        try:
            self.sock.sendall(
                " ".join(str(len(p)) for p in parts).encode() + b"\n" + b"".join(parts)
            )
        except OSError as exc:
            raise SandboxError(f"writing to a check sequencer: {exc}", fix=ENGINE_FIX) from exc

    def record(self, deadline: float) -> tuple[bytes, bytes] | None:
        """The next record, or None at the deadline; SandboxError once the stream ends or
        holds what the sequencer does not write."""
        while True:
            if len(self._records) >= RECORD_HEADER:
                size = struct.unpack(">I", self._records[1:RECORD_HEADER])[0]
                if size > RECORD_MAX - RECORD_HEADER:
                    raise SandboxError("a check sequencer wrote a record too long", fix=ENGINE_FIX)
                if len(self._records) >= RECORD_HEADER + size:
                    kind = bytes(self._records[:1])
                    data = bytes(self._records[RECORD_HEADER : RECORD_HEADER + size])
                    del self._records[: RECORD_HEADER + size]
                    return kind, data
            if len(self._frames) >= FRAME_HEADER:
                size = struct.unpack(">I", self._frames[4:FRAME_HEADER])[0]
                take = min(size, len(self._frames) - FRAME_HEADER, RECORD_MAX)
                if take or not size:
                    if self._frames[0] == STDOUT:
                        self._records += self._frames[FRAME_HEADER : FRAME_HEADER + take]
                    del self._frames[FRAME_HEADER : FRAME_HEADER + take]
                    left = size - take
                    if left:
                        self._frames[4:FRAME_HEADER] = struct.pack(">I", left)
                    else:
                        del self._frames[:FRAME_HEADER]
                    continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                self.sock.settimeout(remaining)
                data = self.sock.recv(READ_CHUNK)
            except TimeoutError:
                return None
            except OSError as exc:
                raise SandboxError(f"reading a check sequencer: {exc}", fix=ENGINE_FIX) from exc
            if not data:
                raise SandboxError("a check sequencer ended", fix=ENGINE_FIX)
            self._frames += data


class SharedChecks:
    """The check containers of one check phase: one per image, started at its first check
    (or by `warm`). Each check (`run`, called as `run_in_check` is) is started by the
    container's sequencer as the attempt's user, on its copy bind-mounted at
    <views>/workspace and a fresh tmpfs at <views>/tmp, which the container sees at
    /workspace and /tmp (`hardening.shared_check_request`). Once its first process exits,
    every process but the sequencer is killed (`CLEAR`) before both are unmounted. A check
    that leaves something that outlives its processes (a SysV IPC object, a POSIX message
    queue), or whose processes do not all end, costs its container: the next check starts
    another; so does a sequencer that ends (the check has no exit code). An image whose
    sequencer cannot run (no python3): its checks run in containers of their own
    (`run_in_check`). The copies are made ahead (`_CopiesAhead`)."""

    def __init__(
        self,
        backend: SandboxBackend,
        scratch: Path,
        labels: dict[str, str],
        name: str,
        user: tuple[int, int],
        views: int | None = None,
    ):
        self.backend, self.labels, self.name, self.user = backend, labels, name, user
        self.views = scratch / VIEWS
        self._containers: dict[str, tuple[str, _Sequencer | None]] = {}  # image -> (cid, seq)
        self._lock = threading.Lock()  # `_container`: `warm`'s thread and the checks
        self._warming: threading.Thread | None = None
        self._alone: set[str] = set()  # images whose sequencer could not run
        self._made = 0
        self._mounted = False
        self._attached = contextlib.ExitStack()
        self.copies = _CopiesAhead(scratch, user, views)

    @staticmethod
    def possible(backend: SandboxBackend, user: tuple[int, int]) -> bool:
        """The sequencer is a real program (`Exec`: a backend that runs them), started as root
        to become the attempt's user, which must not be root."""
        return isinstance(backend, Exec) and os.geteuid() == 0 and user[0] != 0

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
        """Start `image`'s container on a thread of its own (the attempt does so when its agent
        stops: run/attempt.py `_checks_ahead`); its failure is the first check's to meet: that
        one starts it again."""
        if self.usable(spec):
            self._warming = threading.Thread(target=self._warm, args=(spec, image), daemon=True)
            self._warming.start()

    def _warm(self, spec: Spec, image: str) -> None:
        with contextlib.suppress(SandboxError):
            self._container(spec, image)

    def _container(self, spec: Spec, image: str) -> _Sequencer | None:
        """`image`'s running container's sequencer, once ready; None when it cannot run (the
        image's checks then run in containers of their own: `_alone`)."""
        with self._lock:
            if image in self._alone:
                return None
            if image not in self._containers:
                self._mount_views()
                request = hardening.shared_check_request(
                    spec,
                    image=image,
                    name=f"{self.name}-checks{self._made}",
                    views=self.views,
                    labels=self.labels,
                    user=self.user,
                    sequencer=SEQUENCER,
                )
                self._made += 1
                try:
                    cid = self.backend.create_container(request)
                    self._containers[image] = (cid, None)
                    sock = self._attached.enter_context(self.backend.attached(cid, stdin=True))
                    self.backend.start(cid)
                    seen = self.backend.observe(cid)
                    if seen.running and seen.host_pid:
                        seq = _Sequencer(sock, seen.host_pid, seen.runtime)
                        if seq.record(time.monotonic() + READY_SECONDS) == (b"R", b""):
                            self._containers[image] = (cid, seq)
                except SandboxError:
                    pass
                if self._containers.get(image, (None, None))[1] is None:
                    self._alone.add(image)
                    self._discard(image)
                    return None
            return self._containers[image][1]

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
        """`run_in_check`, started by this phase's sequencer for `image`."""
        assert user == self.user
        own: _CheckCall = {
            "command": command,
            "env": env,
            "timeout": timeout,
            "stdin": stdin,
            "stdout_cap": stdout_cap,
        }
        seq = self._container(spec, image)
        if seq is None:
            return run_in_check(
                spec, copy, backend, image=image, labels=labels, name=name, user=user, **own
            )
        ws, tmp = (self.views / sub for sub in hardening.CHECK_VIEWS)
        run = CheckRun(runtime=seq.runtime)
        clean = False
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
                clean = _sequenced(seq, run, **own)
            finally:
                if not clean:
                    self._discard(image)
                fs.unmount_call(tmp)
        finally:
            fs.unmount_call(ws)
        return run

    def close(self) -> None:
        if self._warming is not None:
            self._warming.join()
        for _, seq in self._containers.values():  # its stdin's end: the sequencer, pid 1, exits
            if seq is not None:
                with contextlib.suppress(OSError):
                    seq.sock.shutdown(socket.SHUT_WR)
        # the containers removed while the worker releases the last copies (both wait on others:
        # the engine, the kernel), then the copies' errors raised
        removing = concurrent.futures.ThreadPoolExecutor(1, "assure-check-remove")
        removed = [removing.submit(self._discard, image) for image in list(self._containers)]
        removing.shutdown(wait=False)
        try:
            self.copies.close()
        finally:
            for done in removed:
                done.result()
        self._attached.close()
        if self._mounted:
            if workspace_fs.mounted_under(self.views):
                workspace_fs.unmount_call(self.views)
            for sub in hardening.CHECK_VIEWS:
                (self.views / sub).rmdir()
            self.views.rmdir()
            self._mounted = False


def _sequenced(
    seq: _Sequencer,
    run: CheckRun,
    *,
    command: list[str],
    env: dict[str, str],
    timeout: float,
    stdin: bytes | None,
    stdout_cap: int | None,
) -> bool:
    """One check by the sequencer, into `run`: its output until its first process exits (the
    deadline or stdout past its cap end it first), then `_clear`, then what was in flight,
    up to the end of its streams. Whether its container is fit for the next check: cleared,
    and the end of the streams seen."""
    started = time.monotonic()
    deadline, cleared = started + timeout, None
    try:
        seq.send(command, {**env, "HOME": "/tmp"}, stdin or b"")
        while True:
            got = seq.record(deadline)
            if got is None:  # the deadline: the check's, or the drain's after the kill
                if cleared is not None:
                    return False
                run.timed_out = True
            elif got[0] == b"D":
                return bool(cleared)
            elif got[0] == b"X" and cleared is None:
                run.exit_code = int(got[1])
            elif got[0] in (b"1", b"2") and not (run.timed_out or run.stdout_over):
                run.combined += got[1]
                del run.combined[:-OUTPUT_TAIL_BYTES]
                if got[0] == b"1" and stdout_cap is not None:
                    run.stdout += got[1][: stdout_cap - len(run.stdout)]
                    run.stdout_over = len(run.stdout) >= stdout_cap
                if not run.stdout_over:
                    continue
            else:
                continue
            if cleared is None:  # its first process exited, or it is to be ended
                run.seconds = round(time.monotonic() - started, 3)
                if run.timed_out or run.stdout_over:
                    run.exit_code = None
                cleared = _clear(seq.pid)
                deadline = time.monotonic() + DRAIN_SECONDS
    except SandboxError as exc:  # the sequencer ended (its container killed): no exit code
        run.exit_code = None
        run.combined += f"\n[assure: {exc}]".encode()
        return False


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
    views: int | None = None,
) -> Iterator[SharedChecks | None]:
    """The phase's `SharedChecks`, closed afterwards; None where the checks cannot share.
    `warm`: (spec, image) whose container to start at once (`SharedChecks.warm`); `views`: how
    many checks the phase runs (`views_of`), so that no view is made ahead past the last."""
    if not SharedChecks.possible(backend, user):
        yield None
        return
    shared = SharedChecks(backend, scratch, labels, name, user, views)
    try:
        if warm is not None:
            shared.warm(*warm)
        yield shared
    finally:
        shared.close()


def views_of(spec: Spec) -> int:
    """The check views a spec's phase takes: one per command, one per case."""
    return len(spec.commands()) + sum(len(c.each) for c in spec.cases())


def _feed(sock: socket.socket, data: bytes) -> None:
    """Write stdin, then close it; a program that never reads it is ended by the deadline."""
    with contextlib.suppress(OSError):
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)


def _read_frames(
    sock: socket.socket, deadline: float, stdout_cap: int | None, run: CheckRun
) -> None:
    """Demultiplex the engine's frames until EOF, the deadline, or stdout past its cap.
    Memory stays bounded whatever frame sizes the stream announces."""
    header, stream, left = b"", 0, 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            run.timed_out = True
            return
        try:
            sock.settimeout(remaining)
            data = sock.recv(READ_CHUNK)
        except TimeoutError:
            run.timed_out = True
            return
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
