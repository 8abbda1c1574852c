"""One queryable view over a run's three hash-chained logs: the driver's `events.jsonl`, the
operators' `control/operator.jsonl` and each attempt's gateway journal.

Every source is verified first; a broken chain is reported, never silently merged. The
standard's gate events are derived from the gateway's `tool_call` records by decision, so
`--event gate_denied` finds every denied call.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .chain import ChainError, verify_chain
from .store import RunDir

GATE_EVENTS = {"allow": "gate_allowed", "deny": "gate_denied", "escalate": "gate_escalated"}


@dataclass(frozen=True)
class Source:
    name: str
    path: Path
    records: tuple[dict[str, Any], ...]
    error: str | None


def sources(run: RunDir) -> list[Source]:
    paths = [("events", run.path / "events.jsonl"), ("operator", run.path / "control" / "operator.jsonl")]
    paths += [(f"gateway/{a.name}", a / "gateway" / "journal.jsonl") for a in run.attempts()]
    out = []
    for name, path in paths:
        if not path.is_file():
            continue
        try:
            out.append(Source(name, path, tuple(verify_chain(path)), None))
        except (ChainError, OSError, UnicodeDecodeError) as exc:
            out.append(Source(name, path, (), str(exc)))
    return out


def standard_event(record: dict[str, Any]) -> str:
    if record.get("event") == "tool_call":
        return GATE_EVENTS.get(str(record.get("decision")), "gate_denied")
    return str(record.get("event"))


def query(run: RunDir, *, event: str | None = None, actor: str | None = None, since: str | None = None) -> Iterator[dict[str, Any]]:
    """Matching records from every source, in time order, each tagged with its `source`."""
    merged = [{**r, "source": s.name} for s in sources(run) for r in s.records]
    merged.sort(key=lambda r: (str(r.get("ts")), r["source"], r.get("seq", 0)))
    for record in merged:
        if event and event not in (record.get("event"), standard_event(record)):
            continue
        if actor and record.get("actor") != actor:
            continue
        if since and str(record.get("ts")) < since:
            continue
        yield record
