"""`python3 -m assure.gateway --config PATH [--wait SECONDS [--listen SOCKET]]`: run the gateway
until SIGTERM or SIGINT.

`--wait`: a warm pool's gateway (run/pool.py) boots (its imports are most of its start) before
its attempt exists, then waits up to SECONDS for the config, written (atomically) when the pair
is claimed; a gateway never claimed exits 0 when the wait ends. It waits blocked on the FIFO
`wake` beside the config, which the claim writes to once the config is in place: an idle pair
costs no CPU (a stat every 2 ms cost ~37 ms of CPU a second per gateway, its root's FUSE
daemon included); without the FIFO (the claim removes it) it polls.

Before it waits, it does what needs nothing of the attempt, at the places the pool gives:
- `--listen SOCKET` binds the socket: the claimed agent's first call waits in its backlog while
  the config is read and the journal opened (it is accepted only then), not for the socket;
- `--store DB` opens the idempotency store (its file, WAL and schema: fsyncs that were most of
  the gateway's start after the claim), in the pair's own run-state folder, fresh and empty;
- every record class's __init__ is compiled (`record.build_inits`).
A config that names another socket or store than the ones opened is refused (exit 1).

Exit codes: 0 after a clean stop, 2 for a bad config (one line naming the field) or usage, 1 when
the gateway cannot start (workspace, journal or socket unusable).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time

from assure.core import record
from assure.gateway.config import ConfigError, load
from assure.gateway.idempotency import Store
from assure.gateway.server import bind, serve

# One form only, read by hand: argparse (and the gettext it imports) would be ~10 ms of every boot.
USAGE = (
    "usage: python3 -m assure.gateway --config PATH [--wait SECONDS [--listen SOCKET] [--store DB]]"
)
BEFORE_CLAIM = ("--listen", "--store")  # what a waiting gateway may open before its config
WAIT_POLL_SECONDS = 0.002  # without the FIFO: a stat every 2 ms
WAKE = "wake"  # run/pool.py WAKE: the FIFO the claim writes a line to


def _wait_for(path: str, seconds: float) -> bool:
    """The FIFO is opened before the config is looked for: a wake-up written after that look
    is never missed, and one written before it found no reader, but the config is there."""
    deadline = time.monotonic() + seconds
    try:
        wake = os.open(
            os.path.join(os.path.dirname(path), WAKE), os.O_RDWR | os.O_NONBLOCK
        )  # O_RDWR: never an EOF
    except OSError:
        wake = None
    try:
        while not os.path.exists(path):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if wake is None:
                time.sleep(WAIT_POLL_SECONDS)
                continue
            if select.select([wake], [], [], left)[0]:
                try:
                    os.read(wake, 4096)
                except BlockingIOError:
                    pass
    finally:
        if wake is not None:
            os.close(wake)
    return True


def _parse(args: list[str]) -> tuple[str, float | None, dict[str, str]] | None:
    """(config path, seconds to wait for it or None, {option: path} of `BEFORE_CLAIM`), or None
    for bad usage."""
    if len(args) == 2 and args[0] == "--config":
        return args[1], None, {}
    if len(args) < 4 or args[0] != "--config" or args[2] != "--wait" or len(args) % 2:
        return None
    opened = dict(zip(args[4::2], args[5::2], strict=True))
    if len(opened) * 2 != len(args) - 4 or not set(opened) <= set(BEFORE_CLAIM):
        return None
    if not all(opened.values()):
        return None
    try:
        wait = float(args[3])
    except ValueError:
        return None
    return (args[1], wait, opened) if wait > 0 else None


def main(argv: list[str] | None = None) -> int:
    parsed = _parse(sys.argv[1:] if argv is None else argv)
    if parsed is None:
        print(USAGE, file=sys.stderr)
        return 2
    path, wait, opened = parsed
    listener = store = None
    if wait is not None:
        try:
            listener = bind(opened["--listen"]) if "--listen" in opened else None
            store = Store(opened["--store"]) if "--store" in opened else None
        except Exception as exc:
            print(f"assure.gateway: cannot start: {exc}", file=sys.stderr)
            return 1
        record.build_inits()
        if not _wait_for(path, wait):
            return 0  # never claimed: the pool removes it
    try:
        config = load(path)
    except ConfigError as exc:
        print(f"assure.gateway: {exc}", file=sys.stderr)
        return 2
    for option, made, wanted in (
        ("--listen", listener, config.socket),
        ("--store", store, config.idempotency_db),
    ):
        if made is not None and wanted != opened[option]:
            print(
                f"assure.gateway: cannot start: the config names {wanted or 'none'}, not"
                f" {opened[option]} opened before it ({option})",
                file=sys.stderr,
            )
            return 1
    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        gateway = serve(config, listener, store)
    except Exception as exc:
        print(f"assure.gateway: cannot start: {exc}", file=sys.stderr)
        return 1
    stop.wait()
    gateway.shutdown(reason=f"signal {signal.Signals(received[0]).name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
