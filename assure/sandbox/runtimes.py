"""Which OCI runtime runs which container, and what the engine needs for a spec's runtime.

The spec's `sandbox.runtime` runs the containers that execute the agent's code: the agent
and the command checks. The gateway and the egress proxy always run under runc. Two gVisor
sandboxes cannot share a unix socket (each has its own kernel), so under any runtime other
than runc the gateway binds its socket in a private host folder that is bind-mounted into
both containers, and gVisor is registered with `--host-uds=open` so the agent may connect to
a host socket (never create one). Nothing here talks to Docker; stdlib only, so
`.ci/register-runsc` reads the registration from here.
"""

from __future__ import annotations

import json
import os
from typing import Any

RUNC = "runc"
RUNSC = "runsc"
# --host-uds=open: connect to the gateway's host socket. --network=none: the agent has no
# network anyway, and Debian's 2022 runsc refuses to start a `--network none` container
# without it. --oci-seccomp: apply the container's seccomp profile to the agent's syscalls
# inside the sandbox; without it runsc ignores the profile that `docker inspect` reports.
RUNSC_ARGS = ("--host-uds=open", "--network=none", "--oci-seccomp")
RUNSC_PATH = "/usr/bin/runsc"
REGISTER_SCRIPT = ".ci/register-runsc"
# Under gVisor's ptrace platform the pids cgroup counts the sandbox's host tasks: about 40
# for the sentry and gofer, and about 8 per process inside (measured on runsc 20221219). Over
# it the whole sandbox dies (exit 2), so `limits.pids` is scaled to the same number of
# processes inside instead of being a limit on gVisor's own threads.
RUNSC_PIDS_BASE = 64
RUNSC_PIDS_PER_PROCESS = 10
HOST_UDS_FLAGS = frozenset(
    {"host-uds=open", "host-uds=all", "fsgofer-host-uds", "fsgofer-host-uds=true"}
)
OCI_SECCOMP_FLAGS = frozenset({"oci-seccomp", "oci-seccomp=true"})


def sidecar_runtime() -> str:
    """The gateway and the egress proxy: runc, whatever the spec says (they run our code)."""
    return RUNC


def socket_on_host(runtime: str) -> bool:
    """True when the agent's runtime cannot reach a socket on a Docker volume of a runc
    container, so the socket lives in a host folder instead."""
    return runtime != RUNC


def is_gvisor(runtime: str) -> bool:
    """gVisor as registered by `registration_steps` (a runtime of another name is not assumed to
    be)."""
    return runtime == RUNSC


def pids_limit(runtime: str, pids: int) -> int:
    """The engine's pids limit that gives the container `pids` processes."""
    return RUNSC_PIDS_BASE + RUNSC_PIDS_PER_PROCESS * pids if is_gvisor(runtime) else pids


def registration_steps() -> list[str]:
    """How to register runsc, as commands to run as root (the daemon.json entry is merged,
    never written over the file's other keys; SIGHUP reloads: running containers keep running)."""
    entry = json.dumps({"runtimes": {RUNSC: {"path": RUNSC_PATH, "runtimeArgs": list(RUNSC_ARGS)}}})
    return [
        "apt-get install -y runsc    # Debian's gVisor package",
        "merge into /etc/docker/daemon.json, keeping its other keys:",
        f"    {entry}",
        "kill -HUP $(pidof dockerd)    # reload the engine's configuration (never a restart)",
        f"or, from an assure checkout: {REGISTER_SCRIPT} (does all three, idempotently)",
    ]


def registration() -> str:
    return "register runsc: " + "; ".join(
        step.split("    #")[0].strip() for step in registration_steps()
    ).replace(":;", ":")


def problem(runtime: str, engine_runtimes: dict[str, Any]) -> str | None:
    """Why the engine cannot run a spec with `runtime` (None when it can)."""
    if runtime not in engine_runtimes:
        return (
            f"the Docker engine has no runtime {runtime!r} (it has:"
            f" {', '.join(sorted(engine_runtimes)) or 'none'})"
        )
    path = (engine_runtimes.get(runtime) or {}).get("path")
    if (
        runtime != RUNC
        and isinstance(path, str)
        and os.path.isabs(path)
        and not os.path.exists(path)
    ):
        return (
            f"the Docker engine's runtime {runtime!r} is registered as {path}, which is not on this"
            " host: no container could start under it"
        )
    if is_gvisor(runtime):
        args = [
            str(a).lstrip("-")
            for a in (engine_runtimes.get(runtime) or {}).get("runtimeArgs") or []
        ]
        if not HOST_UDS_FLAGS.intersection(args):
            return (
                f"the Docker engine's runtime {runtime!r} is registered without --host-uds=open"
                f" (its runtimeArgs: {args or 'none'}): the agent could not reach the gateway's"
                " socket"
            )
        if not OCI_SECCOMP_FLAGS.intersection(args):
            return (
                f"the Docker engine's runtime {runtime!r} is registered without --oci-seccomp (its"
                f" runtimeArgs: {args or 'none'}): the container's seccomp profile would not filter"
                " the agent's syscalls"
            )
    return None


def fix(runtime: str) -> str:
    if is_gvisor(runtime):
        return registration()
    return (
        f"install {runtime!r} and register it with dockerd (/etc/docker/daemon.json `runtimes`), or"
        " leave sandbox.runtime out"
    )
