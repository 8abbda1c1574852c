"""`assure bench`: compare two scorecards."""

from __future__ import annotations

from pathlib import Path

import typer

from assure.cli.lazy import (
    Table,
)
from assure.cli.output import (
    _safe_lines,
    err,
    out,
    plain,
)
from assure.cli.root import HELP
from assure.errors import AssureError

bench_app = typer.Typer(
    no_args_is_help=True,
    context_settings=HELP,
    help="Compare the scorecards `make bench` writes (.assure/bench/scorecard*.json).",
)


EXIT_REGRESSION, EXIT_BAD_SCORECARD = 1, 2


@bench_app.command("compare")
def bench_compare(
    old: Path | None = typer.Argument(
        None,
        metavar="OLD",
        help="The earlier scorecard (the baseline); default: the last one in --dir measured on a"
        " clean checkout of a commit on main, older than NEW.",
    ),
    new: Path | None = typer.Argument(
        None, metavar="NEW", help="The later scorecard; default: the newest one in --dir."
    ),
    directory: Path = typer.Option(
        Path(".assure") / "bench",
        "--dir",
        metavar="DIR",
        help="Where `make bench` wrote its scorecards (scorecard-<UTC stamp>.json).",
    ),
) -> None:
    """Print metric / old / new / change / band / verdict; exit 1 if any metric of NEW is worse
    than OLD beyond its noise band (any escape or false positive is), 2 if a file is malformed,
    the two have different schema versions, or a default cannot be found. With no arguments:
    the newest scorecard against the last one on main (git, from the current directory)."""
    from assure.ops import scorecard

    try:
        if new is None:
            found = scorecard.stamped(directory)
            if not found:
                raise scorecard.ScorecardError(
                    "no scorecard to compare",
                    where=str(directory),
                    fix="run `make bench`, or name OLD and NEW",
                )
            new = found[-1]
        if old is None:
            old = scorecard.last_on_main(directory, Path.cwd(), before=new)
            if old is None:
                raise scorecard.ScorecardError(
                    f"no scorecard older than {new.name} was measured on a commit on main",
                    where=str(directory),
                    fix="run `make bench` on a clean checkout of main first, or name OLD",
                )
            out.print(plain(f"OLD {old}"), soft_wrap=True)
            out.print(plain(f"NEW {new}"), soft_wrap=True)
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
