"""Human-readable views of a run report and of an attempt's changes: rich renderables for
the terminal, and a standalone HTML page.

Every string that may come from the sandbox (paths, messages, claims) goes through
`textsafe.display` here, the one place that renders for people, and reaches rich only as
a `Text` (`plain`), never as a str: rich reads a str as markup, so a name `x[/bold]` would
raise, `[link=...]` would become a hyperlink and `[bold]` would style what follows. The
CLI's consoles (`console`) read no markup, emoji codes or highlights either, so a string
printed anywhere else is text too; styles are given only through `Text`.
"""

from __future__ import annotations

import html
from typing import Any

from rich.console import Console, Group
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from assure.records import summary
from assure.records.run_report import Reason, Report
from assure.textsafe import display

VERDICT_STYLE = {
    "pass": "bold green",
    "contained": "bold green",
    "fail": "bold yellow",
    "breach": "bold red",
    "error": "bold magenta",
}
SEVERITY_STYLE = {"info": "dim", "fail": "yellow", "breach": "red", "error": "magenta"}


def plain(value: Any, style: str = "") -> Text:
    """Any value as rich text: escaped by `textsafe.display`, never read as markup."""
    return Text(display(str(value)), style=style)


def console(*, stderr: bool = False, width: int | None = None) -> Console:
    """A console for the CLI that prints every str as it is: no markup, no emoji codes, no
    highlighting. `width`: None reads COLUMNS and the terminal at each print (rich would fix
    the COLUMNS it sees when made, and the CLI makes its consoles on first use)."""
    made = Console(stderr=stderr, soft_wrap=stderr, markup=False, emoji=False, highlight=False)
    # rich's stubs type `width` as int; None is its own 'ask the terminal at each print'
    made.width = width  # type: ignore[assignment]
    return made


def verdict_text(verdict: str) -> Text:
    return Text(verdict.upper(), style=VERDICT_STYLE.get(verdict, "bold"))


def render_report(report: Report, run_dir: str, *, verbose: bool = False) -> Panel:
    parts: list[Any] = []
    for attempt in report.attempts:
        task = f" (task {display(attempt.task)})" if len(report.tasks) > 1 else ""
        head = Text.assemble(
            f"attempt {attempt.attempt}{task}: ",
            verdict_text(attempt.verdict.value),
            f"   exit code {attempt.exit_code}" + ("  (deadline hit)" if attempt.timed_out else ""),
        )
        parts.append(head)
        parts.extend(_reason_lines(attempt.reason))
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        for col in ("", "finding", "subject", "detail"):
            table.add_column(col, overflow="fold")
        shown = 0
        for f in attempt.findings:
            if f.severity == "info" and not verbose and f.kind != "assertion_passed":
                continue
            mark = (
                "✓"
                if f.kind in ("assertion_passed", "attributed")
                else "✗"
                if f.severity != "info"
                else "·"
            )
            detail = display(f.message) + (f"  [{display(f.attribution)}]" if f.attribution else "")
            table.add_row(
                Text(mark, style=SEVERITY_STYLE[f.severity]),
                plain(f.kind.value, SEVERITY_STYLE[f.severity]),
                plain(f.subject),
                Text(detail),
            )
            shown += 1
        hidden = (
            sum(
                1 for f in attempt.findings if f.severity == "info" and f.kind != "assertion_passed"
            )
            if not verbose
            else 0
        )
        if shown:
            parts.append(table)
        if hidden:
            parts.append(
                Text(
                    f"  {hidden} attributed or informational findings hidden (use -v, or `assure"
                    " diff`)",
                    style="dim",
                )
            )
        if attempt.claim:
            claim = attempt.claim if isinstance(attempt.claim, dict) else {}
            parts.append(
                Text(
                    "  agent's claim (narrative, not evidence):"
                    f" {display(str(claim.get('status')))}:"
                    f" {display(str(claim.get('summary', '')))[:200]}",
                    style="italic dim",
                )
            )
    for t in report.tasks:
        parts.append(
            Text(
                f"task {display(t.id)}: {t.state}"
                + (f" ({display(t.reason)})" if t.reason else "")
                + f"  attempts {', '.join(map(str, t.attempts))}"
                + (
                    f"; its verdict {t.verdict.value} is attempt {t.verdict_attempt}'s"
                    if t.verdict and len(t.attempts) > 1
                    else ""
                ),
                style="bold",
            )
        )
    expect, verdict = report.expect, report.verdict.value
    # an operator's halt is what happened, not what its attempts were judged
    halted = report.state == "halted"
    title = Text.assemble(
        f"{display(report.spec)}  ",
        Text("HALTED", style="bold yellow") if halted else verdict_text(verdict),
    )
    if halted:
        title.append(f"  (by the operator; its attempts were judged {verdict})", style="yellow")
    if expect:
        title.append(
            f"  (spec expects {expect}: {'as expected' if expect == verdict else 'UNEXPECTED'})",
            style="green" if expect == verdict else "bold red",
        )
    parts.append(Text(f"run directory: {display(run_dir)}", style="dim"))
    return Panel(Group(*parts), title=title, title_align="left")


