"""The `assure` command line: parse, call the library once, render. Nothing else lives here."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import json
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer

from assure.errors import AssureError, unreadable
from assure.records.obligations import OBLIGATIONS


class _Lazy:
    """A module, or what a call makes, on first use: `--version` and `--help` need none of
    rich, docker, jsonschema or cryptography, which were most of a bare start (issue 25)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make, self._it, self._lock = make, None, threading.Lock()

    def _get(self) -> Any:
        with self._lock:
            if self._it is None:
                self._it = self._make()
            return self._it

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._get(), attr)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._get()(*args, **kwargs)

    # Special methods skip __getattr__: rich's Live enters its console (`with console:`).
    def __enter__(self) -> Any:
        return self._get().__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self._get().__exit__(*exc)


def _lazy(module: str, name: str | None = None) -> Any:
    return _Lazy(
        lambda: (
            getattr(importlib.import_module(module), name)
            if name
            else importlib.import_module(module)
        )
    )


Table = _lazy("rich.table", "Table")
Text = _lazy("rich.text", "Text")
spec_mod = _lazy("assure.spec")
alerts = _lazy("assure.records.alerts")
runs_mod = _lazy("assure.ops.runs")
junit = _lazy("assure.records.junit")
layout = _lazy("assure.records.layout")
store = _lazy("assure.records.store")
summary = _lazy("assure.records.summary")
render = _lazy("assure.records.report")
AttemptPaths = _lazy("assure.records.layout", "AttemptPaths")
RunPaths = _lazy("assure.records.layout", "RunPaths")
install = _lazy("assure.sandbox.install")
registry = _lazy("assure.sandbox.registry")
live = _lazy("assure.sandbox.live")
runtimes = _lazy("assure.sandbox.runtimes")
workspace_fs = _lazy("assure.sandbox.workspace_fs")
DockerBackend = _lazy("assure.sandbox.docker.backend", "DockerBackend")
Images = _lazy("assure.sandbox.docker.images", "Images")
ImageSet = _lazy("assure.sandbox.docker.images", "ImageSet")

HELP = {"help_option_names": ["-h", "--help"]}  # every command and group: -h is --help
app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    context_settings=HELP,
    help="Run an untrusted agent in a sealed container and judge it by ground truth.",
)
images_app = typer.Typer(
    no_args_is_help=True, context_settings=HELP, help="Build the sandbox images."
)
app.add_typer(images_app, name="images")
contract_app = typer.Typer(
    no_args_is_help=True, context_settings=HELP, help="Work with a spec's contract."
)
app.add_typer(contract_app, name="contract")
# no markup, emoji or highlighting: every str is printed as text; styles only through Text.
# Made on first use, with the width a console made at import reads (COLUMNS as the process
# started), not whatever COLUMNS says when something is first printed.
_COLUMNS = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else None
out = _Lazy(lambda: render.console(width=_COLUMNS))
err = _Lazy(lambda: render.console(stderr=True, width=_COLUMNS))
plain = _lazy(
    "assure.records.report", "plain"
)  # the one way an agent-controlled value enters a rich renderable


def _print_json(data: Any) -> None:
    """JSON on stdout, ASCII only: a hostile name's controls, bidi marks and undecodable bytes
    (kept as surrogate escapes) come out as \\u escapes, never raw (rich's print_json would not)."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=True) + "\n")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        sys.stdout.write(f"assure {version('assure')}\n")
        raise typer.Exit(0)


@app.callback()
def _setup(
    _: bool = typer.Option(
        False,
        "--version",
        callback=_version,
        is_eager=True,
        help="Print assure's version and exit.",
    ),
) -> None:
    """Library code logs (alerts among it); the CLI shows warnings on stderr."""
    from rich.logging import RichHandler

    logging.basicConfig(
        level=logging.WARNING,
        format="%(message)s",
        handlers=[RichHandler(console=err, show_path=False, show_time=False, markup=False)],
    )


DEFAULT_SPEC = Path(__file__).resolve().parent.parent / "specs" / "examples" / "benign.yaml"
EXIT = {"pass": 0, "contained": 0, "fail": 3, "breach": 4, "error": 5}
EXIT_HARNESS, EXIT_UNEXPECTED = 1, 6


def _fail(exc: AssureError) -> typer.Exit:
    err.print("error:", _safe_lines(exc.explain()), style="bold red", markup=False, highlight=False)
    return typer.Exit(EXIT_HARNESS)


def _safe_lines(text: str) -> str:
    return "\n".join(render.display(line) for line in text.split("\n"))


def _sigterm_as_interrupt() -> None:
    """Make `kill` behave like Ctrl-C so every `finally` cleans up its containers; both also
    set `stop.INTERRUPTED`, which the attempt's run loop reads in case the raise was lost."""
    from assure.run.stop import INTERRUPTED

    def handler(signum: int, frame: Any) -> None:
        INTERRUPTED.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def _backend_and_images(*specs: spec_mod.Spec) -> tuple[DockerBackend, ImageSet]:
    """`preflight.engine`, saying on stderr what it builds."""
    from assure.run import preflight

    say = lambda msg: err.print(Text.assemble(("images: ", "dim"), plain(msg)))  # noqa: E731
    return preflight.engine(list(specs), say)


