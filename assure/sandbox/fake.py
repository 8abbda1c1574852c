"""An in-memory `SandboxBackend` for unit tests: whole attempts run with no Docker engine.

Each container is a thread. What it runs is decided by its request's role:
- `gateway`: the real gateway (assure.gateway, stdlib) in this process, on the unix socket
  the attempt expects; its config is the attempt's, with every container path mapped to the
  host folder mounted there.
- `check`: the command as a local subprocess in the check copy (test fixtures only: this
  runs on the host, so never an agent's code).
- anything else (the agent): a `Program` registered under the command's first word, given a
  `Context` (workspace, socket, environment, its own root folder) and returning an exit code.

Nothing is isolated: a fake container is no sandbox. `observe` reports the hardening the
request asked for, as an engine that honoured it would; read-only mounts are not enforced.
Errors, idempotent removal, stop of an exited container and labels behave as the protocol
says, and the conformance suite (assure/sandbox/conformance.py) holds the fake to it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import socket
import stat
import struct
import subprocess
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from assure.errors import ImageError, SandboxError
from assure.sandbox.backend import (
    ENGINE_FIX,
    LABEL_OWNER,
    LABEL_RUN,
    OWNER,
    ChangeKind,
    ContainerRequest,
    FsChange,
    Observed,
    Owned,
    Role,
)

KILLED = 137  # what a container killed at the end of its stop grace exits with (128 + SIGKILL)
GATE_EXIT = (
    125  # as the Docker backend's gate script: the socket never appeared, the command never ran
)
GATE_POLL_SECONDS = 0.01
TERMINATED = 143  # 128 + SIGTERM: what a program stopped without handling SIGTERM reports


@dataclass
class Context:
    """What a fake container's program sees: host folders for its mounts, its own root."""

    command: list[str]
    env: dict[str, str]
    working_dir: str
    mounts: dict[str, Path]  # container path -> host path
    root: Path  # the container's own filesystem: writes land here (its writable layer)
    stopping: threading.Event  # set by `stop`: a program returns soon after (TERMINATED, say)
    output: Callable[[int, bytes], None]  # (stream 1|2, bytes): to the logs and an attached reader
    stdin: socket.socket | None = None  # the attached stdin, when the request keeps it open

    def path(self, container_path: str) -> Path:
        """Where a container path is on the host: under the deepest mount, else in `root`."""
        for target in sorted(self.mounts, key=len, reverse=True):
            if container_path == target or container_path.startswith(target.rstrip("/") + "/"):
                return self.mounts[target] / os.path.relpath(container_path, target)
        return self.root / container_path.lstrip("/")

    def print(self, text: str) -> None:
        self.output(1, text.encode())


Program = Callable[[Context], int]


@dataclass
class _Container:
    id: str
    request: ContainerRequest
    context: Context
    program: Program | None
    thread: threading.Thread | None = None
    exit_code: int | None = None
    logs: bytearray = field(default_factory=bytearray)
    attached: socket.socket | None = None  # the backend's end of an attached stream
    lock: threading.Lock = field(default_factory=threading.Lock)  # exit_code, logs, attached
    sending: threading.Lock = field(
        default_factory=threading.Lock
    )  # one frame at a time, never under `lock`

    @property
    def running(self) -> bool:
        return self.thread is not None and self.exit_code is None


