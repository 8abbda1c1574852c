"""Micro-benchmark: the CLI's fixed costs (issue 25 item 3), best and median of N fresh processes.

- `assure --version` and `assure --help` (targets: 0.15 s each); `--help` is answered from the
  copy of typer's output its untimed first run keeps (assure/cli/fasthelp.py), as a user's
  second `--help` is;
- `assure run SPEC` from exec to `Driver.drive` (target 0.15 s): imports, spec load, preflight,
  the engine and image checks, the run directory; the drive itself is not timed (it is stopped
  there), so this is what the CLI costs before the first spec starts;
- bare `python -c pass`, the floor, in the same run; with --before DIR (a checkout with its own
  .venv, e.g. /work/main), the same figures for that tree too, each shown as after/before.

Each figure is also given in CPU seconds (user + system) of the process, which a shared machine
inflates less than wall time. Byte-compiled files are written and used (PYTHONDONTWRITEBYTECODE
unset), as an installed assure has them.
Run: .venv/bin/python bench/cli_start_bench.py [--before DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = 9
SPEC = f"""\
version: 1
name: cli-start
agent: {{command: ["true"]}}
workspace: {{fixture: {ROOT / "fixtures" / "workspaces" / "calc"}}}
assertions: [{{exit_code: 0}}]
expect: pass
"""
# Runs `assure run` in this process and ends it where the first spec would start: the seconds
# since exec are printed (the parent passes its clock at spawn).
TO_DRIVE = """
import sys, time, os
from assure.run import driver
def stop(self):
    print(time.time() - float(os.environ["CLI_BENCH_T0"]), flush=True)
    os._exit(0)
driver.Driver.drive = stop
from assure.cli import app
app(sys.argv[1:], prog_name="assure")
"""


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Seconds from spawn to exit, or to what the process printed last if it is TO_DRIVE; and
    the CPU seconds (user + system) the process used, which a loaded machine inflates less."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    done = subprocess.run(
        cmd,
        env={**env, "CLI_BENCH_T0": repr(t0)},
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    took = time.time() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if done.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed: {done.stderr[-400:]}")
    lines = done.stdout.strip().splitlines()
    return (float(lines[-1]) if TO_DRIVE in cmd else took), cpu


def commands(tree: Path, work: Path) -> dict[str, list[str]]:
    py = str(tree / ".venv" / "bin" / "python")
    run = ["run", str(work / "spec.yaml"), "--runs-dir", str(work / f"runs-{tree.name}"), "--new"]
    return {
        "python -c pass": [py, "-c", "pass"],
        "assure --version": [py, "-m", "assure.cli", "--version"],
        "assure --help": [py, "-m", "assure.cli", "--help"],
        "assure run (to the first spec)": [py, "-c", TO_DRIVE, *run],
    }


Figures = dict[str, dict[str, list[float]]]


def figures(trees: dict[str, Path], work: Path) -> tuple[Figures, Figures]:
    """Each figure of each tree, wall and CPU seconds, interleaved run by run: every tree sees
    the same load."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cmds = {label: commands(tree, work) for label, tree in trees.items()}
    for label, tree in trees.items():  # once untimed: byte-compile, warm the page cache
        for cmd in cmds[label].values():
            timed(cmd, {**env, "PYTHONPATH": str(tree)}, tree)
    wall: Figures = {label: {n: [] for n in cmds[label]} for label in trees}
    cpu: Figures = {label: {n: [] for n in cmds[label]} for label in trees}
    for _ in range(RUNS):
        for label, tree in trees.items():
            for name, cmd in cmds[label].items():
                took, used = timed(cmd, {**env, "PYTHONPATH": str(tree)}, tree)
                wall[label][name].append(took)
                cpu[label][name].append(used)
    return wall, cpu


def _medians(results: Figures, unit: str) -> dict[str, dict[str, float]]:
    medians: dict[str, dict[str, float]] = {}
    for label, rows in results.items():
        medians[label] = {}
        for name, xs in rows.items():
            med = statistics.median(xs)
            medians[label][name] = med
            ratio = ""
            if label == "after" and "before" in results:
                ratio = f"  after/before {med / statistics.median(results['before'][name]):.2f}"
            print(f"{label:6} {name:32} {unit} best {min(xs):.3f} s  median {med:.3f} s{ratio}")
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--before", type=Path, help="a checkout with .venv to compare against")
    parser.add_argument("--json", type=Path, help="write the medians here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="assure-cli-bench-") as tmp:
        work = Path(tmp)
        (work / "spec.yaml").write_text(SPEC)
        trees = {"after": ROOT, **({"before": args.before.resolve()} if args.before else {})}
        wall, cpu = figures(trees, work)
    medians = _medians(wall, "wall")
    cpu_medians = _medians(cpu, "cpu ")
    if args.json:
        doc = {"schema_version": 1, "median_s": medians, "median_cpu_s": cpu_medians}
        args.json.write_text(json.dumps(doc, indent=2))


if __name__ == "__main__":
    sys.exit(main())
