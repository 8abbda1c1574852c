"""Findings about the agent container itself, from what the engine reported after it stopped.

Two kinds: the hardening the container actually ran with (`docker inspect`, re-checked here
against the table in `sandbox.hardening`), and changes to its own filesystem outside the
mounts and the tmpfs (`docker diff`, with content digests collected by the host).
"""

from __future__ import annotations

import json
import os
from typing import Any

from assure.sandbox import seccomp, workspace_fs
from assure.sandbox.hardening import (
    AGENT_CLAIM,
    AGENT_FILES,
    CONTAINMENT,
    SOCKET_DIR,
    WORKSPACE,
    agent_tmpfs,
    ulimits,
)
from assure.spec import Spec
from assure.verify.findings import Finding, Kind
from assure.verify.snapshot import Snapshot

# Mount points and their parents appear in `docker diff` when the runtime creates them
# (the engine's init binary is bind-mounted at /sbin/docker-init, /usr/sbin on merged-usr).
# Exact paths only: anything created beside or below them is still reported.
EXPECTED_PATHS = frozenset(
    {
        WORKSPACE,
        SOCKET_DIR,
        AGENT_FILES,
        "/tmp",
        "/run",
        "/opt",
        "/dev",
        "/proc",
        "/sys",
        "/etc",
        "/etc/hostname",
        "/etc/hosts",
        "/etc/resolv.conf",
        "/usr",
        "/usr/sbin",
        "/usr/sbin/docker-init",
        "/sbin",
        "/sbin/docker-init",
    }
)
MOUNTED_PREFIXES = tuple(
    f"{p}/" for p in (WORKSPACE, SOCKET_DIR, AGENT_FILES, "/tmp", "/proc", "/sys", "/dev")
)


