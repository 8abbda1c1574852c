"""Alerts that stay pending until a person acknowledges them (`assure ack ID`, or a filter).

An outcome its spec expects (a hostile spec breached, or refused, as it expects) needs no
person: its alert is raised already acknowledged by the spec, with that reason, so it is on
record but neither the monitor nor `assure health` waits for it. Any other stays pending.

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

log = logging.getLogger("assure.records.alerts")
WEBHOOK_TIMEOUT_SECONDS = 3.0


class AlertKind(StrEnum):
    OVERRIDE_BLOCK = "override_block"
    BUDGET_HALT = "budget_halt"
    BREACH = "breach"
    QUARANTINE = "quarantine"
    STALE_HEALTH = "stale_health"
    COMMIT_FAILED = "commit_failed"
    TRUST_DROPPED = "trust_dropped"  # earned autonomy fell to propose (run/earned), and why
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
    ack_reason: str | None = (
        None  # why it was acknowledged without a person: the outcome its spec expects
    )


@dataclass(frozen=True)
class Sinks:
    jsonl: Path | None = None
    webhook: str | None = None


SPEC_ACTOR = "spec"  # who acknowledged an alert for an outcome its spec expects


def raise_alert(
    run_dir: Path,
    kind: str,
    message: str,
    sinks: Sinks,
    detail: dict[str, Any] | None = None,
    expected: str | None = None,
) -> Alert:
    """Record and deliver an alert, pending; `expected` (why the spec expects this outcome):
    acknowledged by the spec."""
    try:
        kind = AlertKind(kind).value
    except ValueError:
        raise ValueError(f"unknown alert kind {kind!r}") from None
    now = utc_now()
    alert = Alert(f"{kind}-{secrets.token_hex(4)}", run_dir.name, kind, message, now, detail=detail)
    if expected is not None:
        alert = replace(
            alert,
            state=AlertState.ACKED.value,
            acked_by=SPEC_ACTOR,
            acked_at=now,
            ack_reason=expected,
        )
    paths = RunPaths(run_dir)
    paths.alerts.mkdir(exist_ok=True)
    write_json(paths.alert(alert.id), asdict(alert))
    errors = _deliver(alert, sinks)
    if errors:
        alert = replace(alert, sink_errors=tuple(errors))
        write_json(paths.alert(alert.id), asdict(alert))
    if expected is None:
        log.warning(
            "ALERT %s [%s] %s (pending until `assure ack %s`)",
            alert.id,
            kind,
            display(message),
            alert.id,
        )
    else:
        log.info(
            "alert %s [%s] %s (no ACK needed: %s)",
            alert.id,
            kind,
            display(message),
            display(expected),
        )
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
        # here, not at the top: urllib.request (http.client, email, ssl) is a tenth of every
        # `assure run`'s start, and most runs have no webhook (issue 25)
        import urllib.error
        import urllib.request

        req = urllib.request.Request(
            sinks.webhook,
            data=line.encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
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
            view = view[os.write(fd, view) :]
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
    matches = (
        [p for p in runs_base.glob(f"*/{ALERTS}/{alert_id}.json")] if _safe_id(alert_id) else []
    )
    if not matches:
        raise AssureError(
            f"no alert {alert_id!r}",
            where=str(runs_base),
            fix="`assure alerts` lists the pending ones",
        )
    return _ack_file(matches[0], actor)


def ack_matching(
    runs_base: Path, actor: str, *, run_id: str | None = None, kind: str | None = None
) -> list[Alert]:
    """Acknowledge every pending alert of the run `run_id` and of `kind` (None: any); the ones
    acknowledged."""
    if kind is not None and kind not in {k.value for k in AlertKind}:
        raise AssureError(
            f"no alert kind {kind!r}", fix="one of: " + ", ".join(k.value for k in AlertKind)
        )
    if run_id is not None and not _safe_id(run_id):
        raise AssureError(f"{run_id!r} is not a run id", fix="`assure runs` lists them")
    done = []
    for path in (
        sorted(runs_base.glob(f"{run_id or '*'}/{ALERTS}/*.json")) if runs_base.is_dir() else []
    ):
        try:
            alert = load(path)
        except (AssureError, TypeError, ValueError) as exc:
            log.warning("unreadable alert file %s: %s", display(str(path)), display(str(exc)))
            continue
        if alert.state == AlertState.PENDING and kind in (None, alert.kind):
            done.append(_ack_file(path, actor))
    return done


def _ack_file(path: Path, actor: str) -> Alert:
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
