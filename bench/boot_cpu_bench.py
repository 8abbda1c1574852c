"""Micro-benchmark: the CPU an attempt pays for Python processes it starts in its containers
(issue 25 item 3: the gateway's boot cost per attempt), in the images built for this checkout.

- gateway: its command (hardening.GATEWAY_COMMAND) with a missing config, every import of its
  boot, then the config error (exit 2), in the gateway image; beside it `python3 -m
  assure.gateway`, as it started before (boot_m);
- client: `assure-tool fs.list` with no socket, the agent's start up to its first connect
  (a shell agent's every call pays it), in the agent image;
each beside `python3 -c pass` (`-S` in the agent image, as assure-tool runs it), the floor,
interleaved in one container per image, so load hits all alike. CPU is user + system of the
child (getrusage), a median of N. Nothing is built: the images must exist (`make images`).

    python bench/boot_cpu_bench.py [--runs N] [--json PATH] [--gateway-image IMAGE]

--gateway-image: measure the gateway's boot in IMAGE instead (e.g. an image of another
checkout's package, to set a before beside an after).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from assure.sandbox.docker.backend import DockerBackend
from assure.sandbox.docker.images import Images
from assure.sandbox.hardening import GATEWAY_COMMAND

MISSING = "/nonexistent/config.json"

INSIDE = """
import json, resource, statistics, subprocess, sys
n, variants = int(sys.argv[1]), json.loads(sys.argv[2])
def cpu(cmd):
    b = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    a = resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime - b.ru_utime + a.ru_stime - b.ru_stime
for cmd in variants.values():
    cpu(cmd)
got = {k: [] for k in variants}
for _ in range(n):
    for k, cmd in variants.items():
        got[k].append(cpu(cmd))
print(json.dumps({k: statistics.median(v) for k, v in got.items()}))
"""
# Longer than a unix socket's path may be: the client's first connect fails at once and is not
# retried (a missing socket is, for the client's 10 s connect timeout, which each of a run's 31
# calls waited out).
NO_SOCKET = "/" + "x" * 120
FIGURES = {
    "gateway": {
        "floor": ["python3", "-c", "pass"],
        # the command an attempt's gateway runs, its config missing
        "boot": [*GATEWAY_COMMAND[: GATEWAY_COMMAND.index("--config")], "--config", MISSING],
        # how it started before issue 25's -I -S -c, in the same image and run
        "boot_m": ["python3", "-m", "assure.gateway", "--config", MISSING],
    },
    "agent": {
        "floor": ["python3", "-S", "-c", "pass"],
        "boot": ["assure-tool", "fs.list"],
    },
}


def measure(image: str, variants: dict[str, list[str]], runs: int) -> dict[str, float]:
    done = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-e", f"ASSURE_GATEWAY_SOCKET={NO_SOCKET}"]
        + [image, "python3", "-c", INSIDE, str(runs), json.dumps(variants)],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(done.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--json", type=str, help="write the medians (CPU-s) here")
    parser.add_argument("--gateway-image", type=str, help="the gateway's image to boot in")
    args = parser.parse_args()
    images = Images(DockerBackend()).resolve()
    if images is None and not args.gateway_image:
        raise SystemExit("the images for this checkout are not built: make images")
    out = {}
    for role, variants in FIGURES.items():
        if role == "gateway" and args.gateway_image:
            image = args.gateway_image
        elif images is not None:
            image = getattr(images, role)
        else:
            print(f"{role:8} not measured: the images for this checkout are not built")
            continue
        got = measure(image, variants, args.runs)
        out[role] = {**got, "over_floor": got["boot"] - got["floor"]}
        if "boot_m" in got:
            out[role]["over_floor_m"] = got["boot_m"] - got["floor"]
        print(
            f"{role:8} boot {got['boot'] * 1000:6.1f} ms CPU, floor {got['floor'] * 1000:5.1f} ms,"
            f" over the floor {(got['boot'] - got['floor']) * 1000:6.1f} ms"
            f" (medians of {args.runs}, interleaved)"
            + (
                f"; as python3 -m: over the floor {out[role]['over_floor_m'] * 1000:6.1f} ms"
                if "boot_m" in got
                else ""
            )
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"schema_version": 1, "median_cpu_s": out}, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
