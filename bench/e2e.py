"""End-to-end attempt cost against a bare Docker baseline, measured in the same run, phase by phase.

bare:       the same Docker work with nothing of ours: create a volume, start a hardened
            sidecar, run a hardened `--network none` container to completion, remove both.
trivial:    one trivial attempt through assure, prepare through verdict (fresh workspace, PRE
            snapshot, socket volume, gateway ready on its socket, hardened agent running
            `true`, collect, cleanup, POST snapshot, judge, records).
first call: the same attempt with an agent that makes one gateway call (`fs.list`): the time
            from the attempt's start to that call's journal line.

Runs are interleaved (bare, trivial, first call, bare, ...) so a machine shared with other
work slows all three alike; medians and ratios are reported, never absolute targets.
Each attempt's Docker API round trips are counted (a response hook on docker-py's session).

    python bench/e2e.py [--rounds N] [--json PATH] [--profile PATH]
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
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from assure import spec as spec_mod
from assure.records import store
from assure.run.driver import Driver
from assure.sandbox import hardening
from assure.sandbox.backend import Mount, Role
from assure.sandbox.docker import DockerBackend
from assure.sandbox.images import Images

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
    start = time.perf_counter()
    labels = {"assure.owner": "assure", "assure.run": f"bench-baseline-{n}"}
    volume = backend.create_volume(f"bench-baseline-{n}", labels, hardening.socket_volume_options(spec))
    common = hardening.common_request(spec, Role.AGENT, images.agent, labels, "256m", 64)
    sidecar = backend.start_container(replace(common, role=Role.GATEWAY, image=images.gateway, name=f"bench-side-{os.getpid()}-{n}", command=("sleep", "60"),
                                              mounts=(Mount(volume, "/run/assure"),)))
    agent = backend.start_container(replace(common, name=f"bench-agent-{os.getpid()}-{n}", command=("true",), mounts=(Mount(volume, "/run/assure", read_only=True),)))
    backend.wait(agent, 60)
    for cid in (agent, sidecar):
        backend.remove_container(cid)
    backend.remove_volume(volume)
    return time.perf_counter() - start


def _wall(ts: str) -> float:
    return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def first_call_seconds(run: store.RunDir) -> float | None:
    """From the attempt's start (container.json) to its first `tool_call` journal line (None
    before container.json recorded `started_at`)."""
    paths = run.attempt(1)
    started = json.loads(paths.container.read_text()).get("started_at")
    if started is None:
        return None
    for line in paths.journal.read_text().splitlines():
        record = json.loads(line)
        if record.get("event") == "tool_call":
            return _wall(record["ts"]) - started
    raise AssertionError("the agent made no gateway call")


FAILED: list[str] = []  # attempts that did not pass (on a shared machine: RLIMIT_NPROC is per uid, host-wide)
RETRIES = 3


def ours(backend, images, spec, runs: Path) -> tuple[float, dict[str, float], store.RunDir]:
    for _ in range(RETRIES):
        start = time.perf_counter()
        run = store.RunDir.create(runs, store.new_run_id(spec.name), spec.path, spec.to_json())
        result = Driver(spec, run, backend, images, lambda *_: None).drive()
        elapsed = time.perf_counter() - start
        if result.verdict == "pass":
            return elapsed, dict(result.report["attempts"][0]["timings"]), run
        FAILED.append("; ".join(f["message"] for f in result.report["attempts"][0]["findings"])[:300])
    raise AssertionError(f"{spec.name}: no attempt passed in {RETRIES}: {FAILED[-RETRIES:]}")


def _ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json", type=Path, help="write the medians here (schema_version 1)")
    parser.add_argument("--profile", type=Path, help="profile one trivial attempt with pyinstrument, text to this file")
    args = parser.parse_args()
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
        bare(backend, images, specs["trivial"], -1)  # warm-up
        for spec in specs.values():
            ours(backend, images, spec, runs)
        trips.take()
        bare_t, trivial_t, first_t, calls_t = [], [], [], []
        phases: dict[str, list[float]] = {}
        per_attempt: list[dict[str, float]] = []
        api: collections.Counter[str] = collections.Counter()
        for n in range(args.rounds):
            bare_t.append(bare(backend, images, specs["trivial"], n))
            trips.take()
            elapsed, timings, _ = ours(backend, images, specs["trivial"], runs)
            api += trips.take()
            trivial_t.append(elapsed)
            per_attempt.append(timings)
            for phase, seconds in timings.items():
                phases.setdefault(phase, []).append(seconds)
            elapsed, _, run = ours(backend, images, specs["first_call"], runs)
            calls_t.append(elapsed)
            if (seconds := first_call_seconds(run)) is not None:
                first_t.append(seconds)
        if args.profile:
            from pyinstrument import Profiler

            with Profiler(interval=0.001) as profiler:
                ours(backend, images, specs["trivial"], runs)
            args.profile.write_text(profiler.output_text(unicode=False, color=False, show_all=False))
    outside_t = [t - sum(v for k, v in p.items() if "." not in k) for t, p in zip(trivial_t, per_attempt)]
    doc = summary(bare_t, trivial_t, phases, first_t, calls_t, outside_t)
    medians, ratio, first_p50 = doc["medians_ms"], doc["ratio_vs_bare"], doc["first_call_p50_ms"]
    print("assure phases (median ms): " + ", ".join(f"{k} {_ms(v):.0f}" for k, v in phases.items()))
    print("Docker API round trips per trivial attempt: " + ", ".join(f"{k} {v / args.rounds:g}" for k, v in sorted(api.items())))
    print(f"  total {sum(api.values()) / args.rounds:g}")
    print(f"e2e attempt, {args.rounds} interleaved rounds: bare two-container sequence median {medians['bare']:.0f} ms, "
          f"trivial attempt median {medians['trivial']:.0f} ms, ratio {ratio:.2f}x")
    print(f"attempt start to the agent's first gateway call: p50 {first_p50} ms (whole attempt {medians['first_call_attempt']:.0f} ms)")
    print(f"outside the attempt's phases (run dir, state, judge, promote, receipts): {medians['outside_phases']:.0f} ms")
    if FAILED:
        print(f"{len(FAILED)} attempt(s) did not pass and were run again: {FAILED}")
    if args.json:
        doc.update(failed_attempts=len(FAILED), api_round_trips={k: v / args.rounds for k, v in sorted(api.items())})
        args.json.write_text(json.dumps(doc, indent=2) + "\n")


def summary(bare_t: list[float], trivial_t: list[float], phases: dict[str, list[float]], first_t: list[float] = (),
            calls_t: list[float] = (), outside_t: list[float] = ()) -> dict:
    """The figures the printout and `--json` share: medians in ms, the ratio to the bare sequence."""
    medians = {"bare": _ms(bare_t), "trivial": _ms(trivial_t), **({"first_call_attempt": _ms(calls_t)} if calls_t else {}),
               **({"outside_phases": _ms(outside_t)} if outside_t else {}), **{f"phase.{k}": _ms(v) for k, v in phases.items()}}
    return {"schema_version": SCHEMA_VERSION, "rounds": len(trivial_t), "medians_ms": medians,
            "ratio_vs_bare": round(statistics.median(trivial_t) / statistics.median(bare_t), 3),
            "first_call_p50_ms": _ms(first_t) if first_t else None}


if __name__ == "__main__":
    main()
