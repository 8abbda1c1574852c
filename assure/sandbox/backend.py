"""What an attempt needs from a sandbox engine, as a protocol: Docker runs it, a fake tests it.

`SandboxBackend` is everything the attempt, the checks, the driver's reaping and `assure gc`
do with containers, volumes and networks. `ImageBuilder` is the Docker-only part (building
and tagging the images); engine facts for `assure doctor` (`info`, `version`, `runtimes`)
stay on `DockerBackend` alone.

Errors. Every method raises only `SandboxError` (the engine refused or failed; the engine's
own exception, if any, is kept as `__cause__`), and `ImageError` where a container is created
from an image that is missing. Both are `AssureError`s; nothing of the engine's client library
leaks out. Waiting past a timeout is not an error (`wait` returns None).

Cleanup guarantees.
- `remove_container`, `remove_volume`, `remove_network` are idempotent: removing what is
  absent (never created, already removed, removal in progress) returns quietly. A running
  container is killed and removed, with its anonymous volumes.
- `stop` of a container that already exited does nothing and does not raise; its exit state
  stays as it was. `stop` returns once the container has exited (killed after `grace`).
- Every container, volume and network an attempt makes carries `labels(...)`: `owned()` finds
  them by `LABEL_OWNER` (and one run's by `LABEL_RUN`), so a driver killed at any moment is
  reaped on resume and `assure gc` removes the rest.

Requests. A container is described by a `ContainerRequest` (role, image, command, env, mounts,
user, limits, runtime, network, read-only root, tmpfs, ulimits, security options, labels),
built by `sandbox.hardening`, the one place that decides the hardening. Docker translates it
into its create arguments; the fake runs it. What the engine reports back is an `Observed`
(`observe`), in the request's terms, and a container's own writes are `FsChange`s.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

LABEL_OWNER = "assure.owner"
LABEL_RUN = "assure.run"
LABEL_ATTEMPT = "assure.run.attempt"
LABEL_ROLE = "assure.role"
LABEL_PID = "assure.pid"
LABEL_HOST = "assure.host"
LABEL_UID = (  # the user whose process made it: `assure gc` takes only its own (or --all-users)
    "assure.uid"
)
OWNER = "assure"
ENGINE_FIX = (
    "start the Docker engine (e.g. `systemctl start docker`) and check `docker info` works for this"
    " user"
)


class ChangeKind(StrEnum):
    """What a container did to one path of its own filesystem (`fs_changes`)."""

    MODIFIED = "modified"
    ADDED = "added"
    DELETED = "deleted"


@dataclass(frozen=True)
class FsChange:
    path: str  # absolute, in the container
    kind: ChangeKind


class Role(StrEnum):
    """`LABEL_ROLE` of each kind of container; the fake decides by it what a container runs."""

    AGENT = "agent"
    GATEWAY = "gateway"
    EGRESS = "egress"
    CHECK = "check"


@dataclass(frozen=True)
class Mount:
    """A host folder (absolute path) or a named volume, at `target` in the container."""

    source: str
    target: str
    read_only: bool = False
    nocopy: bool = False  # a volume: the engine must not copy the image's files at `target` into it
    # "rslave": what the host mounts under `source` later appears at `target` (a shared check
    # container's per-case views, run/checks.py); `source` must be under a shared mount
    propagation: str | None = None


@dataclass(frozen=True)
class Ulimit:
    name: str
    soft: int
    hard: int


@dataclass(frozen=True)
class ContainerRequest:
    """One container, backend-neutral: what to run, what it sees, how it is confined.
    sandbox/hardening.py builds every request of an attempt; a backend translates it (Docker:
    `docker.create_kwargs`) or interprets it (the fake). None: the engine's or image's own."""

    role: str  # Role.*: also the `LABEL_ROLE` label
    image: str
    name: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    command: tuple[str, ...] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    working_dir: str | None = None
    hostname: str | None = None
    user: str | None = None
    mounts: tuple[Mount, ...] = ()
    network: str | None = None  # "none", a network's name, or None: the engine's default
    read_only_root: bool = False
    tmpfs: Mapping[str, str] = field(default_factory=dict)  # path -> mount options
    ulimits: tuple[Ulimit, ...] = ()
    cap_add: tuple[str, ...] = ()  # after cap_drop: a shared check container's sequencer only
    cap_drop: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    ipc: str | None = None
    pids_limit: int | None = None
    memory: int | None = None  # bytes
    memory_swap: int | None = None  # memory + swap, bytes (equal to memory: no swap)
    nano_cpus: int | None = None
    log_max: str | None = None  # the size past which the engine rotates the container's log
    init: bool = False
    runtime: str | None = None
    stdin_open: bool = False
    # The command runs only once a unix socket exists at `gate` (a container path), and never
    # if none does within `gate_seconds`: the container may start before the server it talks
    # to is up, with nothing of its own running until it is. Needs a command and /bin/bash.
    gate: str | None = None
    gate_seconds: float = 0.0
    # A warm pool's agent (run/pool.py; Docker only): created before its attempt exists, so its
    # command and environment are read, once the gate opens, from this folder (a container
    # path): `argv` and `env` (`NAME=value`), each NUL-separated. `command` is then None.
    claim: str | None = None
    # A claimed agent's warm-up, run (output discarded, exit ignored) before it waits for its
    # claim: the files its first command reads are then in the page cache of the container's
    # own root (fuse-overlayfs caches per mount), not read through FUSE after the claim.
    warm_up: tuple[str, ...] = ()

    @property
    def all_labels(self) -> dict[str, str]:
        return {**self.labels, LABEL_ROLE: self.role}


@dataclass(frozen=True)
class Observed:
    """What the engine reports of one container, in the request's terms (`ContainerRequest`'s
    field names where the two meet), so the verifier compares them field by field. None: the
    engine reported nothing there. Docker translates its inspect into it
    (sandbox/docker/observe.py); the fake reports its request back."""

    status: str  # "created" (never started), "running", "exited"
    exit_code: int | None = None
    oom_killed: bool = False
    host_pid: int | None = None  # the host's pid of its first process, while it runs
    image: str | None = None  # the image's id where the engine gives one, else its name
    labels: Mapping[str, str] = field(default_factory=dict)
    user: str | None = None
    network: str | None = None
    read_only_root: bool | None = None
    mounts: tuple[Mount, ...] = ()  # every mount but the tmpfs, with the engine's host source
    tmpfs: Mapping[str, str] = field(default_factory=dict)
    ulimits: tuple[Ulimit, ...] = ()
    cap_add: tuple[str, ...] = ()
    cap_drop: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()  # as requested: no-new-privileges, seccomp=<profile>...
    apparmor: str | None = None  # the AppArmor profile applied ("": none)
    privileged: bool | None = None
    pid_namespace: str | None = None  # "" or None: its own; "host": the host's
    ipc: str | None = None
    devices: tuple[str, ...] = ()  # host devices passed in
    pids_limit: int | None = None
    memory: int | None = None
    memory_swap: int | None = None
    nano_cpus: int | None = None
    runtime: str | None = None

    @property
    def running(self) -> bool:
        return self.status == "running"

    def to_json(self) -> dict[str, Any]:
        """For container.json; `from_json` reads it back."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["mounts"] = [vars(m) for m in self.mounts]
        out["ulimits"] = [vars(u) for u in self.ulimits]
        return {
            k: list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, Mapping) else v
            for k, v in out.items()
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Observed:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["mounts"] = tuple(Mount(**m) for m in data.get("mounts") or [])
        values["ulimits"] = tuple(Ulimit(**u) for u in data.get("ulimits") or [])
        for name in ("cap_add", "cap_drop", "security_opt", "devices"):
            values[name] = tuple(data.get(name) or ())
        return cls(**values)


