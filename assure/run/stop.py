"""Why the driver stopped an attempt's agent before it exited by itself (container.json
`stopped.reason`; the monitor and the driver's escalation read it back)."""

from __future__ import annotations

from enum import StrEnum


class StopReason(StrEnum):
    DEADLINE = "deadline"  # limits.wall_seconds ran out
    OPERATOR_HALT = "operator_halt"  # `assure halt`, or the monitor's escalation
    BUDGET = "budget"  # the gateway reported a budget counter exhausted (breach.json)
