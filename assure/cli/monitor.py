"""Operating runs: `assure halt`, `dial`, `alerts`, `ack`, `journal`, `monitor` and `health`."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import typer

from assure.cli.common import (
    JSON_OPTION,
    RUN_ARG,
    RUNS_OPTION,
    _fail,
    _sigterm_as_interrupt,
    runs_option,
)
from assure.cli.lazy import (
    alerts,
    registry,
    render,
    runs_mod,
    store,
)
from assure.cli.output import (
    _print_json,
    _print_table,
    _whole,
    err,
    out,
    plain,
)
from assure.cli.root import app
from assure.errors import AssureError


def _override(run: str, runs_dir: Path, **change: Any) -> tuple[store.RunDir, Any]:
    """Record an operator request (halt or dial) in RUN's control record; refused once RUN is
    over."""
    try:
        rd = runs_mod.find(run, runs_dir)
        return rd, rd.override(alerts.operator_name(), **change)
    except AssureError as exc:
        raise _fail(exc) from None


@app.command()
def halt(run: str = RUN_ARG, runs_dir: Path = RUNS_OPTION, json_out: bool = JSON_OPTION) -> None:
    """Halt RUN now: every further mutation is denied, the agent is stopped, no new attempt
    starts."""
    rd, done = _override(run, runs_dir, halt=True)
    if json_out:
        _print_json({"run_id": rd.run_id, "halt": True, "request_id": done.request_id})
        return
    out.print(
        f"halt requested for {rd.run_id} (request {done.request_id}); the gateway and the driver"
        " act on it within a second"
    )


@app.command()
def dial(
    run: str = RUN_ARG,
    level: str = typer.Argument(..., metavar="LEVEL", help="propose, commit or irreversible"),
    runs_dir: Path = RUNS_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Turn the autonomy dial of RUN: `propose` stops every external effect from here on."""
    from assure.core import control

    if level not in control.LEVELS:
        err.print(f"error: dial must be one of {', '.join(control.LEVELS)}", markup=False)
        raise typer.Exit(2)
    rd, done = _override(run, runs_dir, dial=level)
    if json_out:
        _print_json({"run_id": rd.run_id, "dial": level, "request_id": done.request_id})
        return
    out.print(f"dial of {rd.run_id} set to {level} (request {done.request_id})")


