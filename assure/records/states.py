"""The states a run and its tasks go through, as `state.json` spells them."""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    HALTED = "halted"  # the operator halted it: no new attempt or commit
    ABORTED = "aborted"  # the driver died or was stopped: `assure resume` continues it


class TaskState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    PROMOTING = "promoting"  # verified; the promote gate is deciding or committing
    COMMITTED = "committed"
    PROPOSED = "proposed"  # verified, but the gate allowed only a proposal
    QUARANTINED = "quarantined"
    COMMIT_FAILED = "commit_failed"
    HALTED = "halted"


# Never written to state.json: what `runs`, `show` and `health` say of a run whose state.json
# says running while no process holds its lock (`store.is_locked`): its driver is gone.
INTERRUPTED = "interrupted"
RESUMABLE = frozenset({RunState.ABORTED, INTERRUPTED})  # `assure resume` continues it

RUN_OVER = frozenset({RunState.FINISHED, RunState.HALTED})
TERMINAL = frozenset(
    {
        TaskState.COMMITTED,
        TaskState.PROPOSED,
        TaskState.QUARANTINED,
        TaskState.COMMIT_FAILED,
        TaskState.HALTED,
    }
)
STOPS_GOAL = frozenset(
    {TaskState.QUARANTINED, TaskState.COMMIT_FAILED, TaskState.HALTED}
)  # later tasks do not run
VERIFIED = frozenset(
    {TaskState.COMMITTED, TaskState.PROPOSED}
)  # the last attempt verified and the gate acted on it


def shown_verdict(state: str | None, verdict: str | None) -> str | None:
    """What a run's verdict reads as: `halted` for a run the operator halted (its attempts were
    judged, but it did not finish), save a breach, which no halt hides."""
    return "halted" if state == RunState.HALTED and verdict not in (None, "breach") else verdict
