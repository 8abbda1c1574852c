"""The registered anomaly classes of the runtime monitor: small pure functions over plain
data read from the runs base (`RunData`), each returning the findings it raises alerts for.
`ANOMALIES` is the finite list a monitor pass runs; `staleness` judges a heartbeat."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from assure.records.health import Thresholds
from assure.textsafe import display
from assure.verify.stopped import Stopped, StopReason

RUNNING = "running"
WINDOW_SECONDS = 60.0  # "per minute"


@dataclass(frozen=True)
class Call:
    """One journaled tool call."""

    at: float | None
    tool: str
    args_digest: str
    effect: bool  # the gateway journaled an effect (file write/delete, SQL, HTTP)
    rule: str | None = None


@dataclass(frozen=True)
class AttemptData:
    number: int
    calls: tuple[Call, ...] = ()
    tool_calls_used: int | None = None  # the gateway's counter at `gateway_stopped`
    tool_calls_limit: int | None = None  # from `gateway_started`
    budget_breach: str | None = None  # the counter the gateway said ran out
    finished: bool = False  # container.json exists: the attempt's agent is gone
    oom_killed: bool = False
    stopped: Stopped | None = None  # container.json `stopped`
    stop_malformed: str | None = None  # why container.json's `stopped` could not be read
    ready_at: float | None = None  # mtime of the gateway's ready file
    journal_mtime: float | None = None


@dataclass(frozen=True)
class RunData:
    run_id: str
    state: str | None  # None: state.json is garbage
    attempt: int | None
    started_at: float | None
    state_mtime: float
    events_mtime: float | None = None
    attempts: tuple[AttemptData, ...] = ()
    examined: bool = False  # running or finished within the lookback: attempts were read

    @property
    def running(self) -> bool:
        return self.state == RUNNING

    @property
    def current(self) -> AttemptData | None:
        found = [a for a in self.attempts if a.number == self.attempt]
        return found[0] if found else (self.attempts[-1] if self.attempts else None)


@dataclass(frozen=True)
class Finding:
    attempt: int | None
    subject: str  # with the class, the run and the attempt: the alert's dedup key
    message: str
    detail: dict[str, Any] = field(default_factory=dict)


Detector = Callable[[RunData, Thresholds, float], list[Finding]]


def peak_per_window(times: list[float], window: float = WINDOW_SECONDS) -> int:
    """The largest number of `times` inside any `window` seconds."""
    ordered, best, start = sorted(times), 0, 0
    for end, t in enumerate(ordered):
        while t - ordered[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best


def rate_of_change(run: RunData, t: Thresholds, now: float) -> list[Finding]:
    """Tool calls, or journaled effects, per minute above their limit in some attempt."""
    out = []
    for a in run.attempts:
        calls = peak_per_window([c.at for c in a.calls if c.at is not None])
        if calls > t.max_tool_calls_per_minute:
            out.append(
                Finding(
                    a.number,
                    "tool_calls",
                    f"attempt {a.number}: {calls} tool calls within one minute (limit"
                    f" {t.max_tool_calls_per_minute})",
                    {"per_minute": calls, "limit": t.max_tool_calls_per_minute},
                )
            )
        changes = peak_per_window([c.at for c in a.calls if c.at is not None and c.effect])
        if changes > t.max_changes_per_minute:
            out.append(
                Finding(
                    a.number,
                    "changes",
                    f"attempt {a.number}: {changes} effects (writes, deletes, SQL, HTTP) within one"
                    f" minute (limit {t.max_changes_per_minute})",
                    {"per_minute": changes, "limit": t.max_changes_per_minute},
                )
            )
    return out


def duplication_ratio(run: RunData, t: Thresholds, now: float) -> list[Finding]:
    """The share of tool calls that repeat an earlier call exactly (same tool and args_digest)."""
    out = []
    for a in run.attempts:
        total = len(a.calls)
        if total < t.min_calls_for_ratio:
            continue
        duplicates = total - len({(c.tool, c.args_digest) for c in a.calls})
        ratio = duplicates / total
        if ratio > t.max_duplicate_ratio:
            out.append(
                Finding(
                    a.number,
                    "duplicates",
                    f"attempt {a.number}: {duplicates} of {total} tool calls are exact duplicates"
                    f" ({ratio:.0%}, limit {t.max_duplicate_ratio:.0%})",
                    {
                        "duplicates": duplicates,
                        "calls": total,
                        "ratio": round(ratio, 4),
                        "limit": t.max_duplicate_ratio,
                    },
                )
            )
    return out


def resource_saturation(run: RunData, t: Thresholds, now: float) -> list[Finding]:
    """An attempt killed by the OOM killer, stopped by a budget or the deadline, or whose
    tool-call counter reached `near_limit_ratio` of its limit."""
    out = []
    for a in run.attempts:
        if a.oom_killed:
            out.append(
                Finding(
                    a.number,
                    "oom",
                    f"attempt {a.number}: the agent was killed for running out of memory (OOM)",
                    {"oom_killed": True},
                )
            )
        if a.stop_malformed is not None:  # never read as "not stopped"
            out.append(
                Finding(
                    a.number,
                    "stop_malformed",
                    f"attempt {a.number}: its stop record (container.json `stopped`) is"
                    f" malformed: {display(a.stop_malformed)}",
                    {"why": a.stop_malformed},
                )
            )
        stop = a.stopped
        if (stop and stop.reason in (StopReason.BUDGET, StopReason.DEADLINE)) or a.budget_breach:
            reason = stop.reason.value if stop else None
            counter = (stop.counter if stop else None) or a.budget_breach or reason
            out.append(
                Finding(
                    a.number,
                    "budget",
                    f"attempt {a.number}: budget {display(str(counter))} exhausted",
                    {"counter": counter, "stopped": reason},
                )
            )
            continue
        if (
            a.tool_calls_limit
            and a.tool_calls_used is not None
            and a.tool_calls_used >= t.near_limit_ratio * a.tool_calls_limit
        ):
            out.append(
                Finding(
                    a.number,
                    "tool_calls_near_limit",
                    f"attempt {a.number}: {a.tool_calls_used} of {a.tool_calls_limit} tool calls"
                    f" used (alert at {t.near_limit_ratio:.0%})",
                    {
                        "used": a.tool_calls_used,
                        "limit": a.tool_calls_limit,
                        "ratio": t.near_limit_ratio,
                    },
                )
            )
    return out


def silent_component(run: RunData, t: Thresholds, now: float) -> list[Finding]:
    """A running run whose driver events and current gateway journal have not grown for a while."""
    if not run.running:
        return []
    current = run.current
    marks = [
        m for m in (run.events_mtime, current.journal_mtime if current else None) if m is not None
    ]
    last = max(marks) if marks else (run.started_at or run.state_mtime)
    quiet = now - last
    if quiet <= t.silent_after_seconds:
        return []
    return [
        Finding(
            run.attempt,
            f"since:{last:.0f}",
            f"running, but its events and gateway journal have not grown for {quiet:.0f} s (limit"
            f" {t.silent_after_seconds:.0f} s)",
            {
                "last_growth_at": last,
                "quiet_seconds": round(quiet, 1),
                "limit": t.silent_after_seconds,
            },
        )
    ]


ANOMALIES: tuple[tuple[str, Detector], ...] = (
    ("rate_of_change", rate_of_change),
    ("duplication_ratio", duplication_ratio),
    ("resource_saturation", resource_saturation),
    ("silent_component", silent_component),
)


def staleness(
    last: float | None, active_since: float | None, stale_after: float, now: float
) -> float | None:
    """Seconds without a success once a heartbeat is overdue, else None. A heartbeat is due
    `stale_after` seconds after its last success or after it became expected
    (`active_since`), whichever is later; never expected and never seen is never overdue."""
    marks = [m for m in (last, active_since) if m is not None]
    if not marks:
        return None
    age = now - max(marks)
    return age if age > stale_after else None
