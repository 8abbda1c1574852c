"""Alerts that stay pending until a person acknowledges them (`assure ack ID`).

Each alert is a file `<run_dir>/alerts/<id>.json` (the durable truth, atomic writes) and is
also sent to the sinks: the log (the CLI shows it on the console), a JSON-lines file, and a
webhook. A sink that fails is recorded on the alert; it never loses the alert.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import secrets
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from assure.core import private
from assure.core.chain import utc_now
from assure.errors import AssureError
from assure.records.layout import ALERTS, RunPaths
from assure.records.store import read_json, write_json
from assure.textsafe import display

log = logging.getLogger("assure.ops.alerts")
WEBHOOK_TIMEOUT_SECONDS = 3.0


class AlertKind(StrEnum):
    OVERRIDE_BLOCK = "override_block"
    BUDGET_HALT = "budget_halt"
    BREACH = "breach"
    QUARANTINE = "quarantine"
    STALE_HEALTH = "stale_health"
    COMMIT_FAILED = "commit_failed"
    # the monitor's registered anomaly classes (assure/ops/anomalies.py ANOMALIES), one kind each
    RATE_OF_CHANGE = "rate_of_change"
    DUPLICATION_RATIO = "duplication_ratio"
    RESOURCE_SATURATION = "resource_saturation"
    SILENT_COMPONENT = "silent_component"


class AlertState(StrEnum):
    PENDING = "pending"  # until a person acknowledges it; the monitor escalates it meanwhile
    ACKED = "acked"


@dataclass(frozen=True)
class Alert:
    id: str
    run_id: str
    kind: str
    message: str
    raised_at: str
    state: str = AlertState.PENDING.value
    acked_by: str | None = None
    acked_at: str | None = None
    sink_errors: tuple[str, ...] = ()
    detail: dict[str, Any] | None = None


@dataclass(frozen=True)
class Sinks:
    jsonl: Path | None = None
    webhook: str | None = None


def raise_alert(run_dir: Path, kind: str, message: str, sinks: Sinks, detail: dict[str, Any] | None = None) -> Alert:
    try:
        kind = AlertKind(kind).value
    except ValueError:
        raise ValueError(f"unknown alert kind {kind!r}") from None
    alert = Alert(f"{kind}-{secrets.token_hex(4)}", run_dir.name, kind, message, utc_now(), detail=detail)
    paths = RunPaths(run_dir)
    paths.alerts.mkdir(exist_ok=True)
    write_json(paths.alert(alert.id), asdict(alert))
    errors = _deliver(alert, sinks)
    if errors:
        alert = replace(alert, sink_errors=tuple(errors))
        write_json(paths.alert(alert.id), asdict(alert))
    log.warning("ALERT %s [%s] %s (pending until `assure ack %s`)", alert.id, kind, display(message), alert.id)
    return alert


def _deliver(alert: Alert, sinks: Sinks) -> list[str]:
    errors = []
    line = json.dumps(asdict(alert), sort_keys=True, ensure_ascii=True)
    if sinks.jsonl is not None:
        try:
            private.make_folder(sinks.jsonl.parent, exist_ok=True)
            _append_line(sinks.jsonl, (line + "\n").encode("ascii"))
        except OSError as exc:
            errors.append(f"jsonl: {exc}")
    if sinks.webhook:
        req = urllib.request.Request(sinks.webhook, data=line.encode(), headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=WEBHOOK_TIMEOUT_SECONDS) as resp:
                resp.read(1024)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            errors.append(f"webhook: {exc}")
    return errors


def _append_line(path: Path, data: bytes) -> None:
    """One whole line at the end of a file that every run of the runs base appends to (runs side
    by side among them): O_APPEND, under the file's lock, written out in full before unlocking."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, private.FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def load(path: Path) -> Alert:
    data = read_json(path)
    return Alert(**{**data, "sink_errors": tuple(data.get("sink_errors", ()))})


def all_alerts(runs_base: Path) -> list[Alert]:
    """Every alert under the runs base; a damaged alert file is logged and left out of the list."""
    if not runs_base.is_dir():
        return []
    found = []
    for path in runs_base.glob(f"*/{ALERTS}/*.json"):
        try:
            found.append(load(path))
        except (AssureError, TypeError, ValueError) as exc:
            log.warning("unreadable alert file %s: %s", display(str(path)), display(str(exc)))
    return sorted(found, key=lambda a: a.raised_at)


def ack(runs_base: Path, alert_id: str, actor: str) -> Alert:
    matches = [p for p in runs_base.glob(f"*/{ALERTS}/{alert_id}.json")] if _safe_id(alert_id) else []
    if not matches:
        raise AssureError(f"no alert {alert_id!r}", where=str(runs_base), fix="`assure alerts` lists the pending ones")
    path = matches[0]
    alert = load(path)
    if alert.state == AlertState.ACKED:
        return alert
    alert = replace(alert, state=AlertState.ACKED.value, acked_by=actor, acked_at=utc_now())
    write_json(path, asdict(alert))
    return alert


def _safe_id(alert_id: str) -> bool:
    return bool(alert_id) and all(c.isalnum() or c in "-_" for c in alert_id)


def operator_name() -> str:
    return os.environ.get("ASSURE_OPERATOR") or os.environ.get("USER") or f"uid-{os.getuid()}"
