"""Micro-benchmark: fs.read of a 100-byte file through the gateway vs. reading it directly.

In-process gateway on a unix socket, one kept-alive client, 200 warm-up calls, then 2000
timed calls; the baselines are the same number of os.open/os.read/os.close of the file, and
of round trips of a bare unix-socket echo in Python (a thread that sends back what it reads:
the floor of any Python server on that socket), the echo alternated with the gateway in
blocks so that the same load hits both. The CPU time per call (this process: client and
gateway) is shown too: load inflates wall time only.
--instructions runs this script under callgrind (valgrind) at two call counts and prints the
instructions per call of the gateway and of the echo, and their ratio: what a shared
machine's load does not change.
Run: .venv/bin/python bench/gateway_latency.py [--json PATH] [--instructions] (--json also
writes the figures there, for bench/scorecard.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from assure.client import Client
from assure.gateway.config import Config, parse
from assure.gateway.server import serve

WARMUP, CALLS, FILE_BYTES, BLOCK = 200, 2000, 100, 100
# What the client sends for fs.read(path="small.txt") and about what the gateway answers.
ECHO_REQUEST = (
    b"POST /v1/tools/fs.read HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
    b'Content-Length: 21\r\n\r\n{"path": "small.txt"}'
)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Echo:
    """A bare unix-socket echo server in a thread of this process, and a connection to it."""

    def __init__(self, path: str):
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen(1)
        threading.Thread(target=self._serve, daemon=True).start()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)

    def _serve(self) -> None:
        conn, _ = self._listener.accept()
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def round_trip(self) -> None:
        self.sock.sendall(ECHO_REQUEST)
        got = 0
        while got < len(ECHO_REQUEST):
            got += len(self.sock.recv(65536))

    def close(self) -> None:
        self.sock.close()
        self._listener.close()


def samples(client: Client, echo: Echo) -> tuple[list[float], float, list[float]]:
    """Wall time of each gateway call, the CPU time per call of this process (the client and
    the in-process gateway: what load on the machine does not inflate), and the wall time of
    each echo round trip, the two alternated in blocks of BLOCK."""
    for _ in range(WARMUP):
        client.call("fs.read", path="small.txt")
        echo.round_trip()
    via_gateway, echoes, cpu = [], [], 0.0
    for _ in range(CALLS // BLOCK):
        start_cpu = time.process_time()
        for _ in range(BLOCK):
            start = time.perf_counter()
            client.call("fs.read", path="small.txt")
            via_gateway.append(time.perf_counter() - start)
        cpu += time.process_time() - start_cpu
        for _ in range(BLOCK):
            start = time.perf_counter()
            echo.round_trip()
            echoes.append(time.perf_counter() - start)
    return via_gateway, cpu / len(via_gateway), echoes


def direct_samples(path: Path) -> list[float]:
    samples = []
    for _ in range(WARMUP + CALLS):
        start = time.perf_counter()
        fd = os.open(path, os.O_RDONLY)
        os.read(fd, FILE_BYTES + 1)
        os.close(fd)
        samples.append(time.perf_counter() - start)
    return samples[WARMUP:]


def summary(
    via_gateway: list[float], cpu: float, direct: list[float], echoes: list[float]
) -> dict[str, object]:
    """p50/p99 of each, in milliseconds: what the human lines and the --json document show."""
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
        "echo": {
            "p50_ms": round(statistics.median(echoes) * ms, 5),
            "p99_ms": round(percentile(echoes, 0.99) * ms, 5),
        },
        "ratio_p50": round(statistics.median(via_gateway) / statistics.median(direct), 1),
        "ratio_p50_vs_echo": round(statistics.median(via_gateway) / statistics.median(echoes), 1),
    }


def instructions() -> None:
    """Instructions per call under callgrind: each way run at two call counts, the difference
    divided by the difference of calls (boot and warm-up cancel out)."""
    counts = (100, 600)
    per: dict[str, float] = {}
    for way in ("gateway", "echo"):
        totals = []
        for n in counts:
            with tempfile.NamedTemporaryFile(prefix="gwbench-cg", dir="/tmp") as out:
                run = subprocess.run(
                    ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out.name}"]
                    + [sys.executable, __file__, "--only", way, "--calls", str(n)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
            totals.append(int(re.findall(r"Collected : (\d+)", run.stderr)[-1]))
        per[way] = (totals[1] - totals[0]) / (counts[1] - counts[0])
    print(
        f"instructions per call (callgrind): fs.read via gateway {per['gateway']:,.0f}, bare"
        f" unix-socket echo in Python {per['echo']:,.0f}; ratio {per['gateway'] / per['echo']:.0f}x"
    )


def only(way: str, calls: int) -> None:
    """`calls` calls of one way and nothing else (what --instructions measures)."""
    with tempfile.TemporaryDirectory(prefix="gwbench", dir="/tmp") as tmp:
        root = Path(tmp)
        if way == "echo":
            echo = Echo(str(root / "echo.sock"))
            for _ in range(calls):
                echo.round_trip()
            echo.close()
            return
        gateway = serve(gateway_config(root, calls))
        try:
            with Client(gateway.config.socket) as client:
                for _ in range(calls):
                    client.call("fs.read", path="small.txt")
        finally:
            gateway.shutdown()


def gateway_config(root: Path, calls: int) -> Config:
    (root / "ws").mkdir()
    (root / "ws" / "small.txt").write_bytes(b"x" * FILE_BYTES)
    return parse(
        {
            "run_id": "bench",
            "attempt": 1,
            "socket": str(root / "gw.sock"),
            "workspace": str(root / "ws"),
            "journal": str(root / "journal.jsonl"),
            "ready_file": str(root / "ready"),
            "limits": {"tool_calls": calls},
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--json", type=Path, dest="json_path", help="also write the figures to this file as JSON"
    )
    parser.add_argument(
        "--instructions", action="store_true", help="also count instructions per call (valgrind)"
    )
    parser.add_argument("--only", choices=("gateway", "echo"), help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, default=CALLS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        only(args.only, args.calls)
        return
    with tempfile.TemporaryDirectory(prefix="gwbench", dir="/tmp") as tmp:
        root = Path(tmp)
        gateway = serve(gateway_config(root, WARMUP + CALLS))
        echo = Echo(str(root / "echo.sock"))
        try:
            with Client(gateway.config.socket) as client:
                via_gateway, cpu, echoes = samples(client, echo)
        finally:
            echo.close()
            gateway.shutdown()
        direct = direct_samples(root / "ws" / "small.txt")
    figures = summary(via_gateway, cpu, direct, echoes)
    gw, dr, ec = figures["gateway"], figures["direct"], figures["echo"]
    print(
        f"fs.read via gateway ({CALLS} calls, keep-alive): p50 {gw['p50_ms']:.3f} ms, p99"
        f" {gw['p99_ms']:.3f} ms; CPU {gw['cpu_ms']:.3f} ms per call (client and gateway)"
    )
    print(
        f"direct os.open/os.read ({CALLS} reads):          p50 {dr['p50_ms']:.4f} ms, p99"
        f" {dr['p99_ms']:.4f} ms"
    )
    print(
        f"bare unix-socket echo in Python ({CALLS} round trips, same request): p50"
        f" {ec['p50_ms']:.4f} ms, p99 {ec['p99_ms']:.4f} ms"
    )
    print(
        f"ratio p50 gateway / direct: {figures['ratio_p50']:.0f}x; gateway / echo:"
        f" {figures['ratio_p50_vs_echo']:.1f}x"
    )
    if args.instructions:
        instructions()
    if args.json_path is not None:
        args.json_path.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