class FakeBackend:
    """A `SandboxBackend` without an engine. `programs` maps a command's first word to what the
    container runs; `images` are the tags that exist (creating from another is an ImageError);
    volumes and containers' own folders live in a fresh folder under `tmp`."""

    def __init__(
        self,
        programs: dict[str, Program] | None = None,
        images: set[str] | None = None,
        *,
        tmp: str = "/tmp",
    ):
        self.programs: dict[str, Program] = dict(programs or {})
        self.images: set[str] = set(images or ())
        self.created: list[ContainerRequest] = []  # every request, in order, for tests to read
        self._containers: dict[str, _Container] = {}
        self._volumes: dict[str, tuple[Path, dict[str, str]]] = {}
        self._networks: dict[str, tuple[str, dict[str, str], set[str]]] = {}
        self._ids = itertools.count(1)
        self._scratch = Path(
            tempfile.mkdtemp(prefix="fk", dir=tmp)
        )  # keep it short: a unix socket's path is ~100 bytes at most

    def close(self) -> None:
        """Remove every container and volume left, and the fake's own folder."""
        for cid in list(self._containers):
            self.remove_container(cid)
        shutil.rmtree(self._scratch, ignore_errors=True)

    # --- engine -------------------------------------------------------------------------------
    def security_options(self) -> list[str]:
        return ["name=seccomp,profile=builtin"]

    # --- volumes and networks -------------------------------------------------------------------
    def create_volume(self, name: str, labels: dict[str, str], driver_opts: dict[str, str]) -> str:
        if name not in self._volumes:
            folder = self._scratch / f"v{next(self._ids)}"
            folder.mkdir()
            self._volumes[name] = (folder, dict(labels))
        return name

    def remove_volume(self, name: str) -> None:
        if (volume := self._volumes.pop(name, None)) is not None:
            shutil.rmtree(volume[0], ignore_errors=True)

    def create_network(self, name: str, labels: dict[str, str], *, internal: bool) -> str:
        nid = f"net{next(self._ids)}"
        self._networks[nid] = (name, dict(labels), set())
        return nid

    def connect(self, network: str, cid: str) -> None:
        nid = next((n for n, (name, _, _) in self._networks.items() if network in (n, name)), None)
        if nid is None:
            raise SandboxError(f"connect to network {network}: no such network", fix=ENGINE_FIX)
        self._networks[nid][2].add(self._get(cid).id)

    def remove_network(self, nid: str) -> None:
        self._networks.pop(nid, None)

    # --- lifecycle ------------------------------------------------------------------------------
    def create_container(self, request: ContainerRequest) -> str:
        name = request.name
        if request.image not in self.images:
            raise ImageError(
                f"create container {name}: image not found",
                fix="run `assure images build` (or `make images`)",
            )
        if name and any(c.request.name == name for c in self._containers.values()):
            raise SandboxError(
                f"create container {name}: the name is already in use", fix=ENGINE_FIX
            )
        cid = f"fake{next(self._ids):06d}"
        root = self._scratch / cid
        root.mkdir()
        mounts = {m.target: self._source(m.source) for m in request.mounts}
        container = _Container(
            cid,
            request,
            Context(
                list(request.command or ()),
                dict(request.env),
                request.working_dir or "/",
                mounts,
                root,
                threading.Event(),
                lambda *_: None,
            ),
            self._program(request),
        )
        container.context.output = lambda stream, data: self._output(container, stream, data)
        self._containers[cid] = container
        self.created.append(request)
        return cid

    def start(self, cid: str) -> None:
        container = self._get(cid)
        if container.thread is not None:
            return
        if container.program is None:
            first = (container.context.command or ["(none)"])[0]
            raise SandboxError(
                f"start container: the fake has no program {first!r}",
                fix="register it in FakeBackend(programs=...)",
            )
        container.thread = threading.Thread(
            target=self._run, args=(container,), name=f"fake-{cid}", daemon=True
        )
        container.thread.start()

    def start_container(self, request: ContainerRequest) -> str:
        cid = self.create_container(request)
        try:
            self.start(cid)
        except BaseException:
            self.remove_container(cid)
            raise
        return cid

    def wait(self, cid: str, timeout: float) -> int | None:
        container = self._get(cid)
        if container.thread is None:
            threading.Event().wait(max(timeout, 0.0))  # a created container never exits on its own
            return None
        container.thread.join(max(timeout, 0.01))
        return container.exit_code

    @contextlib.contextmanager
    def attached(self, cid: str, *, stdin: bool) -> Iterator[socket.socket]:
        container = self._get(cid)
        ours, theirs = socket.socketpair()
        container.attached = theirs
        if stdin:
            container.context.stdin = theirs
        try:
            yield ours
        finally:
            ours.close()

    def stop(self, cid: str, grace: float) -> None:
        container = self._get(cid)
        if not container.running:
            return
        container.context.stopping.set()
        assert container.thread is not None
        container.thread.join(max(grace, 0.01))
        with container.lock:
            if (
                container.exit_code is None
            ):  # the program ignored the stop: killed (its thread is left to end)
                container.exit_code = KILLED
                self._close_attached(container)

    def remove_container(self, cid: str) -> None:
        container = self._containers.get(cid)
        if container is None:
            return
        self.stop(cid, 0)
        del self._containers[cid]
        shutil.rmtree(container.context.root, ignore_errors=True)

    # --- inspect and collect ---------------------------------------------------------------------
    def observe(self, cid: str) -> Observed:
        c = self._get(cid)
        r = c.request
        return Observed(
            status="running" if c.running else ("exited" if c.thread is not None else "created"),
            exit_code=c.exit_code or 0,
            image=r.image,
            labels=r.all_labels,
            user=r.user or "",
            network=r.network or "default",
            read_only_root=r.read_only_root,
            mounts=tuple(replace(m, source=str(self._source(m.source))) for m in r.mounts),
            tmpfs=dict(r.tmpfs),
            ulimits=r.ulimits,
            cap_add=r.cap_add,
            cap_drop=r.cap_drop,
            security_opt=r.security_opt,
            apparmor="",
            privileged=False,
            pid_namespace="",
            ipc=r.ipc or "private",
            pids_limit=r.pids_limit,
            memory=r.memory or 0,
            memory_swap=r.memory_swap or 0,
            nano_cpus=r.nano_cpus or 0,
            runtime=r.runtime or "runc",
        )

    def logs(self, cid: str, limit: int) -> bytes:
        return bytes(self._get(cid).logs[-limit:]) if limit > 0 else b""

    def fs_changes(self, cid: str) -> list[FsChange]:
        root = self._get(cid).context.root
        return [
            FsChange("/" + os.path.relpath(os.path.join(top, name), root), ChangeKind.ADDED)
            for top, dirs, files in os.walk(root)
            for name in sorted(dirs + files)
        ]

    def writable_layer(self, cid: str) -> Path | None:
        return self._get(cid).context.root

    def read_file(self, cid: str, path: str, limit: int) -> tuple[str, bytes | None, str | None]:
        target = self._get(cid).context.root / path.lstrip("/")
        try:
            st = target.lstat()
        except OSError as exc:
            raise SandboxError(
                f"copy {path} out of container: {exc.strerror}", fix=ENGINE_FIX
            ) from exc
        if stat.S_ISLNK(st.st_mode):
            return "symlink", None, os.readlink(target)
        if stat.S_ISDIR(st.st_mode):
            return "dir", None, None
        if not stat.S_ISREG(st.st_mode):
            return "other", None, None
        return "file", (target.read_bytes() if st.st_size <= limit else None), None

    # --- cleanup ----------------------------------------------------------------------------------
    def owned(self, run_id: str | None = None) -> Owned:
        def ours(labels: dict[str, str]) -> bool:
            return labels.get(LABEL_OWNER) == OWNER and (
                run_id is None or labels.get(LABEL_RUN) == run_id
            )

        return {
            "containers": [
                {"id": c.id, "name": c.request.name or c.id, **c.request.all_labels}
                for c in self._containers.values()
                if ours(c.request.all_labels)
            ],
            "volumes": [
                {"id": name, "name": name, **labels}
                for name, (_, labels) in self._volumes.items()
                if ours(labels)
            ],
            "networks": [
                {"id": nid, "name": name, **labels}
                for nid, (name, labels, _) in self._networks.items()
                if ours(labels)
            ],
        }

    # --- inside ----------------------------------------------------------------------------------
    def _get(self, cid: str) -> _Container:
        container = self._containers.get(cid)
        if container is None:
            raise SandboxError(f"no such container: {cid}", fix=ENGINE_FIX)
        return container

    def _source(self, source: str) -> Path:
        """A mount's host folder: a bind's path, or a named volume's folder (made on first use, as
        the engine does)."""
        if os.path.isabs(source):
            return Path(source)
        return self._volumes[self.create_volume(source, {}, {})][0]

    def _program(self, request: ContainerRequest) -> Program | None:
        if request.role == Role.GATEWAY:
            return _gateway
        if request.role == Role.CHECK:
            return _subprocess
        return self.programs.get((request.command or ("",))[0])

    def _run(self, container: _Container) -> None:
        assert container.program is not None
        try:
            code = _gated(container) if container.request.gate else None
            if code is None:
                code = container.program(container.context)
        except BaseException:
            container.context.output(2, traceback.format_exc().encode())
            code = 1
        with container.lock:
            if container.exit_code is None:
                container.exit_code = int(code)
                self._close_attached(container)

    def _output(self, container: _Container, stream: int, data: bytes) -> None:
        with container.lock:
            if container.exit_code is not None:
                return
            container.logs += data
            attached = container.attached
        if (
            attached is not None
        ):  # a reader that stopped reading blocks this program only, never `stop`
            with container.sending, contextlib.suppress(OSError):
                attached.sendall(struct.pack(">BxxxI", stream, len(data)) + data)

    @staticmethod
    def _close_attached(container: _Container) -> None:
        """The program ended: EOF on its attached stream, as when the engine's process exits."""
        if container.attached is not None:
            with contextlib.suppress(OSError):
                container.attached.shutdown(socket.SHUT_WR)


