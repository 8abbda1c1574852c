"""`assure run`, `suite` and `resume`: drive runs and suite runs with live progress, print
their reports, exit with their verdicts."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from assure.cli.common import (
    DEFAULT_SPEC,
    EXIT,
    EXIT_UNEXPECTED,
    JUNIT_OPTION,
    KEY_OPTION,
    RUN_ARG,
    RUNS_OPTION,
    _backend_and_images,
    _fail,
    _sigterm_as_interrupt,
    _spec_of,
    _writable,
    _write_out,
    runs_option,
)
from assure.cli.lazy import (
    DockerBackend,
    ImageSet,
    Text,
    junit,
    layout,
    registry,
    render,
    runs_mod,
    spec_mod,
    store,
    summary,
)
from assure.cli.output import (
    _print_json,
    _print_whole,
    _stamp,
    err,
    out,
    plain,
)
from assure.cli.root import app
from assure.errors import AssureError


def _drive(
    loaded: spec_mod.Spec,
    run: store.RunDir,
    engine: tuple[DockerBackend, ImageSet],
    key: Path | None,
    json_out: bool,
    expect: bool,
    verbose: bool,
    junit_file: Path | None = None,
    resumed: bool = False,
) -> None:
    """Drive a run with live progress (a status line on a terminal, a timestamped line per
    phase elsewhere), print its report, exit with the verdict's code. A `resumed` run found
    unfinished that another process claimed first gives way to a new run."""
    from assure.run.driver import Driver

    backend, images = engine
    try:
        started = time.monotonic()
        with contextlib.ExitStack() as stack:
            status = (
                stack.enter_context(err.status(plain(f"{loaded.name}: starting")))
                if err.is_terminal
                else None
            )  # a str status would be read as markup
            last = [""]

            def progress(phase: str, info: dict[str, Any]) -> None:
                calls = f" · {info['tool_calls']} tool calls" if "tool_calls" in info else ""
                if status is not None:
                    status.update(
                        plain(
                            f"{loaded.name} · {phase} · {time.monotonic() - started:5.1f}s{calls}"
                        )
                    )
                elif phase != last[0]:
                    last[0] = phase
                    err.print(
                        plain(
                            f"{_stamp()} {loaded.name}: {phase} {time.monotonic() - started:.1f}s"
                        ),
                        soft_wrap=True,
                    )

            try:
                result = Driver(loaded, run, backend, images, progress, signing_key=key).drive()
            except store.Busy:
                if not resumed:
                    raise
                run = store.RunDir.new(run.path.parent, loaded.name, loaded.path, loaded.to_json())
                err.print(
                    plain(
                        f"another process resumed that run first: starting a new run {run.run_id}"
                    )
                )
                result = Driver(loaded, run, backend, images, progress, signing_key=key).drive()
    except AssureError as exc:
        raise _fail(exc) from None
    except KeyboardInterrupt:
        err.print(
            Text(
                "interrupted: containers and volumes of this run were removed; `assure resume`"
                " continues it",
                style="yellow",
            )
        )
        raise typer.Exit(130) from None
    if junit_file is not None:
        _write_out(junit_file, lambda: junit.write(junit_file, junit.of_run(result.run_dir)))
    if json_out:
        _print_json(summary.run_document(result.run_dir, result.view))
    else:
        _print_whole(render.render_report(result.view, str(result.run_dir), verbose=verbose))
    code = EXIT[result.verdict]
    if expect:
        code = 0 if result.verdict == loaded.expect else EXIT_UNEXPECTED
    raise typer.Exit(code)


@app.command()
def run(
    spec: Path = typer.Argument(
        DEFAULT_SPEC, metavar="SPEC", help="Spec file (default: the built-in benign example)."
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print the machine-readable report on stdout."
    ),
    expect: bool = typer.Option(
        False, "--expect", help="Exit 0 only if the verdict is the one the spec expects."
    ),
    runs_dir: Path = runs_option("Where run directories go."),
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Show attributed changes too."),
    new: bool = typer.Option(
        False, "--new", help="Start a new run even if an unfinished run of this spec exists."
    ),
    key: Path | None = KEY_OPTION,
    junit_file: Path | None = JUNIT_OPTION,
) -> None:
    """Run SPEC's tasks in fresh sandboxes, verify, promote, print the verdict.

    An unfinished run of the same spec (its driver killed) is resumed instead, unless --new."""
    from assure.run.driver import find_unfinished, resume_note

    _sigterm_as_interrupt()
    try:
        loaded = spec_mod.load(spec)
        _writable(junit=junit_file)
        runs_mod.check_base(runs_dir, writable=True)
        engine = _backend_and_images(loaded)  # before a run is made for nothing
        rd = None if new else find_unfinished(runs_dir, loaded)
        resumed = rd is not None
        if rd is not None:
            err.print(resume_note(rd, loaded), markup=False)
        else:
            rd = store.RunDir.new(runs_dir, loaded.name, loaded.path, loaded.to_json())
    except AssureError as exc:
        raise _fail(exc) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    _drive(loaded, rd, engine, key, json_out, expect, verbose, junit_file, resumed)


@app.command("suite")
def suite_cmd(
    suite_files: list[Path] = typer.Argument(
        ...,
        metavar="SUITE",
        help="Suite files (e.g. suites/containment.yaml), run one after another.",
    ),
    json_out: bool = typer.Option(
        False,
        "--json",
        help=(
            "Print the summary (specs/report.schema.json) on stdout (a list of them for several"
            " suites)."
        ),
    ),
    summary_file: Path | None = typer.Option(
        None,
        "--summary",
        metavar="FILE",
        help="Also write the summary (specs/report.schema.json) here (one suite).",
    ),
    junit_file: Path | None = JUNIT_OPTION,
    runs_dir: Path = runs_option("Where run directories go (suite runs go beside it, in suites/)."),
    new: bool = typer.Option(
        False, "--new", help="Start a new suite run even if an unfinished run of this suite exists."
    ),
    check: bool = typer.Option(
        False, "--check", help="Only check the suite and its specs; run nothing."
    ),
    jobs: int | None = typer.Option(
        None,
        "-j",
        "--jobs",
        min=1,
        metavar="N",
        help=(
            "Specs in flight at once (default: as many as this machine's CPUs and memory hold under"
            " the specs' limits; with --cluster, the cluster's docker resource)."
        ),
    ),
    shard: str | None = typer.Option(
        None,
        "--shard",
        metavar="K/N",
        help="Run only shard K of N (1-based), e.g. one job of a CI matrix.",
    ),
    cluster: str | None = typer.Option(
        None,
        "--cluster",
        metavar="ADDRESS",
        help="Run each spec as a task on this Ray cluster (host:port, or auto); needs assure[ray].",
    ),
    pool_size: int | None = typer.Option(
        None,
        "--pool",
        min=0,
        metavar="N",
        help=(
            "Keep N booted gateway and agent pairs per shape, one claimed per fresh attempt"
            " (default: the suite's `pool`, else none)."
        ),
    ),
    pool_idle: float | None = typer.Option(
        None,
        "--pool-idle",
        metavar="SECONDS",
        help="Replace a pooled pair idle this long (default: the suite's, else 300).",
    ),
    key: Path | None = KEY_OPTION,
) -> None:
    """Run every spec of each SUITE, -j at a time; exit 0 only if each verdict is the one its spec
    expects.

    An unfinished run of the same suite (its process killed) is continued instead, unless --new:
    finished runs are kept, the interrupted ones resume, the rest start."""
    from assure.run import suite as suite_mod

    _sigterm_as_interrupt()
    try:
        cut = suite_mod.Shard.parse(shard) if shard is not None else None
        suites = [(whole, whole.sharded(cut)) for whole in map(suite_mod.load, suite_files)]
        if cluster is not None:  # the cluster's rules, --check's too
            for _, loaded in suites:
                if loaded.epochs > 1 or any(s.sample for s in loaded.specs):
                    raise AssureError(
                        "epochs and datasets do not run on a cluster yet",
                        where=f"--cluster {cluster}",
                        fix="run this suite without --cluster (with -j, or --shard K/N per CI job)",
                    )
        if check:
            from assure.run import preflight

            preflight.refuse([s for _, loaded in suites for s in loaded.specs], None)
            for path, (_, loaded) in zip(suite_files, suites, strict=False):
                epochs = f", {loaded.epochs} epochs each" if loaded.epochs > 1 else ""
                here = ""
                if cluster is not None:  # the cluster's rules: what it cannot run runs here
                    from assure.run.cluster import outside_effects

                    here = (
                        f" ({sum(1 for s in loaded.specs if outside_effects(s))} run here, not on"
                        " the cluster: effects outside the sandbox)"
                    )
                out.print(
                    f"ok {render.display(str(path))}: {len(loaded.specs)} specs{epochs}{here}",
                    markup=False,
                    highlight=False,
                    soft_wrap=True,
                )
            raise typer.Exit(0)
        if len(suite_files) > 1 and (summary_file or junit_file):
            raise AssureError(
                "--summary and --junit take one suite: each file is one suite's summary",
                where="--summary/--junit",
                fix="run the suites one per command, or use --json for a list of summaries",
            )
        _writable(summary=summary_file, junit=junit_file)
        runs_mod.check_base(runs_dir, writable=True)
        if cluster is not None:
            from assure.run import cluster as cluster_mod
            from assure.run import preflight

            preflight.refuse(
                [s for _, loaded in suites for s in loaded.specs], None
            )  # the nodes' engines are theirs to ask
            cluster_mod.join(
                cluster, [s for _, loaded in suites for s in loaded.specs]
            )  # before a suite run is made for nothing
            run_here = [
                s for _, loaded in suites for s in loaded.specs if cluster_mod.outside_effects(s)
            ]
            engine = (
                _backend_and_images(*run_here) if run_here else None
            )  # the specs cluster mode cannot run run here
        else:
            engine = _backend_and_images(*(s for _, loaded in suites for s in loaded.specs))
    except AssureError as exc:
        raise _fail(exc) from None
    results = []
    for path, (whole, loaded) in zip(suite_files, suites, strict=False):
        chosen = jobs
        if jobs is None and cluster is None:
            chosen = suite_mod.default_jobs(loaded.specs, *suite_mod.machine())
            err.print(
                plain(
                    f"suite {loaded.name}: -j {chosen} (what this machine's CPUs and memory hold;"
                    " -j N to choose)"
                )
            )
        with _warm_pool(
            None if cluster else engine, runs_dir, loaded, pool_size, pool_idle
        ) as warm:
            results.append(
                _drive_suite(path, whole, loaded, engine, runs_dir, new, chosen, key, cluster, warm)
            )
    if cluster is not None:
        from assure.run import cluster as cluster_mod

        cluster_mod.leave()
    ok = all(
        len(outcomes) == len(loaded.trials) and all(o.as_expected for o in outcomes)
        for loaded, _, outcomes, _ in results
    )
    docs = [doc for _, _, _, doc in results]
    if summary_file is not None:
        _write_out(summary_file, lambda: summary.write(summary_file, docs[0]))
    if junit_file is not None:
        _write_out(junit_file, lambda: junit.write(junit_file, junit.of_summary(docs[0])))
    if json_out:
        _print_json(docs[0] if len(docs) == 1 else docs)
    else:
        for loaded, record, outcomes, doc in results:
            _print_whole(
                render.render_suite(loaded.name, record.suite_run_id, outcomes, len(loaded.trials))
            )
            if doc["pool"] is not None:
                p = doc["pool"]
                out.print(
                    plain(
                        f"warm pool: {p['hits']} hits, {p['misses']} misses, {p['cold_starts']}"
                        " cold starts"
                    ),
                    soft_wrap=True,
                )
    raise typer.Exit(0 if ok else EXIT_UNEXPECTED)


@contextlib.contextmanager
def _warm_pool(
    engine: tuple[DockerBackend, ImageSet] | None,
    runs_dir: Path,
    loaded: Any,
    size: int | None,
    idle: float | None,
) -> Iterator[Any]:
    """The suite's warm pool (run/pool.py), or None: `--pool`/`--pool-idle` over the suite
    file's `pool`; never on a cluster. Removed on the way out, Ctrl-C included."""
    from assure.run import pool as pool_mod

    given = loaded.pool or {}
    size = given.get("size", 0) if size is None else size
    if engine is None or not size:
        yield None
        return
    idle = given.get("idle_seconds", pool_mod.DEFAULT_IDLE_SECONDS) if idle is None else idle
    try:
        settings = pool_mod.Settings(size, float(idle))
    except AssureError as exc:
        raise _fail(exc) from None
    cold = [(s.name, why) for s in loaded.specs if (why := pool_mod.ineligible(s))]
    err.print(
        plain(
            f"suite {loaded.name}: a warm pool of {settings.size} pairs per shape, idle at most"
            f" {settings.idle_seconds:g} s"
            + (
                f"; {len(cold)} specs start cold ({cold[0][0]}:"
                f" {cold[0][1]}{', ...' if len(cold) > 1 else ''})"
                if cold
                else ""
            )
        )
    )
    warm = pool_mod.WarmPool(
        registry.create(), engine[1], runs_dir, settings, say=lambda msg: err.print(plain(msg))
    )
    try:
        warm.want(loaded.specs)
        yield warm
    finally:
        warm.close()


