"""Garbage collection: remove what assure processes that are gone left behind (containers,
volumes, networks, workspace filesystems, the scratch folders of cluster tasks). A resource is
an orphan when the process its labels name (host and pid) is no longer alive on this host;
`everything` takes all."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from assure.records import store
from assure.run import cluster, pool
from assure.sandbox import workspace_fs
from assure.sandbox.backend import LABEL_HOST, LABEL_PID, SandboxBackend

KINDS = ("containers", "networks", "volumes")  # removal order: a network or volume is freed by its containers


@dataclass(frozen=True)
class Removed:
    containers: int
    volumes: int
    networks: int
    workspaces: int
    node_scratch: int  # the scratch folders of cluster tasks lost with their node or driver (run/cluster.py)


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


def collect(backend: SandboxBackend, *, everything: bool = False, runs_dir: Path | None = None) -> Removed:
    """Remove the orphans (and, given the runs folder, the folders of dead warm pools); raises
    AssureError if the engine or the workspaces cannot be listed."""
    owned = backend.owned()
    host = socket.gethostname()
    removed = dict.fromkeys(KINDS, 0)
    remove = {"containers": backend.remove_container, "volumes": backend.remove_volume, "networks": backend.remove_network}
    for kind in KINDS:
        for item in owned[kind]:
            if is_orphan(item, host, everything):
                remove[kind](item["id"])
                removed[kind] += 1
    # after the containers: nothing holds their workspaces now
    released = workspace_fs.release_orphans(lambda run_dir: everything or not store.is_locked(run_dir))
    if runs_dir is not None:
        pool.release_orphans(runs_dir, backend, everything)
    scratch = cluster.release_orphan_scratch()  # after the workspaces: nothing is mounted in them now
    return Removed(removed["containers"], removed["volumes"], removed["networks"], len(released), len(scratch))
