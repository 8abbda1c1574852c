"""The hardened container settings, as pure functions from a spec to container requests
(`backend.ContainerRequest`, which each backend translates or interprets).

Nothing here talks to Docker, so the settings are tested without a daemon; the integration
tests then observe them from inside a real container. `CONTAINMENT` lists what the verifier
re-checks on the stopped container (ground truth from the engine, not the agent's word), as
rules on what the engine reports (`backend.Observed`) against what was asked.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from assure.core import confined
from assure.sandbox import runtimes, seccomp, workspace_fs
from assure.sandbox.backend import ContainerRequest, Mount, Role, Ulimit
from assure.spec import Spec

SOCKET_DIR = "/run/assure"
SOCKET_PATH = f"{SOCKET_DIR}/gateway.sock"
WORKSPACE = "/workspace"
AGENT_FILES = "/opt/agent"
AGENT_CLAIM = "/run/assure-claim"  # a pooled agent's command and environment (run/pool.py)
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
GATEWAY_MEMORY = 256 * 2**20
GATEWAY_PIDS = 64
EGRESS_MEMORY = 128 * 2**20
EGRESS_PIDS = 64
EGRESS_PORT = 3128
SOCKET_VOLUME_SIZE = 2**20
# RLIMIT_FSIZE: the largest file any process of a run may write is the workspace's disk,
# `limits.disk`. This was the limit before that field existed (for specs resolved without it).
FILE_SIZE_LIMIT = 2**30
NO_NEW_PRIVILEGES = "no-new-privileges:true"
# The gateway's start (issue 25: its boot is CPU every attempt pays): -I -S -B, no site, runpy or
# environment (PYTHONPATH, PYTHONSTARTUP...), and nothing on sys.path before the standard library:
# its package (images/gateway/Dockerfile: /opt/assure) and apsw's pip folder are appended, so no
# file there or in the working folder can stand in for a standard module. The same arguments as
# `python3 -m assure.gateway` (the warm pool appends --wait SECONDS).
GATEWAY_BOOT = (
    "import sys; v = sys.version_info;"
    " sys.path += ['/opt/assure', f'/usr/local/lib/python{v[0]}.{v[1]}/dist-packages'];"
    " from assure.gateway.__main__ import main; sys.exit(main())"
)
GATEWAY_COMMAND = (
    "python3",
    "-I",
    "-S",
    "-B",
    "-c",
    GATEWAY_BOOT,
    "--config",
    f"{GATEWAY_CONFIG}/gateway.json",
)


@dataclass(frozen=True)
class Mounts:
    """Host-side places one attempt uses. `control` (operator overrides, read-only) and
    `run_state` (the idempotency store) belong to the run and outlive its attempts."""

    workspace: Path
    socket_volume: (
        str  # a volume name, or a host folder (absolute path) under another runtime than runc
    )
    gateway_state: Path
    gateway_config: Path
    agent_files: Path | None
    control: Path
    run_state: Path


def fixed_user(spec: Spec) -> tuple[int, int] | None:
    """The uid:gid a spec's sandboxes run as when it is not leased per attempt: the spec's own
    `sandbox.user`; ours when we are not root (we cannot hand the workspace to another); the
    shared DEFAULT_UID for a live database, which the gateway writes in place and whose owner
    the user set (sandbox/live.py). None: `auto` as root, each attempt leases a uid of its own
    (`uids.lease_for`), so no two attempts on the host share a per-user kernel limit."""
    if spec.sandbox.user != "auto":
        uid, gid = spec.sandbox.user.split(":")
        return int(uid), int(gid)
    if os.geteuid() != 0:
        return os.geteuid(), os.getegid()
    if any(db.mode == "live" for db in spec.databases):
        return DEFAULT_UID, DEFAULT_UID
    return None


def tmpfs_options(size: int, *, runnable: bool = False) -> str:
    """A tmpfs of `size` bytes."""
    return f"rw,nosuid,nodev,{'exec' if runnable else 'noexec'},size={size}"


TOOLS_TMP = "/var/tmp"  # where Inspect puts the tools it runs in a sandbox (its SANDBOX_TOOLS_DIR)


def agent_tmpfs(spec: Spec) -> dict[str, str]:
    """The agent's tmpfs: /tmp (noexec), and for an Inspect sample /var/tmp, where the programs
    Inspect injects must run (each bounded by `limits.tmpfs`)."""
    size = spec.limits.tmpfs_bytes
    tools = {TOOLS_TMP: tmpfs_options(size, runnable=True)}
    return {"/tmp": tmpfs_options(size), **(tools if spec.sandbox.tools_tmp else {})}


def ulimits(nofile: int, disk: int | None) -> tuple[Ulimit, ...]:
    """nofile; fsize (`limits.disk`: no file, not even a hole, outgrows the workspace's disk);
    core 0 (no core dump lands anywhere).

    No nproc: RLIMIT_NPROC counts every task of the uid on the host, and an attempt's agent,
    gateway and checks share its uid (a fixed `sandbox.user` is shared by every run that names
    it): an agent within its own pids limit could use it up and stop its gateway, or another
    run's, from starting a thread. Each container's processes are bounded by its pids cgroup."""
    fsize = FILE_SIZE_LIMIT if disk is None else disk
    return tuple(
        Ulimit(name, value, value)
        for name, value in (("nofile", nofile), ("fsize", fsize), ("core", 0))
    )


def common_request(
    spec: Spec,
    role: str,
    image: str,
    labels: dict[str, str],
    memory: int,
    pids: int,
    runtime: str | None = None,
    *,
    user: tuple[int, int],
) -> ContainerRequest:
    """The hardening every container of an attempt shares (agent, gateway, proxy, checks), all
    as the attempt's `user` (`uids.Lease.ids`); the runtime is the spec's unless the caller
    says otherwise (the gateway and proxy: runc). `memory` in bytes."""
    uid, gid = user
    runtime = runtime or spec.sandbox.runtime
    return ContainerRequest(
        role=role,
        image=image,
        labels=labels,
        user=f"{uid}:{gid}",
        network="none",
        cap_drop=("ALL",),
        security_opt=(NO_NEW_PRIVILEGES, seccomp.security_opt(runtime)),
        read_only_root=spec.sandbox.read_only_root,
        tmpfs={"/tmp": tmpfs_options(spec.limits.tmpfs_bytes)},
        ipc="none",
        pids_limit=runtimes.pids_limit(runtime, pids),
        memory=memory,
        memory_swap=memory,
        nano_cpus=int(spec.limits.cpus * 1e9),
        ulimits=ulimits(spec.limits.nofile, spec.limits.disk_bytes),
        log_max=LOG_MAX,
        init=True,
        runtime=runtime,
    )


def database_path(db: Any) -> str:
    """Where the gateway finds a database: its per-attempt copy, or the live file's folder."""
    if db.mode == "sandbox":
        return f"{GATEWAY_STATE}/db/{db.name}.sqlite"
    return f"{GATEWAY_LIVE}/{db.name}/{db.fixture.name}"


def live_database_mounts(spec: Spec) -> tuple[Mount, ...]:
    """Live databases: the folder of each (SQLite writes -wal/-journal beside it), gateway only."""
    return tuple(
        Mount(str(db.fixture.parent), f"{GATEWAY_LIVE}/{db.name}")
        for db in spec.databases
        if db.mode == "live"
    )


def chown_tree(root: Path, uid: int, gid: int) -> None:
    """Hand a host folder to the sandbox user (only possible, and only needed, as root)."""
    if os.geteuid() != 0:
        return
    confined.chown_tree(root, uid, gid)


def socket_mount(mounts: Mounts, *, read_only: bool) -> Mount:
    """The socket folder: a volume (`nocopy`, see socket_volume_options), or a host folder."""
    return Mount(
        mounts.socket_volume,
        SOCKET_DIR,
        read_only=read_only,
        nocopy=not os.path.isabs(mounts.socket_volume),
    )


def agent_request(
    spec: Spec,
    *,
    image: str,
    name: str,
    mounts: Mounts,
    labels: dict[str, str],
    env: dict[str, str],
    user: tuple[int, int],
    gate_seconds: float | None = None,
) -> ContainerRequest:
    """`gate_seconds`: the agent's command waits (at most that long) for the gateway's socket,
    which the gateway binds only once its journal is open: the container may then be started
    while the gateway boots, and the agent still acts only once the gateway journals."""
    agent_files = (
        (Mount(str(mounts.agent_files), AGENT_FILES, read_only=True),)
        if mounts.agent_files is not None
        else ()
    )
    return replace(
        common_request(
            spec, Role.AGENT, image, labels, spec.limits.memory_bytes, spec.limits.pids, user=user
        ),
        name=name,
        command=tuple(spec.agent.command),
        tmpfs=agent_tmpfs(spec),
        env={**spec.agent.env, **env, **agent_base_env()},
        working_dir=WORKSPACE,
        hostname="sandbox",
        mounts=(
            Mount(str(mounts.workspace), WORKSPACE),
            socket_mount(mounts, read_only=True),
            *agent_files,
        ),
        gate=SOCKET_PATH if gate_seconds is not None else None,
        gate_seconds=gate_seconds or 0.0,  # the request's default when ungated
    )


def agent_base_env() -> dict[str, str]:
    """What every agent's environment holds, whatever its spec (a pooled agent's, before its
    claim)."""
    return {"ASSURE_GATEWAY_SOCKET": SOCKET_PATH, "HOME": "/tmp"}


def gateway_request(
    spec: Spec,
    *,
    image: str,
    name: str,
    mounts: Mounts,
    labels: dict[str, str],
    user: tuple[int, int],
    network: str | None = None,
    extra_mounts: tuple[Mount, ...] = (),
) -> ContainerRequest:
    """The gateway: no network, or only the internal egress network it shares with the proxy.
    It runs as its agent's user: the files it writes in the workspace are the agent's to edit."""
    return replace(
        common_request(
            spec,
            Role.GATEWAY,
            image,
            labels,
            GATEWAY_MEMORY,
            GATEWAY_PIDS,
            runtimes.sidecar_runtime(),
            user=user,
        ),
        network=network or "none",
        read_only_root=True,
        name=name,
        command=GATEWAY_COMMAND,
        env={"PYTHONDONTWRITEBYTECODE": "1"},
        hostname="gateway",
        mounts=(
            Mount(str(mounts.workspace), WORKSPACE),
            socket_mount(mounts, read_only=False),
            Mount(str(mounts.gateway_state), GATEWAY_STATE),
            Mount(str(mounts.gateway_config), GATEWAY_CONFIG, read_only=True),
            Mount(str(mounts.control), GATEWAY_CONTROL, read_only=True),
            Mount(str(mounts.run_state), GATEWAY_RUN_STATE),
            *live_database_mounts(spec),
            *extra_mounts,
        ),
    )


def egress_request(
    spec: Spec,
    *,
    image: str,
    name: str,
    config_dir: Path,
    log_dir: Path,
    labels: dict[str, str],
    network: str,
    user: tuple[int, int],
) -> ContainerRequest:
    """The egress proxy: on the internal network with the gateway (the upstream network is
    connected before it starts); the only container of a run that can reach anything. As the
    attempt's user, like the rest: no budget of it is shared with another run's."""
    return replace(
        common_request(
            spec,
            Role.EGRESS,
            image,
            labels,
            EGRESS_MEMORY,
            EGRESS_PIDS,
            runtimes.sidecar_runtime(),
            user=user,
        ),
        network=network,
        read_only_root=True,
        name=name,
        hostname="egress-proxy",
        mounts=(
            Mount(str(config_dir), "/etc/egress", read_only=True),
            Mount(str(log_dir), "/var/log/egress"),
        ),
    )


def check_request(
    spec: Spec,
    *,
    image: str,
    name: str,
    command: list[str],
    env: dict[str, str],
    copy: Path,
    labels: dict[str, str],
    stdin: bool,
    user: tuple[int, int],
) -> ContainerRequest:
    """A check: the agent's limits on a throwaway copy of the workspace, read-only root;
    `stdin` keeps stdin open for a case's input."""
    return replace(
        common_request(
            spec, Role.CHECK, image, labels, spec.limits.memory_bytes, spec.limits.pids, user=user
        ),
        name=name,
        command=tuple(command),
        working_dir=WORKSPACE,
        env={**env, "HOME": "/tmp"},
        read_only_root=True,
        mounts=(Mount(str(copy), WORKSPACE),),
        stdin_open=stdin,
    )


# A shared check container (run/checks.py `SharedChecks`): its own process, pid 1, is the
# check sequencer (run/check_sequencer.py, by the image's python3), as root with CAP_SETUID and
# CAP_SETGID only: it starts each check as the attempt's user, who then has no capability
# (no-new-privileges: none to gain), so no check can signal, trace or re-limit it. Each check
# runs on a view of POST and a /tmp the host mounts under `CHECK_VIEWS`; the host kills every
# other process between two.
CHECK_SEQUENCER_CAPS = ("SETUID", "SETGID")
CHECK_VIEWS = workspace_fs.VIEW_FOLDERS  # under the views folder -> /workspace, /tmp


def shared_check_request(
    spec: Spec,
    *,
    image: str,
    name: str,
    views: Path,
    labels: dict[str, str],
    user: tuple[int, int],
    sequencer: str,
) -> ContainerRequest:
    """`check_request`'s hardening, for a container whose checks the `sequencer` (its source)
    starts as `user`: /workspace and /tmp are the host's `views` folders, mounted `rslave` so
    each check sees the view the host mounts there for it and nothing of the check before it."""
    return replace(
        common_request(
            spec, Role.CHECK, image, labels, spec.limits.memory_bytes, spec.limits.pids, user=(0, 0)
        ),
        name=name,
        command=("python3", "-I", "-S", "-c", sequencer, *(str(i) for i in user)),
        cap_add=CHECK_SEQUENCER_CAPS,
        init=False,  # the sequencer is pid 1: CLEAR kills all but pid 1
        working_dir="/",
        env={"HOME": "/tmp"},
        read_only_root=True,
        tmpfs={},
        stdin_open=True,
        mounts=(
            Mount(str(views / CHECK_VIEWS[0]), WORKSPACE, propagation="rslave"),
            Mount(str(views / CHECK_VIEWS[1]), "/tmp", propagation="rslave"),
        ),
    )


def socket_volume_options(user: tuple[int, int]) -> dict[str, str]:
    """A private tmpfs for the socket, owned by the attempt's user (the agent mounts it read-only).

    Both mounts use `nocopy`: otherwise the engine copies the image's /run/assure (owned by
    root) over the volume's root when a container is created, and the gateway cannot bind."""
    uid, gid = user
    return {
        "type": "tmpfs",
        "device": "tmpfs",
        "o": f"size={SOCKET_VOLUME_SIZE},uid={uid},gid={gid},mode=0755,nosuid,nodev,noexec",
    }


def make_socket_folder(path: Path, user: tuple[int, int]) -> None:
    """The socket's host folder when the agent runs under another runtime than runc: fresh,
    mode 0700 and owned by the sandbox user, so on the host only that user and root reach
    the socket (the agent mounts the folder read-only: it can connect, never bind)."""
    path.mkdir(mode=0o700)
    os.chmod(path, 0o700)  # whatever the umask
    if os.geteuid() == 0:
        os.chown(path, *user, follow_symlinks=False)


@dataclass(frozen=True)
class Rule:
    """One setting the verifier re-checks on the stopped agent: `field` of `Observed` (and of
    the `ContainerRequest`, where it has one) must satisfy `holds(requested, observed)`. The
    subject is the finding's, named as verdicts always named it (Docker's inspect path)."""

    subject: str
    description: str
    field: str
    holds: Callable[[Any, Any], bool]


def _no_docker_socket(_: Any, mounts: Any) -> bool:
    return not any("docker.sock" in f"{m.source}:{m.target}" for m in mounts or ())


# What the verifier expects to find on the stopped agent container. A rule that does not hold
# is a `containment_failed` breach.
CONTAINMENT: tuple[Rule, ...] = (
    Rule("HostConfig.NetworkMode", "no network", "network", lambda want, got: got == want),
    Rule(
        "HostConfig.CapDrop",
        "all capabilities dropped",
        "cap_drop",
        lambda want, got: bool(got) and set(want) <= set(got),
    ),
    Rule("HostConfig.CapAdd", "no capabilities added", "cap_add", lambda _, got: not got),
    Rule("HostConfig.Privileged", "not privileged", "privileged", lambda _, got: got is False),
    Rule(
        "HostConfig.SecurityOpt",
        "no-new-privileges",
        "security_opt",
        lambda _, got: NO_NEW_PRIVILEGES in (got or ()),
    ),
    Rule("HostConfig.IpcMode", "private IPC", "ipc", lambda want, got: got == want),
    Rule(
        "HostConfig.PidMode",
        "private PID namespace",
        "pid_namespace",
        lambda _, got: got in ("", None),
    ),
    Rule("HostConfig.Devices", "no host devices", "devices", lambda _, got: not got),
    Rule(
        "HostConfig.PidsLimit",
        "pids limited",
        "pids_limit",
        lambda _, got: isinstance(got, int) and got > 0,
    ),
    Rule(
        "HostConfig.Memory",
        "memory limited",
        "memory",
        lambda _, got: isinstance(got, int) and got > 0,
    ),
    Rule(
        "HostConfig.MemorySwap",
        "no swap",
        "memory_swap",
        lambda _, got: isinstance(got, int) and got > 0,
    ),
    Rule(
        "Config.User",
        "non-root user",
        "user",
        lambda _, got: bool(got) and got.split(":")[0] not in ("0", "root"),
    ),
    Rule("HostConfig.Binds", "no Docker socket", "mounts", _no_docker_socket),
    Rule(
        "HostConfig.ReadonlyRootfs",
        "read-only root filesystem as the spec says",
        "read_only_root",
        lambda want, got: got is want,
    ),
)
