"""Watch the operator's control record and hand each new override to the dispatcher; the
same loop keeps the gateway's heartbeat fresh while the agent is quiet.

The record sits on a read-only mount; a poll every `POLL_SECONDS` keeps the effect latency
far under the standard's 5 s without inotify (not available through every mount).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from assure.core import control

POLL_SECONDS = 0.02


class OverrideWatcher:
    def __init__(
        self,
        control_dir: str,
        on_change: Callable[[control.Override], None],
        on_tick: Callable[[], None] = lambda: None,
    ):
        self._dir = control_dir
        self._on_change = on_change
        self._on_tick = on_tick
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="override-watcher", daemon=True)
        self.current = control.read(control_dir)

    def apply(self) -> None:
        """Hand over the override in place at the gateway's start (before any call is taken)."""
        if self.current.request_id is not None:
            self._on_change(self.current)

    def start(self) -> None:
        """Watch for the next ones (its first look compares with the one `apply` handed over)."""
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1)

    def _loop(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self._on_tick()
            latest = control.read(self._dir)
            if latest != self.current:
                self.current = latest
                self._on_change(latest)
