"""Failpoints for chaos tests: `ASSURE_FAILPOINT=<name>` makes the process kill itself with
SIGKILL when it reaches that point, exactly as `kill -9` from outside would, but at a known
moment (container start, mid-agent, a check's view mounted, verification, promotion). Unset,
it does nothing."""

from __future__ import annotations

import os
import signal

POINTS = ("start", "run", "checks", "verify", "promote")


def hit(name: str) -> None:
    if name not in POINTS:
        raise ValueError(f"unknown failpoint {name!r}")
    if os.environ.get("ASSURE_FAILPOINT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
