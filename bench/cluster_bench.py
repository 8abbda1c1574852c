"""A suite on a one-host Ray cluster against the same suite run locally at the same -j, in one run
(issue 26 item 7: target at most 1.15x).

Each suite runs, round after round, with plain `assure suite -j 2` (the baseline) and with
`--cluster ADDRESS -j 2` on a local cluster of two workers with one `docker` each; the two
alternate, and which goes first swaps every round, so a drift of the shared machine touches both
alike. Printed per suite: the median wall time of each (the whole command, interpreter and Ray's
join included, as an operator waits for it), and the ratio cluster/local, median and range over
the rounds' pairs. The cluster runs on this same machine (tests/integration/ray_cluster.py: a
loopback-only network namespace), so the ratio is what Ray's placement, the node task's start,
the run directory's trip and the caller's re-judging cost, not more cores.

Where the time goes, from each run's suite `state.json` (medians per side): `before` (the
command's start to its suite run's: the interpreter, imports, Ray's join), `span` (the suite run
itself), `after` (its end to the command's exit: Ray's shutdown), and for the cluster `queued`
(the first specs' wait in Ray's queue: each node's Ray worker starting for this command).

Ray's own fixed cost per command, apart (`ray` line, medians): a bare Ray driver on the same
cluster, each round, timing `import ray`, the join, the first task on each `docker` node (a Ray
worker started for this job: Ray never gives a job another job's workers), a warm task, and
Ray's shutdown. What of a command's overhead is Ray's, not assure's.

`--before DIR`: a checkout of another commit (with its own `make install`) measured in the same
run, on a cluster of its own run by its own Ray and assure, each of its commands interleaved
with this checkout's: the before and after ratios are of the same minutes of the machine.

The suites: 20 trivial specs (each agent exits 0 at once: the cluster's fixed and per-spec
costs, the worst case) and suites/demo.yaml (the README's demo: real agents), unless --suite
names others.

    python bench/cluster_bench.py [--suite FILE]... [--specs 20] [--rounds 3] [--before DIR]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# the checkout's specs are signed with its example key (as the Makefile says); set before the
# cluster's environment is taken, so its nodes judge them alike
os.environ.setdefault("ASSURE_RATIFIERS", str(ROOT / "specs" / "ratifiers.yaml"))

from tests.integration import ray_cluster  # noqa: E402 -- after sys.path

CALC = ROOT / "fixtures" / "workspaces" / "calc"
TARGET = 1.15  # issue 26 item 7: cluster / local at the same -j
JOBS = 2  # the cluster's two workers' `docker` slots


def trivial_suite(folder: Path, count: int) -> Path:
    for n in range(count):
        (folder / f"trivial-{n:02d}.yaml").write_text(
            f"version: 1\nname: trivial-{n:02d}\nagent:\n  command: [sh, -c, 'exit"
            f" 0']\nworkspace:\n  fixture: {json.dumps(str(CALC))}\nlimits: {{wall_seconds:"
            " 30}\nassertions:\n  - exit_code: 0\nexpect: pass\n"
        )
    suite = folder / "trivial.yaml"
    suite.write_text("version: 1\nname: trivial\nspecs: ['trivial-*.yaml']\n")
    return suite


RAY_PHASES = ("import", "join", "first", "warm", "shutdown")
BARE_DRIVER = """
import json, sys, time
t = [time.monotonic()]
import ray
t.append(time.monotonic())
ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR",
         _node_ip_address="127.0.0.1")
t.append(time.monotonic())
nodes = int(ray.cluster_resources()["docker"])
task = ray.remote(resources={"docker": 1}, num_cpus=1)(lambda: None)
ray.get([task.remote() for _ in range(nodes)])
t.append(time.monotonic())
ray.get([task.remote() for _ in range(nodes)])
t.append(time.monotonic())
ray.shutdown()
t.append(time.monotonic())
print("PHASES", json.dumps([b - a for a, b in zip(t, t[1:])]))
"""


def ray_phases(cluster: ray_cluster.LocalCluster) -> dict[str, float]:
    """Seconds of each of Ray's own phases of one bare driver (`RAY_PHASES`)."""
    done = subprocess.run(
        cluster.in_ns(cluster.python, "-c", BARE_DRIVER, cluster.address),
        env=ray_cluster.ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("PHASES ")]
    return dict(zip(RAY_PHASES, json.loads(line.removeprefix("PHASES ")), strict=True))


def wall(argv: list[str], cwd: Path) -> tuple[float, dict[str, float]] | None:
    """Seconds one `assure suite` command took, start to exit, and where they went (`PARTS`,
    read from the suite run it wrote in `cwd`); None when it failed (a real agent past its wall
    budget on a loaded machine), said on stderr: its round's pair is left out."""
    started, at = time.monotonic(), time.time()
    done = subprocess.run(
        argv, cwd=cwd, env=ray_cluster.ENV, capture_output=True, text=True, timeout=900
    )
    took = time.monotonic() - started
    if done.returncode != 0:
        print(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-1500:]}", file=sys.stderr)
        return None
    (state,) = (json.loads(p.read_text()) for p in cwd.glob("suites/*/state.json"))
    begun, ended = _epoch(state["started_at"]), _epoch(state["finished_at"])
    first = sorted(state["runs"], key=lambda e: e["started_at"])[:JOBS]
    return took, {
        "before": begun - at,
        "span": ended - begun,
        "after": at + took - ended,
        "queued": max(e.get("queued_seconds") or 0.0 for e in first),
    }


