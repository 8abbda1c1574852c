"""`python3 -m assure.gateway --config PATH`: run the gateway until SIGTERM or SIGINT.

Exit codes: 0 after a clean stop, 2 for a bad config (one line naming the field) or usage, 1 when
the gateway cannot start (workspace, journal or socket unusable).
"""

from __future__ import annotations

import signal
import sys
import threading

from assure.gateway.config import ConfigError, load
from assure.gateway.server import serve

# One form only, read by hand: argparse (and the gettext it imports) would be ~10 ms of every boot.
USAGE = "usage: python3 -m assure.gateway --config PATH"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "--config":
        print(USAGE, file=sys.stderr)
        return 2
    try:
        config = load(args[1])
    except ConfigError as exc:
        print(f"assure.gateway: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        gateway = serve(config)
    except Exception as exc:
        print(f"assure.gateway: cannot start: {exc}", file=sys.stderr)
        return 1
    stop.wait()
    gateway.shutdown(reason=f"signal {signal.Signals(received[0]).name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
