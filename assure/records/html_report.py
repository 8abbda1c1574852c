"""A self-contained HTML page of a run, or of a suite run, for a security reviewer.

The page needs nothing but itself: inline CSS, inline SVG charts, no script, no image, no
link off the page but a suite page's to its runs' pages (`<run id>.html`, written beside it),
and a Content-Security-Policy that forbids the rest anyway. It shows the
verdict and the findings behind it, each attempt's changes with their content diffs (read
from the run's `base/` and the attempt's `workspace/`, trusted only where their hash is the
snapshot's), each attribution linked to its journal line, the denied calls, the agent's claim
beside the evidence, and the spec's writable and protected scopes.

The agent chose every name, byte, claim and journal argument shown here. Each one reaches the
page only through `_h`: `textsafe.display` (controls, bidi, invalid UTF-8 made visible), a cap,
then `html.escape(quote=True)`. None ever lands in an `id`, `href`, `class` or `style`: those
are constants, or anchors derived from a hash (`_anchor`). Every read is confined and bounded.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import html
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assure.core import confined
from assure.core.chain import ChainError, iter_chain
from assure.errors import AssureError, RunDirError
from assure.records import conversation, layout, store, summary
from assure.records.layout import AttemptPaths, RunPaths, SuitePaths
from assure.records.run_report import AttemptEntry, Reason, Report
from assure.records.states import shown_verdict
from assure.textsafe import display

MAX_FILE_BYTES = (
    256 * 2**10
)  # of each side of one file read to diff it; a bigger file is shown by size and hash
MAX_FILE_DIFF_LINES = 400  # diff lines shown per file
# lines of both sides together that are diffed (difflib is superlinear on repetitive text)
MAX_DIFF_INPUT_LINES = 4_000
MAX_PAGE_DIFF_LINES = 5_000  # diff lines shown per page; past it, files are named, not diffed
MAX_JOURNAL_ROWS = 2_000  # journal lines shown per attempt
MAX_CHARS = 2_000  # characters of any one value shown (after `display`)
MAX_ROWS = 1_000  # rows of any one table (findings, denied calls, suite specs)
MAX_CHANGES = 300  # changes shown in detail per attempt; the rest are in the findings table

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
VERDICTS = ("pass", "contained", "fail", "breach", "error")
_GOOD = {"pass", "contained"}
_COLOR = {
    "pass": "#1a7f37",
    "contained": "#0969da",
    "fail": "#bf8700",
    "breach": "#cf222e",
    "error": "#8250df",
    "not_run": "#6e7781",
}
_DENIED = {"deny", "escalate"}


@dataclass(frozen=True)
class Page:
    """A rendered page, what it is a page of (`id`), and the folders it was read from (no
    page is ever written into them: a run directory is sealed)."""

    id: str
    html: str
    sources: tuple[Path, ...]
    linked: tuple[Path, ...] = ()  # the run directories whose pages it links, as `<run id>.html`


def page_name(run_dir: Path) -> str | None:
    """The file a run's page is written to beside a suite page that links it (its run id is
    the only part of the name: RUN_ID's characters), None for a folder that is no run id."""
    return f"{run_dir.name}.html" if store.RUN_ID.match(run_dir.name) else None


def render(ref: str, runs_dir: Path) -> Page:
    """The page of a run or a suite run, given by id (under `runs_dir` or its suites folder)
    or by directory, or of a suite summary file."""
    path = Path(ref)
    if not path.exists():
        if not store.RUN_ID.match(ref):
            raise AssureError(
                f"{ref!r} is not a run id, a suite run id or a directory",
                fix="`assure runs` lists runs",
            )
        path = next(
            (p for p in (runs_dir / ref, layout.suites_base(runs_dir) / ref) if p.is_dir()), path
        )
    if path.is_file():
        return summary_page(path)
    if RunPaths(path).spec_json.is_file():
        return run_page(store.RunDir.open(path))
    if SuitePaths(path).state.is_file():
        return suite_page(path, runs_dir)
    raise AssureError(
        f"{ref!r} is neither a run nor a suite run",
        where=str(path),
        fix="pass a folder under .assure/runs/ or .assure/suites/",
    )


# ---- the run page ----


def run_page(run: store.RunDir) -> Page:
    report = Report.read(run.paths.report) if run.paths.report.is_file() else None
    spec = run.spec_json()
    budget = _Budget(MAX_PAGE_DIFF_LINES)
    judged = shown_verdict(report.state, report.verdict.value) if report else None
    verdict = str(judged or "unfinished")
    body = [
        _verdict_banner(
            f"run {run.run_id}", str(spec.get("name", "?")), verdict, spec.get("expect"), report
        )
    ]
    attempts = [_Attempt.load(run, p) for p in run.attempts()]
    body.append(_why(attempts, report))
    body.append(_scopes(spec))
    body.append(
        "<nav><h2>Attempts</h2><ul>"
        + "".join(
            f'<li><a href="#{_anchor("attempt", a.n)}">attempt {a.n}</a>:'
            f" {_verdict_word(a.verdict)}</li>"
            for a in attempts
        )
        + "</ul></nav>"
        if attempts
        else "<p>The run has no attempts.</p>"
    )
    body += [a.section(run, spec, budget) for a in attempts]
    return Page(run.run_id, _document(f"assure run {run.run_id}", "\n".join(body)), (run.path,))


