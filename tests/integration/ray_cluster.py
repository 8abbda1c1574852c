"""A real Ray cluster on this machine for the cluster tests: a head and worker nodes, each a
`ray start --block` in a session of its own, all inside a network namespace that has nothing
but loopback, so no Ray traffic can leave 127.0.0.1 whatever Ray binds to.

Why a namespace: Ray 2.60 rewrites an explicit `--node-ip-address=127.0.0.1` to the host's
outward address once multi-node is enabled (`resolve_ip_for_localhost`), and its gRPC servers
listen on every interface. In a namespace whose only interface is `lo`, the outward address
*is* 127.0.0.1 and every interface is loopback. The Docker engine is reached through its unix
socket, which a network namespace does not hide.

Everything started is stopped by process id: each node's session (its `ray start` and every
process it spawned: gcs_server, raylet, workers) is SIGKILLed until none is left, then the
namespace removed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ENV = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1", "RAY_USAGE_STATS_ENABLED": "0"}


def session_pids(sid: int) -> list[int]:
    """Every live process of session `sid` (a node's `ray start` was started as its leader)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                pids.append(int(entry))
    return pids


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@dataclass
class Node:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    node_id: str = ""  # Ray's id for it, once it has joined

    @property
    def sid(self) -> int:
        return self.proc.pid

    def pids(self) -> list[int]:
        return session_pids(self.sid)

    def raylet(self) -> int:
        (pid,) = [p for p in self.pids() if comm(p) == "raylet"]
        return pid

    def kill(self, timeout: float = 30) -> None:
        """SIGKILL every process of the node's session, again and again until none is left: a
        process forked between a listing and the kills (a raylet starting a worker) is in the next
        listing, and one SIGKILLed is listed until it has died."""
        deadline = time.monotonic() + timeout
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                self.proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass
        if pids:
            raise AssertionError(f"{self.name}: Ray processes still alive after SIGKILL: {pids}")


@dataclass
class LocalCluster:
    netns: str
    port: int
    tmp: Path
    nodes: list[Node] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # every node's and check's, beside ENV
    python: str = sys.executable  # the nodes' (their `ray` beside it) and the checks'
    ray_tmp: str = field(
        default_factory=lambda: tempfile.mkdtemp(prefix="ar-", dir="/tmp")
    )  # short: Ray's socket paths must fit 107 bytes

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def in_ns(self, *argv: str) -> list[str]:
        """`argv` in the namespace's network only: `ip netns exec` would also give it a mount
        namespace of its own, and the loop-mounted workspaces it made there would be invisible to
        dockerd, which bind-mounts them into the containers."""
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--", *argv]

    def start_node(self, name: str, *args: str, env: dict[str, str] | None = None) -> Node:
        log = self.tmp / f"{name}.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                self.in_ns(
                    str(Path(self.python).with_name("ray")),
                    "start",
                    "--block",
                    "--node-ip-address=127.0.0.1",
                    "--disable-usage-stats",
                    *args,
                ),
                stdout=fh,
                stderr=subprocess.STDOUT,
                env={**ENV, **self.env, **(env or {})},
                start_new_session=True,
            )
        node = Node(name, proc, log)
        self.nodes.append(node)
        return node

    def alive_nodes(self) -> list[dict[str, object]]:
        code = (
            f"import json, ray; ray.init(address='{self.address}', logging_level='ERROR',"
            " log_to_driver=False);"
            " print('NODES', json.dumps([n for n in ray.nodes() if n['Alive']]))"
        )
        out = subprocess.run(
            self.in_ns(self.python, "-c", code),
            env={**ENV, **self.env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        lines = [
            line for line in out.stdout.splitlines() if line.startswith("NODES ")
        ]  # Ray may print its own lines too
        return json.loads(lines[-1].removeprefix("NODES ")) if out.returncode == 0 and lines else []

    def wait_for(self, count: int, timeout: float = 90) -> list[dict[str, object]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            alive = self.alive_nodes()
            if len(alive) >= count:
                return alive
            time.sleep(1)
        raise AssertionError(
            f"{count} Ray nodes did not come up: "
            + "; ".join(n.log.read_text(errors="replace")[-800:] for n in self.nodes)
        )

    def stop(self) -> None:
        failed = []
        for node in reversed(self.nodes):
            try:
                node.kill()
            except AssertionError as exc:  # the other nodes are stopped all the same
                failed.append(str(exc))
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)
        shutil.rmtree(self.ray_tmp, ignore_errors=True)
        if failed:
            raise AssertionError("; ".join(failed))


def start(
    tmp: Path,
    workers: int = 2,
    worker_env: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    python: str = sys.executable,
) -> LocalCluster:
    """A head (no `docker` resource: it only places) and `workers` nodes with one `docker` each
    (`worker_env` added to their environment, and so to their Ray workers'; `env` to every
    node's, the head's too, and to the checks that it is up: Ray's token authentication), run by
    `python`'s Ray (another checkout's, for a benchmark's before and after)."""
    netns = f"assure-ray-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    cluster = LocalCluster(netns, 6379, tmp, env=dict(env or {}), python=python)
    try:
        subprocess.run(cluster.in_ns("ip", "link", "set", "lo", "up"), check=True)
        cluster.start_node(
            "head",
            "--head",
            f"--port={cluster.port}",
            "--num-cpus=0",
            "--include-dashboard=false",
            f"--temp-dir={cluster.ray_tmp}",
        )
        seen = {n["NodeID"] for n in cluster.wait_for(1)}
        cluster.nodes[0].node_id = next(iter(seen))
        for n in range(
            workers
        ):  # one at a time: two raylets registering at once on one host can stall
            node = cluster.start_node(
                f"worker{n + 1}",
                f"--address={cluster.address}",
                "--num-cpus=1",
                '--resources={"docker": 1}',
                env=worker_env,
            )
            (node.node_id,) = {m["NodeID"] for m in cluster.wait_for(n + 2)} - seen
            seen.add(node.node_id)
    except BaseException:
        cluster.stop()
        raise
    return cluster
