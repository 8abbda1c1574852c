"""Runs-base fixtures for the monitor: one that fires each anomaly class, one clean one, one
hostile one. Real files, as the driver and the gateway write them: `state.json` with
`store.write_json`, `events.jsonl` and the gateway journal as hash chains with `ChainWriter`,
`container.json`, heartbeats with `health.beat`. Every fixture keeps the default manifest's
thresholds (`health.Manifest()`), so each one proves the defaults fire.

Materialise them for a look with the CLI:
    python -m tests.unit.health_fixtures /tmp/health && assure monitor --once --runs-dir
/tmp/health/<class>
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from assure.core.chain import ChainWriter, canonical, sha256_hex, utc_now
from assure.records import health, store

CLEAN = "clean"
CLASSES = ("rate_of_change", "duplication_ratio", "resource_saturation", "silent_component")
TOOL_CALLS_LIMIT = 1000


def tool_call(tool: str, args: dict[str, Any], *, effect: bool = False) -> dict[str, Any]:
    """The fields the gateway journals for one allowed call (see gateway/dispatch.py)."""
    path = args.get("path")
    return {
        "action_id": sha256_hex(canonical([tool, args, time.monotonic_ns()]))[:32],
        "tool": tool,
        "path": path,
        "args_digest": sha256_hex(canonical(args)),
        "decision": "allow",
        "rule": "allowed",
        "reason": "fixture",
        "inputs": {},
        "effect": (
            {"op": "write", "path": path, "sha256": "0" * 64, "size": 1, "mode": 420}
            if effect
            else None
        ),
        "status": 200,
        "error": None,
    }


def make_run(
    base: Path,
    run_id: str,
    *,
    # an empty tuple as the default, never mutated
    calls: list[dict[str, Any]] = (),  # type: ignore[assignment]
    state: str = "running",
    container: dict[str, Any] | None = None,
    heartbeats: bool = True,
    age_seconds: float = 0.0,
) -> Path:
    """One run with attempt 1; without `container` the attempt is still in progress."""
    run = base / run_id
    attempt = run / "attempts" / "1"
    (attempt / "gateway").mkdir(parents=True)
    (run / "control").mkdir()
    store.write_json(run / "spec.json", {"name": run_id})
    store.write_json(
        run / "state.json",
        {"run_id": run_id, "spec": run_id, "state": state, "attempt": 1, "started_at": utc_now()},
    )
    events = ChainWriter(run / "events.jsonl", base={"run_id": run_id, "actor": "driver"})
    events.append("run_started", spec=run_id)
    events.append("attempt_started", attempt=1)
    events.close()
    journal = ChainWriter(
        attempt / "gateway" / "journal.jsonl",
        base={"run_id": run_id, "attempt": 1, "actor": "gateway"},
    )
    journal.append(
        "gateway_started",
        config_sha256="0" * 64,
        tools=["fs.read", "fs.write"],
        protected=[],
        limits={"tool_calls": TOOL_CALLS_LIMIT},
    )
    for call in calls:
        journal.append("tool_call", **call)
    journal.close()
    (attempt / "gateway" / "ready").write_text('{"attempt": 1}\n')
    if container is not None:
        store.write_json(
            attempt / "container.json",
            {
                "harness_errors": [],
                "exit_code": 0,
                "oom_killed": False,
                "stopped": None,
                **container,
            },
        )
    if heartbeats:
        health.beat(run / "control" / "verifier.json", health.VERIFIER, attempt=1)
        health.beat(
            attempt / "gateway" / "heartbeat.json", health.GATEWAY, attempt=1, tool_calls=len(calls)
        )
        health.beat(base / health.HEALTH_DIR / "driver.json", health.DRIVER, run_id=run_id)
    if age_seconds:
        then = time.time() - age_seconds
        for path in (
            run / "events.jsonl",
            attempt / "gateway" / "journal.jsonl",
            run / "state.json",
        ):
            os.utime(path, (then, then))
    return run


def clean(base: Path) -> Path:
    """A running attempt, fresh heartbeats, a few different calls: fires nothing."""
    calls = [tool_call("fs.read", {"path": f"src/{n}.py"}) for n in range(5)] + [
        tool_call("fs.write", {"path": "out.txt", "content": "x"}, effect=True)
    ]
    return make_run(base, "clean-run", calls=calls)


def rate_of_change(base: Path) -> Path:
    """More different tool calls within a minute than the default limit allows."""
    calls = [
        tool_call("fs.read", {"path": f"src/{n}.py"})
        for n in range(health.MAX_TOOL_CALLS_PER_MINUTE + 1)
    ]
    return make_run(base, "rate-run", calls=calls)


def duplication_ratio(base: Path) -> Path:
    """Enough calls to judge, most of them the same call again."""
    n = health.MIN_CALLS_FOR_RATIO + 10
    same = tool_call("fs.read", {"path": "loop.txt"})
    calls = [same] * (n - 8) + [tool_call("fs.read", {"path": f"other/{i}"}) for i in range(8)]
    return make_run(base, "dup-run", calls=calls)


def resource_saturation(base: Path) -> Path:
    """An attempt whose agent the OOM killer stopped."""
    return make_run(
        base,
        "oom-run",
        calls=[tool_call("fs.read", {"path": "big.bin"})],
        container={"oom_killed": True, "exit_code": 137},
    )


def silent_component(base: Path) -> Path:
    """A running run (driver alive) whose events and journal stopped growing long ago."""
    return make_run(
        base,
        "quiet-run",
        calls=[tool_call("fs.read", {"path": "a"})],
        container={"exit_code": 0},
        age_seconds=health.SILENT_AFTER_SECONDS + 60,
    )


BUILDERS: dict[str, Callable[[Path], Path]] = {
    CLEAN: clean,
    "rate_of_change": rate_of_change,
    "duplication_ratio": duplication_ratio,
    "resource_saturation": resource_saturation,
    "silent_component": silent_component,
}


def hostile(base: Path) -> dict[str, Path]:
    """A runs base built to hurt a reader: symlinks out of it, garbage and deeply nested
    JSON, a FIFO where a file should be, oversized files, a file where a directory should be."""
    base.mkdir(parents=True, exist_ok=True)
    outside = base.parent / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "state.json").write_text('{"state": "running", "attempt": 1}')
    made: dict[str, Path] = {}
    # a run directory that is a symlink out of the runs base
    os.symlink(outside, base / "linked-run")
    # a run whose state.json is a symlink, one whose state is garbage, one a FIFO, one huge
    for name, kind in (
        ("state-link", "link"),
        ("state-garbage", "garbage"),
        ("state-fifo", "fifo"),
        ("state-huge", "huge"),
        ("state-deep", "deep"),
    ):
        run = base / name
        (run / "attempts").mkdir(parents=True)
        target = run / "state.json"
        if kind == "link":
            os.symlink(outside / "state.json", target)
        elif kind == "garbage":
            target.write_bytes(b"\x00\xff{not json")
        elif kind == "fifo":
            os.mkfifo(target)
        elif kind == "huge":
            with open(target, "wb") as fh:
                fh.write(b'{"state": "running", "pad": "' + b"x" * (2 << 20) + b'"}')
        else:
            target.write_text("[" * 100_000 + "]" * 100_000)
        made[name] = run
    # a running run whose attempt is full of traps
    run = make_run(
        base, "trapped-run", calls=[tool_call("fs.read", {"path": "a"})], heartbeats=False
    )
    attempt = run / "attempts" / "1"
    journal = attempt / "gateway" / "journal.jsonl"
    with open(journal, "ab") as fh:  # garbage lines after the real chain, then 10 MiB more
        fh.write(b"not json\n[1, 2]\n" + b'{"event": "tool_call", "tool": 5}\n')
        fh.write((b"z" * 1023 + b"\n") * (10 << 10))
    (attempt / "container.json").unlink(missing_ok=True)
    (attempt / "gateway" / "breach.json").write_text("[" * 50_000)
    (run / "control" / "verifier.json").write_text("{garbage")
    os.symlink("/etc/passwd", attempt / "gateway" / "heartbeat.json")
    (run / "alerts").mkdir()
    (run / "alerts" / "junk.json").write_text('{"id": 1}')
    (run / "alerts" / "bad.json").write_text("{{{{")
    (run / "alerts" / "future.json").write_text(
        '{"id": "x-1", "kind": "breach", "state": "pending", "raised_at": "garbage", "extra": 1}'
    )
    os.mkfifo(run / "alerts" / "fifo.json")
    (attempt / "weird").symlink_to("/")
    os.symlink("/", run / "attempts" / "2")
    made["trapped-run"] = run
    # a run whose attempts "directory" is a file and whose alerts dir is a symlink
    odd = make_run(base, "odd-run", heartbeats=False)
    for child in sorted((odd / "attempts").rglob("*"), reverse=True):
        child.unlink() if not child.is_dir() else child.rmdir()
    (odd / "attempts").rmdir()
    (odd / "attempts").write_text("not a directory")
    os.symlink(outside, odd / "alerts")
    made["odd-run"] = odd
    # the monitor's own files: a garbage ledger and a driver heartbeat in the future
    health_dir = base / health.HEALTH_DIR
    health_dir.mkdir(exist_ok=True)
    (health_dir / "escalations.jsonl").write_text("garbage\n")
    store.write_json(
        health_dir / "driver.json", {"component": "driver", "last_success_at": time.time() + 10**6}
    )
    return made


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else "health-fixtures")
    for name, build in BUILDERS.items():
        build(out / name)
        print(out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
