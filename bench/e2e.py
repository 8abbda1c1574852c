"""End-to-end attempt cost against a bare Docker baseline, measured in the same run, phase by phase.

bare:       the same Docker work with nothing of ours: create a volume, start a hardened
            sidecar, run a hardened `--network none` container to completion, remove both.
trivial:    one trivial attempt through assure, prepare through verdict (fresh workspace, PRE
            snapshot, socket volume, gateway ready on its socket, hardened agent running
            `true`, collect, cleanup, POST snapshot, judge, records).
first call: the same attempt with an agent that makes one gateway call (`fs.list`): the time
            from the attempt's start to that call's journal line.
pool on:    trivial and first call again, each claiming a booted pair of a warm pool
            (run/pool.py, one pair): before each, the pool holds a booted pair (`wait_full`) and
            its refill is held until the attempt ends, so the figure is a warm claim (neither
            the refill nor a cold start). `trivial, refill overlapping` is the same claim with
            the refill let run at once, as in a suite: the next pair's creation competes with it.

Runs are interleaved (bare, trivial, first call, trivial and first call with the pool,
bare, ...) so a machine shared with other work slows them all alike; medians and ratios are
reported, never absolute targets. The issues' targets (14 and 25) are printed met or missed;
a miss does not fail the benchmark (`assure bench compare` judges regressions).
Each attempt's Docker API round trips are counted (a response hook on docker-py's session);
the pool's own (its backend, its refill thread) per pair made.

    python bench/e2e.py [--rounds N] [--json PATH] [--profile PATH] [--no-pool]
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import re
import statistics
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from assure import spec as spec_mod
from assure.records import store
from assure.run.driver import Driver
from assure.run.pool import Settings, WarmPool
from assure.sandbox import hardening, uids
from assure.sandbox.backend import Mount, Role
from assure.sandbox.docker.backend import DockerBackend
from assure.sandbox.docker.images import Images

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_VERSION = 1
SPEC = """\
version: 1
name: {name}
agent: {{command: {command}}}
workspace: {{fixture: {fixture}}}
sandbox: {{user: "{user}"}}
assertions: [{{exit_code: 0}}]
expect: pass
"""
FIXTURE = ROOT / "fixtures" / "workspaces" / "calc"
# RLIMIT_NPROC counts every task of a uid on the host: on a machine shared with other runs
# (a fork bomb in a containment suite, say) the default 10001 may be spent by others.
USER = f"{20000 + os.getpid() % 10000}:{20000 + os.getpid() % 10000}"
COMMANDS = {"trivial": '["true"]', "first_call": '["assure-tool", "fs.list"]'}
# The issues' targets, medians of the same run: the cold ratio issue 14's, the pooled issue 25's.
TARGET_RATIO_POOL, TARGET_RATIO_COLD, TARGET_FIRST_CALL_POOL_MS = 0.3, 1.25, 50.0
POOL_FULL_SECONDS = 120  # wait_full: one pair made on a loaded machine


class BenchPool(WarmPool):
    """The warm pool with a hold on its refill: while `refill` is clear, the refill thread
    makes no pair (it waits at its next one), so a measured claim does not compete with the
    creation of the pair that replaces it."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.refill = threading.Event()
        self.refill.set()
        super().__init__(*args, **kwargs)  # starts the refill thread: `refill` exists first

    def _make(self, spec, shape, number):
        self.refill.wait()
        return super()._make(spec, shape, number)

    def ready(self) -> None:
        """A booted pair free (the refill let run until there is one)."""
        self.refill.set()
        if not self.wait_full(POOL_FULL_SECONDS):
            raise AssertionError(f"the warm pool held no booted pair after {POOL_FULL_SECONDS} s")


class RoundTrips:
    """Counts the engine's answers by method and path (ids folded), on docker-py's session."""

    def __init__(self, backend: DockerBackend):
        self.counts: collections.Counter[str] = collections.Counter()
        backend._client.api.hooks["response"].append(self._seen)

    def _seen(self, response: Any, *_args: Any, **_kwargs: Any) -> None:
        path = re.sub(r"^/v[0-9.]+", "", response.request.path_url.split("?")[0])
        path = re.sub(r"/(containers|volumes|networks)/(?!create$)[^/]+", r"/\1/{id}", path)
        self.counts[f"{response.request.method} {path}"] += 1

    def take(self) -> collections.Counter[str]:
        counts, self.counts = self.counts, collections.Counter()
        return counts