Owned = dict[
    str, list[dict[str, str]]
]  # "containers" | "volumes" | "networks" -> [{"id", "name", **labels}]


@runtime_checkable
class SandboxBackend(Protocol):
    """Containers, volumes and networks for one attempt; see the module docstring for the
    errors every method may raise and the cleanup guarantees."""

    # --- engine ---------------------------------------------------------------------------
    def security_options(self) -> list[str]:
        """How the engine confines containers (`name=seccomp,...`, `name=apparmor`), for the
        verifier."""
        ...

    # --- volumes and networks ---------------------------------------------------------------
    def create_volume(self, name: str, labels: dict[str, str], driver_opts: dict[str, str]) -> str:
        """A named volume (for the gateway's socket) with the engine's local driver options; returns
        its name."""
        ...

    def remove_volume(self, name: str) -> None:
        """Idempotent."""
        ...

    def create_network(self, name: str, labels: dict[str, str], *, internal: bool) -> str:
        """A bridge network (internal: no route out); returns its id."""
        ...

    def connect(self, network: str, cid: str) -> None:
        """Attach a created container to a network before it starts."""
        ...

    def remove_network(self, nid: str) -> None:
        """Idempotent."""
        ...

    # --- lifecycle ----------------------------------------------------------------------------
    def create_container(self, request: ContainerRequest) -> str:
        """A created, not started container; returns its id. ImageError if the image is missing."""
        ...

    def start(self, cid: str) -> None: ...

    def start_container(self, request: ContainerRequest) -> str:
        """Create and start; a container that fails to start is removed before raising."""
        ...

    def wait(self, cid: str, timeout: float) -> int | None:
        """The exit code, or None if still running after `timeout` seconds."""
        ...

    def attached(self, cid: str, *, stdin: bool) -> AbstractContextManager[socket.socket]:
        """The stdio of a created container as one socket; attach before `start` so no byte is
        missed. Write stdin (shut the write side to close it; the request sets `stdin_open`);
        read stdout and stderr as frames (8-byte header: stream 1|2, 0, 0, 0, big-endian size),
        Docker's, which every backend speaks on this socket."""
        ...

    def stop(self, cid: str, grace: float) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds; returns once it exited. A container that
        already exited is left as it is (no error, same exit code)."""
        ...

    def remove_container(self, cid: str) -> None:
        """Kill if running, then remove. Idempotent."""
        ...

    # --- inspect and collect (on a stopped container) ---------------------------------------
    def observe(self, cid: str) -> Observed:
        """How the container is and ran, as the engine reports it (not as it was asked)."""
        ...

    def logs(self, cid: str, limit: int) -> bytes:
        """stdout and stderr as written, at most the last `limit` bytes."""
        ...

    def fs_changes(self, cid: str) -> list[FsChange]:
        """What the container changed in its own filesystem (not in mounts or tmpfs)."""
        ...

    def writable_layer(self, cid: str) -> Path | None:
        """A host folder holding the container's own writes, when this host can read it;
        None otherwise (use `fs_changes` and `read_file`)."""
        ...

    def read_file(self, cid: str, path: str, limit: int) -> tuple[str, bytes | None, str | None]:
        """(kind, content, link target) of one path: kind is file, dir, symlink or other;
        content only for a file of at most `limit` bytes, never a folder's contents."""
        ...

    # --- cleanup ----------------------------------------------------------------------------
    def owned(self, run_id: str | None = None) -> Owned:
        """Containers, volumes and networks labelled `LABEL_OWNER=assure` (and, given,
        `LABEL_RUN=run_id`)."""
        ...