@app.command("alerts")
def alerts_cmd(
    pending: bool = typer.Option(False, "--pending", help="Only alerts not yet acknowledged."),
    runs_dir: Path = RUNS_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """List alerts (pending ones stay until `assure ack ID`)."""
    found = [
        a
        for a in alerts.all_alerts(runs_dir)
        if not pending or a.state == alerts.AlertState.PENDING
    ]
    if json_out:
        _print_json([dataclasses.asdict(a) for a in found])
        return
    table = _whole("id", "run", "kind", "state", "raised", "message")
    for a in found:
        table.add_row(
            plain(a.id),
            plain(a.run_id),
            plain(a.kind),
            plain(a.state),
            plain(a.raised_at),
            plain(a.message),
        )
    _print_table(table)


@app.command()
def ack(
    alert_id: str | None = typer.Argument(
        None, metavar="ALERT", help="The alert's id (`assure alerts` lists them)."
    ),
    every: bool = typer.Option(
        False, "--all", help="Every pending alert (with --run or --kind: every one they match)."
    ),
    run_ref: str | None = typer.Option(
        None, "--run", metavar="ID", help="The pending alerts of this run (its id or its folder)."
    ),
    kind: str | None = typer.Option(
        None,
        "--kind",
        metavar="KIND",
        help="The pending alerts of this kind (breach, quarantine, ...); with --run or --all.",
    ),
    runs_dir: Path = RUNS_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Acknowledge a pending alert, or every one a filter matches (--all, --run, --kind)."""
    try:
        if alert_id is not None and (every or run_ref or kind):
            raise AssureError(
                "name one alert or give a filter, not both",
                fix=(
                    "`assure ack ID`, or `assure ack --run RUN [--kind KIND]`, or `assure ack"
                    " --all`"
                ),
            )
        if alert_id is None and not (every or run_ref or kind):
            raise AssureError(
                "which alerts? no id and no filter",
                fix=(
                    "`assure ack ID`, `assure ack --run RUN`, `assure ack --kind KIND --all`, or"
                    " `assure ack --all`"
                ),
            )
        if kind and not (
            every or run_ref
        ):  # one word would silence every run's breaches: say which runs
            raise AssureError(
                f"--kind alone would acknowledge every pending {kind!r} alert of every run",
                fix=(
                    f"`assure ack --kind {kind} --run RUN` for one run's, or `assure ack --kind"
                    f" {kind} --all` for every run's"
                ),
            )
        if alert_id is not None:
            done = [alerts.ack(runs_dir, alert_id, alerts.operator_name())]
        elif run_ref is not None:
            rd = runs_mod.find(run_ref, runs_dir)
            done = alerts.ack_matching(
                rd.path.parent, alerts.operator_name(), run_id=rd.run_id, kind=kind
            )
        else:
            done = alerts.ack_matching(runs_dir, alerts.operator_name(), kind=kind)
    except AssureError as exc:
        raise _fail(exc) from None
    if json_out:
        _print_json(
            dataclasses.asdict(done[0])
            if alert_id is not None
            else [dataclasses.asdict(a) for a in done]
        )
        return
    if alert_id is None and not done:
        out.print("no pending alert matches", markup=False)
    for a in done:
        out.print(
            f"{a.id} acknowledged by {render.display(str(a.acked_by))} at {a.acked_at}",
            markup=False,
        )


@app.command("journal")
def journal_cmd(
    run: str = RUN_ARG,
    event: str | None = typer.Option(
        None, metavar="EVENT", help="e.g. gate_denied, override_effective, tool_call"
    ),
    actor: str | None = typer.Option(
        None, metavar="NAME", help="gateway, driver, or an operator's name"
    ),
    since: str | None = typer.Option(None, metavar="TIME", help="ISO time, e.g. 2026-11-30T08:00"),
    runs_dir: Path = RUNS_OPTION,
    json_out: bool = typer.Option(False, "--json", help="One JSON record per line."),
) -> None:
    """Query a run's journals (driver events, operator requests, gateway journals), verified
    first."""
    from assure.ops.runsbase import parse_time
    from assure.records import journal

    if since is not None and parse_time(since) is None:
        err.print(
            "error: --since must be an ISO time, e.g. 2026-11-30T08:00 (got"
            f" {render.display(since)})",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(2)
    try:
        rd = runs_mod.find(run, runs_dir)
        broken = [s for s in journal.sources(rd) if s.error]
        records = list(journal.query(rd, event=event, actor=actor, since=since))
    except AssureError as exc:
        raise _fail(exc) from None
    for s in broken:
        err.print(f"BROKEN CHAIN {s.name}: {s.error}", style="bold red", markup=False)
    if json_out:
        for r in records:
            out.print(
                json.dumps(r, sort_keys=True, ensure_ascii=True),
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
    else:
        table = _whole("ts", "source", "actor", "event", "detail")
        for r in records:
            detail = journal.detail(
                r, ("tool", "path", "decision", "rule", "reason", "latency_ms", "verdict")
            )
            table.add_row(
                plain(r.get("ts")),
                plain(r["source"]),
                plain(r.get("actor")),
                plain(journal.standard_event(r)),
                plain(detail),
            )
        _print_table(table)
    raise typer.Exit(1 if broken else 0)


@app.command("monitor")
def monitor_cmd(
    once: bool = typer.Option(False, "--once", help="One pass, then exit."),
    interval: float | None = typer.Option(
        None,
        "--interval",
        metavar="SECONDS",
        help="Seconds between passes (default: the manifest's interval_seconds).",
    ),
    runs_dir: Path = runs_option("The runs base to watch."),
    manifest_file: Path | None = typer.Option(
        None,
        "--manifest",
        metavar="FILE",
        help=(
            "JSON or YAML manifest (default: the built-in one, `Manifest` in"
            " assure/records/health.py)."
        ),
    ),
) -> None:
    """Watch heartbeats and anomalies: raise alerts that stay pending until `assure ack`,
    dial down then halt the runs whose alerts nobody acknowledges."""
    from assure.ops import monitor
    from assure.records import health

    if interval is not None and interval <= 0:
        err.print("error: --interval must be positive", markup=False)
        raise typer.Exit(2)
    try:
        manifest = health.Manifest.load(manifest_file)
    except AssureError as exc:
        raise _fail(exc) from None
    sinks = monitor.sinks_for(runs_dir, manifest)
    reported: set[tuple[str, str]] = set()

    def show(result: monitor.Pass) -> None:
        if result.busy:
            err.print(
                "another monitor holds the lock: this pass did nothing",
                markup=False,
                highlight=False,
            )
        for a in result.alerts:
            out.print(
                f"ALERT {a.id} [{a.kind}] {render.display(a.run_id)}: {render.display(a.message)}"
                f" (pending until `assure ack {a.id}`)",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
        for e in result.escalations:
            request = f", request {e.request_id}" if e.request_id else ""
            out.print(
                f"ESCALATED {render.display(e.alert_id)}: {e.step} on {render.display(e.run_id)}"
                f" ({e.effect}{request})",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
        for s in result.skipped:  # already escaped by the monitor; each shown once per process
            if (s.path, s.reason) not in reported:
                reported.add((s.path, s.reason))
                err.print(
                    f"skipped {s.path}: {s.reason}", markup=False, highlight=False, soft_wrap=True
                )

    if once:
        show(monitor.scan(runs_dir, manifest, time.time(), sinks))
        raise typer.Exit(0)
    _sigterm_as_interrupt()
    try:
        monitor.run_forever(runs_dir, manifest, sinks, interval, on_pass=show)
    except KeyboardInterrupt:
        err.print("monitor stopped", markup=False)
    raise typer.Exit(0)


@app.command("health")
def health_cmd(
    run_ref: str | None = typer.Argument(
        None, metavar="RUN", help="A run id or directory; default: every live run of the runs base."
    ),
    runs_dir: Path = runs_option("The runs base (for a RUN given by id, and without a RUN)."),
    manifest_file: Path | None = typer.Option(
        None,
        "--manifest",
        metavar="FILE",
        help="The monitor's manifest: heartbeat paths and staleness limits.",
    ),
    out_file: Path | None = typer.Option(
        None, "--out", metavar="FILE", help="Also write the document to this file."
    ),
) -> None:
    """Print a frontier.machine.health.v1 document (specs/health.schema.json) on stdout.
    Exit 0 only when the aggregate is pass; 1 when it is degraded, propose_only, blocked or
    halted (the document is printed all the same, its `aggregate.causes` say why)."""
    from assure.ops import health_probe
    from assure.records import health

    try:
        manifest = health.Manifest.load(manifest_file)
        run = runs_mod.find(run_ref, runs_dir) if run_ref is not None else None
    except AssureError as exc:
        raise _fail(exc) from None
    engine = health_probe.engine_facts(registry.create)
    base, run_id = (run.path.parent, run.run_id) if run else (runs_dir, None)
    doc = health_probe.probe(base, run_id, engine, time.time(), manifest)
    if out_file is not None:
        try:
            out_file.write_text(
                json.dumps(doc, indent=2, ensure_ascii=True) + "\n", encoding="utf-8"
            )
        except OSError as exc:
            raise _fail(
                AssureError(
                    f"cannot write the document: {exc.strerror or exc}",
                    where=str(out_file),
                    fix="pass --out a file path in a folder you can write to",
                )
            ) from None
    _print_json(doc)
    raise typer.Exit(0 if doc["aggregate"]["status"] == "pass" else 1)
