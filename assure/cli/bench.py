"""`assure bench`: compare two scorecards."""

from __future__ import annotations

from pathlib import Path

import typer

from assure.cli.common import (
    HELP,
)
from assure.cli.lazy import (
    Table,
)
from assure.cli.output import (
    _safe_lines,
    err,
    out,
    plain,
)
from assure.errors import AssureError

bench_app = typer.Typer(
    no_args_is_help=True,
    context_settings=HELP,
    help="Compare the scorecards `make bench` writes (.assure/bench/scorecard*.json).",
)


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