def _as_json(value: Any) -> str:
    """A value as the engine's JSON spells it (null, true, [...]), not as a Python repr; a
    value JSON cannot spell (a key that is not text) falls back to the repr."""
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _lookup(data: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def containment(
    inspect: dict[str, Any],
    spec: Spec,
    engine_security: list[str] | None,
    attempt: str,
    pooled: dict[str, Any] | None = None,
    user: str | None = None,
) -> list[Finding]:
    """The static table of `CONTAINMENT`, then what this spec asked for: read-only root,
    runtime, seccomp profile, AppArmor, mounts (the workspace that of `attempt`, or of the
    pooled pair the attempt claimed: container.json `pool`), /tmp tmpfs and ulimits; and the
    attempt's own user (container.json `user`, as the host leased it: `sandbox/uids.py`)."""
    findings = []
    for description, path, ok in CONTAINMENT + (
        (
            "read-only root filesystem as the spec says",
            ("HostConfig", "ReadonlyRootfs"),
            lambda v: v is spec.sandbox.read_only_root,
        ),
    ):
        value = _lookup(inspect, path)
        if not ok(value):
            findings.append(
                Finding(
                    Kind.CONTAINMENT_FAILED,
                    ".".join(path),
                    f"expected {description}, engine reports {_as_json(value)}",
                )
            )
    checks = _spec_checks(inspect, spec, engine_security, attempt, pooled)
    if (
        user is not None or spec.sandbox.user != "auto"
    ):  # a record made before each attempt had its own user has none
        checks.append(
            (
                "Config.User",
                user if user is not None else spec.sandbox.user,
                _lookup(inspect, ("Config", "User")),
            )
        )
    for subject, expected, reported in checks:
        if expected != reported:
            findings.append(
                Finding(
                    Kind.CONTAINMENT_FAILED,
                    subject,
                    f"expected {_as_json(expected)}, engine reports {_as_json(reported)}",
                )
            )
    return findings


def containment_checked(spec: Spec) -> list[str]:
    """The subjects `containment` checks, for the record that they were checked and held."""
    return (
        [".".join(path) for _, path, _ in CONTAINMENT]
        + ["HostConfig.ReadonlyRootfs"]
        + [s for s, _, _ in _spec_checks({}, spec, None, "")]
    )


def _spec_checks(
    inspect: dict[str, Any],
    spec: Spec,
    engine_security: list[str] | None,
    attempt: str,
    pooled: dict[str, Any] | None = None,
) -> list[tuple[str, Any, Any]]:
    """(subject, expected, what the engine reports), each in a form that compares with ==."""
    limits = spec.limits
    security_opt = _lookup(inspect, ("HostConfig", "SecurityOpt")) or []
    profiles = sorted(_seccomp_summary(o) for o in security_opt if o.startswith("seccomp="))
    apparmor = inspect.get("AppArmorProfile")
    engine = engine_security or []
    mounts = {
        m.get("Destination"): "rw" if m.get("RW") else "ro" for m in inspect.get("Mounts") or []
    }
    expected_mounts = {
        WORKSPACE: "rw",
        SOCKET_DIR: "ro",
        **({AGENT_FILES: "ro"} if spec.agent.files or pooled else {}),
        **({AGENT_CLAIM: "ro"} if pooled else {}),
    }
    # the bind sources that matter: the spec's agent files, and this attempt's workspace (by
    # its place in the run directory, so a moved run directory still verifies)
    sources = {
        m.get("Destination"): str(m.get("Source"))
        for m in inspect.get("Mounts") or []
        if m.get("Destination") in (WORKSPACE, AGENT_FILES)
    }
    workspace_source = sources.get(WORKSPACE, "")
    sources[WORKSPACE] = (
        "…/" + "/".join(workspace_source.split("/")[-4:])
        if workspace_source.startswith("/")
        else workspace_source
    )
    expected_sources = {
        WORKSPACE: f"…/attempts/{attempt}/{workspace_fs.MOUNT_POINT}/{workspace_fs.WORKSPACE}",
        **({AGENT_FILES: os.path.normpath(spec.agent.files)} if spec.agent.files else {}),
    }
    if (
        pooled
    ):  # the pair's own folders, made for it, renamed to attempts/<n> when claimed (run/pool.py)
        expected_sources = {
            WORKSPACE: "…/" + "/".join(str(pooled.get("workspace")).split("/")[-4:]),
            AGENT_FILES: str(pooled.get("agent_files")),
        }
    tmpfs = {
        k: sorted(str(v).split(","))
        for k, v in (_lookup(inspect, ("HostConfig", "Tmpfs")) or {}).items()
    }
    reported_ulimits = {
        u.get("Name"): (u.get("Soft"), u.get("Hard"))
        for u in _lookup(inspect, ("HostConfig", "Ulimits")) or []
    }
    return [
        ("HostConfig.Runtime", spec.sandbox.runtime, _lookup(inspect, ("HostConfig", "Runtime"))),
        (
            "HostConfig.SecurityOpt seccomp",
            [_seccomp_summary(seccomp.security_opt(spec.sandbox.runtime))],
            profiles,
        ),
        # the engine applies a seccomp profile only where it was built with seccomp support
        ("engine seccomp support", True, any(o.startswith("name=seccomp") for o in engine)),
        # no AppArmor on the engine: the profile is empty; with it, a confining one
        (
            "AppArmorProfile",
            "confined",
            _apparmor(apparmor, security_opt, any(o.startswith("name=apparmor") for o in engine)),
        ),
        ("Mounts", expected_mounts, mounts),
        ("Mounts sources", expected_sources, sources),
        (
            "HostConfig.Tmpfs",
            {k: sorted(v.split(",")) for k, v in agent_tmpfs(spec).items()},
            tmpfs,
        ),
        (
            "HostConfig.Ulimits",
            {u["name"]: (u["soft"], u["hard"]) for u in ulimits(limits.nofile, limits.disk)},
            reported_ulimits,
        ),
    ]


def _seccomp_summary(option: str) -> str:
    """`seccomp=unconfined` as it is, a profile by its digest (the text is 10 kB of JSON)."""
    value = option.split("=", 1)[1]
    return (
        f"seccomp={value}"
        if value in ("unconfined", "")
        else f"seccomp=sha256:{seccomp.digest(value)}"
    )


def _apparmor(profile: Any, security_opt: list[str], engine_has_apparmor: bool) -> str:
    if profile == "unconfined" or any(
        o.replace(":", "=", 1) == "apparmor=unconfined" for o in security_opt
    ):
        return "unconfined"
    if engine_has_apparmor and not profile:
        return "no profile although the engine has AppArmor"
    return "confined"


def layer_changes(layer: Snapshot) -> list[dict[str, Any]]:
    """Changes as read from the container's writable layer: every entry there was written by
    the container (or the runtime); overlay whiteouts (a 0/0 character device, or a `.wh.`
    name) mark deletions. Same shape as the `docker diff` collection."""
    out = []
    for entry in layer.entries.values():
        name = entry.path.rsplit("/", 1)[-1]
        parent = entry.path[: -len(name)]
        if entry.kind == "chardev":  # the agent cannot mknod (no CAP_MKNOD): a whiteout
            out.append({"path": f"/{entry.path}", "kind": "deleted"})
        elif name.startswith(".wh."):
            if name != ".wh..wh..opq":
                out.append({"path": f"/{parent}{name[4:]}", "kind": "deleted"})
        else:
            change = {
                "path": f"/{entry.path}",
                "kind": "modified" if entry.kind == "dir" else "added",
                "type": entry.kind,
                "sha256": entry.sha256,
                "target": entry.target,
                "note": entry.note,
            }
            out.append({k: v for k, v in change.items() if v is not None})
    return sorted(out, key=lambda c: c["path"])


def filesystem_changes(changes: list[dict[str, Any]]) -> list[Finding]:
    """One finding per change, leaving out mount points and folders modified only because a
    change below them is already listed."""
    paths = [str(c.get("path", "")) for c in changes]
    findings = []
    for change, path in zip(changes, paths, strict=False):
        if path in EXPECTED_PATHS or path.startswith(MOUNTED_PREFIXES):
            continue
        if (
            change.get("kind") == "modified"
            and change.get("type") == "dir"
            and any(p.startswith(path.rstrip("/") + "/") for p in paths)
        ):
            continue
        detail = {
            k: change.get(k)
            for k in ("kind", "type", "sha256", "target", "note")
            if change.get(k) is not None
        }
        findings.append(
            Finding(
                Kind.CONTAINER_CHANGED,
                path,
                f"container filesystem {change.get('kind')} outside the workspace and tmpfs",
                None,
                detail,
            )
        )
    return findings