@dataclass
class _Attempt:
    n: int
    paths: AttemptPaths
    verdict: str
    data: dict[str, Any]  # verdict.json, or {} if the attempt was never judged
    journal: list[dict[str, Any]]
    journal_note: str | None  # why the journal shown is incomplete
    exchange: conversation.Conversation  # the model calls, from the journal and blobs

    @classmethod
    def load(cls, run: store.RunDir, folder: Path) -> _Attempt:
        paths = AttemptPaths(folder)
        try:
            data = store.read_json(paths.verdict)
        except RunDirError:
            data = {}
        journal, note = _journal(paths)
        return cls(
            paths.number,
            paths,
            str(data.get("verdict", "not judged")),
            data,
            journal,
            note,
            conversation.read(paths),
        )

    def row_id(self, record: dict[str, Any]) -> str:
        return _anchor("journal", self.n, record.get("seq"))

    def section(self, run: store.RunDir, spec: dict[str, Any], budget: _Budget) -> str:
        findings = self.data.get("findings", [])
        changes = self.data.get("changes", [])
        by_path = {f.get("subject"): f for f in findings if f.get("kind") in _CHANGE_KINDS}
        calls = {
            str(r.get("action_id")): r
            for r in self.journal
            if r.get("event") == "tool_call" and r.get("action_id") is not None
        }
        parts = [
            f'<section id="{_anchor("attempt", self.n)}"><h2>Attempt {self.n}:'
            f" {_verdict_word(self.verdict)}</h2>"
        ]
        if not self.data:
            parts.append(
                '<p class="bad">Not judged: no verdict.json (the attempt was interrupted, or its'
                " record is damaged).</p>"
            )
        parts.append(self._claim_and_evidence(findings, changes))
        parts.append(
            f"<h3>Changed files ({len(changes)}: protected first, then unexplained, then the"
            " rest)</h3>"
        )
        if not changes:
            parts.append("<p>No change in the workspace.</p>")
        ordered = self.ordered_changes
        for change in ordered[:MAX_CHANGES]:
            parts.append(
                self._change(run, change, by_path.get(change.get("path")), calls, spec, budget)
            )
        if len(ordered) > MAX_CHANGES:
            left: dict[str, int] = {}
            for change in ordered[MAX_CHANGES:]:
                kind = by_path.get(change.get("path"), {}).get("kind")
                group = _CHANGE_GROUPS[_change_rank(kind)]
                left[group] = left.get(group, 0) + 1
            each = ", ".join(f"{left[g]} {g}" for g in _CHANGE_GROUPS if g in left)
            parts.append(
                f'<p class="note">{len(ordered) - MAX_CHANGES} more changed paths are not shown in'
                f" detail (at most {MAX_CHANGES}): {each}; the findings below name them, and"
                " <code>assure diff RUN_DIR</code> lists them all.</p>"
            )
        parts.append(self._denied())
        parts.append(self._exchange())
        parts.append("<h3>Findings</h3>" + _findings_table(findings))
        parts.append(self._journal_table())
        return "\n".join(parts + ["</section>"])

    @functools.cached_property
    def ordered_changes(self) -> list[dict[str, Any]]:
        """The changes as the page lists them: protected first, then unexplained, then attributed
        (each group by path), so that a breach is never among the changes left out."""
        by_path = {
            f.get("subject"): f
            for f in self.data.get("findings", [])
            if f.get("kind") in _CHANGE_KINDS
        }
        return sorted(
            self.data.get("changes", []),
            key=lambda c: _change_rank(by_path.get(c.get("path"), {}).get("kind")),
        )

    @functools.cached_property
    def detailed(self) -> frozenset[str]:
        """The paths whose change the page shows in detail (a finding's subject links to it)."""
        return frozenset(str(c.get("path")) for c in self.ordered_changes[:MAX_CHANGES])

    def _claim_and_evidence(
        self, findings: list[dict[str, Any]], changes: list[dict[str, Any]]
    ) -> str:
        claim = self.data.get("claim")
        if isinstance(claim, dict):
            said = (
                f"<p>status: <strong>{_h(claim.get('status'))}</strong></p><p"
                f' class="quote">{_h(claim.get("summary", ""))}</p>'
            )
        else:
            said = "<p>The agent made no claim (no task.report call).</p>"
        counts: dict[str, int] = {}
        for f in findings:
            counts[str(f.get("kind"))] = counts.get(str(f.get("kind")), 0) + 1
        facts = [
            f"verdict: {_verdict_word(self.verdict)}",
            f"{len(changes)} changed paths",
            f"{len([r for r in self.journal if _is_denied(r)])} denied or rejected calls",
        ]
        facts += [f"{_h(kind)}: {n}" for kind, n in sorted(counts.items())]
        return (
            '<h3>The agent\'s claim beside the evidence</h3><table class="claim"><tr><th>claim'
            " (narrative, not evidence)</th><th>evidence (snapshots, journal,"
            f' checks)</th></tr><tr><td class="text">{said}</td><td class="text"><ul>'
            + "".join(f"<li>{x}</li>" for x in facts)
            + "</ul></td></tr></table>"
        )

    def _change(
        self,
        run: store.RunDir,
        change: dict[str, Any],
        finding: dict[str, Any] | None,
        calls: dict[str, dict[str, Any]],
        spec: dict[str, Any],
        budget: _Budget,
    ) -> str:
        path = str(change.get("path"))
        before, after = change.get("before"), change.get("after")
        kind = str(finding.get("kind")) if finding else "not attributed"
        css = "explained" if kind == "attributed" else "flagged"
        head = (
            f'<div class="change {css}" id="{_anchor("change", self.n, path)}"><h4><span'
            f' class="tag">{_h(change.get("kind"))}</span> <code>{_h(path)}</code>'
            f"{' <span class=tag>' + _h(', '.join(change.get('fields', []))) + '</span>' if change.get('fields') else ''}</h4>"  # noqa: E501 -- an f-string's expression (splittable only from Python 3.12)
        )
        meta = ['<table class="meta"><tr><th></th><th>before (PRE)</th><th>after (POST)</th></tr>']
        for label, key in (
            ("type", "kind"),
            ("mode", "mode"),
            ("owner", "uid"),
            ("size", "size"),
            ("sha256", "sha256"),
            ("target", "target"),
            ("note", "note"),
        ):
            if key in ("sha256", "target", "note") and not any(
                entry and entry.get(key) for entry in (before, after)
            ):
                continue
            values = [_entry_field(entry, key) for entry in (before, after)]
            changed = ' class="changed"' if values[0] != values[1] and before and after else ""
            meta.append(
                f"<tr{changed}><th>{label}</th><td>{values[0]}</td><td>{values[1]}</td></tr>"
            )
        meta.append("</table>")
        return (
            head
            + f"<p>attribution: {self._attribution(path, finding, calls, spec)}</p>"
            + "".join(meta)
            + self._content(run, path, before, after, budget)
            + "</div>"
        )

    def _attribution(
        self,
        path: str,
        finding: dict[str, Any] | None,
        calls: dict[str, dict[str, Any]],
        spec: dict[str, Any],
    ) -> str:
        if finding is None:
            return '<span class="bad">no attribution finding</span>'
        why = str(finding.get("attribution") or "")
        message = _h(finding.get("message"))
        if why.startswith("gateway:"):
            record = calls.get(why[len("gateway:") :])
            if record is None:
                return f'<span class="bad">{message}: its journal line is missing</span>'
            return (
                f'<span class="ok">{message}</span>: <a href="#{self.row_id(record)}">journal line'
                f" {_h(record.get('seq'))}</a> "
                f"({_h(record.get('tool'))} at {_h(record.get('ts'))},"
                f" {_h(record.get('decision'))})"
            )
        if why.startswith("writable:"):
            return (
                f'<span class="ok">{message}</span>: <a'
                f' href="#{_anchor("scope", "writable", why[len("writable:") :])}">writable scope'
                f" {_h(why[len('writable:') :])}</a>"
            )
        near = [r for r in self.journal if r.get("event") == "tool_call" and r.get("path") == path]
        links = ", ".join(
            f'<a href="#{self.row_id(r)}">line {_h(r.get("seq"))} ({_h(r.get("tool"))},'
            f" {_h(r.get('decision'))})</a>"
            for r in near[:20]
        )
        return f'<span class="bad">{_h(finding.get("kind"))}: {message}</span>' + (
            f"; journal lines on this path: {links}"
            if links
            else "; no journal line touches this path"
        )

    def _content(
        self,
        run: store.RunDir,
        path: str,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        budget: _Budget,
    ) -> str:
        sides = [
            (before, run.paths.base, "base/"),
            (after, self.paths.workspace, "the attempt's workspace/"),
        ]
        if not any(entry and entry.get("kind") == "file" for entry, _, _ in sides):
            return ""  # a folder, a link, a device: its metadata above is all there is
        if budget.spent:
            return (
                f'<p class="note">Content not shown: the page already shows {MAX_PAGE_DIFF_LINES}'
                " diff lines.</p>"
            )
        texts: list[list[str]] = []
        for entry, root, where in sides:
            content = _side(root, path, entry, where)
            if isinstance(content, str):  # why it cannot be shown
                return f'<p class="note">{_h(content)}</p>'
            if content is None:
                texts.append([])
                continue
            if b"\0" in content:
                return f'<p class="note">Binary content: {_sizes(before, after)}</p>'
            try:
                texts.append(content.decode("utf-8").splitlines())
            except UnicodeDecodeError:
                return f'<p class="note">Binary content (not UTF-8): {_sizes(before, after)}</p>'
        if len(texts[0]) + len(texts[1]) > MAX_DIFF_INPUT_LINES:
            return (
                f'<p class="note">Not diffed: {len(texts[0])} and {len(texts[1])} lines, above the'
                f" {MAX_DIFF_INPUT_LINES} diffed per file; {_sizes(before, after)}</p>"
            )
        lines = list(
            difflib.unified_diff(
                texts[0], texts[1], "a/" + display(path), "b/" + display(path), lineterm="", n=3
            )
        )
        if not lines:
            return '<p class="note">The content is the same.</p>'
        shown = lines[: min(MAX_FILE_DIFF_LINES, budget.left)]
        budget.take(len(shown))
        cut = len(lines) - len(shown)
        tail = (
            f'<p class="note">{cut} more diff lines not shown (at most {MAX_FILE_DIFF_LINES} per'
            f" file, {MAX_PAGE_DIFF_LINES} per page).</p>"
            if cut
            else ""
        )
        return '<pre class="diff">' + "".join(_diff_line(line) for line in shown) + "</pre>" + tail

    def _denied(self) -> str:
        rows = [r for r in self.journal if _is_denied(r)]
        head = f"<h3>Denied and rejected calls ({len(rows)})</h3>"
        if not rows:
            return head + "<p>The gateway denied or rejected no call.</p>"
        return head + _table(
            ("journal", "time", "tool", "path", "decision", "rule", "reason"),
            [
                (
                    f'<a href="#{self.row_id(r)}">line {_h(r.get("seq"))}</a>',
                    f'<span class="time">{_h(r.get("ts"))}</span>',
                    _h(r.get("tool")),
                    _h(r.get("path") or r.get("endpoint")),
                    f'<span class="bad">{_h(r.get("decision") or r.get("event"))}</span>',
                    _h(r.get("rule") or r.get("code")),
                    _h(r.get("reason") or r.get("error")),
                )
                for r in rows
            ],
        )

    def _exchange(self) -> str:
        """Each model call: the journal's facts (status, tokens, cost), a refusal and why, then
        what the agent sent that its previous call had not and what came back; long texts folded."""
        conv = self.exchange
        head = f"<h3>Model exchange ({len(conv.exchanges)} calls)</h3>" + "".join(
            f'<p class="note">{_h(n)}</p>' for n in conv.notes
        )
        if not conv.exchanges:
            return head + "<p>No model calls.</p>"
        parts = [head]
        for i, x in enumerate(conv.exchanges, 1):
            parts.append(
                f'<div class="call{" flagged" if x.refusal else ""}"><h4><a'
                f' href="#{self.row_id({"seq": x.seq})}">#{i}</a> '
                f"{_h(conversation.headline(i, x).split(' · ', 1)[-1], displayed=True)}</h4>"
            )
            if x.refusal:
                parts.append(f'<p class="bad">refused: {_h(x.refusal)}</p>')
            if x.differs:
                parts.append(
                    "<p>differs from the recording at: "
                    + ", ".join(f"<code>{_h(d)}</code>" for d in x.differs)
                    + "</p>"
                )
            if x.system is not None:
                parts.append(_part("system", x.system, fold=True))
            if x.tools and (i == 1 or x.system is not None):
                parts.append(
                    "<p>tools offered: "
                    + ", ".join(f"<code>{_h(t)}</code>" for t in x.tools)
                    + "</p>"
                )
            if x.earlier:
                parts.append(
                    f'<p class="note">{x.earlier} message(s) as in the call before, not'
                    " repeated.</p>"
                )
            for message in x.messages:
                parts.append(_message_html(message))
            if x.response is not None:
                parts.append(
                    '<div class="answer">' + _message_html(x.response, "answer: ") + "</div>"
                )
            parts += [f'<p class="note">{_h(n)}</p>' for n in x.notes]
            parts.append("</div>")
        if conv.chars_cut:
            parts.append(
                f'<p class="note">{conv.chars_cut} characters of this exchange are over the read'
                " bounds and not shown.</p>"
            )
        return "".join(parts)

    def _journal_table(self) -> str:
        head = f"<h3>Gateway journal ({len(self.journal)} lines shown)</h3>"
        note = f'<p class="note">{_h(self.journal_note)}</p>' if self.journal_note else ""
        if not self.journal:
            return head + note + "<p>No journal lines.</p>"
        rows = []
        for r in self.journal:
            decision = r.get("decision")
            css = "bad" if _is_denied(r) else ""
            rows.append(
                f'<tr id="{self.row_id(r)}" class="{css}"><td>{_h(r.get("seq"))}</td><td'
                f' class="time">{_h(r.get("ts"))}</td><td>{_h(r.get("event"))}</td>'
                f"<td>{_h(r.get('tool'))}</td><td>{_h(r.get('path') or r.get('endpoint'))}</td><td>{_h(decision)}</td>"  # noqa: E501 -- an f-string's expression (splittable only from Python 3.12)
                f"<td>{_h(r.get('rule'))}</td><td>{_h(r.get('reason') or r.get('error'))}</td></tr>"
            )
        return (
            head + note + "<table"
            ' class="journal"><tr><th>line</th><th>time</th><th>event</th><th>tool</th><th>path</th>'  # noqa: E501 -- an f-string's expression (splittable only from Python 3.12)
            "<th>decision</th><th>rule</th><th>reason</th></tr>" + "".join(rows) + "</table>"
        )


