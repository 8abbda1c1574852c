"""One queryable view over a run's three hash-chained logs: the driver's `events.jsonl`, the
operators' `control/operator.jsonl` and each attempt's gateway journal.

Every source is verified first (a streaming pass); a broken chain is reported, never
silently merged. The query then streams the verified logs again and merges them by time, so
memory holds one record per log, not the logs. The standard's gate events are derived from the
gateway's `tool_call` records by decision, so
`--event gate_denied` finds every denied call.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assure.core.chain import ChainError, chain_head, iter_chain
from assure.records import layout
from assure.records.store import RunDir

GATE_EVENTS = {
    "allow": "gate_allowed",
    "deny": "gate_denied",
    "escalate": "gate_escalated",
    "replay": "idempotent_replay",
}


@dataclass(frozen=True)
class Source:
    name: str
    path: Path
    error: str | None

    def records(self) -> Iterator[dict[str, Any]]:
        """The log's records, streamed (nothing for a broken one), each tagged with `source`."""
        if self.error is None:
            for record in iter_chain(self.path):
                yield {**record, "source": self.name}


def sources(run: RunDir) -> list[Source]:
    paths = [("events", run.paths.events), ("operator", run.paths.operator_log)]
    paths += [(f"gateway/{a.name}", a / layout.JOURNAL) for a in run.attempts()]
    out = []
    for name, path in paths:
        if not path.is_file():
            continue
        try:
            chain_head(path)
            out.append(Source(name, path, None))
        except (ChainError, OSError, UnicodeDecodeError) as exc:
            out.append(Source(name, path, str(exc)))
    return out


def standard_event(record: dict[str, Any]) -> str:
    if record.get("event") == "tool_call":
        return GATE_EVENTS.get(str(record.get("decision")), "gate_denied")
    return str(record.get("event"))


def query(
    run: RunDir, *, event: str | None = None, actor: str | None = None, since: str | None = None
) -> Iterator[dict[str, Any]]:
    """Matching records from every source, in time order, each tagged with its `source`."""
    merged = heapq.merge(
        *(s.records() for s in sources(run)),
        key=lambda r: (str(r.get("ts")), r["source"], r.get("seq", 0)),
    )
    for record in merged:
        if event and event not in (record.get("event"), standard_event(record)):
            continue
        if actor and record.get("actor") != actor:
            continue
        if since and str(record.get("ts")) < since:
            continue
        yield record


def detail(record: dict[str, Any], keys: tuple[str, ...]) -> str:
    """`key=value` for each of `keys` the record has, in words: a nested mapping (the host's
    promote `decision`) as `key.field=value` for its plain fields, a list comma-joined, never a
    repr.
    """
    parts = []
    for key in keys:
        value = record.get(key)
        if isinstance(value, dict):
            parts += [
                f"{key}.{k}={_word(v)}"
                for k, v in value.items()
                if v is not None and not isinstance(v, (dict, list))
            ]
        elif value is not None:
            parts.append(f"{key}={_word(value)}")
    return " ".join(parts)


def _word(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(_word(v) for v in value if not isinstance(v, (dict, list)))
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
