"""What one attempt collected, and its judgement: one typed value for judge, promote, the
report and the receipts.

The attempt builds it in memory and writes each part to its folder as it goes (the on-disk
format is `layout`'s); `assure verify` loads the same record from the folder alone
(`AttemptRecord.load`) and hands it to the same judge. A part that cannot be loaded is kept
as the exception that stopped it (`unreadable`), for the judge to report: it never passes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from assure.errors import RunDirError
from assure.records.layout import AttemptPaths, RunPaths
from assure.records.store import read_json
from assure.verify.assertions import CHECK_KINDS, KINDS
from assure.verify.diff import Change
from assure.verify.facts import ContainerFacts
from assure.verify.judge import SNAPSHOTS, Judgement
from assure.verify.snapshot import Snapshot


@dataclass(frozen=True)
class AttemptRecord:
    paths: AttemptPaths
    facts: ContainerFacts
    pre: Snapshot | None
    post: Snapshot | None
    checks: Mapping[
        str, list[Any]
    ]  # check-container results by assertion kind (commands.json, cases.json)
    unreadable: Mapping[str, Exception] = field(
        default_factory=dict
    )  # file name -> why it did not load
    judgement: Judgement | None = None
    judged_at: str | None = None

    @property
    def number(self) -> int:
        return self.paths.number

    def judged(self, judgement: Judgement, judged_at: str | None) -> AttemptRecord:
        return replace(self, judgement=judgement, judged_at=judged_at)

    def verdict_json(self) -> dict[str, Any]:
        """What `verdict.json` holds."""
        assert self.judgement is not None
        return {**self.judgement.to_json(), "judged_at": self.judged_at}

    def changes(self) -> tuple[Change, ...]:
        """The judged workspace changes (`verdict.json`'s)."""
        if self.judgement is None:
            raise RunDirError(
                f"missing {self.paths.verdict.name}: the attempt was never judged",
                where=str(self.paths.root),
            )
        return self.judgement.changes

    @classmethod
    def collected(
        cls,
        paths: AttemptPaths,
        facts: ContainerFacts,
        *,
        pre: Snapshot | None,
        post: Snapshot | None,
        checks: Mapping[str, list[Any] | None],
    ) -> AttemptRecord:
        """The live record: what the attempt holds in memory; a part it does not hold (a phase
        failed before it) is loaded as `assure verify` would load it."""
        unreadable: dict[str, Exception] = {}
        if pre is None or post is None:
            pre, post = _snapshots(paths, unreadable)
        loaded = {
            kind: found if found is not None else _check_file(paths, kind, unreadable)
            for kind, found in checks.items()
        }
        return cls(paths, facts, pre, post, MappingProxyType(loaded), MappingProxyType(unreadable))

    @classmethod
    def load(
        cls, paths: AttemptPaths, *, snapshots: bool = True, judged: bool = True
    ) -> AttemptRecord:
        """The record from the attempt's folder alone, with its live judgement (`verdict.json`)
        if there is one and `judged`. `snapshots=False` leaves out PRE, POST and the check
        results (promote, the report and the receipts need only the facts and the judgement)."""
        unreadable: dict[str, Exception] = {}
        try:
            facts = ContainerFacts(read_json(paths.container))
        except Exception as exc:
            unreadable[paths.container.name] = exc
            facts = ContainerFacts()
        pre, post = _snapshots(paths, unreadable) if snapshots else (None, None)
        checks = {
            kind: _check_file(paths, kind, unreadable) if snapshots else [] for kind in CHECK_KINDS
        }
        judgement, judged_at = None, None
        if judged and paths.verdict.is_file():
            data = read_json(paths.verdict)
            judgement, judged_at = Judgement.from_json(data), data.get("judged_at")
        return cls(
            paths,
            facts,
            pre,
            post,
            MappingProxyType(checks),
            MappingProxyType(unreadable),
            judgement,
            judged_at,
        )


def _snapshots(
    paths: AttemptPaths, unreadable: dict[str, Exception]
) -> tuple[Snapshot | None, Snapshot | None]:
    try:
        return Snapshot.from_json(read_json(paths.pre)), Snapshot.from_json(read_json(paths.post))
    except (
        Exception
    ) as exc:  # a missing or unreadable snapshot: the judge cannot judge, never passes
        unreadable[SNAPSHOTS] = exc
        return None, None


def _check_file(paths: AttemptPaths, kind: str, unreadable: dict[str, Exception]) -> list[Any]:
    path = KINDS[kind].results(paths)
    try:
        return read_json(path) if path.is_file() else []
    except Exception as exc:
        unreadable[path.name] = exc
        return []


class Records:
    """A run's attempt records by number: the ones kept here (judged in this process, or
    amended), else loaded once from the run directory (the facts and the judgement)."""

    def __init__(self, run: RunPaths):
        self._run = run
        self._held: dict[int, AttemptRecord] = {}

    def keep(self, record: AttemptRecord) -> None:
        self._held[record.number] = record

    def get(self, n: int) -> AttemptRecord:
        if n not in self._held:
            self._held[n] = AttemptRecord.load(self._run.attempt(n), snapshots=False)
        return self._held[n]