_CHANGE_KINDS = (
    "protected_changed",
    "unattributed",
    "attributed",
)  # the findings that judge a workspace change
_CHANGE_GROUPS = ("protected", "unexplained", "attributed")  # in the order the page lists them


def _change_rank(kind: str | None) -> int:
    """A change's group, by its finding's kind: protected, unexplained (unattributed, or no
    finding at all), attributed."""
    return 0 if kind == "protected_changed" else 2 if kind == "attributed" else 1


def detailed(changes: list[str], findings: Iterable[tuple[str, str]]) -> list[str]:
    """The changed paths a page shows in detail (`ordered_changes`, the first MAX_CHANGES),
    given the (subject, kind) of each finding: what run/attempt.py copies out for it."""
    kinds = {subject: kind for subject, kind in findings if kind in _CHANGE_KINDS}
    return sorted(changes, key=lambda p: _change_rank(kinds.get(p)))[:MAX_CHANGES]


FOLD_CHARS = (
    600  # a text longer than this (or of more than FOLD_LINES lines) is folded in <details>
)
FOLD_LINES = 8


def _message_html(message: conversation.Message, prefix: str = "") -> str:
    out = "".join(_part(f"{prefix}{message.role}", part) for part in message.parts)
    return out + (
        f'<p class="note">{message.parts_cut} more parts not read.</p>' if message.parts_cut else ""
    )


