"""The gate's costs, measured in one run against same-run baselines.

1. db.execute through the gateway (socket, gate, changeset, journal) against the same
   INSERTs run locally with apsw on a copy of the same database, alternated in blocks:
   medians of wall and of CPU time, and both ratios (target: <= 2x).
2. Operator override latency: from `assure halt`'s control record to the gateway's
   `override_effective` (as the gateway journals it): p50 and p99 over ROUNDS halts.
Decision cost alone: bench/gate_bench.py.
Run: .venv/bin/python bench/gate_live_bench.py [ROUNDS] [--json FILE] (for bench/scorecard.py)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import apsw

from assure.client import Client
from assure.core import control, gate
from assure.core.chain import verify_chain
from assure.gateway.config import parse
from assure.gateway.server import serve

STATEMENTS, BLOCK = 500, 25
_parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
_parser.add_argument("rounds", type=int, nargs="?", default=30, help="halts timed")
_parser.add_argument("--json", help="also write the figures here")
_ARGS = _parser.parse_args()
ROUNDS, JSON = _ARGS.rounds, _ARGS.json
SQL = "INSERT INTO orders (item, qty) VALUES (?, ?)"


def policy() -> dict:
    contract = gate.Contract(
        id="bench",
        proposed_by="a",
        ratified_by="b",
        scope=("db:*", "fs:**"),
        autonomy_ceiling=gate.COMMIT,
    )
    return {
        "contract": dataclasses.asdict(gate.ratify(contract)),
        "operator_dial": gate.COMMIT,
        "verifier_trust": gate.COMMIT,
    }


def config(root: Path, journal: str, **extra) -> dict:
    (root / "ws").mkdir(exist_ok=True)
    return {
        "run_id": "bench",
        "attempt": 1,
        "socket": str(root / "gw.sock"),
        "workspace": str(root / "ws"),
        "journal": str(root / journal),
        "ready_file": str(root / "ready"),
        "policy": policy(),
        "limits": {"tool_calls": 100_000},
        **extra,
    }  # the host always passes it (the spec's limits.tool_calls)


def bench_db(root: Path) -> dict[str, float]:
    """Medians per INSERT, wall and CPU, of both ways, run alternately in blocks of BLOCK (the
    same load hits both). CPU is this process's (client and in-process gateway alike): both
    ways wait on an fsync per commit on the shared disk, which inflates wall time only."""
    db = root / "shop.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT, qty INTEGER)")
    con.commit()
    con.close()
    shutil.copyfile(db, root / "local.sqlite")
    gw = serve(
        parse(
            config(
                root, "db.jsonl", databases=[{"name": "shop", "path": str(db), "mode": "sandbox"}]
            )
        )
    )
    local_con = apsw.Connection(str(root / "local.sqlite"))
    client = Client(gw.config.socket)

    def through(i: int) -> None:
        client.call("db.execute", db="shop", sql=SQL, params=[f"item-{i}", i])

    def local(i: int) -> None:
        with local_con:  # one transaction per statement, as the gateway does
            local_con.execute(SQL, (f"item-{i}", i))

    samples: dict[str, tuple[list[float], list[float]]] = {"gateway": ([], []), "apsw": ([], [])}
    try:
        for start in range(0, STATEMENTS, BLOCK):
            for name, way in (("gateway", through), ("apsw", local)):
                walls, cpus = samples[name]
                for i in range(start, start + BLOCK):
                    wall, cpu = time.perf_counter(), time.process_time()
                    way(i)
                    cpus.append(time.process_time() - cpu)
                    walls.append(time.perf_counter() - wall)
    finally:
        client.close()
        gw.shutdown()
        local_con.close()
    return {
        f"{name}_{kind}_ms": statistics.median(values) * 1000
        for name, (walls, cpus) in samples.items()
        for kind, values in (("wall", walls), ("cpu", cpus))
    }


def bench_override(root: Path) -> list[float]:
    latencies = []
    for n in range(ROUNDS):
        control_dir = root / f"control-{n}"
        control_dir.mkdir()
        gw = serve(parse(config(root, f"o{n}.jsonl", control_dir=str(control_dir))))
        try:
            time.sleep(0.05)
            control.request(control_dir, run_id="bench", actor="bench", halt=True)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                effective = [
                    r for r in verify_chain(gw.config.journal) if r["event"] == "override_effective"
                ]
                if effective:
                    latencies.append(effective[0]["latency_ms"])
                    break
                time.sleep(0.005)
        finally:
            gw.shutdown()
    return latencies


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="gatebench", dir="/tmp") as tmp:
        db = bench_db(Path(tmp))
        wall_ratio = db["gateway_wall_ms"] / db["apsw_wall_ms"]
        cpu_ratio = db["gateway_cpu_ms"] / db["apsw_cpu_ms"]
        print(
            f"db.execute, {STATEMENTS} INSERTs alternated in blocks of {BLOCK}: gateway median"
            f" {db['gateway_wall_ms']:.3f} ms wall / {db['gateway_cpu_ms']:.3f} ms CPU, local apsw"
            f" {db['apsw_wall_ms']:.3f} ms wall / {db['apsw_cpu_ms']:.3f} ms CPU; ratio"
            f" {wall_ratio:.2f}x wall, {cpu_ratio:.2f}x CPU (target <= 2x)"
        )
        lat = sorted(bench_override(Path(tmp)))
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        print(
            f"override effect latency over {len(lat)} halts: p50 {statistics.median(lat):.1f} ms,"
            f" p99 {p99:.1f} ms (target p99 < 1000 ms; the standard allows 5000)"
        )
    if JSON:
        doc = {
            "db_execute": {
                "gateway_ms": round(db["gateway_wall_ms"], 4),
                "apsw_ms": round(db["apsw_wall_ms"], 4),
                "ratio": round(wall_ratio, 4),
                "gateway_cpu_ms": round(db["gateway_cpu_ms"], 4),
                "apsw_cpu_ms": round(db["apsw_cpu_ms"], 4),
                "cpu_ratio": round(cpu_ratio, 4),
            },
            "override_ms": {"p50": round(statistics.median(lat), 2), "p99": round(p99, 2)},
        }
        Path(JSON).write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
