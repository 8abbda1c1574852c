"""Finished runs: `assure runs`, `show`, `verify`, `diff` and `promote`."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import typer

from assure.cli.common import (
    EXIT,
    EXIT_UNEXPECTED,
    JSON_OPTION,
    KEY_OPTION,
    RUN_ARG,
    RUNS_OPTION,
    _fail,
    _spec_of,
)
from assure.cli.lazy import (
    AttemptPaths,
    RunPaths,
    Text,
    alerts,
    render,
    runs_mod,
    store,
    summary,
)
from assure.cli.output import (
    _print_json,
    _print_table,
    _print_whole,
    _whole,
    err,
    out,
    plain,
)
from assure.cli.root import app
from assure.errors import AssureError


@app.command()
def verify(
    run_ref: str = RUN_ARG, runs_dir: Path = RUNS_OPTION, json_out: bool = JSON_OPTION
) -> None:
    """Recompute the verdict of a finished run from its directory alone."""
    from assure.records.run_report import Report
    from assure.run.driver import reverify

    try:
        run_dir = runs_mod.find(run_ref, runs_dir).path
        result = reverify(run_dir)
        recorded = Report.read(RunPaths(run_dir).report).verdict.value
    except AssureError as exc:
        raise _fail(exc) from None
    same = recorded == result.verdict
    if json_out:
        _print_json({**result.report, "recorded_verdict": recorded, "reproduced": same})
    else:
        _print_whole(render.render_report(result.view, str(run_dir)))
        out.print(
            Text.assemble(
                plain(f"recorded verdict {recorded}, recomputed {result.verdict}: "),
                Text("reproduced", style="green") if same else Text("DIFFERENT", style="bold red"),
            )
        )
    raise typer.Exit(EXIT[result.verdict] if same else EXIT_UNEXPECTED)


@app.command()
def diff(
    run_ref: str = RUN_ARG,
    attempt: int | None = typer.Option(
        None, metavar="N", help="Attempt number (default: the first that breached, else the last)."
    ),
    runs_dir: Path = RUNS_OPTION,
    json_out: bool = JSON_OPTION,
    html_out: bool = typer.Option(
        False, "--html", help="A standalone HTML page (changes and findings), for a CI artifact."
    ),
) -> None:
    """Show each workspace change of an attempt with its attribution."""
    from assure.run.driver import breached_attempt

    try:
        run = runs_mod.find(run_ref, runs_dir)
        run_dir = run.path
        attempts = run.attempts()
        if (
            attempt is None and run.paths.state.is_file()
        ):  # a breach a later clean attempt followed is the one to look at
            tasks = store.read_json(run.paths.state).get("tasks", {})
            attempt = next(
                (
                    n
                    for ts in tasks.values()
                    if (n := breached_attempt(ts.get("attempts", []))) is not None
                ),
                None,
            )
        chosen = (
            run.attempt(attempt).root
            if attempt is not None
            else (attempts[-1] if attempts else None)
        )
        if chosen is None:
            raise AssureError("the run has no attempts", where=str(run_dir))
        if chosen not in attempts:
            have = ", ".join(a.name for a in attempts) or "none"
            raise AssureError(
                f"the run has no attempt {attempt} (it has: {have})",
                where=str(run_dir),
                fix="pass --attempt N with one of those, or leave it out for the last",
            )
        verdict = store.read_json(AttemptPaths(chosen).verdict)
    except AssureError as exc:
        raise _fail(exc) from None
    if json_out:
        _print_json({"changes": verdict["changes"], "findings": verdict["findings"]})
    elif html_out:
        sys.stdout.write(
            render.render_changes_html(f"{run_dir.name}, attempt {chosen.name}", verdict)
        )
    else:
        _print_whole(render.render_changes(verdict["changes"], verdict["findings"]))


@app.command()
def runs(runs_dir: Path = RUNS_OPTION, json_out: bool = JSON_OPTION) -> None:
    """List runs and suite runs, newest first, with their state, tasks and verdicts."""
    rows = [r.to_json() for r in runs_mod.listing(runs_dir)]
    if json_out:
        _print_json(rows)
        return
    table = _whole("run", "kind", "state", "verdict", "started", "where", "tasks")
    for r in rows:
        parts = (r["specs"] or {}).items() if r["kind"] == "suite" else r["tasks"].items()
        table.add_row(
            plain(r["run_id"]),
            plain(r["kind"]),
            plain(r["state"]),
            plain(r["verdict"] or "-"),
            plain(r["started_at"]),
            plain(runs_mod.where(r["placement"])),
            plain(", ".join(f"{t}: {st}" for t, st in parts)),
        )
    _print_table(table)
    for r in rows:
        if r["resume"]:
            gone = _gone(r["state"]) if r["kind"] == "run" else "no process drives it"
            out.print(
                plain(
                    f"{r['run_id']} is {r['state']}: {gone}; `{r['resume']}` continues it",
                    "yellow",
                ),
                soft_wrap=True,
            )


def _gone(state: str) -> str:
    """Why a resumable run stopped, in words."""
    return (
        "its driver is gone (no process holds the run's lock)"
        if state == "interrupted"
        else "its driver stopped"
    )


@app.command()
def show(
    run_ref: str = typer.Argument(
        ...,
        metavar="RUN",
        help=(
            "A run or a suite run: its id (looked up under --runs-dir, or its suites/ beside it) or"
            " its folder."
        ),
    ),
    runs_dir: Path = RUNS_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """A run's timeline: attempts, decisions, overrides, alerts and receipts, in time order; then
    each attempt's model exchange (messages, tool calls and results, tokens and cost per call).
    A suite run (its id or folder): each of its runs, its verdict and why."""
    from assure.records import conversation, journal, states
    from assure.records.layout import AttemptPaths

    try:
        suite_run = runs_mod.locate_suite_run(run_ref, runs_dir)
        if suite_run is not None:
            _show_suite_run(suite_run, runs_dir, json_out)
            return
        rd = runs_mod.find(run_ref, runs_dir)
        records = list(journal.query(rd))
    except AssureError as exc:
        raise _fail(exc) from None
    run_alerts = [a for a in alerts.all_alerts(rd.path.parent) if a.run_id == rd.run_id]
    try:
        state = runs_mod.shown_state(rd.path, store.read_json(rd.paths.state).get("state"))
    except (AssureError, AttributeError):
        state = None  # no readable state.json: the timeline is all there is
    resume = (
        runs_mod.resume_command(rd.path.parent, rd.run_id) if state in states.RESUMABLE else None
    )
    exchanges = [
        (paths.number, conversation.read(paths))
        for paths in (AttemptPaths(folder) for folder in rd.attempts())
    ]
    exchanges = [(n, c) for n, c in exchanges if c.exchanges or c.notes != ["no gateway journal"]]
    placed = runs_mod.read_placement(rd.path)  # a cluster run's
    if json_out:
        _print_json(
            {
                "run_id": rd.run_id,
                "state": state,
                "resume": resume,
                "placement": placed,
                "events": [{**r, "standard_event": journal.standard_event(r)} for r in records],
                "alerts": [dataclasses.asdict(a) for a in run_alerts],
                "model_exchange": [
                    {
                        "attempt": n,
                        "calls": [x.to_json() for x in c.exchanges],
                        "notes": c.notes,
                        "chars_cut": c.chars_cut,
                    }
                    for n, c in exchanges
                ],
            }
        )
        return
    table = _whole("ts", "source", "event", "detail")
    keys = (
        "task",
        "attempt",
        "verdict",
        "tool",
        "path",
        "decision",
        "rule",
        "state",
        "reason",
        "latency_ms",
        "counter",
    )
    for r in records:
        table.add_row(
            plain(r.get("ts")),
            plain(r["source"]),
            plain(journal.standard_event(r)),
            plain(journal.detail(r, keys)),
        )
    _print_table(table)
    for line in summary.placement_lines(placed) if placed is not None else []:
        out.print(plain(line), soft_wrap=True)
    for n, conv in exchanges:  # each string the agent or model wrote escaped (textsafe) and cut
        for line in conversation.lines(n, conv):
            out.print(line, markup=False, highlight=False, soft_wrap=True)
    for alert in run_alerts:
        out.print(
            f"alert {alert.id} [{alert.kind}] {alert.state}: {render.display(alert.message)}",
            markup=False,
            highlight=False,
        )
    if resume is not None:
        out.print(
            plain(f"run {rd.run_id} is {state}: {_gone(state)}; `{resume}` continues it", "yellow"),
            soft_wrap=True,
        )
    elif state is not None:
        out.print(plain(f"run {rd.run_id} is {state}"), soft_wrap=True)


def _show_suite_run(folder: Path, runs_dir: Path, json_out: bool) -> None:
    """`assure show SUITE_RUN`: the suite run's state and each of its runs, from the records."""
    state, results = summary.recorded_results(folder, runs_dir)
    shown = runs_mod.shown_state(folder, state.get("state"))
    resume = runs_mod.suite_resume_command(runs_dir, state) if shown == "interrupted" else None
    if json_out:
        _print_json(
            {
                "kind": "suite",
                "suite_run_id": folder.name,
                "suite": state.get("suite"),
                "source": state.get("source"),
                "state": shown,
                "started_at": state.get("started_at"),
                "finished_at": state.get("finished_at"),
                "resume": resume,
                "results": results,
            }
        )
        return
    out.print(
        plain(
            f"suite run {folder.name} of suite {state.get('suite')} ({state.get('source')}):"
            f" {shown}, started {state.get('started_at')}, finished"
            f" {state.get('finished_at') or '-'}"
        ),
        soft_wrap=True,
    )
    table = _whole("#", "spec", "epoch", "verdict", "expects", "seconds", "run", "why")
    for r in results:
        seconds = r["duration_seconds"]
        table.add_row(
            plain(str(r["position"])),
            plain(r["spec"]),
            plain(str(r["epoch"])),
            plain(r["verdict"] or "not run"),
            plain(r["expect"] or "-"),
            plain("-" if seconds is None else f"{seconds:.1f}"),
            plain(r["run_id"] or "-"),
            plain(r["reason"] or ""),
        )
    _print_table(table)
    for r in results:  # a cluster suite's: where each ran, and each lost attempt
        for line in summary.placement_lines(r["placement"]) if r.get("placement") else []:
            out.print(plain(f"#{r['position']} {line}"), soft_wrap=True)
    out.print(plain("`assure show RUN` shows one run's timeline"), soft_wrap=True)
    if resume is not None:
        out.print(plain(f"suite run {folder.name} is {shown}; `{resume}` continues it", "yellow"))