def _part(role: str, part: conversation.Part, fold: bool = False) -> str:
    """One text the agent or model wrote: each line made visible (`display`), escaped, in a
    <pre>; folded when long (or `fold`), its cut said."""
    tag = (
        f'<span class="tag">{_h(role)}'
        f" {_h(part.kind)}{' ' + _h(part.label) if part.label else ''}</span>"
    )
    body = "\n".join(html.escape(display(line), quote=True) for line in part.text.split("\n"))
    cut = (
        f'<p class="note">{part.cut} more characters not shown (over the read bounds).</p>'
        if part.cut
        else ""
    )
    size = len(part.text) + part.cut
    if fold or size > FOLD_CHARS or part.text.count("\n") >= FOLD_LINES:
        first = display(part.text.split("\n", 1)[0])[:120]
        return (
            f"<details><summary>{tag} {html.escape(first, quote=True)} … ({size}"
            f' characters)</summary><pre class="msg">{body}</pre>{cut}</details>'
        )
    return f'<div>{tag}<pre class="msg">{body}</pre>{cut}</div>'


def _journal(paths: AttemptPaths) -> tuple[list[dict[str, Any]], str | None]:
    """The journal's verified lines, at most MAX_JOURNAL_ROWS; a break ends it, and is said."""
    if not paths.journal.is_file():
        return [], "no journal: the gateway never started, or its journal is gone"
    rows: list[dict[str, Any]] = []
    try:
        for record in iter_chain(paths.journal):
            if len(rows) == MAX_JOURNAL_ROWS:
                return rows, f"only the first {MAX_JOURNAL_ROWS} lines are shown"
            rows.append(record)
    except (ChainError, OSError, UnicodeDecodeError) as exc:
        return rows, f"the journal's hash chain breaks here, so nothing after it is shown: {exc}"
    return rows, None


def _side(root: Path, path: str, entry: dict[str, Any] | None, where: str) -> bytes | str | None:
    """One side's content (None: no file on that side), or why it cannot be shown. Content
    is trusted only if its hash is the snapshot's."""
    if entry is None or entry.get("kind") != "file":
        return None
    if not entry.get("sha256"):
        return (
            "Not shown: the snapshot did not hash this file"
            f" ({display(str(entry.get('note') or 'no hash'))})."
        )
    try:
        content = confined.read_file(root, path, MAX_FILE_BYTES)
    except confined.TooLarge:
        return (
            f"Not shown: larger than {MAX_FILE_BYTES} bytes; the sizes and hashes above are the"
            " evidence."
        )
    except OSError:
        return f"Not shown: {where} no longer holds this file as a plain file."
    if hashlib.sha256(content).hexdigest() != entry["sha256"]:
        return (
            f"Not shown: {where} no longer holds the content the snapshot hashed (a later task was"
            " committed, or it was edited); the hashes above are the evidence."
        )
    return content


def _diff_line(line: str) -> str:
    css = (
        "hunk"
        if line.startswith("@@")
        else (
            "file"
            if line.startswith(("---", "+++"))
            else "add"
            if line.startswith("+")
            else "del"
            if line.startswith("-")
            else "ctx"
        )
    )
    return f'<span class="{css}">{_h(line) or " "}</span>'


