"""Suite throughput and per-spec overhead on a local Ray cluster against plain `-j`, in one run.

A suite of trivial specs (each agent exits 0 at once) runs, round after round, with plain
`assure suite -j 1` and `-j 2` (no Ray), then on a local cluster with two workers
(`--cluster`, -j 2) and, after one worker is stopped, with one (-j 1). Printed: specs per
second (median over rounds) and the median per-spec wall time (suite state's started/finished),
each as a ratio to plain -j with as many specs in flight. The cluster runs on this same
machine (tests/integration/ray_cluster.py: loopback-only namespace), so the ratio is what
Ray's placement, the object store round trip and the caller's re-judging cost, not more cores.

    python bench/cluster_bench.py [--specs 8] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration import ray_cluster  # noqa: E402 -- after sys.path

ASSURE = [sys.executable, "-m", "assure.cli"]
CALC = ROOT / "fixtures" / "workspaces" / "calc"


def make_suite(folder: Path, count: int) -> Path:
    for n in range(count):
        (folder / f"trivial-{n:02d}.yaml").write_text(
            f"version: 1\nname: trivial-{n:02d}\nagent:\n  command: [sh, -c, 'exit"
            f" 0']\nworkspace:\n  fixture: {json.dumps(str(CALC))}\nlimits: {{wall_seconds:"
            " 30}\nassertions:\n  - exit_code: 0\nexpect: pass\n"
        )
    suite = folder / "suite.yaml"
    suite.write_text("version: 1\nname: throughput\nspecs: ['trivial-*.yaml']\n")
    return suite


def per_spec_seconds(runs: Path) -> list[float]:
    (state,) = (runs.parent / "suites").glob("*/state.json")
    entries = json.loads(state.read_text())["runs"]
    return [(_t(e["finished_at"]) - _t(e["started_at"])) for e in entries]


def _t(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def one(argv: list[str], cwd: Path, runs: Path, count: int) -> tuple[float, float]:
    """(specs per second, median seconds per spec) of one suite run."""
    started = time.monotonic()
    done = subprocess.run(
        argv, cwd=cwd, env=ray_cluster.ENV, capture_output=True, text=True, timeout=900
    )
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return count / wall, statistics.median(per_spec_seconds(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="assure-cluster-bench-"))
    suite = make_suite(work, args.specs)
    results: dict[str, list[tuple[float, float]]] = {}

    def measure(name: str, argv_of, r: int) -> None:
        runs = work / f"{name.replace(' ', '_')}-{r}" / "runs"
        runs.parent.mkdir()
        results.setdefault(name, []).append(one(argv_of(runs), work, runs, args.specs))
        print(
            f"  {name} round {r + 1}: {results[name][-1][0]:.2f} specs/s",
            file=sys.stderr,
            flush=True,
        )

    def local(j: int):
        return lambda runs: [*ASSURE, "suite", str(suite), "-j", str(j), "--runs-dir", str(runs)]

    def on(j: int):
        return lambda runs: cluster.in_ns(
            *ASSURE,
            "suite",
            str(suite),
            "--cluster",
            cluster.address,
            "-j",
            str(j),
            "--runs-dir",
            str(runs),
        )

    (work / "ray-logs").mkdir()
    cluster = ray_cluster.start(work / "ray-logs", workers=2)
    try:
        for r in range(
            args.rounds
        ):  # interleaved: a drift of the machine touches every configuration alike
            measure("local -j1", local(1), r)
            measure("local -j2", local(2), r)
            measure("ray 2 workers -j2", on(2), r)
        cluster.nodes[-1].kill()  # one worker left
        while len(cluster.alive_nodes()) > 2:
            time.sleep(1)
        for r in range(args.rounds):
            measure("ray 1 worker -j1", on(1), r)
    finally:
        cluster.stop()
    med = {
        k: (statistics.median(t for t, _ in v), statistics.median(s for _, s in v))
        for k, v in results.items()
    }
    baseline = {"ray 2 workers -j2": "local -j2", "ray 1 worker -j1": "local -j1"}
    print(
        f"\nsuite of {args.specs} trivial specs, {args.rounds} rounds, medians (baseline: plain -j"
        " with as many in flight)"
    )
    print(
        f"{'configuration':<20} {'specs/s':>8} {'s/spec':>8} {'throughput ratio':>17}"
        f" {'per-spec ratio':>15}"
    )
    for name, (tput, per) in med.items():
        base = baseline.get(name)
        ratios = (
            f"{tput / med[base][0]:>16.2f}x {per / med[base][1]:>14.2f}x"
            if base
            else f"{'(baseline)':>17} {'':>15}"
        )
        print(f"{name:<20} {tput:>8.2f} {per:>8.2f} {ratios}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "schema_version": 1,
                    "specs": args.specs,
                    "rounds": args.rounds,
                    "medians": {
                        k: {"specs_per_second": t, "seconds_per_spec": s}
                        for k, (t, s) in med.items()
                    },
                    "ratios": {
                        k: {"throughput": med[k][0] / med[b][0], "per_spec": med[k][1] / med[b][1]}
                        for k, b in baseline.items()
                    },
                },
                indent=2,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