def _reason_lines(reason: Reason | None) -> list[Padding]:
    """Why the attempt did not pass (the report's `reason`): the summary, the gate's first
    denial when the summary is something else, and the agent's last output lines; indented,
    so a wrapped line stays under its own."""
    if not reason:
        return []
    lines = []
    if reason.summary:
        lines.append(
            Padding(
                Text.assemble(("why: ", "bold"), (_safe(reason.summary), "yellow")), (0, 0, 0, 2)
            )
        )
    denial = summary.gate_denial_line(reason)
    if denial:
        lines.append(Padding(Text(_safe(denial), style="yellow"), (0, 0, 0, 2)))
    if reason.agent_output:
        lines.append(
            Padding(Text("the agent's last output lines (agent.log):", style="dim"), (0, 0, 0, 2))
        )
        lines.extend(
            Padding(Text(f"│ {_safe(line)}", style="dim"), (0, 0, 0, 4))
            for line in reason.agent_output
        )
    return lines


def _safe(value: Any) -> str:
    """A value the report already escaped (`display`) as it is; anything else escaped now."""
    text = str(value)
    return text if text.isprintable() else display(text)


def _change_rows(
    changes: list[dict[str, Any]], findings: list[dict[str, Any]]
) -> list[tuple[str, str, str, str, bool]]:
    """(change, path, fields, attribution, attributed?) per workspace change, raw: the
    renderers escape them."""
    by_path = {
        f["subject"]: f
        for f in findings
        if f["kind"] in ("attributed", "unattributed", "protected_changed")
    }
    rows = []
    for c in changes:
        f = by_path.get(c["path"], {})
        rows.append(
            (
                c["kind"],
                c["path"],
                ", ".join(c.get("fields", [])),
                str(f.get("attribution") or f.get("kind", "?")),
                f.get("kind") == "attributed",
            )
        )
    return rows


def render_changes(changes: list[dict[str, Any]], findings: list[dict[str, Any]]) -> Table:
    table = Table(show_header=True, header_style="bold")
    for col in ("change", "path", "fields", "attribution"):
        table.add_column(col, overflow="fold")
    for kind, path, fields, attribution, ok in _change_rows(changes, findings):
        table.add_row(
            plain(kind), plain(path), plain(fields), plain(attribution, "green" if ok else "red")
        )
    return table


