"""Cost of assure's seccomp profile against the engine's default profile, measured in the same run.

Each round starts two containers with the same hardening (`hardening.common_request` of the
benign example), one with the engine's default profile, one with ours, interleaved, each
running a syscall-heavy workload to completion: 200k stat calls, 50 process spawns, a
thread pool. Prints medians and the ratio ours / default (target: <= 1.05x).
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from assure import spec as spec_mod
from assure.sandbox import hardening, seccomp, uids
from assure.sandbox.backend import Role
from assure.sandbox.docker.backend import DockerBackend
from assure.sandbox.docker.images import Images

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 7
WORKLOAD = """
import os, subprocess, concurrent.futures
for _ in range(200_000):
    os.stat("/")
for _ in range(50):
    subprocess.run(["true"])
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    list(pool.map(lambda n: sum(range(n)), [100_000] * 64))
"""


def one(backend: DockerBackend, image: str, spec, ours: bool, n: int) -> float:
    with uids.lease_for(spec) as lease:
        return _one(backend, image, spec, ours, n, lease.ids)


def _one(
    backend: DockerBackend, image: str, spec, ours: bool, n: int, user: tuple[int, int]
) -> float:
    request = replace(
        hardening.common_request(
            spec,
            Role.AGENT,
            image,
            {"assure.owner": "assure", "assure.run": f"bench-seccomp-{n}"},
            spec.limits.memory_bytes,
            spec.limits.pids,
            user=user,
        ),
        command=("python3", "-c", WORKLOAD),
    )
    if not ours:
        request = replace(
            request,
            security_opt=tuple(o for o in request.security_opt if o != seccomp.security_opt()),
        )
    start = time.perf_counter()
    cid = backend.start_container(request)
    try:
        code = backend.wait(cid, 300)
    finally:
        backend.remove_container(cid)
    if code != 0:
        raise SystemExit(f"workload exited {code} ({'ours' if ours else 'default'})")
    return time.perf_counter() - start


def main() -> None:
    backend = DockerBackend()
    image = Images(backend).ensure().agent
    spec = spec_mod.load(ROOT / "specs" / "examples" / "benign.yaml")
    default, ours = [], []
    for n in range(ROUNDS):
        default.append(one(backend, image, spec, False, n))
        ours.append(one(backend, image, spec, True, n))
    d, o = statistics.median(default), statistics.median(ours)
    print(f"engine default profile: median {d:.3f}s over {ROUNDS}")
    print(f"assure profile:         median {o:.3f}s over {ROUNDS}")
    print(f"ratio ours/default: {o / d:.3f}x (target <= 1.05x)")


if __name__ == "__main__":
    main()
