"""`assure report`: HTML pages of runs and suite runs, and the shards' summaries merged."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from assure.cli.common import (
    EXIT_UNEXPECTED,
    JUNIT_OPTION,
    _fail,
    _writable,
    _write_out,
    runs_option,
)
from assure.cli.lazy import (
    junit,
    layout,
    render,
    runs_mod,
    store,
    summary,
)
from assure.cli.output import (
    _print_json,
    err,
    plain,
)
from assure.cli.root import HELP
from assure.errors import AssureError

report_app = typer.Typer(
    no_args_is_help=True,
    context_settings=HELP,
    help="Reports of runs and suite runs, for people and for CI.",
)


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