def bare(backend: DockerBackend, images, spec, n: int) -> float:
    with uids.lease_for(spec) as lease:
        return _bare(backend, images, spec, n, lease.ids)


def _bare(backend: DockerBackend, images, spec, n: int, user: tuple[int, int]) -> float:
    start = time.perf_counter()
    name = f"bench-baseline-{os.getpid()}-{n}"  # the pid: two benches on one engine never share
    labels = {"assure.owner": "assure", "assure.run": name}
    volume = backend.create_volume(name, labels, hardening.socket_volume_options(user))
    common = hardening.common_request(
        spec, Role.AGENT, images.agent, labels, 256 * 2**20, 64, user=user
    )
    sidecar = backend.start_container(
        replace(
            common,
            role=Role.GATEWAY,
            image=images.gateway,
            name=f"bench-side-{os.getpid()}-{n}",
            command=("sleep", "60"),
            mounts=(Mount(volume, "/run/assure"),),
        )
    )
    agent = backend.start_container(
        replace(
            common,
            name=f"bench-agent-{os.getpid()}-{n}",
            command=("true",),
            mounts=(Mount(volume, "/run/assure", read_only=True),),
        )
    )
    backend.wait(agent, 60)
    for cid in (agent, sidecar):
        backend.remove_container(cid)
    backend.remove_volume(volume)
    return time.perf_counter() - start


def _wall(ts: str) -> float:
    return (
        datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ")
        .replace(tzinfo=datetime.UTC)
        .timestamp()
    )


def first_call_seconds(run: store.RunDir, since: str = "started_at") -> float | None:
    """From the attempt's start (container.json `started_at`, or another of its times) to its
    first `tool_call` journal line (None if container.json has no such time)."""
    paths = run.attempt(1)
    started = json.loads(paths.container.read_text()).get(since)
    if started is None:
        return None
    for line in paths.journal.read_text().splitlines():
        record = json.loads(line)
        if record.get("event") == "tool_call":
            return _wall(record["ts"]) - started
    raise AssertionError("the agent made no gateway call")


FAILED: list[
    str
] = []  # attempts that did not pass (on a shared machine: RLIMIT_NPROC is per uid, host-wide)
RETRIES = 3


def ours(
    backend, images, spec, runs: Path, pool: BenchPool | None = None, hold: bool = True
) -> tuple[float, dict[str, float], store.RunDir]:
    """One attempt through the driver: its wall time, its phases, its run. With `pool`: the
    pool first holds a booted pair, the attempt must claim it, and (`hold`) the refill waits
    until the attempt is over."""
    for _ in range(RETRIES):
        if pool is not None:
            pool.want(
                [spec] if hold else [spec, spec]
            )  # this claim; without the hold, the next one's pair is made meanwhile, as in a suite
            pool.ready()
            if hold:
                pool.refill.clear()
        try:
            start = time.perf_counter()
            run = store.RunDir.create(runs, store.new_run_id(spec.name), spec.path, spec.to_json())
            result = Driver(spec, run, backend, images, lambda *_: None, pool=pool).drive()
            elapsed = time.perf_counter() - start
        finally:
            if pool is not None:
                pool.ready()  # refilled before the next measurement, which it would slow
        if pool is not None and "pool" not in json.loads(run.attempt(1).container.read_text()):
            raise AssertionError(
                f"{spec.name}: the attempt did not claim the pool's pair (it started cold)"
            )
        if result.verdict == "pass":
            return elapsed, dict(result.report["attempts"][0]["timings"]), run
        FAILED.append(
            "; ".join(f["message"] for f in result.report["attempts"][0]["findings"])[:300]
        )
    raise AssertionError(f"{spec.name}: no attempt passed in {RETRIES}: {FAILED[-RETRIES:]}")


def _ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 1)


