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

The suites: 8 trivial specs (each agent exits 0 at once: the cluster's fixed costs, the worst
case) and suites/demo.yaml (the README's demo: real agents), unless --suite names others.

    python bench/cluster_bench.py [--suite FILE]... [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
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

ASSURE = [sys.executable, "-m", "assure.cli"]
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


def wall(argv: list[str], cwd: Path) -> tuple[float, dict[str, float]]:
    """Seconds one `assure suite` command took, start to exit (it must succeed), and where they
    went (`PARTS`, read from the suite run it wrote in `cwd`)."""
    started, at = time.monotonic(), time.time()
    done = subprocess.run(
        argv, cwd=cwd, env=ray_cluster.ENV, capture_output=True, text=True, timeout=900
    )
    took = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}")
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
    parser.add_argument("--specs", type=int, default=8, help="specs of the trivial suite")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="assure-cluster-bench-"))
    suites = (
        [p.resolve() for p in args.suite]
        if args.suite
        else [
            trivial_suite(work, args.specs),
            ROOT / "suites" / "demo.yaml",
        ]
    )
    times: dict[str, dict[str, list[float]]] = {
        s.stem: {"local": [], "cluster": []} for s in suites
    }
    parts: dict[str, dict[str, list[dict[str, float]]]] = {
        s.stem: {"local": [], "cluster": []} for s in suites
    }
    (work / "ray-logs").mkdir()
    cluster = ray_cluster.start(work / "ray-logs", workers=2)
    try:
        for r in range(args.rounds):
            for suite in suites:
                for side in ("local", "cluster") if r % 2 == 0 else ("cluster", "local"):
                    runs = work / f"{suite.stem}-{side}-{r}" / "runs"
                    runs.parent.mkdir()
                    argv = [*ASSURE, "suite", str(suite), "-j", str(JOBS), "--runs-dir", str(runs)]
                    if side == "cluster":
                        argv = cluster.in_ns(*argv, "--cluster", cluster.address)
                    took, where = wall(argv, runs.parent)
                    times[suite.stem][side].append(took)
                    parts[suite.stem][side].append(where)
                    print(
                        f"  round {r + 1} {suite.stem} {side}: {times[suite.stem][side][-1]:.2f} s",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        cluster.stop()
    figures: dict[str, dict[str, Any]] = {}
    print(
        f"\ncluster (2 workers, -j {JOBS}) against local -j {JOBS} (the baseline), {args.rounds}"
        f" rounds alternated, medians; target ratio <= {TARGET}"
    )
    print(f"{'suite':<12} {'local s':>8} {'cluster s':>10} {'ratio':>6}  range of the pairs")
    for name, t in times.items():
        ratios = sorted(c / b for b, c in zip(t["local"], t["cluster"], strict=True))
        local, on = statistics.median(t["local"]), statistics.median(t["cluster"])
        ratio = statistics.median(ratios)
        figures[name] = {"local_seconds": t["local"], "cluster_seconds": t["cluster"]}
        figures[name]["parts"] = {
            side: {k: statistics.median(w[k] for w in parts[name][side]) for k in PARTS}
            for side in ("local", "cluster")
        }
        figures[name].update(ratio=ratio, ratio_min=ratios[0], ratio_max=ratios[-1])
        print(
            f"{name:<12} {local:>8.2f} {on:>10.2f} {ratio:>5.2f}x  {ratios[0]:.2f}-{ratios[-1]:.2f}"
            f"  {'ok' if ratio <= TARGET else 'above target'}"
        )
    print(f"\nwhere the time goes, medians in s ({', '.join(PARTS)})")
    for name, figure in figures.items():
        for side, got in figure["parts"].items():
            print(f"{name:<12} {side:<8} " + "  ".join(f"{k} {got[k]:5.2f}" for k in PARTS))
    if args.json:
        args.json.write_text(
            json.dumps(
                {"schema_version": 2, "jobs": JOBS, "rounds": args.rounds, "suites": figures},
                indent=2,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
