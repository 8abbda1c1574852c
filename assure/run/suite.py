"""Suites: a named collection of specs (containment, conformance, ...), each verdict checked
against the `expect` of its spec; run in order, `jobs` specs at a time, or one shard of them.

A suite run is durable the way a run is. `<suites>/<suite_run_id>/state.json` names the run of
each spec before that run starts (write-ahead), so after a kill -9 the same `assure suite`
command continues the same suite run: finished runs are not repeated, the interrupted ones
(as many as were in flight) are resumed by their own drivers, and the rest start fresh. One
process drives a suite run at a time; its threads update state.json one at a time.
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from assure import spec as spec_mod
from assure.core.chain import canonical, sha256_hex, utc_now
from assure.errors import AssureError, RunDirError, SpecError
from assure.records import store
from assure.records.layout import SuitePaths
from assure.sandbox.hardening import GATEWAY_MEMORY

MAX_JOBS = 64  # -j: specs in flight at once, at most


@dataclass(frozen=True)
class Shard:
    """Shard `index` (1-based) of `count`: the specs whose place in the suite's name order is
    `index - 1` modulo `count`, so N CI jobs with K = 1..N run every spec exactly once."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        index, count = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
        if not match or count < 1 or not 1 <= index <= count:
            raise AssureError(
                f"{text!r} is not K/N with 1 <= K <= N",
                where="--shard",
                fix=(
                    "e.g. --shard 1/3, --shard 2/3 and --shard 3/3 split a suite over three CI jobs"
                ),
            )
        return cls(index, count)

    def select(self, specs: tuple[spec_mod.Spec, ...]) -> tuple[spec_mod.Spec, ...]:
        """This shard's specs, kept in the suite's order (the name order only decides who takes
        which)."""
        names = sorted(s.name for s in specs)
        mine = {name for i, name in enumerate(names) if i % self.count == self.index - 1}
        return tuple(s for s in specs if s.name in mine)

    def to_json(self) -> dict[str, int]:
        return {"index": self.index, "count": self.count}

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    description: str
    specs: tuple[spec_mod.Spec, ...]
    stop_on_unexpected: bool
    shard: Shard | None = None
    epochs: int = 1  # runs of each spec
    pool: dict[str, Any] | None = (
        None  # the suite file's `pool` (how it runs, not what: not in the digest)
    )

    @property
    def trials(self) -> tuple[tuple[spec_mod.Spec, int], ...]:
        """Each run the suite makes: every spec, `epochs` times (spec, epoch), in suite order."""
        return tuple((s, e) for s in self.specs for e in range(1, self.epochs + 1))

    @property
    def digest(self) -> str:
        """What a suite run is a run of: the suite and every spec, as loaded, and the shard
        (shard 1/2 and shard 2/2 are two suite runs, neither continues the other)."""
        shard: dict[str, Any] = (
            {"shard": self.shard.to_json()} if self.shard else {}
        )  # an unsharded digest is as it always was
        shard |= {"epochs": self.epochs} if self.epochs != 1 else {}  # and so is one of 1 epoch
        return sha256_hex(
            canonical(
                {
                    "name": self.name,
                    "stop_on_unexpected": self.stop_on_unexpected,
                    "specs": [s.to_json() for s in self.specs],
                    **shard,
                }
            )
        )

    def sharded(self, shard: Shard | None) -> Suite:
        """This suite cut down to one shard (itself for None)."""
        return self if shard is None else replace(self, specs=shard.select(self.specs), shard=shard)


@dataclass(frozen=True)
class Outcome:
    spec: str  # the spec's name
    run_id: str
    verdict: str
    expect: str
    epoch: int = 1
    # False: the expected verdict, but from findings the spec never expects (`with_findings`)
    findings_as_expected: bool = True

    @property
    def as_expected(self) -> bool:
        return self.verdict == self.expect and self.findings_as_expected


