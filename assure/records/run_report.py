"""A run's report (`report.json`) as one frozen, typed value: built by the driver, written as
`to_json`, and read back by every reader (the box, the HTML page, the summary, Inspect's
scorer, the cluster) through `from_json`.

A report read back from a run directory is untrusted input: `from_json` refuses an unknown,
missing or wrong-typed field by its name, and a finding whose severity is not its kind's, rather
than guessing. `to_json` gives back exactly what `from_json` read, so a report read and written
again is the same bytes (`store.write_json`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from assure.errors import RunDirError
from assure.records import store
from assure.records.states import RunState, TaskState
from assure.verify.findings import SEVERITY, Finding, Kind, Verdict
from assure.verify.stopped import Stopped


@dataclass(frozen=True)
class GateDenial:
    """The gate's first denied (or escalated) call of an attempt, and how many there were;
    its strings escaped (`display`) where they were read (run/reasons.py)."""

    tool: str
    path: str | None
    rule: str
    message: str
    denied: int

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "path": self.path,
            "rule": self.rule,
            "message": self.message,
            "denied": self.denied,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> GateDenial:
        d = _object(data, where, ("tool", "path", "rule", "message", "denied"))
        return cls(
            _req(d, "tool", str, where),
            _opt(d, "path", str, where),
            _req(d, "rule", str, where),
            _req(d, "message", str, where),
            _req(d, "denied", int, where),
        )


@dataclass(frozen=True)
class Reason:
    """Why an attempt did not pass or was not contained (run/reasons.py): one line, the gate's
    first denial, the agent's last output lines."""

    summary: str | None
    gate_denial: GateDenial | None
    agent_output: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            "gate_denial": self.gate_denial.to_json() if self.gate_denial else None,
            "agent_output": list(self.agent_output),
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> Reason:
        d = _object(data, where, ("summary", "gate_denial", "agent_output"))
        denial = d["gate_denial"]
        return cls(
            _opt(d, "summary", str, where),
            None if denial is None else GateDenial.from_json(denial, f"{where}.gate_denial"),
            tuple(_strs(d, "agent_output", where)),
        )


@dataclass(frozen=True)
class AttemptEntry:
    """One judged attempt, as the report lists it."""

    attempt: int
    task: str
    verdict: Verdict
    exit_code: int | None
    timed_out: bool | None
    stopped: Stopped | None
    timings: Mapping[str, float]
    claim: Any  # the agent's own claim (`task.report`), JSON as it sent it: narrative only
    journal_head: Mapping[str, Any] | None
    findings: tuple[Finding, ...]
    reason: Reason | None

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "task": self.task,
            "verdict": self.verdict.value,
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "stopped": self.stopped.to_json() if self.stopped else None,
            "timings": dict(self.timings),
            "claim": self.claim,
            "journal_head": None if self.journal_head is None else dict(self.journal_head),
            "findings": [f.to_json() for f in self.findings],
            "reason": self.reason.to_json() if self.reason else None,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> AttemptEntry:
        d = _object(data, where, _ATTEMPT_FIELDS)
        stopped, reason, head = d["stopped"], d["reason"], d["journal_head"]
        try:
            stop = None if stopped is None else Stopped.from_json(stopped)
        except ValueError as exc:
            raise ValueError(f"{where}.stopped: {exc}") from None
        timings = _object(d["timings"], f"{where}.timings", None)
        for name, value in timings.items():
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise ValueError(f"{where}.timings.{name} is a number")
        return cls(
            attempt=_req(d, "attempt", int, where),
            task=_req(d, "task", str, where),
            verdict=_enum(Verdict, d, "verdict", where),
            exit_code=_opt(d, "exit_code", int, where),
            timed_out=_opt(d, "timed_out", bool, where),
            stopped=stop,
            timings=dict(timings),
            claim=d["claim"],
            journal_head=None if head is None else dict(_object(head, f"{where}.journal_head")),
            findings=tuple(
                _finding(f, f"{where}.findings[{i}]")
                for i, f in enumerate(_req(d, "findings", list, where))
            ),
            reason=None if reason is None else Reason.from_json(reason, f"{where}.reason"),
        )


@dataclass(frozen=True)
class TaskEntry:
    """One task: its state, why, its attempts, and the verdict of the one that stands for it."""

    id: str
    state: TaskState
    reason: str | None
    attempts: tuple[int, ...]
    verdict: Verdict | None
    verdict_attempt: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state.value,
            "reason": self.reason,
            "attempts": list(self.attempts),
            "verdict": self.verdict.value if self.verdict else None,
            "verdict_attempt": self.verdict_attempt,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> TaskEntry:
        d = _object(
            data, where, ("id", "state", "reason", "attempts", "verdict", "verdict_attempt")
        )
        attempts = _req(d, "attempts", list, where)
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in attempts):
            raise ValueError(f"{where}.attempts is a list of attempt numbers")
        return cls(
            _req(d, "id", str, where),
            _enum(TaskState, d, "state", where),
            _opt(d, "reason", str, where),
            tuple(attempts),
            None if d["verdict"] is None else _enum(Verdict, d, "verdict", where),
            _opt(d, "verdict_attempt", int, where),
        )


