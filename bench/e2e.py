"""End-to-end attempt cost against a bare Docker baseline, measured in the same run.

ours:     one trivial attempt through assure (fresh workspace, PRE snapshot, socket volume,
          gateway container ready on its socket, hardened agent running `true`, collect,
          cleanup, POST snapshot, verify).
baseline: the same Docker work with nothing of ours: create a volume, start a hardened
          sidecar, run a hardened `--network none` container to completion, remove both.
Prints medians and the ratio (target: ours <= 1.5x baseline). Runs are interleaved.
Usage: python bench/e2e.py [ROUNDS] [--json PATH] (--json also writes the figures there, for
bench/scorecard.py).
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from dataclasses import replace

from assure import spec as spec_mod
from assure.records import store
from assure.run.driver import Driver
from assure.sandbox import hardening
from assure.sandbox.backend import Mount, Role
from assure.sandbox.docker import DockerBackend
from assure.sandbox.images import Images

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = 7
TOKEN = secrets.token_hex(4)
SPEC = f"""\
version: 1
name: trivial
agent: {{command: ["true"]}}
workspace: {{fixture: {ROOT / 'fixtures' / 'workspaces' / 'calc'}}}
assertions: [{{exit_code: 0}}]
expect: pass
"""


def baseline(backend: DockerBackend, images, spec, n: int | str) -> float:
    start = time.perf_counter()
    n = f"{TOKEN}-{n}"  # names of this process's own: two benchmarks on one engine must not collide
    labels = {"assure.owner": "assure", "assure.run": f"bench-baseline-{n}"}
    volume = backend.create_volume(f"bench-baseline-{n}", labels, hardening.socket_volume_options(spec))
    common = hardening.common_request(spec, Role.AGENT, images.agent, labels, "256m", 64)
    sidecar = backend.start_container(replace(common, role=Role.GATEWAY, image=images.gateway, name=f"bench-side-{n}", command=("sleep", "60"),
                                              mounts=(Mount(volume, "/run/assure"),)))
    agent = backend.start_container(replace(common, name=f"bench-agent-{n}", command=("true",), mounts=(Mount(volume, "/run/assure", read_only=True),)))
    backend.wait(agent, 60)
    for cid in (agent, sidecar):
        backend.remove_container(cid)
    backend.remove_volume(volume)
    return time.perf_counter() - start


def ours(backend, images, spec, runs: Path, phases: dict[str, list[float]]) -> float:
    start = time.perf_counter()
    run = store.RunDir.create(runs, store.new_run_id("trivial"), spec.path, spec.to_json())
    result = Driver(spec, run, backend, images, lambda *_: None).drive()
    elapsed = time.perf_counter() - start
    assert result.verdict == "pass", result.report
    for phase, seconds in result.report["attempts"][0]["timings"].items():
        phases.setdefault(phase, []).append(seconds)
    return elapsed


def summary(base_t: list[float], our_t: list[float], phases: dict[str, list[float]]) -> dict[str, object]:
    """The figures, in milliseconds: what the human lines and the --json document both show."""
    b, o = statistics.median(base_t), statistics.median(our_t)
    return {
        "rounds": len(our_t),
        "baseline_median_ms": round(b * 1000, 1),
        "assure_median_ms": round(o * 1000, 1),
        "ratio": round(o / b, 4),
        "baseline_ms": [round(t * 1000, 1) for t in base_t],
        "assure_ms": [round(t * 1000, 1) for t in our_t],
        "phases_median_ms": {k: round(statistics.median(v) * 1000, 1) for k, v in phases.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=int, nargs="?", default=ROUNDS)
    parser.add_argument("--json", type=Path, dest="json_path", help="also write the figures to this file as JSON")
    args = parser.parse_args()
    rounds = args.rounds
    backend = DockerBackend()
    images = Images(backend).ensure()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trivial.yaml"
        path.write_text(SPEC)
        spec = spec_mod.load(path)
        baseline(backend, images, spec, -1)
        phases: dict[str, list[float]] = {}
        ours(backend, images, spec, Path(tmp) / "runs", {})  # warm-up
        base_t, our_t = [], []
        for n in range(rounds):
            base_t.append(baseline(backend, images, spec, n))
            our_t.append(ours(backend, images, spec, Path(tmp) / "runs", phases))
    figures = summary(base_t, our_t, phases)
    print("assure phases (median ms): " + ", ".join(f"{k} {v:.0f}" for k, v in figures["phases_median_ms"].items()))
    print(f"e2e attempt, {rounds} rounds: baseline median {figures['baseline_median_ms']:.0f} ms, assure median {figures['assure_median_ms']:.0f} ms, "
          f"ratio {figures['ratio']:.2f}x (target <= 1.5x)")
    if args.json_path is not None:
        args.json_path.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