def _phases_into(phases: dict[str, list[float]], timings: dict[str, float]) -> None:
    for phase, seconds in timings.items():
        phases.setdefault(phase, []).append(seconds)


def _outside(elapsed: float, timings: dict[str, float]) -> float:
    return elapsed - sum(v for k, v in timings.items() if "." not in k)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json", type=Path, help="write the medians here (schema_version 1)")
    parser.add_argument(
        "--profile",
        type=Path,
        help=(
            "profile one trivial attempt with pyinstrument, text to this file (the pooled one to"
            " PATH.pool)"
        ),
    )
    parser.add_argument(
        "--no-pool",
        action="store_true",
        help="measure without the warm pool only (bare, trivial, first call)",
    )
    args = parser.parse_args()
    if args.profile:
        import pyinstrument  # noqa: F401  (before the rounds, not after them)
    backend = DockerBackend()
    images = Images(backend).ensure()
    trips = RoundTrips(backend)
    with tempfile.TemporaryDirectory() as tmp:
        specs = {}
        for name, command in COMMANDS.items():
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(SPEC.format(name=name, command=command, fixture=FIXTURE, user=USER))
            specs[name] = spec_mod.load(path)
        runs = Path(tmp) / "runs"
        runs.mkdir()
        pool = None
        try:
            if not args.no_pool:
                pool_backend = (
                    DockerBackend()
                )  # the refill thread's own client, as `assure suite --pool` gives it
                pool = BenchPool(pool_backend, images, runs, Settings(size=1))
                pool_trips = RoundTrips(
                    pool_backend
                )  # trivial and first call have one shape: one pair serves both
            bare(backend, images, specs["trivial"], -1)  # warm-up
            for spec in specs.values():
                ours(backend, images, spec, runs)
                if pool is not None:
                    ours(backend, images, spec, runs, pool)
            trips.take()
            bare_t, trivial_t, first_t, calls_t, outside_t = [], [], [], [], []
            phases: dict[str, list[float]] = {}
            pooled: dict[str, list[float]] = {
                "trivial": [],
                "overlap": [],
                "first": [],
                "calls": [],
                "outside": [],
                "after_ready": [],
            }
            pool_phases: dict[str, list[float]] = {}
            api: collections.Counter[str] = collections.Counter()
            api_pool: collections.Counter[str] = collections.Counter()
            if pool is not None:
                pool_trips.take()
                made_before = pool._made
            for n in range(args.rounds):
                bare_t.append(bare(backend, images, specs["trivial"], n))
                trips.take()
                elapsed, timings, _ = ours(backend, images, specs["trivial"], runs)
                api += trips.take()
                trivial_t.append(elapsed)
                outside_t.append(_outside(elapsed, timings))
                _phases_into(phases, timings)
                elapsed, _, run = ours(backend, images, specs["first_call"], runs)
                calls_t.append(elapsed)
                if (seconds := first_call_seconds(run)) is not None:
                    first_t.append(seconds)
                if pool is None:
                    continue
                trips.take()
                elapsed, timings, _ = ours(backend, images, specs["trivial"], runs, pool)
                api_pool += trips.take()
                pooled["trivial"].append(elapsed)
                pooled["outside"].append(_outside(elapsed, timings))
                _phases_into(pool_phases, timings)
                elapsed, _, run = ours(backend, images, specs["first_call"], runs, pool)
                pooled["calls"].append(elapsed)
                if (seconds := first_call_seconds(run)) is not None:
                    pooled["first"].append(seconds)
                if (
                    seconds := first_call_seconds(run, "agent_started_at")
                ) is not None:  # pooled: when the claim released the agent
                    pooled["after_ready"].append(seconds)
                elapsed, _, _ = ours(backend, images, specs["trivial"], runs, pool, hold=False)
                pooled["overlap"].append(elapsed)
            trips.take()
            if pool is not None:
                pairs_made = pool._made - made_before
                per_pair = (
                    {k: v / pairs_made for k, v in sorted(pool_trips.take().items())}
                    if pairs_made
                    else {}
                )
            if args.profile:
                from pyinstrument import Profiler

                with Profiler(interval=0.001) as profiler:
                    ours(backend, images, specs["trivial"], runs)
                args.profile.write_text(
                    profiler.output_text(unicode=False, color=False, show_all=False)
                )
                if pool is not None:
                    with Profiler(interval=0.001) as profiler:
                        ours(backend, images, specs["trivial"], runs, pool)
                    args.profile.with_name(args.profile.name + ".pool").write_text(
                        profiler.output_text(unicode=False, color=False, show_all=False)
                    )
        finally:
            if pool is not None:
                pool.refill.set()
                pool.close()
    doc = summary(
        bare_t,
        trivial_t,
        phases,
        first_t,
        calls_t,
        outside_t,
        pool_trivial_t=pooled["trivial"],
        pool_overlap_t=pooled["overlap"],
        pool_first_t=pooled["first"],
        pool_calls_t=pooled["calls"],
        pool_phases=pool_phases,
        pool_outside_t=pooled["outside"],
    )
    medians, ratio, first_p50 = doc["medians_ms"], doc["ratio_vs_bare"], doc["first_call_p50_ms"]
    per_round = [t / b for t, b in zip(trivial_t, bare_t, strict=False)]
    print(
        f"e2e attempt, {args.rounds} interleaved rounds (medians; ratios of the medians of the same"
        " run)"
    )
    print(
        "assure phases, pool off (median ms): "
        + ", ".join(f"{k} {_ms(v):.0f}" for k, v in phases.items())
    )
    if pool_phases:
        print(
            "assure phases, pool on  (median ms): "
            + ", ".join(f"{k} {_ms(v):.0f}" for k, v in pool_phases.items())
        )
    print(
        "Docker API round trips per trivial attempt, pool off: "
        + ", ".join(f"{k} {v / args.rounds:g}" for k, v in sorted(api.items()))
        + f"; total {sum(api.values()) / args.rounds:g}"
    )
    if pool is not None:
        print(
            "Docker API round trips per trivial attempt, pool on:  "
            + ", ".join(f"{k} {v / args.rounds:g}" for k, v in sorted(api_pool.items()))
            + f"; total {sum(api_pool.values()) / args.rounds:g}"
        )
        print(
            f"  and the pool's per pair made ({pairs_made} pairs): "
            + ", ".join(f"{k} {v:g}" for k, v in per_pair.items())
            + f"; total {sum(per_pair.values()):g}"
        )
    print(f"bare two-container sequence median {medians['bare']:.0f} ms")
    print(
        f"trivial attempt, pool off: median {medians['trivial']:.0f} ms, ratio {ratio:.2f}x bare "
        f"(per round {min(per_round):.2f}-{max(per_round):.2f}x)"
    )
    if pool is not None:
        print(
            f"trivial attempt, pool on:  median {medians['trivial_pool']:.0f} ms, ratio"
            f" {doc['ratio_vs_bare_pool']:.2f}x bare (pool on / off"
            f" {medians['trivial_pool'] / medians['trivial']:.2f})"
        )
        print(
            "trivial attempt, pool on, refill overlapping: median"
            f" {medians['trivial_pool_overlap']:.0f} ms, ratio"
            f" {doc['ratio_vs_bare_pool_overlap']:.2f}x bare"
        )
    print(
        f"attempt start to the agent's first gateway call, pool off: p50 {first_p50} ms (whole"
        f" attempt {medians['first_call_attempt']:.0f} ms)"
    )
    if pool is not None:
        print(
            "attempt start to the agent's first gateway call, pool on:  p50"
            f" {doc['first_call_p50_ms_pool']} ms (whole attempt"
            f" {medians['first_call_pool_attempt']:.0f} ms; from the agent's release (its claim's"
            " wake-up) to the call, its gate, its python3 -m assure.client and the call: p50"
            f" {_ms(pooled['after_ready']) if pooled['after_ready'] else '-'} ms)"
        )
        if (
            doc["first_call_p50_ms_pool"] is not None
        ):  # the target is absolute: this says how far a loaded machine moved it
            print(
                "  first call p50 pool on / bare median of the same run:"
                f" {doc['first_call_p50_ms_pool'] / medians['bare']:.3f} (issue 14 measured bare at"
                " 520 ms: 150 ms is 0.288 of it)"
            )
    print(
        "outside the attempt's phases (run dir, state, judge, promote, receipts):"
        f" {medians['outside_phases']:.0f} ms"
        + (f" (pool on {medians['outside_phases_pool']:.0f} ms)" if pool is not None else "")
    )
    for target in doc["targets"]:
        value = "not measured" if target["value"] is None else f"{target['value']:g}"
        met = {True: "met", False: "MISSED", None: "not measured"}[target["met"]]
        print(f"target {target['name']}: {value} {target['unit']} <= {target['target']:g}: {met}")
    if FAILED:
        print(f"{len(FAILED)} attempt(s) did not pass and were run again: {FAILED}")
    if args.json:
        doc.update(
            failed_attempts=len(FAILED),
            api_round_trips={k: v / args.rounds for k, v in sorted(api.items())},
        )
        if pool is not None:
            doc.update(
                first_call_after_ready_p50_ms_pool=(
                    _ms(pooled["after_ready"]) if pooled["after_ready"] else None
                )
            )
            doc.update(
                api_round_trips_pool={k: v / args.rounds for k, v in sorted(api_pool.items())},
                api_round_trips_per_pool_pair=per_pair,
            )
        args.json.write_text(json.dumps(doc, indent=2) + "\n")


