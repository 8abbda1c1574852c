"""The interrupt flag an attempt's run loop checks (why the harness stops an agent, and how
it records it, is `verify/stopped.py`)."""

from __future__ import annotations

import threading

# Set by the CLI's SIGTERM/SIGINT handler as it raises KeyboardInterrupt. Python drops an
# exception raised while the main thread runs a finalizer (`__del__`: "Exception ignored"),
# so a signal can be lost that way; the attempt's run loop raises it again from this flag.
INTERRUPTED = threading.Event()