def with_findings(outcomes: list[Outcome], doc: dict[str, Any]) -> list[Outcome]:
    """The outcomes, each as the suite's summary (`doc`, read from the run directories) judges
    it: an expected breach that a containment failure (or any finding but a covert change's)
    made is unexpected (`findings.as_expected`), in the table and the exit code alike."""
    judged = {r["run_id"]: r["as_expected"] for r in doc["results"] if r.get("run_id")}
    return [
        (
            replace(o, findings_as_expected=False)
            if o.as_expected and judged.get(o.run_id) is False
            else o
        )
        for o in outcomes
    ]


def is_suite(path: Path) -> bool:
    """A YAML mapping with `specs` and no `agent`: no spec has the one, every spec the other."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False  # the spec loader says what is wrong with it
    return isinstance(data, dict) and "specs" in data and "agent" not in data


def load(path: str | Path) -> Suite:
    """Read and check a suite and every spec it names. Raises `SpecError` listing every problem."""
    path = Path(path)
    data, lines = spec_mod.read_document(path, spec_mod.schema("suite"), "suite")
    specs: list[spec_mod.Spec] = []
    problems: list[str] = []
    fixes: list[str] = []  # each kind of problem brings its own fix
    for i, rel in enumerate(data["specs"]):
        targets = _expand(path.resolve().parent, rel)
        if not targets:
            problems.append(
                f"{path}:{spec_mod.line_of(('specs', i), lines)}: specs[{i}]: no such file:"
                f" {path.resolve().parent / rel}"
            )
            fixes.append("spec paths in a suite are relative to the suite file's folder")
        for target in targets:
            try:
                specs += spec_mod.load_samples(target)
            except SpecError as exc:
                problems += exc.problems
                fixes.append(exc.fix or "")
    for name in sorted({s.name for s in specs if sum(t.name == s.name for t in specs) > 1}):
        files = ", ".join(str(s.path) for s in specs if s.name == name)
        problems.append(
            f"{path}: specs: two specs are named `{name}` ({files}): a suite's report tells its"
            " specs apart by name"
        )
        fixes.append("give each spec of the suite a `name:` of its own")
    if problems:
        raise SpecError(problems, fix="; ".join(dict.fromkeys(f for f in fixes if f)) or None)
    return Suite(
        data["name"],
        path.resolve(),
        data.get("description", ""),
        tuple(specs),
        data["stop_on_unexpected"],
        pool=data.get("pool"),
        epochs=data["epochs"],
    )


def _expand(folder: Path, entry: str) -> list[Path]:
    """A spec file, or a glob (`containment/*.yaml`) of them in name order; relative to the
    suite."""
    if any(c in entry for c in "*?["):
        return sorted(p for p in folder.glob(entry) if p.is_file())
    target = folder / entry
    return [target] if target.is_file() else []


def spec_footprint(spec: spec_mod.Spec) -> tuple[float, int]:
    """(cpus, memory bytes) one run of `spec` may take at once: the agent's limits and its
    gateway."""
    return spec.limits.cpus, spec.limits.memory_bytes + GATEWAY_MEMORY


def default_jobs(specs: tuple[spec_mod.Spec, ...], cpus: float, memory: int) -> int:
    """How many runs the machine holds side by side: the fewest that `cpus` CPUs and `memory`
    bytes fit of the hungriest spec; at least 1, at most MAX_JOBS."""
    fits = [
        min(cpus / need_cpu, memory / need_memory)
        for need_cpu, need_memory in map(spec_footprint, specs)
    ]
    return max(1, min(MAX_JOBS, int(min(fits, default=1))))


def machine() -> tuple[int, int]:
    """(CPUs this process may use, bytes of memory available now)."""
    cpus = len(os.sched_getaffinity(0))
    quota = cpu_quota()
    if quota is not None:  # a CI runner started with `docker run --cpus 2` on a 64-core host
        cpus = max(1, min(cpus, math.ceil(quota)))
    return cpus, memory_available()


def memory_available() -> int:
    """Bytes of memory available now (MemAvailable)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            return (
                next(int(line.split()[1]) for line in fh if line.startswith("MemAvailable:")) * 1024
            )
    except (OSError, StopIteration, ValueError, IndexError):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPUs this process's cgroup may use (its CFS quota over its period), None if unlimited
    or unknown: cgroup v2's cpu.max ("max 100000", "200000 100000"), else v1's cfs_quota_us."""
    try:
        quota, period = (root / "cpu.max").read_text(encoding="ascii").split()[:2]
    except (OSError, ValueError):
        try:
            quota = (root / "cpu" / "cpu.cfs_quota_us").read_text(encoding="ascii").strip()
            period = (root / "cpu" / "cpu.cfs_period_us").read_text(encoding="ascii").strip()
        except OSError:
            return None
    try:
        limit, every = int(quota), int(period)
    except ValueError:  # "max": no quota
        return None
    return limit / every if limit > 0 and every > 0 else None


RunOne = Callable[[spec_mod.Spec, store.RunDir], str]
Started = Callable[[int, spec_mod.Spec], None]
Finished = Callable[
    [int, "Outcome", "float | None"], None
]  # seconds; None: finished before this process


class SuiteRun:
    """The durable record of one run of a suite: which run each spec got, and its verdict."""

    def __init__(self, path: Path, suite: Suite):
        self.path, self.suite = path, suite
        self.state: dict[str, Any] = store.read_json(SuitePaths(path).state)
        self._lock = threading.Lock()  # state and state.json: one thread at a time

    @property
    def suite_run_id(self) -> str:
        return self.path.name

    @classmethod
    def create(cls, base: Path, suite: Suite) -> SuiteRun:
        path = store.new_dir(base, suite.name)
        store.write_json(
            SuitePaths(path).state,
            {
                "suite": suite.name,
                "source": str(suite.path),
                "digest": suite.digest,
                "state": "running",
                "shard": suite.shard.to_json() if suite.shard else None,
                "started_at": utc_now(),
                "epochs": suite.epochs,
                "runs": [
                    {
                        "spec": s.key,
                        "epoch": epoch,
                        "run_id": None,
                        "verdict": None,
                        "started_at": None,
                        "finished_at": None,
                    }
                    for s, epoch in suite.trials
                ],
            },
        )
        return cls(path, suite)

    @classmethod
    def find_unfinished(cls, base: Path, suite: Suite) -> SuiteRun | None:
        """The newest unfinished run of this very suite (same specs, unchanged) that nobody
        drives."""
        candidates = []
        for path in base.iterdir() if base.is_dir() else ():
            try:
                state = store.read_json(SuitePaths(path).state)
            except RunDirError:  # not a suite run (or a damaged one): never continued
                continue
            if (
                isinstance(state, dict)
                and state.get("digest") == suite.digest
                and state.get("state") == "running"
                and not store.is_locked(path)
            ):
                candidates.append((SuitePaths(path).state.stat().st_mtime, path))
        return cls(max(candidates)[1], suite) if candidates else None

    def drive(
        self,
        runs_dir: Path,
        run_one: RunOne,
        started: Started = lambda n, spec: None,
        *,
        jobs: int = 1,
        finished: Finished = lambda n, outcome, seconds: None,
    ) -> list[Outcome]:
        """Run the specs in order, `jobs` at a time (`run_one` drives a run and returns its
        verdict; it is called from worker threads); a spec whose verdict is already recorded is
        not run again. With `stop_on_unexpected`, no spec starts after an unexpected verdict
        (those in flight finish). An exception from `run_one` stops the scheduling too and is
        raised once the others in flight are done; a KeyboardInterrupt (Ctrl-C, or SIGTERM made
        one) reaches every worker, whose drivers clean up as they would alone."""
        with store.exclusive(self.path, "suite run"):
            pending = []
            for n, (_, entry) in enumerate(zip(self.suite.trials, self.state["runs"], strict=True)):
                if entry["verdict"] is None:
                    pending.append(n)
                else:
                    finished(n, self._outcome(n), None)
            failure = self._schedule(
                pending, runs_dir, run_one, started, finished, max(1, min(jobs, MAX_JOBS))
            )
            if failure is not None:
                raise failure
            self.finish()
        return [
            self._outcome(n)
            for n, entry in enumerate(self.state["runs"])
            if entry["verdict"] is not None
        ]

    def count_pool(self, starts: dict[str, int]) -> None:
        """Add a warm pool's starts (`pool.WarmPool.stats`) to the suite run's: every process
        that drove it, a continued run's included."""
        with self._lock:
            before = self.state.get("pool") or {}
            self.state["pool"] = {k: before.get(k, 0) + v for k, v in starts.items()}
            self.save()

    def finish(self) -> None:
        """Every spec has its verdict (or the suite stopped on an unexpected one): never continued
        again."""
        self.state["state"] = "finished"
        self.state["finished_at"] = utc_now()
        self.save()

    def _schedule(
        self,
        pending: list[int],
        runs_dir: Path,
        run_one: RunOne,
        started: Started,
        finished: Finished,
        jobs: int,
    ) -> BaseException | None:
        """Keep up to `jobs` specs in flight until none is left to start; the first exception."""
        workers: dict[int, int] = {}  # spec index -> the worker thread's id, while it runs
        failure: BaseException | None = None
        pending = list(pending)
        with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="suite") as pool:
            flight: dict[Future[None], int] = {}
            try:
                while pending or flight:
                    while (
                        pending and len(flight) < jobs and failure is None and not self._stopped()
                    ):
                        n = pending.pop(0)
                        flight[
                            pool.submit(self._one, n, runs_dir, run_one, started, finished, workers)
                        ] = n
                    if not flight:
                        break
                    done, _ = wait(flight, return_when=FIRST_COMPLETED)
                    for future in done:
                        del flight[future]
                        if future.exception() is not None and failure is None:
                            failure = future.exception()
            except (
                BaseException
            ):  # KeyboardInterrupt in this thread: every worker gets it too, once
                interrupted: set[int] = set()
                for future in flight:
                    future.cancel()  # not started yet: never will
                while not all(f.done() for f in flight):
                    for tid in set(workers.values()) - interrupted:
                        _raise_in(tid, KeyboardInterrupt)
                        interrupted.add(tid)
                    wait(flight, timeout=0.1)
                raise
        return failure

    def _one(
        self,
        n: int,
        runs_dir: Path,
        run_one: RunOne,
        started: Started,
        finished: Finished,
        workers: dict[int, int],
    ) -> None:
        (spec, _), entry = self.suite.trials[n], self.state["runs"][n]
        workers[n] = threading.get_ident()
        try:
            with self._lock:
                if entry["run_id"] is None:
                    run = store.RunDir.new(runs_dir, spec.name, spec.path, spec.to_json())
                    entry["run_id"] = run.run_id
                else:
                    run = store.RunDir.open(runs_dir / entry["run_id"])
                entry["started_at"] = (
                    entry.get("started_at") or utc_now()
                )  # a resumed spec keeps when it first started
                self.save()  # before the run starts: a kill from here on resumes this run
            started(n, spec)
            began = time.monotonic()
            verdict = run_one(spec, run)
            with self._lock:
                entry["verdict"], entry["finished_at"] = verdict, utc_now()
                self.save()
            finished(n, self._outcome(n), time.monotonic() - began)
        finally:
            workers.pop(n, None)

    def _outcome(self, n: int) -> Outcome:
        (spec, epoch), entry = self.suite.trials[n], self.state["runs"][n]
        return Outcome(spec.name, entry["run_id"], entry["verdict"], spec.expect, epoch)

    def _stopped(self) -> bool:
        """Whether `stop_on_unexpected` forbids starting another spec."""
        with self._lock:
            return self.suite.stop_on_unexpected and any(
                e["verdict"] is not None and e["verdict"] != s.expect
                for (s, _), e in zip(self.suite.trials, self.state["runs"], strict=True)
            )

    def save(self) -> None:
        store.write_json(SuitePaths(self.path).state, self.state)


def _raise_in(thread_id: int, exc: type[BaseException]) -> None:
    """Raise `exc` in another thread of this process at its next Python instruction (a driver
    waiting on a container wakes every 100 ms, so it is seen within that)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc))
