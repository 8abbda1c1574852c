"""Findings about the agent container itself, from what the engine reported after it stopped.

Two kinds: the hardening the container actually ran with (`docker inspect`, re-checked here
against the table in `sandbox.hardening`), and changes to its own filesystem outside the
mounts and the tmpfs (`docker diff`, with content digests collected by the host).
"""

from __future__ import annotations

from typing import Any

from ..sandbox.hardening import AGENT_FILES, CONTAINMENT, SOCKET_DIR, WORKSPACE, runtime_check
from .findings import Finding, Kind
from .snapshot import Snapshot

# Mount points and their parents appear in `docker diff` when the runtime creates them
# (the engine's init binary is bind-mounted at /sbin/docker-init, /usr/sbin on merged-usr).
# Exact paths only: anything created beside or below them is still reported.
EXPECTED_PATHS = frozenset({
    WORKSPACE, SOCKET_DIR, AGENT_FILES, "/tmp", "/run", "/opt", "/dev", "/proc", "/sys",
    "/etc", "/etc/hostname", "/etc/hosts", "/etc/resolv.conf",
    "/usr", "/usr/sbin", "/usr/sbin/docker-init", "/sbin", "/sbin/docker-init",
})
MOUNTED_PREFIXES = tuple(f"{p}/" for p in (WORKSPACE, SOCKET_DIR, AGENT_FILES, "/tmp", "/proc", "/sys", "/dev"))


def _lookup(data: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def containment(inspect: dict[str, Any], *, read_only_root: bool, runtime: str) -> list[Finding]:
    findings = []
    checks = CONTAINMENT + (("read-only root filesystem as the spec says", ("HostConfig", "ReadonlyRootfs"), lambda v: v is read_only_root),
                            runtime_check(runtime))
    for description, path, ok in checks:
        value = _lookup(inspect, path)
        if not ok(value):
            findings.append(Finding(Kind.CONTAINMENT_FAILED, ".".join(path), f"expected {description}, engine reports {value!r}"))
    return findings


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
            change = {"path": f"/{entry.path}", "kind": "modified" if entry.kind == "dir" else "added", "type": entry.kind,
                      "sha256": entry.sha256, "target": entry.target, "note": entry.note}
            out.append({k: v for k, v in change.items() if v is not None})
    return sorted(out, key=lambda c: c["path"])


def filesystem_changes(changes: list[dict[str, Any]]) -> list[Finding]:
    """One finding per change, leaving out mount points and folders modified only because a
    change below them is already listed."""
    paths = [str(c.get("path", "")) for c in changes]
    findings = []
    for change, path in zip(changes, paths):
        if path in EXPECTED_PATHS or path.startswith(MOUNTED_PREFIXES):
            continue
        if change.get("kind") == "modified" and change.get("type") == "dir" and any(p.startswith(path.rstrip("/") + "/") for p in paths):
            continue
        detail = {k: change.get(k) for k in ("kind", "type", "sha256", "target", "note") if change.get(k) is not None}
        findings.append(Finding(Kind.CONTAINER_CHANGED, path, f"container filesystem {change.get('kind')} outside the workspace and tmpfs", None, detail))
    return findings
