"""Suites: a named collection of specs (containment, conformance, ...) run in order, each verdict
checked against the `expect` of its spec.

A suite run is durable the way a run is. `<suites>/<suite_run_id>/state.json` names the run of
each spec before that run starts (write-ahead), so after a kill -9 the same `assure suite`
command continues the same suite run: finished runs are not repeated, the interrupted one is
resumed by its own driver, and the rest start fresh. One process drives a suite run at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from assure import spec as spec_mod
from assure.records import store
from assure.records.layout import SuitePaths
from assure.core.chain import canonical, sha256_hex, utc_now
from assure.errors import RunDirError, SpecError


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    description: str
    specs: tuple[spec_mod.Spec, ...]
    stop_on_unexpected: bool

    @property
    def digest(self) -> str:
        """What a suite run is a run of: the suite and every spec, as loaded."""
        return sha256_hex(canonical({"name": self.name, "stop_on_unexpected": self.stop_on_unexpected,
                                     "specs": [s.to_json() for s in self.specs]}))


@dataclass(frozen=True)
class Outcome:
    spec: str  # the spec's name
    run_id: str
    verdict: str
    expect: str

    @property
    def as_expected(self) -> bool:
        return self.verdict == self.expect


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
    specs, problems = [], []
    for i, rel in enumerate(data["specs"]):
        targets = _expand(path.resolve().parent, rel)
        if not targets:
            problems.append(f"{path}:{spec_mod.line_of(('specs', i), lines)}: specs[{i}]: no such file: {path.resolve().parent / rel}")
        for target in targets:
            try:
                specs.append(spec_mod.load(target))
            except SpecError as exc:
                problems += exc.problems
    names = [s.name for s in specs]
    problems += [f"{path}: two specs are named {name!r}: a suite's report tells its specs apart by name" for name in sorted({n for n in names if names.count(n) > 1})]
    if problems:
        raise SpecError(problems, fix="spec paths in a suite are relative to the suite file's folder")
    return Suite(data["name"], path.resolve(), data.get("description", ""), tuple(specs), data["stop_on_unexpected"])


def _expand(folder: Path, entry: str) -> list[Path]:
    """A spec file, or a glob (`containment/*.yaml`) of them in name order; relative to the suite."""
    if any(c in entry for c in "*?["):
        return sorted(p for p in folder.glob(entry) if p.is_file())
    target = folder / entry
    return [target] if target.is_file() else []


class SuiteRun:
    """The durable record of one run of a suite: which run each spec got, and its verdict."""

    def __init__(self, path: Path, suite: Suite):
        self.path, self.suite = path, suite
        self.state: dict[str, Any] = store.read_json(SuitePaths(path).state)

    @property
    def suite_run_id(self) -> str:
        return self.path.name

    @classmethod
    def create(cls, base: Path, suite: Suite) -> SuiteRun:
        path = base / store.new_run_id(suite.name)
        path.mkdir(parents=True)
        store.write_json(SuitePaths(path).state, {
            "suite": suite.name, "source": str(suite.path), "digest": suite.digest, "state": "running",
            "started_at": utc_now(), "runs": [{"spec": str(s.path), "run_id": None, "verdict": None} for s in suite.specs],
        })
        return cls(path, suite)

    @classmethod
    def find_unfinished(cls, base: Path, suite: Suite) -> SuiteRun | None:
        """The newest unfinished run of this very suite (same specs, unchanged) that nobody drives."""
        candidates = []
        for path in base.iterdir() if base.is_dir() else ():
            try:
                state = store.read_json(SuitePaths(path).state)
            except RunDirError:  # not a suite run (or a damaged one): never continued
                continue
            if isinstance(state, dict) and state.get("digest") == suite.digest and state.get("state") == "running" and not store.is_locked(path):
                candidates.append((SuitePaths(path).state.stat().st_mtime, path))
        return cls(max(candidates)[1], suite) if candidates else None

    def drive(self, runs_dir: Path, run_one: Callable[[spec_mod.Spec, store.RunDir], str], started: Callable[[int, spec_mod.Spec], None]) -> list[Outcome]:
        """Run each spec in order (`run_one` drives a run and returns its verdict); a spec whose
        verdict is already recorded is not run again."""
        outcomes = []
        with store.exclusive(self.path, "suite run"):
            for n, (spec, entry) in enumerate(zip(self.suite.specs, self.state["runs"], strict=True)):
                started(n, spec)
                if entry["verdict"] is None:
                    if entry["run_id"] is None:
                        run = store.RunDir.create(runs_dir, store.new_run_id(spec.name), spec.path, spec.to_json())
                        entry["run_id"] = run.run_id
                        self.save()  # before the run starts: a kill from here on resumes this run
                    else:
                        run = store.RunDir.open(runs_dir / entry["run_id"])
                    entry["verdict"] = run_one(spec, run)
                    self.save()
                outcomes.append(Outcome(spec.name, entry["run_id"], entry["verdict"], spec.expect))
                if self.suite.stop_on_unexpected and not outcomes[-1].as_expected:
                    break
            self.state["state"] = "finished"
            self.state["finished_at"] = utc_now()
            self.save()
        return outcomes

    def save(self) -> None:
        store.write_json(SuitePaths(self.path).state, self.state)