def _sizes(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    return "; ".join(
        f"{label} {_h(e.get('size'))} bytes, sha256 {_h(e.get('sha256'))}"
        for label, e in (("before", before), ("after", after))
        if e
    )


def _entry_field(entry: dict[str, Any] | None, key: str) -> str:
    if entry is None:
        return '<span class="dim">absent</span>'
    value = entry.get(key)
    if key == "mode" and isinstance(value, int):
        return f"{value:04o}"
    if key == "uid":
        return f"{_h(entry.get('uid'))}:{_h(entry.get('gid'))}"
    return "" if value is None else _h(value)


def _is_denied(record: dict[str, Any]) -> bool:
    """A call the gate denied (or escalated), or a request refused before the gate (a path escape, a
    bad argument)."""
    event = record.get("event")
    return event == "request_rejected" or (
        event in ("tool_call", "model_call") and record.get("decision") in _DENIED
    )


class _Budget:
    """Diff lines the page may still show."""

    def __init__(self, lines: int):
        self.left = lines

    @property
    def spent(self) -> bool:
        return self.left <= 0

    def take(self, n: int) -> None:
        self.left -= n


def _verdict_banner(
    title: str, spec_name: str, verdict: str, expect: Any, report: Report | None
) -> str:
    as_expected = expect == verdict
    expectation = (
        f' <span class="{"ok" if as_expected else "bad"}">(the spec expects {_h(expect)}:'
        f" {'as expected' if as_expected else 'UNEXPECTED'})</span>"
        if expect
        else ""
    )
    tasks = "".join(
        f"<li>task <code>{_h(t.id)}</code>:"
        f" {_h(t.state)}{' (' + _h(t.reason) + ')' if t.reason else ''}"
        + (
            f"; its verdict {_verdict_word(t.verdict.value)} is attempt {_h(t.verdict_attempt)}'s"
            if t.verdict
            else ""
        )
        + "</li>"
        for t in (report.tasks if report else ())
    )
    return (
        f"<header><h1>{_h(title)}</h1><p>spec <code>{_h(spec_name)}</code></p>"
        '<p class="verdict'
        f' {_verdict_class(verdict)}">{_h(verdict.upper())}</p><p>{expectation}</p>'
        + (f"<ul>{tasks}</ul>" if tasks else "")
        + "</header>"
    )


def _why(attempts: list[_Attempt], report: Report | None) -> str:
    causes = "".join(_cause(a, a.reason) for a in (report.attempts if report else ()) if a.reason)
    rows = [
        (
            f'<a href="#{_anchor("attempt", a.n)}">{a.n}</a>',
            f'<span class="bad">{_h(f.get("severity"))}</span>',
            _h(f.get("kind")),
            _subject(a, f),
            _h(f.get("message")),
        )
        for a in attempts
        for f in a.data.get("findings", [])
        if f.get("severity") != "info"
    ]
    head = "<section><h2>Why: the findings that decide the verdict</h2>" + causes
    if not rows:
        return (
            head + "<p>No finding above info: every change is attributed and every assertion"
            " held.</p></section>"
        )
    return (
        head + _table(("attempt", "severity", "finding", "subject", "detail"), rows) + "</section>"
    )


def _cause(attempt: AttemptEntry, reason: Reason) -> str:
    """What the box says under `why:` (the report's `reason`, run/reasons.py): the likeliest
    cause, the gate's first denial when the cause is something else, the agent's last lines."""
    parts = [
        f'<p class="bad">attempt {_h(attempt.attempt)}, why (as its box says):'
        f" {_h(reason.summary or 'no cause found in the records', displayed=True)}</p>"
    ]
    denial = summary.gate_denial_line(reason)
    if denial:
        parts.append(f"<p>{_h(denial, displayed=True)}</p>")
    if reason.agent_output:
        parts.append(
            "<p>the agent's last output lines (agent.log):</p><pre>"
            + "\n".join(_h(line, displayed=True) for line in reason.agent_output)
            + "</pre>"
        )
    return "".join(parts)


def _subject(attempt: _Attempt, finding: dict[str, Any]) -> str:
    """A finding's subject, linked to its change when it names a changed path."""
    subject = finding.get("subject")
    text = f"<code>{_h(subject)}</code>"
    if isinstance(subject, str) and subject in attempt.detailed:
        return f'<a href="#{_anchor("change", attempt.n, subject)}">{text}</a>'
    return text


def _scopes(spec: dict[str, Any]) -> str:
    workspace = spec.get("workspace") or {}
    parts = [
        '<section><h2>The spec\'s scopes</h2><table class="scopes"><tr><th>writable (direct edits'
        " allowed)</th><th>protected (any change is a breach)</th></tr><tr>"
    ]
    for name in ("writable", "protected"):
        globs = [str(g) for g in workspace.get(name) or []]
        items = "".join(
            f'<li id="{_anchor("scope", name, g)}"><code>{_h(g)}</code></li>' for g in globs
        )
        parts.append(f"<td><ul>{items}</ul></td>" if globs else "<td>none</td>")
    parts.append("</tr></table>")
    contract = spec.get("contract") or {}
    if contract.get("scope"):
        parts.append(
            "<p>contract scope (what gateway calls may touch): "
            + ", ".join(f"<code>{_h(s)}</code>" for s in contract["scope"])
            + "; ratified by"
            f" {_h(contract.get('ratified_by') or 'nobody (unratified: the gate denies every mutation)')},"  # noqa: E501 -- an f-string's expression (splittable only from Python 3.12)
            f" proposed by {_h(contract.get('proposed_by'))}</p>"
        )
    return "".join(parts) + "</section>"


def _findings_table(findings: list[dict[str, Any]]) -> str:
    if not findings:
        return "<p>No findings.</p>"
    return _table(
        ("severity", "finding", "subject", "message", "attribution"),
        [
            (
                (
                    "<span"
                    f' class="{"dim" if f.get("severity") == "info" else "bad"}">{_h(f.get("severity"))}</span>'  # noqa: E501 -- an f-string's expression (splittable only from Python 3.12)
                ),
                _h(f.get("kind")),
                f"<code>{_h(f.get('subject'))}</code>",
                _h(f.get("message")),
                _h(f.get("attribution") or ""),
            )
            for f in findings
        ],
    )


# ---- the suite page ----


@dataclass(frozen=True)
class _SuiteRow:
    spec: str
    run_id: str | None
    verdict: str | None
    expect: str | None
    seconds: float | None
    reason: str
    run_dir: Path | None = None  # linked to its page when it is a run's folder
    epoch: int = 1

    @property
    def as_expected(self) -> bool:
        return self.verdict is not None and self.verdict == self.expect


def suite_page(folder: Path, runs_dir: Path) -> Page:
    state = store.read_json(SuitePaths(folder).state)
    if not isinstance(state, dict) or not isinstance(state.get("runs"), list):
        raise RunDirError("not a suite run's state (no runs)", where=str(SuitePaths(folder).state))
    runs = layout.suite_runs_dir(folder, runs_dir)
    rows = [_suite_row(entry, runs) for entry in state["runs"] if isinstance(entry, dict)]
    head = f"suite run <code>{_h(folder.name)}</code>, from <code>{_h(state.get('source'))}</code>"
    sources = (folder, *(runs / r.run_id for r in rows if r.run_id))
    return Page(
        folder.name,
        _suite_document(str(state.get("suite", "?")), head, state, rows),
        sources,
        _linked(rows),
    )


def _linked(rows: list[_SuiteRow]) -> tuple[Path, ...]:
    return tuple(dict.fromkeys(r.run_dir for r in rows if r.run_dir is not None))


def summary_page(path: Path) -> Page:
    """The suite page of a suite summary (`assure suite --summary`, or `assure report merge`'s
    merged one: INTERFACES.md, schema_version 1), from the summary alone."""
    data = store.read_json(path)
    if (
        not isinstance(data, dict)
        or data.get("kind") != "suite"
        or data.get("schema_version") != 1
        or not isinstance(data.get("results"), list)
    ):
        raise AssureError(
            "not a suite summary (kind suite, schema_version 1)",
            where=str(path),
            fix="pass `assure suite --summary`'s file, a run or a suite run",
        )
    rows = [_summary_row(r) for r in data["results"] if isinstance(r, dict)]
    shard, merged = data.get("shard"), data.get("merged_from")
    if isinstance(merged, list):  # `assure report merge`: no suite run of its own, one per shard
        runs = ", ".join(
            f"shard {_h(m.get('index'))} (<code>{_h(m.get('suite_run_id'))}</code>)"
            for m in merged
            if isinstance(m, dict)
        )
        head = f"merged from {runs}, from <code>{_h(data.get('source'))}</code>"
    else:
        head = (
            f"suite run <code>{_h(data.get('suite_run_id'))}</code>, from"
            f" <code>{_h(data.get('source'))}</code>"
            + (
                f", shard {_h(shard.get('index'))} of {_h(shard.get('count'))}"
                if isinstance(shard, dict)
                else ""
            )
        )
    head += f"; summary <code>{_h(path.name)}</code>"
    sources = tuple(
        Path(r["run_dir"])
        for r in data["results"]
        if isinstance(r, dict) and isinstance(r.get("run_dir"), str)
    )
    name = str(data.get("suite_run_id") or path.stem)
    return Page(
        name if store.RUN_ID.match(name) else path.stem,
        _suite_document(str(data.get("suite", "?")), head, data, rows),
        sources,
        _linked(rows),
    )


def _summary_row(result: dict[str, Any]) -> _SuiteRow:
    seconds = result.get("duration_seconds")
    bad = [f for f in result.get("findings") or [] if isinstance(f, dict)]
    reason = result.get("reason") or "; ".join(
        f"{f.get('kind')}: {f.get('subject')}" for f in bad[:2]
    )
    run_dir = Path(result["run_dir"]) if isinstance(result.get("run_dir"), str) else None
    return _SuiteRow(
        str(result.get("spec", "?")),
        result.get("run_id") if isinstance(result.get("run_id"), str) else None,
        result.get("verdict"),
        result.get("expect"),
        float(seconds) if isinstance(seconds, (int, float)) else None,
        str(reason or ""),
        run_dir if run_dir is not None and page_name(run_dir) and run_dir.is_dir() else None,
        result["epoch"] if isinstance(result.get("epoch"), int) else 1,
    )


def _suite_state(state: dict[str, Any]) -> str:
    """A suite run's state, or a summary's (which has none of its own: finished once it has an
    end)."""
    if "state" in state:
        return str(state["state"])
    return "finished" if state.get("finished_at") else "unfinished"


def _suite_document(suite: str, head: str, state: dict[str, Any], rows: list[_SuiteRow]) -> str:
    counts = {v: sum(1 for r in rows if r.verdict == v) for v in VERDICTS}
    counts["not_run"] = sum(1 for r in rows if r.verdict not in VERDICTS)
    ok = bool(rows) and all(r.as_expected for r in rows)
    title = f"suite {suite}"
    body = [
        f"<header><h1>{_h(title)}</h1><p>{head}</p>"
        f'<p class="verdict {"ok" if ok else "bad"}">{"AS EXPECTED" if ok else "UNEXPECTED"}</p>'
        f"<p>{sum(r.as_expected for r in rows)} of {len(rows)} specs as expected; state"
        f" {_h(_suite_state(state))}, "
        f"started {_h(state.get('started_at'))}, finished {_h(state.get('finished_at') or '-')}</p>"
        f"{_metrics_line(rows)}</header>"
    ]
    body.append(
        '<section class="charts"><figure><figcaption>Outcomes (specs per verdict)</figcaption>'
        + _outcome_chart(counts)
        + "</figure><figure><figcaption>Duration per spec (seconds)</figcaption>"
        + _duration_chart(rows)
        + "</figure></section>"
    )
    epochs = max((r.epoch for r in rows), default=1)
    table = [
        (
            (
                "<span"
                f' class="{"ok" if r.as_expected else "bad"}">{"✓" if r.as_expected else "✗"}</span>'  # noqa: E501 -- an f-string's expression (splittable only from Python 3.12)
            ),
            f"<code>{_h(r.spec)}</code>" + (f" epoch {r.epoch}" if epochs > 1 else ""),
            _verdict_word(r.verdict or "not run"),
            _h(r.expect or "?"),
            _h("-" if r.seconds is None else f"{r.seconds:.1f}"),
            _run_cell(r),
            _h(r.reason),
        )
        for r in rows
    ]
    body.append(
        "<section><h2>Specs</h2>"
        + _table(
            (
                "",
                "spec",
                "verdict",
                "expected",
                "seconds",
                "run",
                "why (findings above info, else each task's outcome)",
            ),
            table,
        )
        + '<p class="note">Each run id links its run\'s page, which <code>assure report html</code>'
        " writes beside this one.</p></section>"
    )
    return _document(f"assure {title}", "\n".join(body))


def _metrics_line(rows: list[_SuiteRow]) -> str:
    """The pass rate with its standard error and pass@k (`summary.metrics`), from the rows."""
    places = {name: n for n, name in enumerate(dict.fromkeys(r.spec for r in rows), 1)}
    results = [
        {
            "position": places[r.spec],
            "epoch": r.epoch,
            "spec": r.spec,
            "verdict": r.verdict,
            "as_expected": r.as_expected,
        }
        for r in rows
    ]
    m = summary.metrics(results, max((r.epoch for r in rows), default=1))
    if m["pass_rate"] is None:
        return ""
    error = f" ± {m['pass_rate_stderr']:.2f}" if m["pass_rate_stderr"] is not None else ""
    at_k = ", ".join(f"pass@{k} {v:.2f}" for k, v in m["pass_at_k"].items() if v is not None)
    return (
        f"<p>pass rate {m['pass_rate']:.2f}{error} (standard error) over {m['samples']} samples "
        f"and {m['runs']} runs; {at_k}</p>"
    )


def _run_cell(row: _SuiteRow) -> str:
    """The run's id, a link to its page (written beside this one) when it has a folder."""
    code = f"<code>{_h(row.run_id or '-')}</code>"
    name = page_name(row.run_dir) if row.run_dir is not None else None
    return f'<a href="{html.escape(name, quote=True)}">{code}</a>' if name else code


def _suite_row(entry: dict[str, Any], runs: Path) -> _SuiteRow:
    run_id = (
        entry.get("run_id")
        if isinstance(entry.get("run_id"), str) and store.RUN_ID.match(entry["run_id"])
        else None
    )
    spec_name, expect, reason, seconds = Path(str(entry.get("spec", "?"))).stem, None, "", None
    run_dir = None
    state: dict[str, Any] = {}
    if run_id is not None:
        run = RunPaths(runs / run_id)
        run_dir = run.root if run.root.is_dir() else None
        try:
            spec = store.read_json(run.spec_json)
            spec_name, expect = str(spec.get("name", spec_name)), spec.get("expect")
            state = store.read_json(run.state) if run.state.is_file() else {}
            seconds = summary.seconds_between(
                entry.get("started_at") or state.get("started_at"),
                entry.get("finished_at") or state.get("finished_at"),
            )
            reason = _reason(Report.read(run.report) if run.report.is_file() else None)
        except RunDirError as exc:
            reason = f"its run directory cannot be read: {exc.message} ({exc.where})"
    placed = summary.placement(entry)  # a cluster suite's: where it ran, what was lost
    if placed is not None:
        reason = "; ".join([*summary.placement_lines(placed), *([reason] if reason else [])])
    verdict = shown_verdict(
        state.get("state") if run_id is not None else None, entry.get("verdict")
    )
    epoch = entry["epoch"] if isinstance(entry.get("epoch"), int) else 1
    return _SuiteRow(spec_name, run_id, verdict, expect, seconds, reason, run_dir, epoch)


def _reason(report: Report | None) -> str:
    """One line: the standing attempt's reason (as the summary and the box say it), else its
    first findings above info, else what became of each task."""
    why = summary.attempt_reason(report)
    if why or report is None:
        return why or ""
    stands = summary.standing_attempts(report)
    bad = [f for f in (stands[0].findings if stands else ()) if f.severity != "info"]
    if bad:
        more = f" (+{len(bad) - 2} more)" if len(bad) > 2 else ""
        return "; ".join(f"{f.kind.value}: {f.subject}" for f in bad[:2]) + more
    return "; ".join(
        f"task {t.id}: {t.state}" + (f" ({t.reason})" if t.reason else "") for t in report.tasks
    )


def _outcome_chart(counts: dict[str, int]) -> str:
    """Vertical bars, one per verdict (and not run), each labelled with its count."""
    keys = [*VERDICTS, "not_run"]
    top = max([1, *counts.values()])
    width, height, bar, gap, base = 420, 200, 50, 18, 170
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0'
        f' {width} {height}" role="img" aria-label="outcomes">'
    ]
    for i, key in enumerate(keys):
        x = 12 + i * (bar + gap)
        h = round(140 * counts.get(key, 0) / top)
        parts.append(
            f'<rect x="{x}" y="{base - h}" width="{bar}" height="{h}"'
            f' fill="{_COLOR[key]}"><title>{key}: {counts.get(key, 0)}</title></rect>'
        )
        parts.append(
            f'<text x="{x + bar / 2}" y="{base - h - 5}" text-anchor="middle"'
            f' class="count">{counts.get(key, 0)}</text>'
        )
        parts.append(
            f'<text x="{x + bar / 2}" y="{base + 16}"'
            f' text-anchor="middle">{key.replace("_", " ")}</text>'
        )
    parts.append(f'<line x1="6" y1="{base}" x2="{width - 6}" y2="{base}" stroke="#888"/></svg>')
    return "".join(parts)