@dataclass(frozen=True)
class Report:
    """The machine-readable report: the tasks, every judged attempt, and the run's verdict."""

    run_id: str
    spec: str
    hostile: bool
    expect: str
    verdict: Verdict
    state: RunState
    tasks: tuple[TaskEntry, ...]
    attempts: tuple[AttemptEntry, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "spec": self.spec,
            "hostile": self.hostile,
            "expect": self.expect,
            "verdict": self.verdict.value,
            "state": self.state.value,
            "tasks": [t.to_json() for t in self.tasks],
            "attempts": [a.to_json() for a in self.attempts],
        }

    @classmethod
    def from_json(cls, data: Any) -> Report:
        """A report as `to_json` wrote it; anything else is a `ValueError` naming the field."""
        d = _object(data, "report", _REPORT_FIELDS)
        return cls(
            run_id=_req(d, "run_id", str, "report"),
            spec=_req(d, "spec", str, "report"),
            hostile=_req(d, "hostile", bool, "report"),
            expect=_enum(Verdict, d, "expect", "report").value,
            verdict=_enum(Verdict, d, "verdict", "report"),
            state=_enum(RunState, d, "state", "report"),
            tasks=tuple(
                TaskEntry.from_json(t, f"report.tasks[{i}]")
                for i, t in enumerate(_req(d, "tasks", list, "report"))
            ),
            attempts=tuple(
                AttemptEntry.from_json(a, f"report.attempts[{i}]")
                for i, a in enumerate(_req(d, "attempts", list, "report"))
            ),
        )

    @classmethod
    def read(cls, path: Path) -> Report:
        """`report.json` from a run directory: unreadable or malformed is a `RunDirError`."""
        try:
            return cls.from_json(store.read_json(path))
        except ValueError as exc:
            raise RunDirError(f"malformed report: {exc}", where=str(path)) from None

    def attempts_of(self, task: str) -> list[AttemptEntry]:
        return [a for a in self.attempts if a.task == task]


E = TypeVar("E", Verdict, Kind, RunState, TaskState)
T = TypeVar("T")
_REPORT_FIELDS = ("run_id", "spec", "hostile", "expect", "verdict", "state", "tasks", "attempts")
_ATTEMPT_FIELDS = (
    "attempt",
    "task",
    "verdict",
    "exit_code",
    "timed_out",
    "stopped",
    "timings",
    "claim",
    "journal_head",
    "findings",
    "reason",
)
_FINDING_FIELDS = ("kind", "severity", "subject", "message", "attribution", "detail")


def _finding(data: Any, where: str) -> Finding:
    """A finding as `Finding.to_json` writes it; its severity is its kind's, or it is refused (a
    breach written down as info would otherwise be read as info)."""
    d = _object(data, where, _FINDING_FIELDS)
    kind = _enum(Kind, d, "kind", where)
    if d["severity"] != SEVERITY[kind].value:
        raise ValueError(f"{where}.severity is {SEVERITY[kind].value} for a {kind.value} finding")
    return Finding(
        kind,
        _req(d, "subject", str, where),
        _req(d, "message", str, where),
        _opt(d, "attribution", str, where),
        dict(_object(d["detail"], f"{where}.detail")),
    )


def _object(data: Any, where: str, fields: tuple[str, ...] | None = None) -> Mapping[str, Any]:
    """`data` as a JSON object with exactly `fields` (any keys when None)."""
    if not isinstance(data, Mapping) or not all(isinstance(k, str) for k in data):
        raise ValueError(f"{where} is an object, not {type(data).__name__}")
    if fields is not None:
        unknown = sorted(set(data) - set(fields))
        missing = [f for f in fields if f not in data]
        if unknown:
            raise ValueError(f"{where} has unknown fields: {', '.join(unknown)}")
        if missing:
            raise ValueError(f"{where} lacks fields: {', '.join(missing)}")
    return data


def _opt(d: Mapping[str, Any], key: str, kind: type[T], where: str) -> T | None:
    """`d[key]` if it is a `kind` (a bool is not an int) or null; else ValueError naming it."""
    return None if d[key] is None else _req(d, key, kind, where, " or null")


def _req(d: Mapping[str, Any], key: str, kind: type[T], where: str, null: str = "") -> T:
    """`d[key]` if it is a `kind` (a bool is not an int); else ValueError naming it."""
    value = d[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{where}.{key} is a {kind.__name__}{null}")
    return value


def _strs(d: Mapping[str, Any], key: str, where: str) -> list[str]:
    value = _req(d, key, list, where)
    if not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}.{key} is a list of strings")
    return value


def _enum(kind: type[E], d: Mapping[str, Any], key: str, where: str) -> E:
    value = d[key]
    try:
        return kind(value)
    except (ValueError, TypeError):
        names = ", ".join(str(e.value) for e in kind)
        raise ValueError(f"{where}.{key} is one of {names}, not {value!r}") from None
