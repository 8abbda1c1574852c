"""Why and how the harness stopped an attempt's agent before it exited by itself: container.json
`stopped` (and the report's), written by the attempt, read back by the judge's reasons, the
driver's escalation and the monitor. Here, below records and run, so that all of them may
import it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any


class StopReason(StrEnum):
    DEADLINE = "deadline"  # limits.wall_seconds ran out
    OPERATOR_HALT = "operator_halt"  # `assure halt`, or the monitor's escalation
    BUDGET = "budget"  # the gateway reported a budget counter exhausted (breach.json)


# The keys each reason writes besides `reason`, `halted_at` and `latency_ms`, in their order on
# disk: a counter that ran out carries its name and when; an operator's halt, who asked and when.
_KEYS = {
    StopReason.DEADLINE: ("counter", "breach_at"),
    StopReason.BUDGET: ("counter", "breach_at"),
    StopReason.OPERATOR_HALT: ("request_id", "actor", "requested_at"),
}
_ALL = frozenset(("reason", "halted_at", "latency_ms", *(k for ks in _KEYS.values() for k in ks)))


@dataclass(frozen=True)
class Stopped:
    """One stop. Built by `deadline`, `budget` or `operator_halt` when the harness decides to
    stop the agent, then `halted` once the agent is down."""

    reason: StopReason
    counter: str | None = None  # deadline, budget: the counter that ran out
    breach_at: float | None = None  # deadline, budget: when it ran out (epoch seconds)
    request_id: str | None = None  # operator_halt: the control record's
    actor: str | None = None
    requested_at: float | None = None
    halted_at: float | None = None  # when the agent's container was down
    latency_ms: float | None = None  # from breach_at (or requested_at) to halted_at

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", StopReason(self.reason))
        if self.reason is not StopReason.OPERATOR_HALT and not self.counter:
            raise ValueError(f"a {self.reason} stop names its counter")

    @classmethod
    def deadline(cls, at: float) -> Stopped:
        return cls(StopReason.DEADLINE, counter="wall_seconds", breach_at=at)

    @classmethod
    def budget(cls, counter: str, breach_at: float) -> Stopped:
        return cls(StopReason.BUDGET, counter=counter, breach_at=breach_at)

    @classmethod
    def operator_halt(
        cls, request_id: str | None, actor: str | None, requested_at: float | None
    ) -> Stopped:
        return cls(
            StopReason.OPERATOR_HALT,
            request_id=request_id,
            actor=actor,
            requested_at=requested_at,
        )

    @property
    def since(self) -> float | None:
        """When the reason to stop arose: the breach, or the operator's request."""
        return self.requested_at if self.reason is StopReason.OPERATOR_HALT else self.breach_at

    def halted(self, at: float) -> Stopped:
        since = self.since
        return replace(
            self, halted_at=at, latency_ms=round((at - since) * 1000, 1) if since else None
        )

    def to_json(self) -> dict[str, str | float | None]:
        out: dict[str, str | float | None] = {"reason": self.reason.value}
        out.update((k, getattr(self, k)) for k in _KEYS[self.reason])
        if self.halted_at is not None:
            out.update(halted_at=self.halted_at, latency_ms=self.latency_ms)
        return out

    @classmethod
    def from_json(cls, data: Any) -> Stopped:
        """A recorded stop (container.json is the attempt's, but `assure verify` reads a folder
        from anywhere): a wrong type or an unknown key is a `ValueError`, never a guess."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a stop record is an object, not {type(data).__name__}")
        unknown = sorted(set(data) - _ALL)
        if unknown:
            raise ValueError(f"a stop record has unknown keys: {', '.join(map(str, unknown))}")
        if data.get("reason") not in set(StopReason):
            raise ValueError(f"a stop record's reason is one of {', '.join(StopReason)}")
        for key, kinds in _TYPES.items():
            value = data.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, kinds)):
                raise ValueError(f"a stop record's {key} is a {kinds[0].__name__}")
        times = {k: None if data.get(k) is None else float(data[k]) for k in _TIMES}
        return cls(
            StopReason(data["reason"]),
            counter=data.get("counter"),
            request_id=data.get("request_id"),
            actor=data.get("actor"),
            **times,
        )


_TIMES = ("breach_at", "requested_at", "halted_at", "latency_ms")
_TYPES: dict[str, tuple[type, ...]] = {
    "counter": (str,),
    "request_id": (str,),
    "actor": (str,),
    **{k: (float, int) for k in _TIMES},
}
