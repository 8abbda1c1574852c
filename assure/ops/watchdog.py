"""A cluster node task's own bound, in a process of its own (`python -m assure.ops.watchdog FD
PID SECONDS`). The task waits for it to fork away, so this module imports only the standard
library until it has: its start is on every node task's path."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time


def watch(alive: int, worker: int, seconds: float) -> None:
    """Fork away from the Ray worker at once, in a session of its own, so that this bound
    outlives the worker, its raylet, the driver and the caller. The pipe `alive` ends when the
    worker does: a byte first when the task ended as it should (then nothing is to be done);
    at its end without it (a raylet killed, a task Ray ended with its driver or cancelled), or
    at the spec's whole budget with the worker still alive (then it is killed), everything its
    makers left is removed as `assure gc` would: no agent runs on unwatched."""
    if os.fork():
        os._exit(
            0
            # the worker's own child ends here: Ray ends a worker's children with it, not this
            # grandchild
        )
    if select.select([alive], [], [], seconds)[0]:
        if os.read(alive, 1):
            return
    else:  # past the whole budget, the worker alive: it is hung
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)
    gone = time.monotonic() + 60
    while (
        os.path.exists(f"/proc/{worker}") and time.monotonic() < gone
    ):  # until it is reaped: a zombie's pid is alive to `gc`
        time.sleep(0.2)
    from assure.ops import gc
    from assure.sandbox import registry

    gc.collect(registry.create())


if __name__ == "__main__":
    watch(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]))
