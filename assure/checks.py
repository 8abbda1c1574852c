"""Command assertions: the acceptance tests run in their own fresh container, never the agent's.

The command sees a throwaway copy of the POST workspace in which every protected path is
put back as the fixture has it, so tests the agent edited are never the tests that judge
it. The container has no network, a read-only root and its own limits. Results go to
`commands.json` with the digest of the POST snapshot they ran on; the verifier accepts a
result only for that exact snapshot.
"""

from __future__ import annotations

import base64
import contextlib
import shutil
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import globs
from .chain import canonical, sha256_hex
from .sandbox import hardening
from .errors import SandboxError
from .sandbox.docker import DOCKER_FIX, DockerBackend
from .spec import AGENT_IMAGE_ALIAS, Case, Spec

OUTPUT_TAIL_BYTES = 8192
READ_CHUNK = 65536
FRAME_HEADER, STDOUT = 8, 1


def command_assertions(spec_data: dict[str, Any]) -> list[dict[str, Any]]:
    return [a["command"] for a in spec_data["assertions"] if "command" in a]




def snapshot_digest(post_json: dict[str, Any]) -> str:
    return sha256_hex(canonical(post_json))


def restore_protected(copy: Path, fixture: Path, protected: tuple[str, ...]) -> None:
    """Make every protected path in `copy` exactly what the fixture has (added ones removed)."""
    for root in (copy, fixture):
        for path in sorted(root.rglob("*"), reverse=True):
            rel = path.relative_to(root).as_posix()
            if not globs.match_any(protected, rel):
                continue
            target, source = copy / rel, fixture / rel
            if root is copy and not (source.exists() or source.is_symlink()):
                _remove(target)
            elif root is fixture and not path.is_dir():
                _remove(target)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target, follow_symlinks=False)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


@contextlib.contextmanager
def _throwaway_copy(spec: Spec, workspace: Path) -> Iterator[Path]:
    """A copy of the POST workspace with every protected path as the fixture has it, owned
    by the sandbox user, removed afterwards: what one check container sees."""
    with tempfile.TemporaryDirectory(prefix="assure-check-") as tmp:
        copy = Path(tmp) / "workspace"
        shutil.copytree(workspace, copy, symlinks=True)
        restore_protected(copy, spec.workspace.fixture, spec.workspace.protected)
        uid, gid = hardening.sandbox_user(spec)
        hardening.chown_tree(copy, uid, gid)
        yield copy


def run_commands(spec: Spec, workspace: Path, post_json: dict[str, Any], backend: DockerBackend, agent_image: str, labels: dict[str, str], name: str) -> list[dict[str, Any]]:
    results = []
    for n, cmd in enumerate(command_assertions(spec.to_json())):
        image = agent_image if cmd["image"] == AGENT_IMAGE_ALIAS else cmd["image"]
        with _throwaway_copy(spec, workspace) as copy:
            run = run_in_check(spec, copy, backend, image=image, command=cmd["run"], env=cmd.get("env", {}), timeout=cmd["timeout_seconds"],
                               labels=labels, name=f"{name}-check{n}")
        results.append({"exit_code": run.exit_code, "timed_out": run.timed_out, "seconds": run.seconds, "output_tail": run.tail(),
                        "index": n, "run": cmd["run"], "post_digest": snapshot_digest(post_json), "runtime": run.runtime})
    return results


def run_cases(spec: Spec, workspace: Path, post_json: dict[str, Any], backend: DockerBackend, agent_image: str, labels: dict[str, str], name: str) -> list[dict[str, Any]]:
    """Each case of each `cases` assertion: the program on the case's arguments and stdin, in
    its own fresh check container and copy. Only what the program printed is recorded; the
    expected output stays on the host and sets only how much stdout is worth reading."""
    out = []
    for n, cases in enumerate(spec.cases()):
        image = agent_image if cases.image == AGENT_IMAGE_ALIAS else cases.image
        results = []
        for i, case in enumerate(cases.each):
            with _throwaway_copy(spec, workspace) as copy:
                run = run_in_check(spec, copy, backend, image=image, command=[*cases.run, *case.args], env=cases.env, timeout=cases.timeout_seconds,
                                   labels=labels, name=f"{name}-case{n}-{i}",
                                   stdin=None if case.stdin is None else case.stdin.encode(), stdout_cap=stdout_cap(case))
            results.append({"case": i, "exit_code": run.exit_code, "timed_out": run.timed_out, "seconds": run.seconds,
                            "stdout_b64": base64.b64encode(bytes(run.stdout)).decode(), "stdout_over": run.stdout_over,
                            "output_tail": run.tail(), "runtime": run.runtime})
        out.append({"index": n, "run": list(cases.run), "post_digest": snapshot_digest(post_json), "results": results})
    return out


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


def run_in_check(spec: Spec, copy: Path, backend: DockerBackend, *, image: str, command: list[str], env: dict[str, str], timeout: float,
                 labels: dict[str, str], name: str, stdin: bytes | None = None, stdout_cap: int | None = None) -> CheckRun:
    """Run `command` in a fresh hardened container on `copy`: the one way a check runs the
    agent's code. Output is read from the attached stream as it is written (bounded: stdout
    up to `stdout_cap`, a tail of both), never from a log the engine may rotate."""
    kwargs = {
        **hardening.common_kwargs(spec, {**labels, "assure.role": "check"}, spec.limits.memory, spec.limits.pids),
        "image": image, "name": name, "command": command, "working_dir": hardening.WORKSPACE,
        "environment": {**env, "HOME": "/tmp"}, "read_only": True,
        "volumes": {str(copy): {"bind": hardening.WORKSPACE, "mode": "rw"}},
        "stdin_open": stdin is not None,
    }
    cid = backend.create_container(kwargs)
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
        run.runtime = (backend.inspect(cid).get("HostConfig") or {}).get("Runtime")  # as the engine ran it
        return run
    finally:
        backend.remove_container(cid)


def _feed(sock: socket.socket, data: bytes) -> None:
    """Write stdin, then close it; a program that never reads it is ended by the deadline."""
    with contextlib.suppress(OSError):
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)


def _read_frames(sock: socket.socket, deadline: float, stdout_cap: int | None, run: CheckRun) -> None:
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
            raise SandboxError(f"reading a check container's output: {exc}", fix=DOCKER_FIX) from exc
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