def _stamp() -> str:
    """The UTC second, for progress lines off a terminal (a CI log keeps them in order)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


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
        _print_json(summary.run_document(result.run_dir, result.report))
    else:
        _print_whole(render.render_report(result.report, str(result.run_dir), verbose=verbose))
    code = EXIT[result.verdict]
    if expect:
        code = 0 if result.verdict == loaded.expect else EXIT_UNEXPECTED
    raise typer.Exit(code)


KEY_OPTION = typer.Option(
    None,
    "--key",
    metavar="FILE",
    envvar="ASSURE_SIGNING_KEY",
    help="Ed25519 private key (PEM) to sign receipts; none: keyless.",
)
JUNIT_OPTION = typer.Option(
    None,
    "--junit",
    metavar="FILE",
    help="Also write a JUnit XML report here (one testcase per spec), for CI.",
)


def _writable(**files: Path | None) -> None:
    """Refuse before anything runs an output file (by option name: `junit=` is --junit) that
    could not be written at the end: its folder missing, a folder in its place, or a folder
    nothing can be made in (probed with a file made and removed: as root, /proc passes
    os.access and still refuses)."""
    for option, f in files.items():
        if f is None:
            continue
        where, fix = f"--{option} {f}", f"pass --{option} a file in a folder you can write to"
        if not f.parent.is_dir():
            raise AssureError(
                "no such folder for an output file",
                where=where,
                fix="create the folder first, or name another file",
            )
        if f.is_dir():
            raise AssureError("this output file is a folder", where=where, fix=fix)
        try:
            fd, probe = tempfile.mkstemp(prefix=".probe-", dir=f.parent)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise AssureError(
                f"this output file cannot be written: {exc.strerror or exc}", where=where, fix=fix
            ) from None


def _write_out(path: Path, write: Any) -> None:
    try:
        write()
    except OSError as exc:
        raise _fail(
            AssureError(f"cannot write it: {exc.strerror or exc}", where=str(path))
        ) from None


def _runs_base(value: Path) -> Path:
    """--runs-dir, refused in words when it names a file (a missing folder is an empty base)."""
    try:
        return runs_mod.check_base(value)
    except AssureError as exc:
        raise _fail(exc) from None


def runs_option(
    help: str = "The runs base: where run directories are (and a RUN given by id is looked up).",
) -> Any:
    return typer.Option(store.RUNS_DIR, "--runs-dir", metavar="DIR", callback=_runs_base, help=help)


RUNS_OPTION = runs_option()
RUN_ARG = typer.Argument(
    ..., metavar="RUN", help="A run id (looked up under --runs-dir) or a run's folder."
)
JSON_OPTION = typer.Option(False, "--json", help="Print the result as JSON on stdout.")


def _whole(
    *headers: str,
    keep: tuple[str, ...] = (
        "id",
        "run",
        "ts",
        "started",
        "raised",
        "event",
        "kind",
        "state",
        "verdict",
        "status",
        "outcome",
    ),
) -> Table:
    """A table whose ids, times and one-word names (events, states, verdicts) are never cut (no
    wrap, no ellipsis: copy or grep them whole); the other columns fold rather than end in an
    ellipsis.
    """
    table = Table()
    for h in headers:
        table.add_column(h, no_wrap=h in keep, overflow="fold")
    return table


# what a folding column (a message) keeps at least when the uncut ones take the width: it folds at
# words
FOLD_ROOM = 40


def _print_table(table: Table) -> None:
    """Print `table` at least as wide as its uncut columns need, the others folding into what is
    left but keeping FOLD_ROOM (an alert's message was cut to 8 characters a line, splitting
    words). A narrow terminal wraps the lines; every id stays one copyable string."""
    from rich.measure import Measurement

    options = out.options.update(width=10_000)
    needed = 1
    for column in table.columns:
        cells = [Measurement.get(out, options, c).maximum for c in (column.header, *column.cells)]
        column.min_width = (
            max(cells) if column.no_wrap else min(max(cells), max(FOLD_ROOM, cells[0]))
        )
        needed += 3 + column.min_width
    if needed <= out.width:
        out.print(table)
        return
    wide = render.console()
    wide.width = needed
    wide.print(table)


def _print_whole(renderable: Any) -> None:
    """Print a report: on a terminal at its width; elsewhere (a CI log, a pipe), where rich
    would fold at 80 columns mid-word (`quaranti ned`), at the width its longest line needs."""
    from rich.measure import Measurement

    if out.is_terminal:
        out.print(renderable)
        return
    needed = Measurement.get(out, out.options.update(width=10_000), renderable).maximum
    wide = render.console()
    wide.width = max(needed, out.width)
    wide.print(renderable)


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

            for _, loaded in suites:
                if loaded.epochs > 1 or any(s.sample for s in loaded.specs):
                    raise AssureError(
                        "epochs and datasets do not run on a cluster yet",
                        where=f"--cluster {cluster}",
                        fix="run this suite without --cluster (with -j, or --shard K/N per CI job)",
                    )

            preflight.refuse(
                [s for _, loaded in suites for s in loaded.specs], None
            )  # the nodes' engines are theirs to ask
            cluster_mod.join(
                cluster, [s for _, loaded in suites for s in loaded.specs]
            )  # before a suite run is made for nothing
            here = [
                s for _, loaded in suites for s in loaded.specs if cluster_mod.outside_effects(s)
            ]
            engine = (
                _backend_and_images(*here) if here else None
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
                    lambda n, phase: (in_flight.__setitem__(loaded.specs[n].name, phase), shown()),
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


def _spec_of(rd: store.RunDir) -> spec_mod.Spec:
    """The run's spec, reloaded from its source and checked unchanged since the run began."""
    recorded = spec_mod.Spec.from_json(rd.spec_json())
    loaded = spec_mod.load(recorded.path, recorded.sample.id if recorded.sample else None)
    if loaded != recorded:
        raise AssureError(
            "the spec changed since this run started",
            where=str(recorded.path),
            fix="restore it, or start a new run with --new",
        )
    return loaded


