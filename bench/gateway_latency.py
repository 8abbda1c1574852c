"""Micro-benchmark: fs.read of a 100-byte file through the gateway vs. reading it directly.

In-process gateway on a unix socket, one kept-alive client, 200 warm-up calls, then 2000
timed calls; the baseline is the same number of os.open/os.read/os.close of the file. The
CPU time per call (this process: client and gateway) is shown too: load inflates wall time only.
Run: .venv/bin/python bench/gateway_latency.py [--json PATH] (--json also writes the figures
there, for bench/scorecard.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from assure.client import Client
from assure.gateway.config import parse
from assure.gateway.server import serve

WARMUP, CALLS, FILE_BYTES = 200, 2000, 100


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def gateway_samples(client: Client) -> tuple[list[float], float]:
    """Wall time of each call, and the CPU time per call of this process (the client and the
    in-process gateway: what load on the machine does not inflate)."""
    for _ in range(WARMUP):
        client.call("fs.read", path="small.txt")
    samples = []
    cpu = time.process_time()
    for _ in range(CALLS):
        start = time.perf_counter()
        client.call("fs.read", path="small.txt")
        samples.append(time.perf_counter() - start)
    return samples, (time.process_time() - cpu) / CALLS


def direct_samples(path: Path) -> list[float]:
    samples = []
    for _ in range(WARMUP + CALLS):
        start = time.perf_counter()
        fd = os.open(path, os.O_RDONLY)
        os.read(fd, FILE_BYTES + 1)
        os.close(fd)
        samples.append(time.perf_counter() - start)
    return samples[WARMUP:]


def summary(via_gateway: list[float], cpu: float, direct: list[float]) -> dict[str, object]:
    """p50/p99 of both, in milliseconds: what the human lines and the --json document show."""
    ms = 1000
    return {
        "calls": len(via_gateway),
        "gateway": {
            "p50_ms": round(statistics.median(via_gateway) * ms, 4),
            "p99_ms": round(percentile(via_gateway, 0.99) * ms, 4),
            "cpu_ms": round(cpu * ms, 4),
        },
        "direct": {
            "p50_ms": round(statistics.median(direct) * ms, 5),
            "p99_ms": round(percentile(direct, 0.99) * ms, 5),
        },
        "ratio_p50": round(statistics.median(via_gateway) / statistics.median(direct), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--json", type=Path, dest="json_path", help="also write the figures to this file as JSON"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gwbench", dir="/tmp") as tmp:
        root = Path(tmp)
        (root / "ws").mkdir()
        (root / "ws" / "small.txt").write_bytes(b"x" * FILE_BYTES)
        config = parse(
            {
                "run_id": "bench",
                "attempt": 1,
                "socket": str(root / "gw.sock"),
                "workspace": str(root / "ws"),
                "journal": str(root / "journal.jsonl"),
                "ready_file": str(root / "ready"),
                "limits": {"tool_calls": WARMUP + CALLS},
            }
        )
        gateway = serve(config)
        try:
            with Client(config.socket) as client:
                via_gateway, cpu = gateway_samples(client)
        finally:
            gateway.shutdown()
        direct = direct_samples(root / "ws" / "small.txt")
    figures = summary(via_gateway, cpu, direct)
    gw, dr = figures["gateway"], figures["direct"]
    print(
        f"fs.read via gateway ({CALLS} calls, keep-alive): p50 {gw['p50_ms']:.3f} ms, p99"
        f" {gw['p99_ms']:.3f} ms; CPU {gw['cpu_ms']:.3f} ms per call (client and gateway)"
    )
    print(
        f"direct os.open/os.read ({CALLS} reads):          p50 {dr['p50_ms']:.4f} ms, p99"
        f" {dr['p99_ms']:.4f} ms"
    )
    print(f"ratio p50 gateway / direct: {figures['ratio_p50']:.0f}x")
    if args.json_path is not None:
        args.json_path.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