def _duration_chart(rows: list[_SuiteRow]) -> str:
    """Horizontal bars, one per spec, coloured by verdict, each labelled with its seconds."""
    timed = [
        r for r in rows if r.seconds is not None and math.isfinite(r.seconds) and r.seconds >= 0
    ]  # a summary file's NaN is no bar
    if not timed:
        return "<p>No durations recorded.</p>"
    top = max(r.seconds or 0 for r in timed) or 1.0
    names = [display(r.spec) for r in timed]
    label_w, bar_w, row_h = 12 + 7 * min(32, max(len(n) for n in names)), 300, 22
    height = row_h * len(timed) + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 70}" height="{height}"'
        f' viewBox="0 0 {label_w + bar_w + 70} {height}" role="img" aria-label="durations">'
    ]
    for i, (r, name) in enumerate(zip(timed, names, strict=False)):
        y = 5 + i * row_h
        w = max(1, math.ceil(bar_w * (r.seconds or 0) / top))
        short = name if len(name) <= 32 else name[:31] + "…"
        color = _COLOR.get(r.verdict or "not_run", "#6e7781")
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 15}"'
            f' text-anchor="end">{html.escape(short, quote=True)}<title>{html.escape(name, quote=True)}</title></text>'  # noqa: E501 -- an f-string's expression (splittable only from Python 3.12)
        )
        parts.append(
            f'<rect x="{label_w}" y="{y + 3}" width="{w}" height="{row_h - 6}" fill="{color}"/>'
        )
        parts.append(f'<text x="{label_w + w + 5}" y="{y + 15}">{r.seconds:.1f}</text>')
    return "".join(parts) + "</svg>"


