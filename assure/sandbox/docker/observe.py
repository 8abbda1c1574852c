"""`docker inspect` as an `Observed`: the one place that reads Docker's inspect keys for the
verifier (the CIS self-check, Docker's own benchmark, reads the rest). No docker-py here:
the verifier also reads container.json records made before `Observed`, which hold a part of
the inspect (`HostConfig`, `Config.User`, `Mounts`, `AppArmorProfile`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from assure.sandbox.backend import Mount, Observed, Ulimit


def _apparmor(inspect: Mapping[str, Any], security_opt: tuple[str, ...]) -> str | None:
    """The profile applied: `apparmor=unconfined` (or `apparmor:unconfined`) asked for turns
    it off whatever the engine names."""
    if any(o.replace(":", "=", 1) == "apparmor=unconfined" for o in security_opt):
        return "unconfined"
    profile = inspect.get("AppArmorProfile")
    return profile if isinstance(profile, str) else None


def observed(inspect: Mapping[str, Any]) -> Observed:
    host = inspect.get("HostConfig") or {}
    config = inspect.get("Config") or {}
    state = inspect.get("State") or {}
    security_opt = tuple(host.get("SecurityOpt") or ())
    image = inspect.get("Image") or config.get("Image")
    return Observed(
        status=str(state.get("Status") or "exited"),
        exit_code=state.get("ExitCode"),
        oom_killed=bool(state.get("OOMKilled")),
        host_pid=int(state.get("Pid") or 0) or None,
        image=image if isinstance(image, str) and image else None,
        labels=dict(config.get("Labels") or {}),
        user=config.get("User"),
        network=host.get("NetworkMode"),
        read_only_root=host.get("ReadonlyRootfs"),
        mounts=tuple(
            # a destination as reported, even none: the verifier says what the engine said
            Mount(str(m.get("Source")), m.get("Destination"), read_only=not m.get("RW"))
            for m in inspect.get("Mounts") or []
        )
        + _binds_unlisted(inspect),
        tmpfs={str(k): str(v) for k, v in (host.get("Tmpfs") or {}).items()},
        ulimits=tuple(
            Ulimit(u.get("Name"), u.get("Soft"), u.get("Hard")) for u in host.get("Ulimits") or []
        ),
        cap_add=tuple(host.get("CapAdd") or ()),
        cap_drop=tuple(host.get("CapDrop") or ()),
        security_opt=security_opt,
        apparmor=_apparmor(inspect, security_opt),
        privileged=host.get("Privileged"),
        pid_namespace=host.get("PidMode"),
        ipc=host.get("IpcMode"),
        devices=tuple(
            str(d.get("PathOnHost") if isinstance(d, dict) else d)
            for d in host.get("Devices") or []
        ),
        pids_limit=host.get("PidsLimit"),
        memory=host.get("Memory"),
        memory_swap=host.get("MemorySwap"),
        nano_cpus=host.get("NanoCpus"),
        runtime=host.get("Runtime"),
    )


def _binds_unlisted(inspect: Mapping[str, Any]) -> tuple[Mount, ...]:
    """The config's binds the engine does not list among its mounts (it lists every bind it
    made; a bind it did not list is still reported, so no Docker socket slips past)."""
    listed = {m.get("Destination") for m in inspect.get("Mounts") or []}
    binds = (_bind(b) for b in (inspect.get("HostConfig") or {}).get("Binds") or [])
    return tuple(b for b in binds if b.target not in listed)


def _bind(bind: str) -> Mount:
    """`source:target[:mode]`, a bind the engine listed in its config but not (yet) mounted."""
    source, _, rest = str(bind).partition(":")
    target, _, mode = rest.partition(":")
    return Mount(source, target, read_only="ro" in mode.split(","))
