"""Where a spec's CPU goes: the engine's (dockerd, containerd, each container's shim with the
runc it runs, each container's fuse-overlayfs), the containers' own (the gateway's Python, the
agent), and the host process's (`assure suite`, with the mkfs/mount it runs), per spec, for an
`assure suite` of COUNT copies of bench/suites/trivial.yaml at -j JOBS and for the same count of
bare two-container sequences (bench/bare_throughput.py), measured in the same run.

/proc is sampled every SAMPLE_SECONDS: a shim, a fuse-overlayfs or a container's cgroup is
counted at the last value seen (a process that lives less than a sample is counted in its
parent's children's time: runc in its shim's, less the container's own cgroup), and only for
the containers the measured process made (their `assure.pid` label, or bench/e2e.py's names
with its pid). dockerd and containerd serve every client of the shared engine: their share is
the whole delta, an upper bound on a loaded machine. `--before CHECKOUT` runs the same suite
on another checkout of the code too, each round, for a before/after in the same conditions.

    python bench/spec_cpu.py [--jobs J] [--count N] [--rounds R] [--pool P] [--before DIR]
                             [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")
SAMPLE_SECONDS = 0.01
DOCKER = Path("/var/lib/docker")
CGROUP = Path("/sys/fs/cgroup/cpuacct/docker")


def _stat(pid: str) -> tuple[str, int, float, float] | None:
    """(comm, ppid, own CPU seconds, reaped children's CPU seconds)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = raw[raw.index("(") + 1 : raw.rindex(")")]
    f = raw[raw.rindex(")") + 2 :].split()
    return comm, int(f[1]), (int(f[11]) + int(f[12])) / TICK, (int(f[13]) + int(f[14])) / TICK


def _cmdline(pid: str) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _labels(cid: str) -> dict[str, str]:
    try:
        doc = json.loads((DOCKER / "containers" / cid / "config.v2.json").read_text())
    except (OSError, ValueError):
        return {}
    return {**(doc.get("Config", {}).get("Labels") or {}), "name": str(doc.get("Name", ""))}


def _mount_id(cid: str) -> str | None:
    for driver in ("fuse-overlayfs", "overlay2"):
        try:
            return (DOCKER / "image" / driver / "layerdb/mounts" / cid / "mount-id").read_text()
        except OSError:
            continue
    return None


class Sampler:
    """Last-seen CPU of the engine's processes and of the containers' cgroups."""

    def __init__(self) -> None:
        self.engine: dict[str, float] = {}  # dockerd/containerd at start
        self.shims: dict[str, tuple[str, float]] = {}  # pid -> (cid, cpu incl. reaped children)
        self.fuse: dict[str, tuple[str, float]] = {}  # pid -> (upperdir layer, cpu)
        self.cgroups: dict[str, float] = {}  # cid -> cpuacct seconds
        self.labels: dict[str, dict[str, str]] = {}
        self.mounts: dict[str, str] = {}  # layer id -> cid
        self.daemons = {
            comm: pid
            for pid in os.listdir("/proc")
            if pid.isdigit() and (s := _stat(pid)) and (comm := s[0]) in ("dockerd", "containerd")
        }
        self.start = {c: self._own(p) for c, p in self.daemons.items()}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    @staticmethod
    def _own(pid: str) -> float:
        s = _stat(pid)
        return s[2] + s[3] if s else 0.0

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            time.sleep(SAMPLE_SECONDS)
        self._sample()

    def _sample(self) -> None:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            s = _stat(pid)
            if s is None:
                continue
            comm, _, own, kids = s
            if comm.startswith("containerd-shim"):
                if pid not in self.shims:
                    argv = _cmdline(pid)
                    cid = argv[argv.index("-id") + 1] if "-id" in argv else ""
                    if cid and cid not in self.labels:
                        self.labels[cid] = _labels(cid)
                        mount = _mount_id(cid)
                        if mount:
                            self.mounts[mount] = cid
                    self.shims[pid] = (cid, own + kids)
                else:
                    self.shims[pid] = (self.shims[pid][0], own + kids)
            elif comm == "fuse-overlayfs":
                if pid not in self.fuse:
                    argv = " ".join(_cmdline(pid))
                    layer = ""
                    if "upperdir=" in argv:
                        upper = argv.split("upperdir=", 1)[1].split(",", 1)[0]
                        layer = Path(upper).parent.name
                    self.fuse[pid] = (layer, own + kids)
                else:
                    self.fuse[pid] = (self.fuse[pid][0], own + kids)
        try:
            for cid in os.listdir(CGROUP):
                try:
                    ns = int((CGROUP / cid / "cpuacct.usage").read_text())
                except (OSError, ValueError):
                    continue
                self.cgroups[cid] = ns / 1e9
                if cid not in self.labels:
                    self.labels[cid] = _labels(cid)
                    mount = _mount_id(cid)
                    if mount:
                        self.mounts[mount] = cid
        except OSError:
            pass

    def stop(self, pid: int) -> dict[str, Any]:
        """CPU seconds of what the process `pid` made (its containers' `assure.pid` label)."""
        self._stop.set()
        self._thread.join()
        mine = {
            cid
            for cid, lab in self.labels.items()
            if lab.get("assure.pid") == str(pid) or f"-{pid}-" in lab.get("name", "")
        }
        roles: dict[str, int] = {}
        for cid in mine:
            role = self.labels[cid].get("assure.role", "?")
            if role == "?":  # bench/e2e.py `bare`: its sidecar and its agent, by name
                role = "gateway" if "-side-" in self.labels[cid]["name"] else "agent"
                self.labels[cid]["assure.role"] = role
            roles[role] = roles.get(role, 0) + 1
        return {
            "containers": len(mine),
            "roles": roles,
            **{c: round(self._own(p) - self.start[c], 3) for c, p in self.daemons.items()},
            # a shim reaps runc and its container's processes: those are the cgroup's, not its own
            "shim_runc": round(
                sum(cpu for cid, cpu in self.shims.values() if cid in mine)
                - sum(self.cgroups.get(c, 0.0) for c in mine),
                3,
            ),
            "fuse_overlayfs": round(
                sum(cpu for layer, cpu in self.fuse.values() if self.mounts.get(layer) in mine), 3
            ),
            "containers_cpu": round(sum(self.cgroups.get(c, 0.0) for c in mine), 3),
            "by_role": {
                role: round(
                    sum(
                        self.cgroups.get(c, 0.0)
                        for c in mine
                        if self.labels[c].get("assure.role") == role
                    ),
                    3,
                )
                for role in roles
            },
        }


def _system_cpu() -> float:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    return (sum(int(x) for x in fields) - int(fields[3]) - int(fields[4])) / TICK


def measure(
    argv: list[str], count: int, report: Path | None = None, env: dict[str, str] | None = None
) -> dict[str, Any]:
    sampler = Sampler()
    system = _system_cpu()
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    engine = sampler.stop(proc.pid)
    if status != 0:
        print(err[-2000:], file=sys.stderr)
    if report is not None:  # bare_throughput.py's own timing: its warm-up and start left out
        seconds = count / json.loads(report.read_text())["per_second"]
    return {
        "seconds": round(seconds, 3),
        "host": round(usage.ru_utime + usage.ru_stime, 3),
        "system": round(_system_cpu() - system, 3),
        "ok": status == 0 or os.waitstatus_to_exitcode(status) in (0, 1),
        **engine,
    }


def suite(folder: Path, count: int) -> Path:
    template = yaml.safe_load((ROOT / "bench" / "suites" / "trivial.yaml").read_text())
    template["workspace"]["fixture"] = str(ROOT / "fixtures" / "workspaces" / "calc")
    specs = folder / "specs"
    specs.mkdir(parents=True)
    for n in range(1, count + 1):
        (specs / f"trivial-{n}.yaml").write_text(
            yaml.safe_dump({**template, "name": f"trivial-{n}"})
        )
    path = folder / "suite.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "name": "cpu", "specs": ["specs/*.yaml"]}))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--count", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pool", type=int, default=0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--assure", default=str(ROOT / ".venv" / "bin" / "assure"))
    parser.add_argument(
        "--before",
        type=Path,
        help="a checkout before a change: its suite is run too, each round (by PYTHONPATH)",
    )
    args = parser.parse_args()
    python = sys.executable
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="thru-cpu-") as tmp:
        for r in range(args.rounds):
            report = Path(tmp) / f"bare-{r}.json"
            bare = measure(
                [python, str(ROOT / "bench" / "bare_throughput.py"), "--jobs", str(args.jobs)]
                + ["--count", str(args.count), "--json", str(report)],
                args.count,
                report,
            )
            row = {"bare": bare}
            sides = {"suite": None}
            if args.before:
                sides = {"before": {**os.environ, "PYTHONPATH": str(args.before)}, **sides}
            for side, env in sides.items():
                folder = Path(tmp) / f"r{r}-{side}"
                path = suite(folder, args.count)
                extra = ["--pool", str(args.pool)] if args.pool else []
                cmd = [args.assure, "suite", str(path), "-j", str(args.jobs), *extra]
                cmd += ["--new", "--runs-dir", str(folder / "runs")]
                row[side] = measure(cmd, args.count, env=env)
            rows.append(row)
            print(json.dumps(row), flush=True)
    per = {
        side: {
            k: round(statistics.median(row[side][k] for row in rows) / args.count * 1000, 1)
            for k in ("seconds", "host", "system", "dockerd", "containerd", "shim_runc")
            + ("fuse_overlayfs", "containers_cpu")
        }
        for side in rows[0]
    }
    ratio = {
        side: round(
            statistics.median(row["bare"]["seconds"] / row[side]["seconds"] for row in rows), 3
        )
        for side in rows[0]
        if side != "bare"
    }
    doc = {"jobs": args.jobs, "count": args.count, "per_spec_ms": per, "of_bare": ratio}
    print(json.dumps(doc, indent=2))
    if args.json:
        args.json.write_text(json.dumps({**doc, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
