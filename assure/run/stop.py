"""Why the driver stopped an attempt's agent before it exited by itself (container.json
`stopped.reason`; the monitor and the driver's escalation read it back)."""

from __future__ import annotations

import threading
from enum import StrEnum

# Set by the CLI's SIGTERM/SIGINT handler as it raises KeyboardInterrupt. Python drops an
# exception raised while the main thread runs a finalizer (`__del__`: "Exception ignored"),
# so a signal can be lost that way; the attempt's run loop raises it again from this flag.
INTERRUPTED = threading.Event()


class StopReason(StrEnum):
    DEADLINE = "deadline"  # limits.wall_seconds ran out
    OPERATOR_HALT = "operator_halt"  # `assure halt`, or the monitor's escalation
    BUDGET = "budget"  # the gateway reported a budget counter exhausted (breach.json)
