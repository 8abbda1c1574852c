"""How the command line prints: its two consoles, JSON on stdout, and tables and reports
printed whole (ids never cut, messages folded at words)."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any, cast

from assure.cli.lazy import Table, _Lazy, _lazy, render

if TYPE_CHECKING:
    from rich.console import Console

# no markup, emoji or highlighting: every str is printed as text; styles only through Text.
# Made on first use, with the width a console made at import reads (COLUMNS as the process
# started), not whatever COLUMNS says when something is first printed.
_COLUMNS = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else None
# each a Console once first used: typed as one, so mypy checks every call on it
out = cast("Console", _Lazy(lambda: render.console(width=_COLUMNS)))
err = cast("Console", _Lazy(lambda: render.console(stderr=True, width=_COLUMNS)))
plain = _lazy(
    "assure.records.report", "plain"
)  # the one way an agent-controlled value enters a rich renderable


def _print_json(data: Any) -> None:
    """JSON on stdout, ASCII only: a hostile name's controls, bidi marks and undecodable bytes
    (kept as surrogate escapes) come out as \\u escapes, never raw (rich's print_json would not)."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=True) + "\n")


def _safe_lines(text: str) -> str:
    return "\n".join(render.display(line) for line in text.split("\n"))


def _stamp() -> str:
    """The UTC second, for progress lines off a terminal (a CI log keeps them in order)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


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