@app.command()
def validate(
    specs: list[Path] = typer.Argument(..., metavar="FILE", help="Spec or suite files to check."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Check spec files (and suites, with every spec they name) against their schemas in specs/,
    and that each can work: its contract as the gate will judge it (ratified, by someone other
    than its proposer, hash and terms as they stand) and its agent command among the agent
    files; and, when the Docker engine answers, that it holds each image and runtime the spec
    names. Report every problem as file:line: field: message, with the command that fixes it."""
    from assure.run import preflight
    from assure.run import suite as suite_mod

    bad, results = 0, []
    engine: list[
        Any
        # the engine, asked at most once, and only by a spec that names an image or runtime to look
        # for
    ] = []

    def engine_problems(s: spec_mod.Spec) -> list[preflight.Problem]:
        if not preflight.needs_engine(s):
            return []
        if not engine:
            try:
                engine.append(registry.create())
            except AssureError as exc:
                engine.append(exc)
        if isinstance(engine[0], AssureError):
            return [
                preflight.Problem(
                    str(s.path),
                    f"its images and sandbox.runtime were not checked: {engine[0].message}",
                    engine[0].fix or "start the Docker engine",
                    fatal=False,
                )
            ]
        return preflight.engine_problems(s, engine[0])

    for path in specs:
        try:
            loaded = (
                suite_mod.load(path).specs
                if suite_mod.is_suite(path)
                else spec_mod.load_samples(path)
            )
            found = list(  # the samples of one spec share its problems: each said once
                dict.fromkeys(
                    p for s in loaded for p in [*preflight.problems(s), *engine_problems(s)]
                )
            )
            signed = list(dict.fromkeys(line for s in loaded for line in preflight.ratified(s)))
        except AssureError as exc:
            bad += 1
            results.append(
                {
                    "file": str(path),
                    "ok": False,
                    "problems": exc.message.split("\n"),
                    "fix": exc.fix,
                    "notes": [],
                }
            )
            if not json_out:
                err.print(_safe_lines(exc.explain()), markup=False, highlight=False)
            continue
        fatal = [p for p in found if p.fatal]
        bad += bool(fatal)
        results.append(
            {
                "file": str(path),
                "ok": not fatal,
                "problems": [f"{p.where}: {p.message}" for p in fatal],
                "fix": "; ".join(p.fix for p in fatal) or None,
                "notes": [f"{p.where}: {p.message}" for p in found if not p.fatal],
                "ratified": signed,
            }
        )
        if json_out:
            continue
        for problem in found:
            first, *rest = problem.lines()
            err.print(
                _safe_lines("\n".join([first if problem.fatal else f"note: {first}", *rest])),
                markup=False,
                highlight=False,
            )
        if not fatal:
            out.print(f"ok {render.display(str(path))}", markup=False, highlight=False)
            for line in signed:
                out.print(_safe_lines(f"  {line}"), markup=False, highlight=False)
    if json_out:
        _print_json(results)
    raise typer.Exit(1 if bad else 0)


@app.command()
def init(
    folder: Path = typer.Argument(
        Path("."),
        metavar="DIR",
        help=(
            "Where to write the project (default: here); made if missing, nothing in it"
            " overwritten."
        ),
    ),
    name: str = typer.Option(
        "my-first-spec",
        "--name",
        metavar="NAME",
        help="The spec's name (lowercase letters, digits, dashes).",
    ),
    writable: list[str] | None = typer.Option(
        None,
        "--writable",
        metavar="GLOB",
        help="A path the agent may change (repeatable; default: out/**).",
    ),
    protected: list[str] | None = typer.Option(
        None,
        "--protected",
        metavar="GLOB",
        help="A path whose change is a breach (repeatable; default: src/**).",
    ),
    proposed_by: str | None = typer.Option(
        None,
        "--proposed-by",
        metavar="NAME",
        help="Who proposes the contract (default: $USER@localhost).",
    ),
    ratified_by: str = typer.Option(
        "reviewer@localhost",
        "--ratified-by",
        metavar="NAME",
        help="Who ratifies it: someone other than the proposer.",
    ),
    database: str | None = typer.Option(
        None,
        "--database",
        metavar="NAME",
        help="Also a SQLite database the gateway owns, which the agent writes a row to.",
    ),
) -> None:
    """Write a first project: a commented spec, a tiny agent, its workspace, a suite and a README
    stub. `assure validate` passes on them and `assure run spec.yaml` passes as written."""
    from assure.ops import init as scaffold

    given = {
        k: v
        for k, v in {
            "name": name,
            "writable": tuple(writable or ()),
            "protected": tuple(protected or ()),
            "proposed_by": proposed_by,
            "ratified_by": ratified_by,
            "database": database,
        }.items()
        if v
    }
    try:
        choices = scaffold.Choices(**given)
        written = scaffold.create(folder, choices)
        signed = scaffold.ratify_as_you(folder / "spec.yaml", choices.ratified_by)
    except AssureError as exc:
        raise _fail(exc) from None
    for path in written:
        out.print(plain(f"wrote {path}"), soft_wrap=True)
    out.print(plain(signed), soft_wrap=True)
    out.print(
        plain(f"next: cd {folder} && assure validate spec.yaml && assure run spec.yaml"),
        soft_wrap=True,
    )


@app.command()
def verify(
    run_ref: str = RUN_ARG, runs_dir: Path = RUNS_OPTION, json_out: bool = JSON_OPTION
) -> None:
    """Recompute the verdict of a finished run from its directory alone."""
    from assure.run.driver import reverify

    try:
        run_dir = runs_mod.find(run_ref, runs_dir).path
        result = reverify(run_dir)
        recorded = store.read_json(RunPaths(run_dir).report)
    except AssureError as exc:
        raise _fail(exc) from None
    same = recorded.get("verdict") == result.verdict
    if json_out:
        _print_json(
            {**result.report, "recorded_verdict": recorded.get("verdict"), "reproduced": same}
        )
    else:
        _print_whole(render.render_report(result.report, str(run_dir)))
        out.print(
            Text.assemble(
                plain(f"recorded verdict {recorded.get('verdict')}, recomputed {result.verdict}: "),
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


report_app = typer.Typer(
    no_args_is_help=True,
    context_settings=HELP,
    help="Reports of runs and suite runs, for people and for CI.",
)
app.add_typer(report_app, name="report")


@report_app.command("html")
def report_html(
    ref: str = typer.Argument(
        ...,
        metavar="RUN",
        help="A run or a suite run (id or folder), or a suite summary JSON file.",
    ),
    output: Path | None = typer.Option(
        None,
        "-o",
        "--output",
        metavar="FILE",
        help="Where to write the page ('-': stdout). Default: ./<id>.html.",
    ),
    runs_dir: Path = runs_option(
        "Where run ids are looked up (suite runs: beside it, in suites/)."
    ),
) -> None:
    """A self-contained HTML page (no script, no network) of a run or a suite run, for a reviewer.
    A suite's page links each run's page, written beside it as <run id>.html.

    It is written to the current folder by default, never into a run directory: those are sealed."""
    from assure.records import html_report

    try:
        named = Path(ref).exists() or (
            store.RUN_ID.match(ref) and (layout.suites_base(runs_dir) / ref).is_dir()
        )
        page = html_report.render(
            ref if named else str(runs_mod.locate(ref, runs_dir)), runs_dir
        )  # a run: the one resolver
        if output is not None and str(output) == "-":
            sys.stdout.write(page.html)
            return
        target = (output or Path(f"{page.id}.html")).resolve()
        pages = [(target, page)]
        for run_dir in page.linked:  # each beside the suite's page, where its link points
            name = html_report.page_name(run_dir)
            try:
                if name is not None:
                    pages.append(
                        (target.parent / name, html_report.run_page(store.RunDir.open(run_dir)))
                    )
            except AssureError as exc:  # its row on the suite page says why already
                err.print(plain(f"no page for run {run_dir.name}: {exc.message}", "yellow"))
        sources = [s.resolve() for _, p in pages for s in p.sources]
        for where, _ in pages:
            if any(where.is_relative_to(s) for s in sources):
                raise AssureError(
                    "the page would be written inside a run directory, which is sealed",
                    where=str(where),
                    fix="pass -o with a path outside it (or -o - for stdout)",
                )
        for where, p in pages:
            where.write_text(p.html, encoding="utf-8")
    except AssureError as exc:
        raise _fail(exc) from None
    except OSError as exc:
        raise _fail(
            AssureError(f"cannot write the page: {exc.strerror}", where=str(exc.filename))
        ) from None
    more = f" and the pages of its {len(pages) - 1} runs beside it" if len(pages) > 1 else ""
    err.print(f"wrote {render.display(str(target))}{more}", markup=False, highlight=False)


@images_app.command("build")
def images_build(
    specs: list[Path] | None = typer.Argument(
        None, metavar="SPEC", help="Specs whose agent.install images to build too."
    ),
    json_out: bool = JSON_OPTION,
) -> None:
    """Build the base, agent and gateway images (no registry needed), and each SPEC's derived
    agent image (its agent.install); skip what is up to date."""
    try:
        loaded = [spec_mod.load(p) for p in specs or []]
        backend = registry.create()
        built = Images(backend, lambda msg: err.print(f"images: {msg}")).ensure()
        derived = {
            s.name: install.ensure(s, backend, built, lambda msg: err.print(f"images: {msg}"))
            for s in loaded
            if s.agent.install
        }
    except AssureError as exc:
        raise _fail(exc) from None
    roles = ("base", "agent", "gateway", "egress")
    if json_out:
        _print_json(
            {
                **{role: getattr(built, role) for role in roles},
                **({"installs": derived} if derived else {}),
            }
        )
        return
    for role in roles:
        out.print(f"{role:8} {getattr(built, role)}")
    for name, tag in derived.items():
        out.print(f"{'install':8} {tag}  ({name})", markup=False, highlight=False)


CONTRACT_TASK_OPTION = typer.Option(
    None,
    "--task",
    metavar="TASK",
    help="The contract governing this task (its own block, else the spec's).",
)


@contract_app.command("hash")
def contract_hash(
    spec: Path = typer.Argument(..., metavar="SPEC", help="Spec file."),
    task: str | None = CONTRACT_TASK_OPTION,
    write: bool = typer.Option(
        False,
        "--write",
        help="Put the new terms and hash into SPEC's contract block (the rest stays as written).",
    ),
) -> None:
    """Print the term digests and hash SPEC's contract must carry to be ratified as it stands
    (YAML for its contract block), and say which terms changed since the ones it carries."""
    from assure.run import ratify

    try:
        loaded = spec_mod.load(spec)
        found = ratify.compute(loaded, task)
        if write:
            ratify.write(loaded, found)
    except AssureError as exc:
        raise _fail(exc) from None
    sys.stdout.write(found.to_yaml())
    changed = found.changed()
    if changed is None:
        err.print(
            "the contract carries no term digests (none yet, or an older format): have these"
            " ratified",
            markup=False,
        )
    elif changed or found.carried_hash != found.hash:
        err.print(
            "changed since the terms it carries: "
            + (", ".join(changed) or "hash")
            + "; have it re-ratified",
            markup=False,
        )
    else:
        err.print("unchanged: the contract carries these terms and hash", markup=False)
    if write:
        err.print(f"written to {render.display(str(spec))}", markup=False)


@contract_app.command("ratify")
def contract_ratify(
    spec: Path = typer.Argument(..., metavar="SPEC", help="Spec file."),
    name: str = typer.Option(
        ..., "--as", metavar="NAME", help="Who ratifies: someone other than the proposer."
    ),
    key: Path | None = typer.Option(
        None,
        "--key",
        metavar="FILE",
        help=(
            "The ratifier's Ed25519 private key (PEM); default: the one `assure keys generate`"
            " made."
        ),
    ),
    task: str | None = CONTRACT_TASK_OPTION,
    trust: bool = typer.Option(
        False,
        "--trust",
        help="Also trust the key for NAME in your own keyring (ratifiers.yaml beside your keys).",
    ),
) -> None:
    """Sign SPEC's contract terms as they stand, as NAME: writes the terms, hash, `ratified_by`
    and the signature into SPEC. The gate accepts it only if a trusted-ratifiers keyring
    (yours, ratifiers.yaml beside your keys, or one in ASSURE_RATIFIERS) holds this key for NAME."""
    from assure.records import keys
    from assure.run import ratifiers, ratify

    try:
        private_key = keys.load_private(key or keys.default_key_dir() / keys.PRIVATE_NAME)
        loaded = spec_mod.load(spec)
        found = ratify.compute(loaded, task)
        contract = ratify.spec_contract(loaded, found.at)
        if name.strip().casefold() == contract.proposed_by.strip().casefold():
            raise AssureError(
                f"{name!r} proposed this contract: the gate refuses a self-ratified one",
                where=str(spec),
                fix="have someone other than the proposer ratify it",
            )
        signature = ratify.sign(loaded, found, name, private_key)
        keyring = ratifiers.own()
        if trust and ratifiers.trust(keyring, name, private_key.public_key()):
            err.print(f"trusted {name} in {render.display(str(keyring))}", markup=False)
        check = ratifiers.check(loaded.name, ratify.spec_contract(spec_mod.load(spec), found.at))
    except AssureError as exc:
        raise _fail(exc) from None
    err.print(
        f"ratified {render.display(str(spec))} (contract {contract.id!r}, {found.hash}) as "
        f"{name} with key {signature['key_id']}",
        markup=False,
    )
    if check.problem:
        err.print(f"but the gate will refuse it: {check.problem}", markup=False)
        raise typer.Exit(1)


@app.command()
def doctor(
    specs: list[Path] = typer.Argument(
        None,
        metavar="SPEC",
        help="Specs whose sandbox.runtime and agent.install image must be available here.",
    ),
    cluster: str = typer.Option(
        None,
        "--cluster",
        metavar="ADDRESS",
        help=(
            "Check a Ray cluster instead (its head's host:port): Ray on both sides, the docker"
            " resource, each node's engine, images and assure version."
        ),
    ),
    json_out: bool = JSON_OPTION,
) -> None:
    """Say what is missing to run assure here (daemon, images, runtimes), or on a Ray cluster, and
    how to fix it."""
    from assure.ops import doctor as checks

    try:
        loaded = [spec_mod.load(path) for path in specs or []]
    except AssureError as exc:
        raise _fail(exc) from None
    if cluster is not None:
        from assure.ops import doctor_cluster

        report = doctor_cluster.diagnose(cluster, doctor_cluster.local_images())
    else:
        report = checks.diagnose(
            {s.sandbox.runtime for s in loaded}, [s for s in loaded if s.agent.install is not None]
        )
    if json_out:
        _print_json(
            {
                "ok": report.ok,
                "checks": [dataclasses.asdict(c) for c in report.checks],
                "register_gvisor": (
                    list(runtimes.registration_steps()) if report.register_gvisor else []
                ),
            }
        )
        raise typer.Exit(0 if report.ok else 1)
    styles = {
        checks.Status.OK: "green",
        checks.Status.MISSING: "red",
        checks.Status.OPTIONAL: "yellow",
        checks.Status.ABSENT: "yellow",
    }
    table = _whole("check", "status", "detail / fix")
    for c in report.checks:
        status = (
            plain(c.value or "")
            if c.status is checks.Status.INFO
            else Text(str(c.status), style=styles[c.status])
        )
        table.add_row(plain(c.name), status, plain(c.detail))
    out.print(table)
    if report.register_gvisor:
        out.print(
            "to register gVisor's runsc with this engine, as root:", markup=False, highlight=False
        )
        for step in runtimes.registration_steps():
            out.print(f"  {step}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(0 if report.ok else 1)


@app.command()
def gc(
    everything: bool = typer.Option(
        False, "--all", help="Also remove resources of runs that are still going."
    ),
    json_out: bool = JSON_OPTION,
    runs_dir: Path = RUNS_OPTION,
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Remove nothing: list what would be removed."
    ),
    all_users: bool = typer.Option(
        False,
        "--all-users",
        help=(
            "Also what other users' processes left (default: only this user's, and the runs of"
            " --runs-dir)."
        ),
    ),
) -> None:
    """Remove containers, volumes, networks, workspace filesystems and cluster tasks' scratch
    folders left by assure processes that are gone."""
    from assure.ops import gc as collector

    try:
        removed = collector.collect(
            registry.create(),
            everything=everything,
            runs_dir=runs_dir,
            all_users=all_users,
            dry_run=dry_run,
        )
    except AssureError as exc:
        raise _fail(exc) from None
    if json_out:
        _print_json(dataclasses.asdict(removed))
        return
    if dry_run:
        for name in removed.names:
            out.print(plain(f"would remove {name}"), soft_wrap=True)
    out.print(
        f"{'would remove' if dry_run else 'removed'} {removed.containers} containers,"
        f" {removed.volumes} volumes, {removed.networks} networks, {removed.workspaces} workspace"
        f" filesystems, {removed.node_scratch} node scratch folders",
        markup=False,
        highlight=False,
    )


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


@app.command()
def runs(runs_dir: Path = RUNS_OPTION, json_out: bool = JSON_OPTION) -> None:
    """List runs and suite runs, newest first, with their state, tasks and verdicts."""
    rows = [r.to_json() for r in runs_mod.listing(runs_dir)]
    if json_out:
        _print_json(rows)
        return
    table = _whole("run", "kind", "state", "verdict", "started", "tasks")
    for r in rows:
        parts = (r["specs"] or {}).items() if r["kind"] == "suite" else r["tasks"].items()
        table.add_row(
            plain(r["run_id"]),
            plain(r["kind"]),
            plain(r["state"]),
            plain(r["verdict"] or "-"),
            plain(r["started_at"]),
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
    if json_out:
        _print_json(
            {
                "run_id": rd.run_id,
                "state": state,
                "resume": resume,
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


keys_app = typer.Typer(
    no_args_is_help=True, context_settings=HELP, help="Manage the Ed25519 key that signs receipts."
)
app.add_typer(keys_app, name="keys")
receipts_app = typer.Typer(
    no_args_is_help=True,
    context_settings=HELP,
    help="Verify a run's signed receipts and sealed logs.",
)
app.add_typer(receipts_app, name="receipts")
trust_app = typer.Typer(
    no_args_is_help=True,
    context_settings=HELP,
    help="Earned autonomy: the trust an agent earned in the signed trust ledger.",
)
app.add_typer(trust_app, name="trust")
TRUST_KEY_OPTION = typer.Option(
    None,
    "--public-key",
    metavar="FILE",
    help="Ed25519 public key (PEM) the ledger is signed with (default: `assure keys`' own).",
)


@keys_app.command("generate")
def keys_generate(
    directory: Path | None = typer.Option(
        None,
        "--dir",
        metavar="DIR",
        help="Where to write the key pair (default: ~/.config/assure/keys).",
    ),
    json_out: bool = JSON_OPTION,
) -> None:
    """Make a new Ed25519 key pair for signing receipts; never overwrites a key."""
    from assure.records import keys

    try:
        private_path, public_path = keys.generate_keypair(directory or keys.default_key_dir())
        kid = keys.key_id(keys.load_public(public_path))
    except AssureError as exc:
        raise _fail(exc) from None
    if json_out:
        _print_json(
            {"private_key": str(private_path), "public_key": str(public_path), "key_id": kid}
        )
        return
    out.print(
        f"private key {render.display(str(private_path))} (mode 0600: keep it secret)",
        markup=False,
        highlight=False,
    )
    out.print(
        f"public key  {render.display(str(public_path))} (publish it: it verifies every receipt)",
        markup=False,
        highlight=False,
    )
    out.print(f"key id      {kid}", markup=False, highlight=False)


@receipts_app.command("verify")
def receipts_verify(
    run_ref: str = RUN_ARG,
    public_key: Path | None = typer.Option(
        None,
        "--public-key",
        metavar="FILE",
        help="Ed25519 public key (PEM); without it signatures are NOT-RUN.",
    ),
    runs_dir: Path = RUNS_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Verify RUN's receipts, seal and hash-chained logs with nothing but a public key
    (RUN may be an exported run's folder)."""
    from assure.records import keys
    from assure.records.receipt_format import STEPS, ReceiptError
    from assure.records.receipt_verify import Outcome, verify_run

    try:
        key = keys.load_public(public_key) if public_key is not None else None
        report = verify_run(runs_mod.locate(run_ref, runs_dir), key)
    except ReceiptError as exc:
        if json_out:
            _print_json(
                {
                    "verified": False,
                    "step": exc.step,
                    "step_name": STEPS[exc.step],
                    "path": exc.path,
                    "line": exc.line,
                    "message": exc.detail,
                }
            )
            raise typer.Exit(1) from None
        raise _fail(exc) from None
    except AssureError as exc:
        raise _fail(exc) from None
    if json_out:
        _print_json(report.to_json())
        raise typer.Exit(0)
    table = _whole("step", "check", "outcome", "detail")
    for step in report.steps:
        table.add_row(
            str(step.number),
            plain(step.name),
            (
                Text("passed", style="green")
                if step.outcome is Outcome.PASSED
                else Text("NOT-RUN", style="yellow")
            ),
            plain(step.detail),
        )
    _print_table(table)
    signer = (
        f"signed by {report.key_id}"
        if report.key_id
        else "signatures NOT-RUN (no public key given)"
    )
    out.print(
        plain(
            f"{report.run_id}: {len(report.receipts)} receipts, {len(report.logs)} logs verified;"
            f" {signer}",
            "green",
        )
    )
    raise typer.Exit(0)


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


conformance_app = typer.Typer(
    invoke_without_command=True,
    context_settings=HELP,
    help="Run suites/conformance/ live and write the signed packet; verify one.",
)
app.add_typer(conformance_app, name="conformance")


@conformance_app.callback()
def conformance_cmd(
    ctx: typer.Context,
    out_dir: Path = typer.Option(
        Path(".assure") / "conformance",
        "--out",
        metavar="DIR",
        help="Where the dated packet folder goes.",
    ),
    key: Path | None = typer.Option(
        None,
        "--key",
        metavar="FILE",
        envvar="ASSURE_SIGNING_KEY",
        help=(
            "Ed25519 private key (PEM) for the runs and the packet; none: a fresh one beside the"
            " packet."
        ),
    ),
    only: list[str] | None = typer.Option(
        None,
        "--only",
        metavar="ID",
        help=f"Run only these obligation ids (the rest are NOT-RUN): {', '.join(OBLIGATIONS)}.",
    ),
) -> None:
    """Run every row of the standard's live-evidence table on this machine (real containers)
    and write packet.json, packet.md and packet.pub.pem. Exit 0 only if every row is PASS."""
    if ctx.invoked_subcommand is not None:
        return
    from assure.ops import conformance

    try:
        conformance.check_only(only)
        _backend_and_images()
        paths = conformance.run(
            out_dir,
            key,
            only,
            progress=lambda r: out.print(
                plain(f"{r.status:8} {r.id} ({r.seconds} s) {r.reason}"), soft_wrap=True
            ),
        )
    except AssureError as exc:
        raise _fail(exc) from None
    for p in paths:
        out.print(plain(str(p)))
    doc = json.loads(paths[0].read_text())
    raise typer.Exit(0 if all(o["status"] == "PASS" for o in doc["obligations"].values()) else 1)


@conformance_app.command("verify")
def conformance_verify(
    packet: Path = typer.Argument(..., metavar="PACKET", help="The packet.json to check."),
    public_key: Path = typer.Option(
        ..., "--public-key", metavar="FILE", help="Ed25519 public key (PEM) of the packet's signer."
    ),
) -> None:
    """Check a packet offline: its shape, every obligation PASS, FAIL or NOT-RUN with a reason, its
    signature."""
    from assure.records import conformance_packet, keys

    try:
        doc = json.loads(packet.read_text(encoding="utf-8"))
        conformance_packet.verify(doc, keys.load_public(public_key))
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(
            AssureError(
                f"unreadable packet: {unreadable(exc)}",
                where=str(packet),
                fix="pass the packet.json `assure conformance` wrote",
            )
        ) from None
    except ValueError as exc:
        raise _fail(
            AssureError(
                f"unreadable packet: not JSON ({exc})",
                where=str(packet),
                fix="pass the packet.json `assure conformance` wrote",
            )
        ) from None
    except AssureError as exc:
        raise _fail(exc) from None
    counts = {
        s: sum(o["status"] == s for o in doc["obligations"].values())
        for s in ("PASS", "FAIL", "NOT-RUN")
    }
    out.print(
        plain(
            f"packet verified, signed by {doc['signature']['key_id']}: "
            + ", ".join(f"{n} {s}" for s, n in counts.items()),
            "green",
        )
    )


@report_app.command("merge")
def report_merge(
    summaries: list[Path] = typer.Argument(
        ...,
        metavar="SUMMARY",
        help=(
            "The summary JSON files of every shard of one suite (`assure suite --shard K/N"
            " --summary FILE`)."
        ),
    ),
    out_file: Path | None = typer.Option(
        None,
        "-o",
        "--out",
        metavar="FILE",
        help="Write the merged summary here (default: print it).",
    ),
    junit_file: Path | None = JUNIT_OPTION,
) -> None:
    """Join the summaries of the shards of one suite into one: counts recomputed, results in suite
    order. Refuses summaries of different suites, a missing or repeated shard, a file that does not
    validate. Exit 0 only if every spec got the verdict it expects."""
    try:
        _writable(out=out_file, junit=junit_file)
        merged = summary.merge([(str(p), _read_summary(p)) for p in summaries])
    except AssureError as exc:
        raise _fail(exc) from None
    if out_file is not None:
        _write_out(out_file, lambda: summary.write(out_file, merged))
    if junit_file is not None:
        _write_out(junit_file, lambda: junit.write(junit_file, junit.of_summary(merged)))
    if out_file is None:
        _print_json(merged)
    raise typer.Exit(0 if merged["as_expected"] else EXIT_UNEXPECTED)


def _read_summary(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AssureError(f"cannot read it: {exc.strerror or exc}", where=str(path)) from None
    except ValueError as exc:
        raise AssureError(
            f"not JSON: {exc}",
            where=str(path),
            fix="pass a summary written by `assure suite --summary FILE`",
        ) from None


bench_app = typer.Typer(
    no_args_is_help=True,
    context_settings=HELP,
    help="Compare the scorecards `make bench` writes (.assure/bench/scorecard*.json).",
)
app.add_typer(bench_app, name="bench")
EXIT_REGRESSION, EXIT_BAD_SCORECARD = 1, 2


@bench_app.command("compare")
def bench_compare(
    old: Path = typer.Argument(..., metavar="OLD", help="The earlier scorecard (the baseline)."),
    new: Path = typer.Argument(..., metavar="NEW", help="The later scorecard."),
) -> None:
    """Print metric / old / new / change / band / verdict; exit 1 if any metric of NEW is worse
    than OLD beyond its noise band (any escape or false positive is), 2 if a file is malformed
    or the two have different schema versions."""
    from assure.ops import scorecard

    try:
        rows = scorecard.compare_files(old, new)
    except AssureError as exc:
        err.print(
            "error:", _safe_lines(exc.explain()), style="bold red", markup=False, highlight=False
        )
        raise typer.Exit(EXIT_BAD_SCORECARD) from None
    table = Table("metric", "old", "new", "change", "band", "verdict", box=None)
    styles = {"regression": "bold red", "missing": "bold red", "better": "green", "ok": "green"}
    for r in rows:
        table.add_row(
            plain(r.metric),
            plain(scorecard.fmt(r.old)),
            plain(scorecard.fmt(r.new)),
            plain(r.change),
            plain(r.band),
            plain(r.verdict, styles.get(r.verdict, "")),
        )
    out.print(table)
    bad = scorecard.regressions(rows)
    if bad:
        err.print(
            plain(f"{len(bad)} regression(s): " + ", ".join(r.metric for r in bad), "bold red")
        )
        raise typer.Exit(EXIT_REGRESSION)
    out.print(plain("no regression beyond the noise bands", "green"))


def _help_as_text(group: typer.Typer, done: set[int]) -> None:
    """Make every help string of `group` and its subgroups plain text, once (`done`: an option
    object several commands share). Typer reads help as Rich markup, which ate `needs
    assure[ray]`, and keeps a docstring's line breaks in the command list, which broke lines
    mid-sentence: escape the brackets and join each paragraph's lines."""
    from rich.markup import escape
    from typer.models import DefaultPlaceholder, ParameterInfo

    def text(raw: str) -> str:
        return escape("\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(raw).split("\n\n")))

    infos = [
        *group.registered_commands,
        *([group.registered_callback] if group.registered_callback else []),
    ]
    for info in infos:
        if id(info) not in done and info.callback is not None:
            done.add(id(info))
            doc = info.help if isinstance(info.help, str) else inspect.getdoc(info.callback)
            if doc:
                info.help = text(doc)
            for param in inspect.signature(info.callback).parameters.values():
                if (
                    isinstance(param.default, ParameterInfo)
                    and param.default.help
                    and id(param.default) not in done
                ):
                    done.add(id(param.default))
                    param.default.help = text(param.default.help)
    if not isinstance(group.info.help, DefaultPlaceholder) and group.info.help:
        group.info.help = text(group.info.help)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _help_as_text(sub.typer_instance, done)


_help_as_text(app, set())


def main() -> None:  # pragma: no cover - console entry point
    app()


def _trust_report(ledger: Path, public_key: Path | None, runs: Path | None) -> dict[str, Any]:
    """The whole ledger replayed from its receipts (and the runs' receipts checked against it)."""
    from assure.records import keys, layout, trust

    key = keys.load_public(public_key or keys.default_key_dir() / keys.PUBLIC_NAME)
    found = []
    for path in sorted(runs.glob(f"*/{layout.RECEIPTS}/*.json")) if runs else ():
        if path.name != layout.SEAL and not path.is_symlink() and path.is_file():
            try:
                found.append(json.loads(path.read_bytes()))
            except (ValueError, OSError):
                continue  # not a receipt: `assure receipts verify` judges it
    return trust.verify_ledger(ledger, key, receipts=found)


def _level_name(n: int) -> str:
    from assure.core import gate

    return {v: k for k, v in gate.LEVELS.items()}.get(n, str(n))


@trust_app.command("show")
def trust_show(
    agent: str = typer.Argument(
        ...,
        metavar="AGENT",
        help="The agent's identity digest (a receipt's trust.agent), or its start.",
    ),
    scope: str | None = typer.Option(
        None, "--scope", metavar="SCOPE", help="Only this scope (CONTRACT-ID@HASH)."
    ),
    public_key: Path | None = TRUST_KEY_OPTION,
    runs_dir: Path = RUNS_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """AGENT's earned trust in each scope, why, and what would change it.

    Every rise and fall is listed with the receipts it counted."""
    from assure.records import layout, trust

    try:
        report = _trust_report(runs_dir / layout.TRUST / trust.LEDGER, public_key, runs_dir)
    except AssureError as exc:
        raise _fail(exc) from None
    wanted = agent.removeprefix("sha256:")
    shown = {
        k: lv
        for k, lv in report["levels"].items()
        if k.split(" ", 1)[0].removeprefix("sha256:").startswith(wanted)
        and scope in (None, k.split(" ", 1)[1])
    }
    events = [e for e in report["events"] if trust.key_of(e["agent"], e["scope"]) in shown]
    if json_out:
        _print_json({"levels": shown, "events": events})
        raise typer.Exit(0)
    if not shown:
        raise _fail(
            AssureError(
                f"the trust ledger has no history for agent {agent!r}"
                + (f" in scope {scope!r}" if scope else ""),
                fix=(
                    "a receipt's trust.agent names an agent; `assure trust verify LEDGER` lists"
                    " them"
                ),
            )
        )
    for k, lv in shown.items():
        name, where = k.split(" ", 1)
        out.print(plain(f"{name} in {where}: {_level_name(lv['level'])}", "bold"))
        out.print(plain(f"  why: {lv['why']}"))
        out.print(plain(f"  what would change it: {lv['next']}"))
        for e in (e for e in events if trust.key_of(e["agent"], e["scope"]) == k):
            out.print(
                plain(
                    f"  {e['time']} {_level_name(e['from'])} -> {_level_name(e['to'])}: {e['why']}"
                    f" ({len(e['receipts'])} receipt(s):"
                    f" {', '.join(r[:12] for r in e['receipts'])})"
                )
            )


@trust_app.command("verify")
def trust_verify(
    ledger: Path = typer.Argument(..., metavar="LEDGER", help="The trust ledger (ledger.jsonl)."),
    public_key: Path | None = TRUST_KEY_OPTION,
    runs_dir: Path = RUNS_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Recompute every level in LEDGER from its receipts alone, offline.

    Checks each entry's signature and place in the chain, each receipt's signature, time and
    pinned head, and the receipts under --runs-dir against it (a rolled-back ledger shows)."""
    try:
        report = _trust_report(ledger, public_key, runs_dir)
    except AssureError as exc:
        if json_out:
            _print_json({"verified": False, "message": exc.message})
            raise typer.Exit(1) from None
        raise _fail(exc) from None
    if json_out:
        _print_json(
            {"verified": True, **{k: report[k] for k in ("entries", "head", "levels", "events")}}
        )
        raise typer.Exit(0)
    table = _whole("agent", "scope", "level", "why")
    for k, lv in report["levels"].items():
        name, where = k.split(" ", 1)
        table.add_row(plain(name), plain(where), plain(_level_name(lv["level"])), plain(lv["why"]))
    _print_table(table)
    out.print(
        plain(
            f"{ledger}: {report['entries']} entries verified, {len(report['events'])} rises and"
            " falls",
            "green",
        )
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