def summary(
    bare_t: list[float],
    trivial_t: list[float],
    phases: dict[str, list[float]],
    first_t: list[float] = (),
    calls_t: list[float] = (),
    outside_t: list[float] = (),
    *,
    pool_trivial_t: list[float] = (),
    pool_overlap_t: list[float] = (),
    pool_first_t: list[float] = (),
    pool_calls_t: list[float] = (),
    pool_phases: dict[str, list[float]] | None = None,
    pool_outside_t: list[float] = (),
) -> dict:
    """The figures the printout and `--json` share: medians in ms, the ratios to the bare
    sequence, pool off and (where measured) on, and the issue's targets, met or not."""
    optional = {
        "first_call_attempt": calls_t,
        "outside_phases": outside_t,
        "trivial_pool": pool_trivial_t,
        "trivial_pool_overlap": pool_overlap_t,
        "first_call_pool_attempt": pool_calls_t,
        "outside_phases_pool": pool_outside_t,
    }
    medians = {
        "bare": _ms(bare_t),
        "trivial": _ms(trivial_t),
        **{k: _ms(v) for k, v in optional.items() if v},
        **{f"phase.{k}": _ms(v) for k, v in phases.items()},
        **{f"pool_phase.{k}": _ms(v) for k, v in (pool_phases or {}).items()},
    }
    bare_median = statistics.median(bare_t)

    def ratio(values: list[float]) -> float | None:
        return round(statistics.median(values) / bare_median, 3) if values else None

    doc = {
        "schema_version": SCHEMA_VERSION,
        "rounds": len(trivial_t),
        "medians_ms": medians,
        "ratio_vs_bare": ratio(trivial_t),
        "first_call_p50_ms": _ms(first_t) if first_t else None,
        "ratio_vs_bare_pool": ratio(pool_trivial_t),
        "ratio_vs_bare_pool_overlap": ratio(pool_overlap_t),
        "first_call_p50_ms_pool": _ms(pool_first_t) if pool_first_t else None,
    }
    doc["targets"] = [
        _target(
            "trivial attempt / bare, pool on", "x", doc["ratio_vs_bare_pool"], TARGET_RATIO_POOL
        ),
        _target("trivial attempt / bare, pool off", "x", doc["ratio_vs_bare"], TARGET_RATIO_COLD),
        _target(
            "first call p50, pool on",
            "ms",
            doc["first_call_p50_ms_pool"],
            TARGET_FIRST_CALL_POOL_MS,
        ),
    ]
    return doc


def _target(name: str, unit: str, value: float | None, target: float) -> dict[str, Any]:
    return {
        "name": name,
        "unit": unit,
        "value": value,
        "target": target,
        "met": None if value is None else value <= target,
    }


if __name__ == "__main__":
    main()
