"""The operator's control record: halt and dial, written by `assure halt|dial`, read by the
gateway (through a read-only mount) and by the host's attempt loop.

Two files in `<run_dir>/control/`: `operator.json` (the current override: written only by
operators, atomically, under a lock) and `operator.jsonl` (the operators' own hash-chained
log of every request). The directory, not the file, is mounted into the gateway: an atomic
rename replaces the file's inode, which a single-file bind mount would never see.
Standard library only: the gateway imports this module.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator

from assure.core import atomic
from assure.core.chain import ChainWriter
from assure.core.record import asdict, dataclass

TYPE_CHECKING = False  # typing.TYPE_CHECKING; the gateway boots without typing (core/__init__)
if TYPE_CHECKING:
    from typing import Any

OPERATOR_FILE = "operator.json"
OPERATOR_LOG = "operator.jsonl"
LEVELS = ("propose", "commit", "irreversible")


@dataclass(frozen=True)
class Override:
    """The operator's current word: `halted` stops every mutation; `dial` caps autonomy."""

    halted: bool = False
    dial: str | None = None
    request_id: str | None = None
    requested_at: float | None = None
    actor: str | None = None


def read(control_dir: str | os.PathLike[str]) -> Override:
    """The current override. A missing file is no override; an unreadable one halts (fail
    closed)."""
    path = os.path.join(control_dir, OPERATOR_FILE)  # os.path: the gateway imports no pathlib
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.loads(fh.read())
        return Override(
            halted=bool(data.get("halted", False)),
            dial=_dial(data.get("dial")),
            request_id=data.get("request_id"),
            requested_at=(
                float(data["requested_at"]) if data.get("requested_at") is not None else None
            ),
            actor=data.get("actor"),
        )
    except FileNotFoundError:
        return Override()
    except (OSError, ValueError, TypeError, KeyError):
        return Override(halted=True, request_id="unreadable-control-record")


def _dial(value: Any) -> str | None:
    """No dial is no override; a dial we do not know is the lowest (fail closed)."""
    if value is None:
        return None
    return value if value in LEVELS else LEVELS[0]


@contextlib.contextmanager
def locked(control_dir: str | os.PathLike[str]) -> Iterator[None]:
    """The control record's lock: held by every request, and by the host while it seals the
    run's logs (`operator.jsonl` among them), so no request lands after the seal unseen."""
    os.makedirs(control_dir, exist_ok=True)
    with open(os.path.join(control_dir, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def request(
    control_dir: str | os.PathLike[str],
    *,
    run_id: str,
    actor: str,
    halt: bool | None = None,
    dial: str | None = None,
    check: Callable[[], None] | None = None,
) -> Override:
    """Record an operator request: update `operator.json` atomically and log it, under a lock.
    `check` runs under the lock before anything is written and refuses by raising (a run
    that is over: `RunDir.require_open`)."""
    if dial is not None and dial not in LEVELS:
        raise ValueError(f"dial must be one of {', '.join(LEVELS)}")
    directory = os.fspath(control_dir)
    with locked(directory):
        if check is not None:
            check()
        current = read(directory)
        update = Override(
            halted=current.halted if halt is None else halt,
            dial=current.dial if dial is None else dial,
            request_id=os.urandom(6).hex(),
            requested_at=time.time(),
            actor=actor,
        )
        log = ChainWriter(
            os.path.join(directory, OPERATOR_LOG), base={"run_id": run_id, "actor": actor}
        )
        try:
            fields: dict[str, Any] = {
                "request_id": update.request_id,
                "requested_at": update.requested_at,
            }
            if halt is not None:
                log.append("override_requested", halted=halt, **fields)
            if dial is not None:
                log.append("dial_changed", dial=dial, previous=current.dial, **fields)
        finally:
            log.close()
        atomic.write_json(os.path.join(directory, OPERATOR_FILE), asdict(update), indent=None)
    return update
