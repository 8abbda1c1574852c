"""Suite throughput's baseline: bare two-container sequences (bench/e2e.py `bare`: a socket
volume, a sleeping sidecar, an agent running `true`, both removed) per second, JOBS at once.
It is the engine's own ceiling on this machine for what every attempt must do at least, so
`assure suite -j JOBS` is read against it (the scorecard's throughput.jN_of_bare).

    python bench/bare_throughput.py [--jobs J] [--count N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import e2e  # noqa: E402 -- after sys.path

from assure import spec as spec_mod  # noqa: E402 -- after sys.path
from assure.sandbox.docker.backend import DockerBackend  # noqa: E402 -- after sys.path
from assure.sandbox.docker.images import Images  # noqa: E402 -- after sys.path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--count", type=int, default=8, help="sequences in all (the throughput suite's spec count)"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    backend = DockerBackend()
    images = Images(backend).ensure()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trivial.yaml"
        path.write_text(
            e2e.SPEC.format(
                name="trivial", command=e2e.COMMANDS["trivial"], fixture=e2e.FIXTURE, user=e2e.USER
            )
        )
        spec = spec_mod.load(path)
        e2e.bare(backend, images, spec, -1)  # warm-up
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.jobs) as workers:
            list(workers.map(lambda n: e2e.bare(backend, images, spec, n), range(args.count)))
        seconds = time.perf_counter() - start
    doc = {
        "schema_version": 1,
        "jobs": args.jobs,
        "count": args.count,
        "seconds": round(seconds, 3),
        "per_second": round(args.count / seconds, 4),
    }
    print(
        f"bare two-container sequences, {args.jobs} at once: {args.count} in {seconds:.2f} s,"
        f" {doc['per_second']:.2f}/s"
    )
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
