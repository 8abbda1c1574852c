"""The checks phase against one bare `docker run` of the same command, in the same run.

A spec with one `command` (`python3 tests/test_calc.py`) and three `cases`
(`python3 tests/add_cli.py A B`) on the calc fixture. Each round, interleaved:
- bare: `docker run --rm` of the command on the fixture, bind-mounted (the engine's floor);
- shared: the checks phase as the attempt runs it (`checks.shared_checks`: one container per
  image, each check started by its sequencer on its own fresh copy and /tmp);
- per-check: the same phase with one container per check (what it was before).
Prints the medians and the ratios to bare; the target is shared <= 1.5x bare.
Usage: python bench/checks_bench.py [ROUNDS]   (root and loop devices needed)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from assure import spec as spec_mod
from assure.run import checks
from assure.sandbox import backend as backend_mod
from assure.sandbox.docker.backend import DockerBackend
from assure.sandbox.docker.images import Images
from assure.verify import snapshot

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 7
FIXTURE = ROOT / "fixtures" / "workspaces" / "calc"
USER = (10001, 10001)
COMMAND = ["python3", "tests/test_calc.py"]


def make_spec(where: Path) -> spec_mod.Spec:
    data = {
        "version": 1,
        "name": "bench-checks",
        "agent": {"command": ["true"]},
        "workspace": {"fixture": str(FIXTURE), "protected": ["tests/**"]},
        "assertions": [
            {"command": {"run": COMMAND}},
            {
                "cases": {
                    "run": ["python3", "tests/add_cli.py"],
                    "each": [
                        {"args": ["40", "2"], "stdout": "42\n"},
                        {"args": ["-7", "3"], "stdout": "-4\n"},
                        {"args": ["5", "6"], "stdout": "11\n"},
                    ],
                }
            },
        ],
        "expect": "pass",
    }
    path = where / "bench-checks.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec_mod.load(path)


def phase(spec, backend, image: str, scratch: Path, post: dict, *, shared: bool) -> float:
    labels = backend_mod.labels("bench-checks", 1, 0, "bench")
    start = time.monotonic()
    warm = (spec, image) if shared else None
    views = checks.views_of(spec)
    with checks.shared_checks(backend, scratch, labels, "bench-checks", USER, warm, views) as pool:
        kw = {"scratch": scratch, "user": USER, "shared": pool if shared else None}
        args = (spec, FIXTURE, post, backend, image, labels, "bench-checks")
        commands = checks.run_commands(*args, **kw)
        cases = checks.run_cases(*args, **kw)
    took = time.monotonic() - start
    ran = [*commands, *(r for c in cases for r in c["results"])]
    assert len(ran) == 4 and not any(r["timed_out"] or "not_run" in r for r in ran), ran
    return took


def bare(image: str) -> float:
    start = time.monotonic()
    subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--user", f"{USER[0]}:{USER[1]}"]
        + ["-v", f"{FIXTURE}:/workspace:ro", "-w", "/workspace", image, *COMMAND],
        capture_output=True,
    )  # exit 1: the fixture has the bug the agent fixes
    return time.monotonic() - start


def main() -> None:
    backend = DockerBackend()
    image = Images(backend).ensure().agent
    times: dict[str, list[float]] = {"bare": [], "shared": [], "per-check": []}
    with tempfile.TemporaryDirectory(prefix="assure-checks-bench-") as tmp:
        where = Path(tmp)
        spec = make_spec(where)
        post = snapshot.take(FIXTURE).to_json()  # what the checks' views are made from
        phase(spec, backend, image, where, post, shared=True)  # warm the page cache and the engine
        for _ in range(ROUNDS):
            times["bare"].append(bare(image))
            times["shared"].append(phase(spec, backend, image, where, post, shared=True))
            times["per-check"].append(phase(spec, backend, image, where, post, shared=False))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"checks phase, 1 command + 3 cases, {ROUNDS} rounds (medians, same run):")
    for k in ("bare", "shared", "per-check"):
        print(f"  {k:10s} {med[k]:6.3f} s  {med[k] / med['bare']:5.2f}x bare")
    print(f"checks_shared_ratio={med['shared'] / med['bare']:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