@app.command("promote")
def promote_cmd(
    run_ref: str = RUN_ARG,
    task: str | None = typer.Option(
        None, metavar="TASK", help="Task id (default: every proposed task)."
    ),
    runs_dir: Path = RUNS_OPTION,
    key: Path | None = KEY_OPTION,
    dial: str | None = typer.Option(
        None,
        "--dial",
        metavar="LEVEL",
        help=(
            "The operator's dial for this decision (propose, commit, irreversible; default: the"
            " run's). Never above the spec's."
        ),
    ),
    json_out: bool = JSON_OPTION,
) -> None:
    """Apply a run's proposed results under a fresh gate decision (dial, contract, verifier);
    refuses, writing nothing, when no task can be committed."""
    from assure.core import control
    from assure.run.driver import promote_proposed

    if dial is not None and dial not in control.LEVELS:
        err.print(f"error: --dial must be one of {', '.join(control.LEVELS)}", markup=False)
        raise typer.Exit(2)
    try:
        rd = runs_mod.find(run_ref, runs_dir)
        done = promote_proposed(_spec_of(rd), rd, task, key, dial)
    except AssureError as exc:
        raise _fail(exc) from None
    if json_out:
        _print_json(
            [{"task": task_id, "state": state, "reason": reason} for task_id, state, reason in done]
        )
    else:
        for task_id, state, reason in done:
            out.print(
                f"{render.display(task_id)}: {state} ({render.display(reason)})",
                markup=False,
                highlight=False,
            )
    raise typer.Exit(0 if all(state == "committed" for _, state, _ in done) and done else 1)
