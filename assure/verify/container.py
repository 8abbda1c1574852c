"""Findings about the agent container itself, from what the engine reported after it stopped.

Two kinds: the hardening the container actually ran with (the engine's `Observed`, compared
field by field with the `ContainerRequest` hardening asks for, and `sandbox.hardening`'s
rules), and changes to its own filesystem outside the mounts and the tmpfs (the engine's
`FsChange`s or its writable layer, with content digests collected by the host).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from assure.sandbox import hardening, seccomp, workspace_fs
from assure.sandbox.backend import ContainerRequest, Mount, Observed, Role
from assure.sandbox.hardening import (
    AGENT_CLAIM,
    AGENT_FILES,
    CONTAINMENT,
    SOCKET_DIR,
    WORKSPACE,
    agent_tmpfs,
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


def expected_request(
    spec: Spec, attempt: str, pooled: Mapping[str, Any] | None, user: str | None
) -> ContainerRequest:
    """What `hardening` asked of this attempt's agent, with the mounts the verifier can know:
    the workspace by its place in the run directory (a moved run directory still verifies:
    `attempt` is the attempt folder's last two names, `attempts/<n>`, as the record was found)
    and the spec's agent files, or the pooled pair's own folders (renamed to attempts/<n> when
    claimed: run/pool.py). A mount whose source is not checked has source "". `user` None: no
    user to hold the agent to (a record made before each attempt had its own, `auto`)."""
    workspace = f"…/{attempt}/{workspace_fs.MOUNT_POINT}/{workspace_fs.WORKSPACE}"
    files = os.path.normpath(spec.agent.files) if spec.agent.files else None
    if pooled:
        workspace = "…/" + "/".join(str(pooled.get("workspace")).split("/")[-4:])
        files = str(pooled.get("agent_files"))
    mounts = [Mount(workspace, WORKSPACE), Mount("", SOCKET_DIR, read_only=True)]
    if spec.agent.files or pooled:
        mounts.append(Mount(files or "", AGENT_FILES, read_only=True))
    if pooled:
        mounts.append(Mount("", AGENT_CLAIM, read_only=True))
    if user is None and spec.sandbox.user != "auto":
        user = spec.sandbox.user
    base = hardening.common_request(
        spec, Role.AGENT, "", {}, spec.limits.memory, spec.limits.pids, user=(0, 0)
    )
    return replace(base, user=user, tmpfs=agent_tmpfs(spec), mounts=tuple(mounts))


def containment(
    observed: Observed,
    spec: Spec,
    engine_security: list[str] | None,
    attempt: str,
    pooled: Mapping[str, Any] | None = None,
    user: str | None = None,
) -> list[Finding]:
    """`CONTAINMENT`'s rules, then what this spec asked for, field by field: runtime, seccomp
    profile, AppArmor, mounts (the workspace that of `attempt`, or of the pooled pair the
    attempt claimed: container.json `pool`), tmpfs and ulimits; and the attempt's own user
    (container.json `user`, as the host leased it: `sandbox/uids.py`)."""
    want = expected_request(spec, attempt, pooled, user)
    findings = []
    for rule in CONTAINMENT:
        got = getattr(observed, rule.field)
        if not rule.holds(getattr(want, rule.field, None), got):
            findings.append(
                Finding(
                    Kind.CONTAINMENT_FAILED,
                    rule.subject,
                    f"expected {rule.description}, engine reports {_as_json(_plain(got))}",
                )
            )
    for subject, expected, reported in _compared(want, observed, engine_security):
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
    want = expected_request(spec, "", None, None)
    subjects = [r.subject for r in CONTAINMENT] + [
        s for s, _, _ in _compared(want, Observed(status="exited"), None)
    ]
    return list(dict.fromkeys(subjects))  # the user: a rule, and compared when there is one


def _plain(value: Any) -> Any:
    """A reported value as JSON spells it: mounts as objects, tuples as lists."""
    if isinstance(value, tuple):
        return [vars(v) if isinstance(v, Mount) else v for v in value]
    return value


def _compared(
    want: ContainerRequest, got: Observed, engine_security: list[str] | None
) -> list[tuple[str, Any, Any]]:
    """(subject, expected, what the engine reports), each in a form that compares with ==.
    The user only when there is one to hold the agent to."""
    engine = engine_security or []
    sources = {m.target: str(m.source) for m in got.mounts if m.target in (WORKSPACE, AGENT_FILES)}
    workspace = sources.get(WORKSPACE, "")
    sources[WORKSPACE] = (
        "…/" + "/".join(workspace.split("/")[-4:]) if workspace.startswith("/") else workspace
    )
    compared = [
        ("HostConfig.Runtime", want.runtime, got.runtime),
        (
            "HostConfig.SecurityOpt seccomp",
            _profiles(want.security_opt),
            _profiles(got.security_opt),
        ),
        # the engine applies a seccomp profile only where it was built with seccomp support
        ("engine seccomp support", True, any(o.startswith("name=seccomp") for o in engine)),
        # no AppArmor on the engine: the profile is empty; with it, a confining one
        (
            "AppArmorProfile",
            "confined",
            _apparmor(got.apparmor, any(o.startswith("name=apparmor") for o in engine)),
        ),
        (
            "Mounts",
            {m.target: "ro" if m.read_only else "rw" for m in want.mounts},
            {m.target: "ro" if m.read_only else "rw" for m in got.mounts},
        ),
        (
            "Mounts sources",
            {m.target: m.source for m in want.mounts if m.target in (WORKSPACE, AGENT_FILES)},
            sources,
        ),
        ("HostConfig.Tmpfs", _options(want.tmpfs), _options(got.tmpfs)),
        (
            "HostConfig.Ulimits",
            {u.name: (u.soft, u.hard) for u in want.ulimits},
            {u.name: (u.soft, u.hard) for u in got.ulimits},
        ),
    ]
    if want.user is not None:
        compared.append(("Config.User", want.user, got.user))
    return compared


def _profiles(security_opt: tuple[str, ...]) -> list[str]:
    return sorted(_seccomp_summary(o) for o in security_opt if o.startswith("seccomp="))


def _options(tmpfs: Mapping[str, str]) -> dict[str, list[str]]:
    return {k: sorted(str(v).split(",")) for k, v in tmpfs.items()}


def _seccomp_summary(option: str) -> str:
    """`seccomp=unconfined` as it is, a profile by its digest (the text is 10 kB of JSON)."""
    value = option.split("=", 1)[1]
    return (
        f"seccomp={value}"
        if value in ("unconfined", "")
        else f"seccomp=sha256:{seccomp.digest(value)}"
    )


def _apparmor(profile: str | None, engine_has_apparmor: bool) -> str:
    if profile == "unconfined":
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