# ---- shared ----


def _h(value: object, *, displayed: bool = False) -> str:
    """Any value as HTML text: made visible by `display`, capped, escaped (quotes too).
    `displayed`: text the records already escaped (run/reasons.py) stays as it is if printable,
    as the box shows it (escaping it again would double its backslashes)."""
    text = "" if value is None else str(value)
    text = text if displayed and text.isprintable() else display(text)
    if len(text) > MAX_CHARS:
        text = text[:MAX_CHARS] + f"… ({len(text) - MAX_CHARS} more characters not shown)"
    return html.escape(text, quote=True)


def _anchor(kind: str, *parts: object) -> str:
    """An element id derived from a hash: no agent-chosen character ever reaches an attribute."""
    digest = hashlib.sha256(
        "\0".join(display(str(p)) for p in parts).encode("utf-8", "surrogatepass")
    ).hexdigest()[:16]
    return f"{kind}-{digest}"


def _verdict_class(verdict: str) -> str:
    return "ok" if verdict in _GOOD else "bad" if verdict in VERDICTS else "dim"


def _verdict_word(verdict: str) -> str:
    return f'<strong class="{_verdict_class(verdict)}">{_h(verdict)}</strong>'


def _table(head: Iterable[str], rows: Sequence[tuple[str, ...]]) -> str:
    """Cells are HTML already (escaped by `_h` where they hold data); at most MAX_ROWS rows."""
    lines = ["<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    lines += [
        "<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows[:MAX_ROWS]
    ]
    more = (
        f'<p class="note">{len(rows) - MAX_ROWS} more rows not shown (at most {MAX_ROWS} per'
        " table).</p>"
        if len(rows) > MAX_ROWS
        else ""
    )
    return "".join(lines) + "</table>" + more