def _gated(container: _Container) -> int | None:
    """`ContainerRequest.gate`, as the engine's entry script runs it: None once the socket
    exists (the program may run), GATE_EXIT if it did not appear in time or the container was
    stopped.
    """
    request, ctx = container.request, container.context
    assert request.gate is not None
    deadline = time.monotonic() + max(1, int(request.gate_seconds))
    path = ctx.path(request.gate)
    while not _is_socket(path):
        if time.monotonic() > deadline or ctx.stopping.wait(GATE_POLL_SECONDS):
            why = f"assure: no gateway socket at {request.gate}: the agent was not started\n"
            ctx.output(2, why.encode())
            return GATE_EXIT
    return None


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


def _gateway(ctx: Context) -> int:
    """`python3 -m assure.gateway --config PATH` in this process: the attempt's config with its
    container paths mapped to the host, served until `stop`; exit codes as the module's."""
    from assure.gateway.config import ConfigError, load
    from assure.gateway.server import serve

    config_path = ctx.path(ctx.command[ctx.command.index("--config") + 1])
    mapped = ctx.root / "gateway.json"
    mapped.write_text(
        json.dumps(_mapped(json.loads(config_path.read_text(encoding="utf-8")), ctx)),
        encoding="utf-8",
    )
    try:
        config = load(str(mapped))
    except ConfigError as exc:
        ctx.output(2, f"assure.gateway: {exc}\n".encode())
        return 2
    try:
        gateway = serve(config)
    except Exception as exc:
        ctx.output(2, f"assure.gateway: cannot start: {exc}\n".encode())
        return 1
    ctx.stopping.wait()
    gateway.shutdown(reason="signal SIGTERM")
    return 0


