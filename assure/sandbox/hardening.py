"""The hardened container settings, as pure functions from a spec to container requests
(`backend.ContainerRequest`: Docker's keyword arguments, which every backend interprets).

Nothing here talks to Docker, so the settings are tested without a daemon; the integration
tests then observe them from inside a real container. `CONTAINMENT` lists what the verifier
re-checks on the stopped container (ground truth from the engine, not the agent's word).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assure.core import confined
from assure.spec import Spec, parse_size
from assure.sandbox import runtimes, seccomp
from assure.sandbox.backend import ContainerRequest

SOCKET_DIR = "/run/assure"
SOCKET_PATH = f"{SOCKET_DIR}/gateway.sock"
WORKSPACE = "/workspace"
AGENT_FILES = "/opt/agent"
GATEWAY_STATE = "/var/lib/assure"
GATEWAY_CONFIG = "/etc/assure"
GATEWAY_CONTROL = "/run/assure-control"
GATEWAY_RUN_STATE = "/var/lib/assure-run"
GATEWAY_LIVE = "/var/lib/assure-live"
GATEWAY_SECRETS = "/run/assure-secrets"
GATEWAY_RECORDING = "/var/lib/assure-recording"
DEFAULT_UID = 10001
STOP_GRACE_SECONDS = 3
LOG_MAX = "2m"
GATEWAY_MEMORY = "256m"
GATEWAY_PIDS = 64
EGRESS_MEMORY = "128m"
EGRESS_PIDS = 64
EGRESS_PORT = 3128
SOCKET_VOLUME_SIZE = "1m"
# RLIMIT_FSIZE: the largest file any process of a run may write is the workspace's disk,
# `limits.disk`. This was the limit before that field existed (for specs resolved without it).
FILE_SIZE_LIMIT = "1g"


@dataclass(frozen=True)
class Mounts:
    """Host-side places one attempt uses. `control` (operator overrides, read-only) and
    `run_state` (the idempotency store) belong to the run and outlive its attempts."""

    workspace: Path
    socket_volume: str  # a volume name, or a host folder (absolute path) under another runtime than runc
    gateway_state: Path
    gateway_config: Path
    agent_files: Path | None
    control: Path
    run_state: Path


def sandbox_user(spec: Spec) -> tuple[int, int]:
    """`auto` is 10001:10001 when we run as root (we chown the workspace), else our own ids."""
    if spec.sandbox.user != "auto":
        uid, gid = spec.sandbox.user.split(":")
        return int(uid), int(gid)
    if os.geteuid() == 0:
        return DEFAULT_UID, DEFAULT_UID
    return os.geteuid(), os.getegid()


def tmpfs_options(size: str) -> str:
    return f"rw,nosuid,nodev,noexec,size={parse_size(size)}"


def ulimits(nofile: int, agent_pids: int, disk: str | None) -> list[dict[str, Any]]:
    """nofile; fsize (`limits.disk`: no file, not even a hole, outgrows the workspace's disk);
    core 0 (no core dump lands anywhere); nproc.

    RLIMIT_NPROC counts every task of the uid on the host, not of one container: the agent,
    its gateway and its proxy run as the same uid, so nproc is their pids limits added up
    (never binding while each pids cgroup holds; a second bound should one not)."""
    nproc = agent_pids + GATEWAY_PIDS + EGRESS_PIDS
    fsize = parse_size(disk or FILE_SIZE_LIMIT)
    return [{"name": name, "soft": value, "hard": value} for name, value in
            (("nofile", nofile), ("fsize", fsize), ("core", 0), ("nproc", nproc))]


def common_kwargs(spec: Spec, labels: dict[str, str], memory: str, pids: int, runtime: str | None = None) -> ContainerRequest:
    """The hardening every container of a run shares (agent, gateway, proxy, checks); the
    runtime is the spec's unless the caller says otherwise (the gateway and proxy: runc)."""
    uid, gid = sandbox_user(spec)
    mem = parse_size(memory)
    runtime = runtime or spec.sandbox.runtime
    return {
        "user": f"{uid}:{gid}",
        "labels": labels,
        "network_mode": "none",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true", seccomp.security_opt()],
        "read_only": spec.sandbox.read_only_root,
        "tmpfs": {"/tmp": tmpfs_options(spec.limits.tmpfs)},
        "ipc_mode": "none",
        "pids_limit": runtimes.pids_limit(runtime, pids),
        "mem_limit": mem,
        "memswap_limit": mem,
        "nano_cpus": int(spec.limits.cpus * 1e9),
        "ulimits": ulimits(spec.limits.nofile, spec.limits.pids, spec.limits.disk),
        "log_config": {"type": "json-file", "config": {"max-size": LOG_MAX, "max-file": "1"}},
        "privileged": False,
        "init": True,
        "runtime": runtime,
        "detach": True,
    }


def database_path(db: Any) -> str:
    """Where the gateway finds a database: its per-attempt copy, or the live file's folder."""
    if db.mode == "sandbox":
        return f"{GATEWAY_STATE}/db/{db.name}.sqlite"
    return f"{GATEWAY_LIVE}/{db.name}/{db.fixture.name}"


def live_database_volumes(spec: Spec) -> dict[str, dict[str, str]]:
    """Live databases: the folder of each (SQLite writes -wal/-journal beside it), gateway only."""
    return {str(db.fixture.parent): {"bind": f"{GATEWAY_LIVE}/{db.name}", "mode": "rw"} for db in spec.databases if db.mode == "live"}


def chown_tree(root: Path, uid: int, gid: int) -> None:
    """Hand a host folder to the sandbox user (only possible, and only needed, as root)."""
    if os.geteuid() != 0:
        return
    confined.chown_tree(root, uid, gid)


def socket_mount(mounts: Mounts, mode: str) -> dict[str, dict[str, str]]:
    """The socket folder: a volume (`nocopy`, see socket_volume_options), or a host folder."""
    if os.path.isabs(mounts.socket_volume):
        return {mounts.socket_volume: {"bind": SOCKET_DIR, "mode": mode}}
    return {mounts.socket_volume: {"bind": SOCKET_DIR, "mode": f"{mode},nocopy"}}


def agent_kwargs(spec: Spec, *, image: str, name: str, mounts: Mounts, labels: dict[str, str], env: dict[str, str]) -> ContainerRequest:
    volumes = {
        str(mounts.workspace): {"bind": WORKSPACE, "mode": "rw"},
        **socket_mount(mounts, "ro"),
    }
    if mounts.agent_files is not None:
        volumes[str(mounts.agent_files)] = {"bind": AGENT_FILES, "mode": "ro"}
    return {
        **common_kwargs(spec, labels, spec.limits.memory, spec.limits.pids),
        "image": image,
        "name": name,
        "command": list(spec.agent.command),
        "environment": {**spec.agent.env, **env, "ASSURE_GATEWAY_SOCKET": SOCKET_PATH, "HOME": "/tmp"},
        "working_dir": WORKSPACE,
        "hostname": "sandbox",
        "volumes": volumes,
    }


def gateway_kwargs(spec: Spec, *, image: str, name: str, mounts: Mounts, labels: dict[str, str], network: str | None = None,
                   extra_volumes: dict[str, dict[str, str]] | None = None) -> ContainerRequest:
    """The gateway: no network, or only the internal egress network it shares with the proxy."""
    return {
        **common_kwargs(spec, labels, GATEWAY_MEMORY, GATEWAY_PIDS, runtimes.sidecar_runtime()),
        "network_mode": network or "none",
        "read_only": True,
        "image": image,
        "name": name,
        "command": ["python3", "-m", "assure.gateway", "--config", f"{GATEWAY_CONFIG}/gateway.json"],
        "environment": {"PYTHONDONTWRITEBYTECODE": "1"},
        "hostname": "gateway",
        "volumes": {
            str(mounts.workspace): {"bind": WORKSPACE, "mode": "rw"},
            **socket_mount(mounts, "rw"),
            str(mounts.gateway_state): {"bind": GATEWAY_STATE, "mode": "rw"},
            str(mounts.gateway_config): {"bind": GATEWAY_CONFIG, "mode": "ro"},
            str(mounts.control): {"bind": GATEWAY_CONTROL, "mode": "ro"},
            str(mounts.run_state): {"bind": GATEWAY_RUN_STATE, "mode": "rw"},
            **live_database_volumes(spec),
            **(extra_volumes or {}),
        },
    }


def egress_kwargs(spec: Spec, *, image: str, name: str, config_dir: Path, log_dir: Path, labels: dict[str, str], network: str) -> ContainerRequest:
    """The egress proxy: on the internal network with the gateway (the upstream network is
    connected before it starts); the only container of a run that can reach anything."""
    return {
        **common_kwargs(spec, labels, EGRESS_MEMORY, EGRESS_PIDS, runtimes.sidecar_runtime()),
        "user": f"{DEFAULT_UID}:{DEFAULT_UID}",
        "network_mode": network,
        "read_only": True,
        "image": image,
        "name": name,
        "hostname": "egress-proxy",
        "volumes": {str(config_dir): {"bind": "/etc/egress", "mode": "ro"}, str(log_dir): {"bind": "/var/log/egress", "mode": "rw"}},
    }


def check_kwargs(spec: Spec, *, image: str, name: str, command: list[str], env: dict[str, str], copy: Path, labels: dict[str, str],
                 stdin: bool) -> ContainerRequest:
    """A check: the agent's limits on a throwaway copy of the workspace, read-only root;
    `stdin` keeps stdin open for a case's input."""
    return {
        **common_kwargs(spec, labels, spec.limits.memory, spec.limits.pids),
        "image": image, "name": name, "command": command, "working_dir": WORKSPACE,
        "environment": {**env, "HOME": "/tmp"}, "read_only": True,
        "volumes": {str(copy): {"bind": WORKSPACE, "mode": "rw"}},
        "stdin_open": stdin,
    }


def socket_volume_options(spec: Spec) -> dict[str, str]:
    """A private tmpfs for the socket, owned by the sandbox user (the agent mounts it read-only).

    Both mounts use `nocopy`: otherwise the engine copies the image's /run/assure (owned by
    root) over the volume's root when a container is created, and the gateway cannot bind."""
    uid, gid = sandbox_user(spec)
    return {"type": "tmpfs", "device": "tmpfs", "o": f"size={SOCKET_VOLUME_SIZE},uid={uid},gid={gid},mode=0755,nosuid,nodev,noexec"}


def make_socket_folder(path: Path, spec: Spec) -> None:
    """The socket's host folder when the agent runs under another runtime than runc: fresh,
    mode 0700 and owned by the sandbox user, so on the host only that user and root reach
    the socket (the agent mounts the folder read-only: it can connect, never bind)."""
    path.mkdir(mode=0o700)
    os.chmod(path, 0o700)  # whatever the umask
    if os.geteuid() == 0:
        uid, gid = sandbox_user(spec)
        os.chown(path, uid, gid, follow_symlinks=False)


# What the verifier expects to find on the stopped agent container: (description, path in
# `docker inspect`, predicate). A failed predicate is a `containment_failed` breach.
CONTAINMENT: tuple[tuple[str, tuple[str, ...], Any], ...] = (
    ("no network", ("HostConfig", "NetworkMode"), lambda v: v == "none"),
    ("all capabilities dropped", ("HostConfig", "CapDrop"), lambda v: bool(v) and "ALL" in v),
    ("no capabilities added", ("HostConfig", "CapAdd"), lambda v: not v),
    ("not privileged", ("HostConfig", "Privileged"), lambda v: v is False),
    ("no-new-privileges", ("HostConfig", "SecurityOpt"), lambda v: bool(v) and "no-new-privileges:true" in v),
    ("private IPC", ("HostConfig", "IpcMode"), lambda v: v == "none"),
    ("private PID namespace", ("HostConfig", "PidMode"), lambda v: v in ("", None)),
    ("no host devices", ("HostConfig", "Devices"), lambda v: not v),
    ("pids limited", ("HostConfig", "PidsLimit"), lambda v: isinstance(v, int) and v > 0),
    ("memory limited", ("HostConfig", "Memory"), lambda v: isinstance(v, int) and v > 0),
    ("no swap", ("HostConfig", "MemorySwap"), lambda v: isinstance(v, int) and v > 0),
    ("non-root user", ("Config", "User"), lambda v: bool(v) and v.split(":")[0] not in ("0", "root")),
    ("no Docker socket", ("HostConfig", "Binds"), lambda v: not any("docker.sock" in b for b in (v or []))),
)