_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em 2em; color: #1f2328; max-width: 1200px; }
h1 { margin: 0 0 .2em; font-size: 1.6em; } h2 { border-bottom: 1px solid #d0d7de; padding-bottom: .2em; margin-top: 1.6em; }
h4 { margin: .2em 0 .4em; font-weight: 600; }
code, pre, td { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 13px; }
td { overflow-wrap: break-word; } code { overflow-wrap: anywhere; } .time { white-space: nowrap; }
table { border-collapse: collapse; margin: .4em 0 1em; }
th, td { border: 1px solid #d0d7de; padding: .25em .55em; text-align: left; vertical-align: top; }
th { background: #f6f8fa; font-family: system-ui, sans-serif; }
td.text { font-family: system-ui, sans-serif; width: 50%; }
table.claim, table.scopes { width: 100%; table-layout: fixed; }
.verdict { display: inline-block; font-size: 1.5em; font-weight: 700; padding: .15em .7em; border-radius: 6px; margin: .3em 0; }
.verdict.ok { background: #1a7f37; color: #fff; } .verdict.bad { background: #cf222e; color: #fff; } .verdict.dim { background: #6e7781; color: #fff; }
.ok { color: #1a7f37; } .bad { color: #cf222e; } .dim { color: #6e7781; }
tr.bad td { background: #ffebe9; } tr.changed td { background: #fff8c5; }
.quote { white-space: pre-wrap; overflow-wrap: anywhere; border-left: 3px solid #d0d7de; padding-left: .6em; font-style: italic; }
.change { border: 1px solid #d0d7de; border-left: 5px solid #1a7f37; border-radius: 4px; padding: .4em .8em; margin: .8em 0; }
.change.flagged { border-left-color: #cf222e; background: #fffafa; }
.tag { font-size: 12px; font-weight: 600; background: #eaeef2; border-radius: 3px; padding: 0 .4em; font-family: system-ui, sans-serif; }
pre.diff { background: #f6f8fa; border: 1px solid #d0d7de; padding: .4em 0; overflow-x: auto; white-space: pre; }
pre.diff span { display: block; padding: 0 .6em; }
.add { background: #dafbe1; } .del { background: #ffebe9; } .hunk { color: #0550ae; background: #ddf4ff; } .file { color: #57606a; font-weight: 600; }
.note { color: #57606a; font-style: italic; }
.charts { display: flex; flex-wrap: wrap; gap: 2em; }
figure { margin: 0; } figcaption { font-weight: 600; margin-bottom: .3em; }
svg text { font: 12px system-ui, sans-serif; fill: #1f2328; } svg text.count { font-weight: 700; }
.call { border: 1px solid #d0d7de; border-left: 5px solid #0969da; border-radius: 4px; padding: .4em .8em; margin: .8em 0; }
.call.flagged { border-left-color: #cf222e; background: #fffafa; } .answer { border-left: 3px solid #1a7f37; padding-left: .5em; }
pre.msg { white-space: pre-wrap; overflow-wrap: anywhere; background: #f6f8fa; border: 1px solid #d0d7de; padding: .3em .5em; margin: .2em 0 .5em; }
details > summary { cursor: pointer; } details { margin: .2em 0; }
:target { outline: 3px solid #0969da; }
"""  # noqa: E501 -- a multi-line text whose lines are its content


def _document(title: str, body: str) -> str:
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="referrer"'
        f' content="no-referrer">\n<title>{_h(title)}</title>\n<style>{_STYLE}</style></head>\n'
        f"<body>\n{body}\n</body></html>\n"
    )