def _drive_suite(
    path: Path,
    whole: Any,
    loaded: Any,
    engine: tuple[DockerBackend, ImageSet] | None,
    runs_dir: Path,
    new: bool,
    jobs: int | None,
    key: Path | None,
    cluster: str | None,
    warm: Any = None,
) -> tuple[Any, Any, list[Any], dict[str, Any]]:
    """Drive one suite run of `loaded` (`whole` cut to its shard; continuing an unfinished run
    unless `new`), `jobs` specs at a time: here, each worker thread with its own engine client,
    or on the Ray `cluster`. Progress on stderr: a bar on a terminal, one timestamped line per
    finished spec elsewhere. Returns the suite run's summary too (of the whole suite: each
    result knows its place)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from assure.run import suite as suite_mod
    from assure.run.driver import Driver

    backend, images = engine if engine is not None else (None, None)
    local = threading.local()
    in_flight: dict[str, str] = {}  # spec name -> its phase
    total = len(loaded.trials)
    try:
        base = layout.suites_base(runs_dir)
        record = None if new else suite_mod.SuiteRun.find_unfinished(base, loaded)
        if record is not None:
            err.print(plain(f"continuing unfinished suite run {record.suite_run_id}"))
        else:
            record = suite_mod.SuiteRun.create(base, loaded)
        shard = f" shard {loaded.shard}" if loaded.shard else ""
        with contextlib.ExitStack() as stack:
            bar = None
            if err.is_terminal:
                bar = stack.enter_context(
                    Progress(
                        TextColumn("{task.description}", markup=False),
                        BarColumn(),
                        MofNCompleteColumn(),
                        TimeElapsedColumn(),
                        TextColumn("{task.fields[flight]}", markup=False),
                        console=err,
                        transient=True,
                    )
                )
                task = bar.add_task(
                    f"suite {render.display(loaded.name)}{shard}", total=total, flight=""
                )

            def shown() -> None:
                if bar is not None:
                    bar.update(
                        task,
                        flight=render.display(
                            " · ".join(
                                f"{name}: {phase}" for name, phase in list(in_flight.items())
                            )
                        ),
                    )

            def begin(n: int, spec: spec_mod.Spec) -> None:
                in_flight[spec.name] = "starting"
                shown()

            def report_line(line: str, outcome: Any) -> None:
                """One finished spec: a ✓/✗ line above the bar, or a timestamped line off a
                terminal."""
                if bar is not None:
                    bar.advance(task)
                    shown()
                    bar.console.print(
                        Text.assemble(
                            Text(
                                "✓ " if outcome.as_expected else "✗ ",
                                style="green" if outcome.as_expected else "bold red",
                            ),
                            plain(line),
                        )
                    )
                else:
                    err.print(plain(f"{_stamp()} {line}"), soft_wrap=True)

            def done(n: int, outcome: Any, seconds: float | None) -> None:
                in_flight.pop(outcome.spec, None)
                took = "kept from before" if seconds is None else f"{seconds:.1f}s"
                epoch = f" epoch {outcome.epoch}" if loaded.epochs > 1 else ""
                report_line(
                    f"[{n + 1}/{total}] {outcome.spec}{epoch}: {outcome.verdict} (expects"
                    f" {outcome.expect}) {took}",
                    outcome,
                )

            def run_one(spec: spec_mod.Spec, run: store.RunDir) -> str:
                if threading.current_thread() is threading.main_thread():
                    local.backend = backend
                elif not hasattr(local, "backend"):
                    local.backend = (
                        registry.create()
                    )  # docker-py's client is one HTTP session: one per thread

                def progress(phase: str, info: dict[str, Any]) -> None:
                    if in_flight.get(spec.name) != phase:
                        in_flight[spec.name] = phase
                        shown()

                assert images is not None  # run_one is given only with an engine
                return (
                    Driver(spec, run, local.backend, images, progress, signing_key=key, pool=warm)
                    .drive()
                    .verdict
                )

            def arrived(
                n: int, spec: spec_mod.Spec, outcome: suite_mod.Outcome, entry: dict[str, Any]
            ) -> None:
                where = (
                    f" on {entry['node'][:12]}"
                    if entry.get("node")
                    else " here"
                    if entry.get("where") == "here"
                    else ""
                )
                in_flight.pop(spec.name, None)
                lost = f", {cluster_mod.losses(entry['lost'])}" if entry.get("lost") else ""
                lost += (
                    f", queued {entry['queued_seconds']:g} s" if entry.get("queued_seconds") else ""
                )
                why = entry.get("node_finding") or (
                    entry.get("reason") if outcome.verdict == "error" else None
                )
                note = f" — {why}" if why else ""
                report_line(
                    f"suite {loaded.name} [{n + 1}/{total}] {spec.name}: {outcome.verdict} (expects"
                    f" {spec.expect}){where}{lost}{note}",
                    outcome,
                )

            def placed(n: int, phase: str) -> None:
                in_flight[loaded.specs[n].name] = phase
                shown()

            if cluster is not None:
                from assure.run import cluster as cluster_mod

                err.print(plain(f"suite {loaded.name}: on the Ray cluster {cluster}"))
                outcomes = cluster_mod.drive_suite(
                    record,
                    runs_dir,
                    cluster,
                    jobs,
                    key,
                    arrived,
                    run_one if engine is not None else None,
                    placed,
                )
            else:
                try:
                    outcomes = record.drive(runs_dir, run_one, begin, jobs=jobs or 1, finished=done)
                finally:  # an interrupted suite run's starts count too
                    if warm is not None:
                        record.count_pool(warm.stats())
        doc = summary.suite_document(whole, record.path, runs_dir)
        outcomes = suite_mod.with_findings(outcomes, doc)
    except AssureError as exc:
        raise _fail(exc) from None
    except KeyboardInterrupt:
        again = f"assure suite {path}" + (f" --shard {loaded.shard}" if loaded.shard else "")
        err.print(
            plain(
                f"interrupted: containers and volumes were removed; `{again}` continues this"
                " suite run",
                "yellow",
            )
        )
        raise typer.Exit(130) from None
    return loaded, record, outcomes, doc


@app.command()
def resume(
    run_ref: str = RUN_ARG,
    runs_dir: Path = RUNS_OPTION,
    json_out: bool = typer.Option(
        False, "--json", help="Print the machine-readable report on stdout."
    ),
    key: Path | None = KEY_OPTION,
) -> None:
    """Continue a run whose driver was killed: same run, same task, next attempt, no effect
    repeated."""
    from assure.run.driver import resume_note

    _sigterm_as_interrupt()
    try:
        rd = runs_mod.find(run_ref, runs_dir)
        loaded = _spec_of(rd)
        engine = _backend_and_images(loaded)
        err.print(resume_note(rd, loaded), markup=False)
    except AssureError as exc:
        raise _fail(exc) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    _drive(loaded, rd, engine, key, json_out, False, False)