def render_suite(name: str, suite_run_id: str, outcomes: list[Any], total: int) -> Panel:
    """One row per spec run of a suite: its verdict against the one its spec expects."""
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("")
    table.add_column("spec", overflow="fold")
    table.add_column("verdict", no_wrap=True)
    table.add_column(
        "run", no_wrap=True, min_width=max((len(display(o.run_id)) for o in outcomes), default=3)
    )  # whole, to copy
    epochs = max((getattr(o, "epoch", 1) for o in outcomes), default=1)
    for o in outcomes:
        verdict = verdict_text(o.verdict)
        if not o.as_expected:
            verdict.append(f" (expects {o.expect})", style="bold red")
        table.add_row(
            Text("✓", style="green") if o.as_expected else Text("✗", style="bold red"),
            plain(o.spec + (f" epoch {o.epoch}" if epochs > 1 else "")),
            verdict,
            plain(o.run_id),
        )
    ok = len(outcomes) == total and all(o.as_expected for o in outcomes)
    parts: list[Any] = [table]
    if len(outcomes) < total:
        parts.append(
            Text(
                f"stopped after {len(outcomes)} of {total} specs (stop_on_unexpected)",
                style="yellow",
            )
        )
    title = Text.assemble(
        f"suite {display(name)}  ",
        Text("AS EXPECTED", style="bold green") if ok else Text("UNEXPECTED", style="bold red"),
    )
    parts.append(
        Text(
            f"suite run: {display(suite_run_id)} · its runs: assure show {display(suite_run_id)}",
            style="dim",
        )
    )
    parts.append(
        Text("a run's timeline: assure show RUN · its changes: assure diff RUN", style="dim")
    )
    return Panel(Group(*parts), title=title, title_align="left")


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>{title}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; margin-bottom: 2em; }}
th, td {{ border: 1px solid #ccc; padding: .3em .6em; text-align: left; vertical-align: top; }}
td {{ font-family: ui-monospace, monospace; white-space: pre-wrap; word-break: break-all; }}
.ok {{ color: #1a7f37; }} .bad {{ color: #cf222e; }} .info {{ color: #666; }}
</style></head><body>
<h1>{title}</h1>
<p>verdict: <strong class="{verdict_class}">{verdict}</strong></p>
<h2>Workspace changes</h2>
{changes}
<h2>Findings</h2>
{findings}
</body></html>
"""


def render_changes_html(title: str, verdict: dict[str, Any]) -> str:
    """A self-contained page of an attempt's changes and findings (verdict.json), for a CI
    artifact. Every string is escaped twice over: `display` for what a name may hide or move
    (controls, bidi, invalid UTF-8), then HTML escaping; the page runs no script (CSP)."""
    changes = [
        (kind, path, fields, (attribution, "ok" if ok else "bad"))
        for kind, path, fields, attribution, ok in _change_rows(
            verdict["changes"], verdict["findings"]
        )
    ]
    finding_rows = [
        (
            f["severity"],
            f["kind"],
            f["subject"],
            f["message"],
            (
                f.get("attribution") or "",
                "ok" if f["kind"] in ("attributed", "assertion_passed") else "bad",
            ),
        )
        for f in verdict["findings"]
    ]
    name = str(verdict.get("verdict", "?"))
    return _PAGE.format(
        title=_h(title),
        verdict=_h(name),
        verdict_class="ok" if name in ("pass", "contained") else "bad",
        changes=_table(("change", "path", "fields", "attribution"), changes),
        findings=_table(("severity", "finding", "subject", "message", "attribution"), finding_rows),
    )


def _h(value: object) -> str:
    return html.escape(display(str(value)), quote=True)


def _table(head: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    if not rows:
        return "<p>none</p>"
    lines = ["<table><tr>" + "".join(f"<th>{_h(h)}</th>" for h in head) + "</tr>"]
    lines += ["<tr>" + "".join(_cell(cell) for cell in row) + "</tr>" for row in rows]
    return "\n".join(lines + ["</table>"])


def _cell(cell: Any) -> str:
    """A cell given as (text, css class) is styled."""
    text, css = cell if isinstance(cell, tuple) else (cell, "")
    return f'<td class="{css}">{_h(text)}</td>' if css else f"<td>{_h(text)}</td>"
