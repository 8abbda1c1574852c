"""Garbage collection: remove what assure processes that are gone left behind (containers,
volumes, networks, workspace filesystems, the scratch folders of cluster tasks). A resource is
an orphan when the process its labels name (host and pid) is no longer alive on this host;
`everything` takes all. Only what this user made (its uid label, the owner of a run folder)
or what belongs to a run of this runs folder is taken, unless `all_users`; `dry_run` removes
nothing and says what would go."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from assure.records import layout, store
from assure.run import cluster, pool
from assure.sandbox import workspace_fs
from assure.sandbox.backend import LABEL_HOST, LABEL_PID, LABEL_RUN, LABEL_UID, SandboxBackend

KINDS = (
    "containers",
    "networks",
    "volumes",
)  # removal order: a network or volume is freed by its containers


@dataclass(frozen=True)
class Removed:
    containers: int
    volumes: int
    networks: int
    workspaces: int
    # the scratch folders of cluster tasks lost with their node or driver (run/cluster.py)
    node_scratch: int
    dry_run: bool = False  # nothing was removed: these are what would be
    names: list[str] = field(default_factory=list)  # `kind id-or-path` of each


def is_orphan(labels: Mapping[str, str], host: str, everything: bool) -> bool:
    """Whether the process that created a resource is gone (a live or foreign process keeps it)."""
    if everything or labels.get(LABEL_HOST) != host:
        return everything
    try:
        os.kill(int(labels.get(LABEL_PID, "0")), 0)
        return False
    except (ProcessLookupError, ValueError):
        return True
    except PermissionError:
        return False


def is_ours(labels: Mapping[str, str], runs_dir: Path | None, uid: int) -> bool:
    """Whether this user's process made a resource (its uid label), or it belongs to a run of
    this runs folder: another user's orphans are theirs to collect."""
    if labels.get(LABEL_UID) == str(uid):
        return True
    run = labels.get(LABEL_RUN, "")
    return (
        runs_dir is not None and store.RUN_ID.match(run) is not None and (runs_dir / run).is_dir()
    )


def _folder_is_ours(folder: Path, runs_dir: Path | None, uid: int) -> bool:
    try:
        return folder.lstat().st_uid == uid or (
            runs_dir is not None
            and Path(os.path.abspath(folder)).is_relative_to(os.path.abspath(runs_dir))
        )
    except OSError:
        return False


def collect(
    backend: SandboxBackend,
    *,
    everything: bool = False,
    runs_dir: Path | None = None,
    all_users: bool = False,
    dry_run: bool = False,
) -> Removed:
    """Remove the orphans (and, given the runs folder, the folders of dead warm pools); raises
    AssureError if the engine or the workspaces cannot be listed."""
    owned = backend.owned()
    host, uid = socket.gethostname(), os.getuid()
    removed = dict.fromkeys(KINDS, 0)
    names: list[str] = []
    remove = {
        "containers": backend.remove_container,
        "volumes": backend.remove_volume,
        "networks": backend.remove_network,
    }
    for kind in KINDS:
        for item in owned[kind]:
            if is_orphan(item, host, everything) and (all_users or is_ours(item, runs_dir, uid)):
                if not dry_run:
                    remove[kind](item["id"])
                removed[kind] += 1
                names.append(f"{kind[:-1]} {item.get('name') or item['id']}")

    def orphaned(folder: Path) -> bool:
        return (everything or not store.is_locked(folder)) and (
            all_users or _folder_is_ours(folder, runs_dir, uid)
        )

    # after the containers: nothing holds their workspaces now
    if dry_run:
        workspaces = [
            point
            for point, folder in workspace_fs.workspace_mounts(layout.mount_owner)
            if orphaned(folder)
        ]
        base = runs_dir / layout.POOL if runs_dir is not None else None
        pools = (
            [
                f
                for f in sorted(base.iterdir())
                if f.is_dir() and (everything or not store.is_locked(f))
            ]
            if base and base.is_dir()
            else []
        )
        scratch = cluster.release_orphan_scratch(dry_run=True)
    else:
        workspaces = workspace_fs.release_orphans(orphaned, layout.mount_owner)
        pools = pool.release_orphans(runs_dir, backend, everything) if runs_dir is not None else []
        scratch = (
            cluster.release_orphan_scratch()
        )  # after the workspaces: nothing is mounted in them now
    names += (
        [f"workspace {p}" for p in workspaces]
        + [f"pool folder {p}" for p in pools]
        + [f"node scratch {p}" for p in scratch]
    )
    return Removed(
        removed["containers"],
        removed["volumes"],
        removed["networks"],
        len(workspaces),
        len(scratch),
        dry_run,
        names,
    )