@runtime_checkable
class Exec(Protocol):
    """A command in a running container (the Inspect sandbox, assure/inspect/): Docker only."""

    def exec(
        self, cid: str, argv: list[str], data: bytes, *, limit: int, timeout: float | None
    ) -> tuple[int | None, bytes, bytes]: ...


@runtime_checkable
class ImageBuilder(Protocol):
    """The images' build (sandbox/docker/images.py): Docker only."""

    def image_exists(self, tag: str) -> bool: ...

    def try_pull(self, reference: str) -> bool: ...

    def import_rootfs(
        self, tar_path: str, repository: str, tag: str, changes: list[str]
    ) -> None: ...

    def build(
        self,
        context: bytes,
        tag: str,
        buildargs: dict[str, str],
        labels: dict[str, str],
        *,
        network: bool = False,
    ) -> None: ...

    def tag(self, source: str, repository: str, tag: str) -> None: ...


def labels(run_id: str, attempt: int, pid: int, host: str) -> dict[str, str]:
    """The labels every resource of one attempt carries (`owned()` and `assure gc` find it by
    them)."""
    return {
        LABEL_OWNER: OWNER,
        LABEL_RUN: run_id,
        LABEL_ATTEMPT: str(attempt),
        LABEL_PID: str(pid),
        LABEL_HOST: host,
        LABEL_UID: str(os.getuid()),
    }
