"""Human-readable views of a run report and of an attempt's changes (rich renderables).

Every string that may come from the sandbox (paths, messages, claims) goes through
`textsafe.display` here, the one place that renders for a terminal.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .textsafe import display

VERDICT_STYLE = {"pass": "bold green", "contained": "bold green", "fail": "bold yellow", "breach": "bold red", "error": "bold magenta"}
SEVERITY_STYLE = {"info": "dim", "fail": "yellow", "breach": "red", "error": "magenta"}


def verdict_text(verdict: str) -> Text:
    return Text(verdict.upper(), style=VERDICT_STYLE.get(verdict, "bold"))


def render_report(report: dict[str, Any], run_dir: str, *, verbose: bool = False) -> Panel:
    parts: list[Any] = []
    for attempt in report["attempts"]:
        task = f" (task {display(attempt['task'])})" if len(report.get("tasks", [])) > 1 else ""
        head = Text.assemble(f"attempt {attempt['attempt']}{task}: ", verdict_text(attempt["verdict"]),
                             f"   exit code {attempt['exit_code']}" + ("  (deadline hit)" if attempt.get("timed_out") else ""))
        parts.append(head)
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        for col in ("", "finding", "subject", "detail"):
            table.add_column(col, overflow="fold")
        shown = 0
        for f in attempt["findings"]:
            if f["severity"] == "info" and not verbose and f["kind"] != "assertion_passed":
                continue
            mark = "✓" if f["kind"] in ("assertion_passed", "attributed") else "✗" if f["severity"] != "info" else "·"
            detail = display(f["message"]) + (f"  [{display(f['attribution'])}]" if f.get("attribution") else "")
            table.add_row(Text(mark, style=SEVERITY_STYLE[f["severity"]]), Text(f["kind"], style=SEVERITY_STYLE[f["severity"]]),
                          Text(display(f["subject"])), Text(detail))
            shown += 1
        hidden = sum(1 for f in attempt["findings"] if f["severity"] == "info" and f["kind"] != "assertion_passed") if not verbose else 0
        if shown:
            parts.append(table)
        if hidden:
            parts.append(Text(f"  {hidden} attributed or informational findings hidden (use -v, or `assure diff`)", style="dim"))
        if attempt.get("claim"):
            claim = attempt["claim"]
            parts.append(Text(f"  agent's claim (narrative, not evidence): {display(str(claim.get('status')))}: {display(str(claim.get('summary', '')))[:200]}", style="italic dim"))
    for task in report.get("tasks", []):
        parts.append(Text(f"task {display(task['id'])}: {task['state']}" + (f" ({display(str(task['reason']))})" if task.get("reason") else "")
                          + f"  attempts {', '.join(map(str, task['attempts']))}", style="bold"))
    expect = report.get("expect")
    title = Text.assemble(f"{display(report['spec'])}  ", verdict_text(report["verdict"]))
    if expect:
        title.append(f"  (spec expects {expect}: {'as expected' if expect == report['verdict'] else 'UNEXPECTED'})",
                     style="green" if expect == report["verdict"] else "bold red")
    parts.append(Text(f"run directory: {display(run_dir)}", style="dim"))
    return Panel(Group(*parts), title=title, title_align="left")


def render_changes(changes: list[dict[str, Any]], findings: list[dict[str, Any]]) -> Table:
    by_path = {f["subject"]: f for f in findings if f["kind"] in ("attributed", "unattributed", "protected_changed")}
    table = Table(show_header=True, header_style="bold")
    for col in ("change", "path", "fields", "attribution"):
        table.add_column(col, overflow="fold")
    for c in changes:
        f = by_path.get(c["path"], {})
        attribution = f.get("attribution") or f.get("kind", "?")
        style = "green" if f.get("kind") == "attributed" else "red"
        table.add_row(c["kind"], display(c["path"]), ", ".join(c.get("fields", [])), Text(display(str(attribution)), style=style))
    return table
