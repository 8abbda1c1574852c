"""assure: run an untrusted agent in a sealed container and judge it by ground truth.

Rooms: `core/` (shared with the gateway image), `gateway/` (the agent's only channel out),
`sandbox/` (containers), `run/` (driver and attempts), `verify/` (ground truth and the
verdict), `records/` (the run directory), `ops/` (monitor, health, alerts). This file is
copied into the images, so it imports nothing.
"""

__version__ = "0.1.0"