PARTS = ("before", "span", "after", "queued")


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", type=Path, action="append", help="a suite file (repeatable)")
    parser.add_argument("--specs", type=int, default=20, help="specs of the trivial suite")
    parser.add_argument(
        "--before", type=Path, help="another checkout (its own .venv) measured alongside"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="assure-cluster-bench-"))
    suites = (
        [p.resolve() for p in args.suite]
        if args.suite
        else [trivial_suite(work, args.specs), ROOT / "suites" / "demo.yaml"]
    )
    pythons = {"after": sys.executable}  # a version -> the Python that runs it
    if args.before:
        pythons = {"before": str(args.before.resolve() / ".venv" / "bin" / "python"), **pythons}
    sides = [(v, side) for v in pythons for side in ("local", "cluster")]
    times: dict[str, dict[tuple[str, str], list[float]]] = {
        s.stem: {k: [] for k in sides} for s in suites
    }
    parts: dict[str, dict[tuple[str, str], list[dict[str, float]]]] = {
        s.stem: {k: [] for k in sides} for s in suites
    }
    phases: dict[str, list[dict[str, float]]] = {v: [] for v in pythons}
    clusters: dict[str, ray_cluster.LocalCluster] = {}
    try:
        for version, python in pythons.items():
            (work / f"ray-logs-{version}").mkdir()
            clusters[version] = ray_cluster.start(
                work / f"ray-logs-{version}", workers=2, python=python
            )
        for r in range(args.rounds):
            for version, cluster in clusters.items():
                phases[version].append(ray_phases(cluster))
            for suite in suites:
                for version, side in sides if r % 2 == 0 else sides[::-1]:
                    runs = work / f"{suite.stem}-{version}-{side}-{r}" / "runs"
                    runs.parent.mkdir()
                    argv = [
                        pythons[version], "-m", "assure.cli", "suite", str(suite),
                        "-j", str(JOBS), "--runs-dir", str(runs),
                    ]  # fmt: skip
                    if side == "cluster":
                        cluster = clusters[version]
                        argv = cluster.in_ns(*argv, "--cluster", cluster.address)
                    got = wall(argv, runs.parent)
                    took, where = got or (float("nan"), dict.fromkeys(PARTS, float("nan")))
                    times[suite.stem][version, side].append(took)
                    parts[suite.stem][version, side].append(where)
                    print(
                        f"  round {r + 1} {suite.stem} {version} {side}: {took:.2f} s"
                        f" (load {os.getloadavg()[0]:.1f})",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        for cluster in clusters.values():
            cluster.stop()
    figures: dict[str, dict[str, Any]] = {}
    print(
        f"\ncluster (2 workers, -j {JOBS}) against local -j {JOBS} (the baseline), {args.rounds}"
        f" rounds alternated, medians; target ratio <= {TARGET}; load average at the end"
        f" {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    print(f"{'suite':<12} {'version':<7} {'local s':>8} {'cluster s':>10} {'ratio':>6}  pairs")
    for name, t in times.items():
        figures[name] = {}
        for version in pythons:
            pairs = [
                (b, c)
                for b, c in zip(t[version, "local"], t[version, "cluster"], strict=True)
                if not (math.isnan(b) or math.isnan(c))
            ]  # the rounds where both succeeded
            local, on = [b for b, _ in pairs], [c for _, c in pairs]
            ratios = sorted(c / b for b, c in pairs)
            ratio = statistics.median(ratios)
            figures[name][version] = {
                "local_seconds": local,
                "cluster_seconds": on,
                "ratio": ratio,
                "ratio_min": ratios[0],
                "ratio_max": ratios[-1],
                "parts": {
                    side: {
                        k: statistics.median(
                            w[k] for w in parts[name][version, side] if not math.isnan(w[k])
                        )
                        for k in PARTS
                    }
                    for side in ("local", "cluster")
                },
            }
            print(
                f"{name:<12} {version:<7} {statistics.median(local):>8.2f}"
                f" {statistics.median(on):>10.2f} {ratio:>5.2f}x  {ratios[0]:.2f}-{ratios[-1]:.2f}"
                f"  {'ok' if ratio <= TARGET else 'above target'}"
            )
    print(f"\nwhere the time goes, medians in s ({', '.join(PARTS)})")
    for name, figure in figures.items():
        for version, got in figure.items():
            for side, where in got["parts"].items():
                print(
                    f"{name:<12} {version:<7} {side:<8} "
                    + "  ".join(f"{k} {where[k]:5.2f}" for k in PARTS)
                )
    ray_medians = {
        v: {k: statistics.median(p[k] for p in got) for k in RAY_PHASES}
        for v, got in phases.items()
    }
    print(f"\nray: a bare driver's own phases, medians in s ({', '.join(RAY_PHASES)})")
    for version, got in ray_medians.items():
        print(
            f"{'ray':<12} {version:<7} "
            + "  ".join(f"{k} {got[k]:5.2f}" for k in RAY_PHASES)
            + f"  total {sum(got.values()):5.2f}"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "schema_version": 3,
                    "jobs": JOBS,
                    "rounds": args.rounds,
                    "suites": figures,
                    "ray": ray_medians,
                },
                indent=2,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