def _mapped(value: Any, ctx: Context) -> Any:
    """Every absolute path in a config, as the host sees it (a `host:port` or a word stays)."""
    if isinstance(value, dict):
        return {k: _mapped(v, ctx) for k, v in value.items()}
    if isinstance(value, list):
        return [_mapped(v, ctx) for v in value]
    if isinstance(value, str) and value.startswith("/"):
        return str(ctx.path(value))
    return value


def _subprocess(ctx: Context) -> int:
    """A check's command on the host, in the folder mounted at its working directory."""
    proc = subprocess.Popen(
        ctx.command,
        cwd=ctx.path(ctx.working_dir),
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **ctx.env},
        stdin=subprocess.PIPE if ctx.stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    pumps = [
        threading.Thread(target=_pump, args=(pipe, n, ctx), daemon=True)
        for n, pipe in ((1, proc.stdout), (2, proc.stderr))
    ]
    if ctx.stdin is not None:
        pumps.append(threading.Thread(target=_feed, args=(ctx.stdin, proc.stdin), daemon=True))
    for pump in pumps:
        pump.start()
    while proc.poll() is None:
        if ctx.stopping.wait(0.02):
            proc.kill()
            proc.wait()
            return KILLED
    for pump in pumps[:2]:
        pump.join()
    return proc.returncode


def _pump(pipe: Any, stream: int, ctx: Context) -> None:
    while chunk := pipe.read1(65536):
        ctx.output(stream, chunk)


def _feed(source: socket.socket, sink: Any) -> None:
    with contextlib.suppress(OSError, ValueError):
        while chunk := source.recv(65536):
            sink.write(chunk)
            sink.flush()
    with contextlib.suppress(OSError, ValueError):
        sink.close()
