"""End-to-end attempt cost against a bare Docker baseline, measured in the same run.

ours:     one trivial attempt through assure (fresh workspace, PRE snapshot, socket volume,
          gateway container ready on its socket, hardened agent running `true`, collect,
          cleanup, POST snapshot, verify).
baseline: the same Docker work with nothing of ours: create a volume, start a hardened
          sidecar, run a hardened `--network none` container to completion, remove both.
Prints medians and the ratio (target: ours <= 1.5x baseline). Runs are interleaved.
"""

from __future__ import annotations

import statistics
import sys
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
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 7
SPEC = f"""\
version: 1
name: trivial
agent: {{command: ["true"]}}
workspace: {{fixture: {ROOT / 'fixtures' / 'workspaces' / 'calc'}}}
assertions: [{{exit_code: 0}}]
expect: pass
"""


def baseline(backend: DockerBackend, images, spec, n: int) -> float:
    start = time.perf_counter()
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


def main() -> None:
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
        for n in range(ROUNDS):
            base_t.append(baseline(backend, images, spec, n))
            our_t.append(ours(backend, images, spec, Path(tmp) / "runs", phases))
    b, o = statistics.median(base_t), statistics.median(our_t)
    print("assure phases (median ms): " + ", ".join(f"{k} {statistics.median(v) * 1000:.0f}" for k, v in phases.items()))
    print(f"e2e attempt, {ROUNDS} rounds: baseline median {b * 1000:.0f} ms, assure median {o * 1000:.0f} ms, ratio {o / b:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
