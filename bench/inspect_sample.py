"""Wall time of one Inspect sample in the `assure` sandbox against the same commands in a bare
`docker run` container of assure's agent image, measured in the same run (issue 24).

Inspect's own `docker` sandbox needs the Docker Compose v2 plugin (`docker compose`), which
this machine's package sources do not carry, so the comparison is a bare container: create,
copy the fixture in, the sample's three commands by `docker exec`, remove.

    .venv/bin/python bench/inspect_sample.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from inspect_ai import eval as inspect_eval

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from assure.inspect import AssureConfig  # noqa: E402 -- after the path set above
from examples.inspect.task import SPEC, calc, fix_calc_script  # noqa: E402 -- the same

FIXTURE = ROOT / "fixtures" / "workspaces" / "calc"
COMMANDS = [
    "cat src/calc.py",
    "sed -i 's/return a - b/return a + b/' src/calc.py",
    "python3 tests/test_calc.py",
]


def assure_sample() -> tuple[float, float]:
    """(the eval's wall time, the sample's own as Inspect logs it: init to cleanup)."""
    with tempfile.TemporaryDirectory() as tmp:
        task = calc(fix_calc_script(), AssureConfig(spec=SPEC, runs_dir=f"{tmp}/runs"))
        start = time.monotonic()
        [log] = inspect_eval(task, log_dir=f"{tmp}/logs", display="none")
        took = time.monotonic() - start
        [sample] = log.samples
        assert sample.scores["assure_verdict"].value == "C"
        return took, float(sample.total_time or 0)


def agent_image() -> str:
    """The agent image the assure sample runs, by its content tag: `:latest` is retagged by
    any image build on this host, so it may be another checkout's."""
    from assure.sandbox import registry
    from assure.sandbox.docker.images import Images

    return Images(registry.create()).ensure().agent


def bare_docker(image: str) -> float:
    start = time.monotonic()
    name = f"assure-bench-inspect-{int(start)}"
    # a one-line helper
    run = lambda *a: subprocess.run(["docker", *a], check=True, capture_output=True)  # noqa: E731
    run(
        "run",
        "-d",
        "--name",
        name,
        "--network",
        "none",
        "-u",
        "0",
        image,
        "sleep",
        "3600",
    )
    try:
        run("cp", f"{FIXTURE}/.", f"{name}:/tmp/ws")
        for command in COMMANDS:
            run("exec", "-w", "/tmp/ws", name, "bash", "--login", "-c", command)
    finally:
        run("rm", "-f", name)
    return time.monotonic() - start


ROUNDS = 5  # alternated, so load on this shared machine falls on both sides alike

if __name__ == "__main__":
    samples, evals, bares = [], [], []
    image = agent_image()
    for _ in range(ROUNDS):
        whole, own = assure_sample()
        samples.append(own)
        evals.append(whole)
        bares.append(bare_docker(image))
    a, whole, d = (statistics.median(x) for x in (samples, evals, bares))
    print(
        f"one sample, median of {ROUNDS}: assure sandbox {a:.2f} s (the eval {whole:.2f} s), "
        f"bare docker run {d:.2f} s, ratio {a / d:.1f}x"
    )
