"""Command assertions: the acceptance tests run in their own fresh container, never the agent's.

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
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assure.core import confined, globs
from assure.core.chain import canonical, sha256_hex
from assure.errors import SandboxError
from assure.sandbox import hardening, workspace_fs
from assure.sandbox.backend import ENGINE_FIX, SandboxBackend
from assure.spec import AGENT_IMAGE_ALIAS, Case, Spec, parse_size
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
            size=2 * parse_size(spec.limits.disk),
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
) -> list[dict[str, Any]]:
    """Each command assertion in a fresh check container and copy, as `user` (the attempt's).
    `left_behind`: POST's files the copy-out refused (none of the checks runs then)."""
    results = []
    for n, cmd in enumerate(spec.commands()):
        image = agent_image if cmd.image == AGENT_IMAGE_ALIAS else cmd.image
        with _throwaway_copy(spec, workspace, scratch, user) as (copy, report):
            if why := _refusal(report, left_behind):
                result = _not_run(why)
            else:
                run = run_in_check(
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
) -> list[dict[str, Any]]:
    """Each case of each `cases` assertion: the program on the case's arguments and stdin, in
    its own fresh check container and copy. Only what the program printed is recorded; the
    expected output stays on the host and sets only how much stdout is worth reading."""
    out = []
    for n, cases in enumerate(spec.cases()):
        image = agent_image if cases.image == AGENT_IMAGE_ALIAS else cases.image
        results = []
        for i, case in enumerate(cases.each):
            with _throwaway_copy(spec, workspace, scratch, user) as (copy, report):
                if why := _refusal(report, left_behind):
                    results.append({"case": i, **_not_run(why)})
                    continue
                run = run_in_check(
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


def _feed(sock: socket.socket, data: bytes) -> None:
    """Write stdin, then close it; a program that never reads it is ended by the deadline."""
    with contextlib.suppress(OSError):
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)


def _read_frames(
    sock: socket.socket, deadline: float, stdout_cap: int | None, run: CheckRun
) -> None:
    """Demultiplex the engine's frames until EOF, the deadline, or stdout past its cap. Memory
    stays bounded whatever frame sizes the stream announces."""
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
