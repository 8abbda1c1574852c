"""The HTML report (`assure report html`) of runs made on the in-memory backend: hostile names,
contents and claims come out as text, never as markup; links stay on the page; diffs are
bounded and shown only where the content is the one the snapshot hashed."""

from __future__ import annotations

import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from assure.cli import app
from assure.client import GatewayError
from assure.errors import AssureError
from assure.records import html_report, layout, store
from assure.run import suite as suite_mod
from assure.sandbox.fake import Context
from tests.unit.test_driver_states import (
    ACCEPTANCE,
    FIXED,
    drive,
    gateway,
    new_run,
    ratified,
    write_spec,
)

SCRIPT_NAME = (  # a folder `<script>alert(1)<`, a file `script>.txt`
    "out/<script>alert(1)</script>.txt"
)
QUOTE_NAME = 'out/x" onmouseover="y'
BIDI_NAME = "out/\u202etxt.exe"
BYTES_NAME = b"out/\xff\x1b[31m.txt"
BREAKOUT = "</pre><img src=x onerror=alert(1)>"
CLAIM = "all tests pass </p><script>alert(2)</script>"


def hostile(ctx: Context) -> int:
    """Fixes add() through the gateway, is denied a protected write, claims success, then
    leaves hostile names and contents in its writable scope and changes a mode behind the gateway.
    """
    with gateway(ctx) as client:
        client.call("fs.write", path="src/calc.py", content=FIXED)
        with pytest.raises(GatewayError):
            client.call("fs.write", path="tests/test_calc.py", content="print('ok')\n")
        with pytest.raises(GatewayError):
            client.call("fs.read", path="../<b>etc/passwd")  # refused before the gate
        client.call("task.report", status="done", summary=CLAIM)
    ws = ctx.path("/workspace")
    (ws / SCRIPT_NAME).parent.mkdir(parents=True)
    (ws / SCRIPT_NAME).write_text(BREAKOUT + "\n")
    (ws / QUOTE_NAME).write_text('" onclick="x\n')
    (ws / BIDI_NAME).write_text("bidi\n")
    with open(os.fsencode(ws) + b"/" + BYTES_NAME, "wb") as fh:
        fh.write(b"\x00\x01\xfe binary")
    (ws / "out" / "long.txt").write_text("".join(f"line {i}\n" for i in range(1000)))
    (ws / "out" / "big.txt").write_text("x" * (html_report.MAX_FILE_BYTES + 1))
    os.chmod(ws / "src" / "calc.py", 0o755)
    return 0


def fixer(ctx: Context) -> int:
    with gateway(ctx) as client:
        client.call("fs.write", path="src/calc.py", content=FIXED)
    return 0


def idle(ctx: Context) -> int:
    return 0


class Parsed(HTMLParser):
    """What a browser would build: tags, attributes, ids, and the text of each element kind."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str, str]] = []  # (tag, name, value)
        self.text: list[str] = []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += [(tag, name, value or "") for name, value in attrs]

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def values(self, name: str) -> list[str]:
        return [v for _, n, v in self.attrs if n == name]


def assert_inert(page: str, pages: frozenset[str] = frozenset()) -> Parsed:
    """Nothing on the page can run or reach anything: no script, no handler, no link off the
    page but to the run `pages` written beside it, no agent-chosen id; the CSP forbids the rest."""
    parsed = Parsed(page)
    beside = [h for h in parsed.values("href") if not h.startswith("#")]
    assert set(beside) <= pages and all(re.fullmatch(r"[A-Za-z0-9._-]+\.html", h) for h in beside)
    anchors = [h for h in parsed.values("href") if h.startswith("#")]
    assert not set(parsed.tags) & {
        "script",
        "img",
        "iframe",
        "object",
        "embed",
        "link",
        "form",
        "base",
        "meta refresh",
    }
    assert not [a for a in parsed.attrs if a[1].startswith("on")]
    assert {n for _, n, _ in parsed.attrs} <= {
        "lang",
        "charset",
        "http-equiv",
        "content",
        "name",
        "id",
        "class",
        "href",
        "xmlns",
        "width",
        "height",
        "viewbox",
        "role",
        "aria-label",
        "x",
        "y",
        "x1",
        "y1",
        "x2",
        "y2",
        "fill",
        "stroke",
        "text-anchor",
    }
    assert all(re.fullmatch(r"#[a-z]+-[0-9a-f]{16}", href) for href in anchors)
    ids = parsed.values("id")
    assert all(re.fullmatch(r"[a-z]+-[0-9a-f]{16}", i) for i in ids) and len(ids) == len(set(ids))
    assert set(h[1:] for h in anchors) <= set(ids)  # every link on the page lands on it
    assert all(re.fullmatch(r"[a-z ]*", c) for c in parsed.values("class"))
    assert (
        "meta",
        "content",
        html_report.CSP,
    ) in parsed.attrs and "default-src 'none'" in html_report.CSP
    assert (
        "url(" not in page
        and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
        and "https://" not in page
    )
    assert not re.search(
        "[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]", page
    )
    return parsed


@pytest.fixture
def short_tmp(short_dir: Path) -> str:
    """The fake's folder (the gateway's socket is in it): conftest's short path."""
    return str(short_dir)


@pytest.fixture
def hostile_run(tmp_path: Path, short_tmp: str) -> store.RunDir:
    spec = write_spec(tmp_path, "hostile", contract=ratified(["fs:**"]), assertions=ACCEPTANCE)
    run = new_run(tmp_path, spec)
    result, _ = drive(spec, run, short_tmp, {"hostile": hostile})
    assert result.verdict == "breach"
    return run


def test_a_hostile_run_renders_as_inert_text(hostile_run: store.RunDir) -> None:
    page = html_report.run_page(hostile_run).html
    parsed = assert_inert(page)
    text = "".join(parsed.text)
    for name in (SCRIPT_NAME, QUOTE_NAME, "out/\\u202etxt.exe", "out/\\xff\\x1b[31m.txt"):
        assert name in text
    assert "+" + BREAKOUT in parsed.text  # the added line, as one diff line of text
    assert CLAIM in text and "BREACH" in text and "UNEXPECTED" in text
    assert "-    return a - b" in parsed.text and "+    return a + b" in parsed.text
    assert "Binary content (not UTF-8)" in text or "Binary content:" in text


def test_attributions_link_to_their_journal_line_and_scope(hostile_run: store.RunDir) -> None:
    page = html_report.run_page(hostile_run).html
    assert_inert(page)
    journal = list(html_report._journal(hostile_run.paths.attempt(1))[0])
    write = next(
        r for r in journal if r.get("event") == "tool_call" and r.get("path") == "src/calc.py"
    )
    denied = next(r for r in journal if r.get("decision") == "deny")
    row = html_report._anchor("journal", 1, write["seq"])
    assert (
        f'<tr id="{row}"' in page and f'href="#{row}">line {write["seq"]} (fs.write, allow)' in page
    )  # calc.py: unattributed, its write linked
    assert (
        f'href="#{html_report._anchor("scope", "writable", "out/**")}">writable scope out/**'
        in page
    )
    denied_row = html_report._anchor("journal", 1, denied["seq"])
    assert f'<a href="#{denied_row}">line {denied["seq"]}</a>' in page and "protected_path" in page
    assert "Denied and rejected calls (2)" in page and "../&lt;b&gt;etc/passwd" in page


def test_modes_and_hashes_are_shown_and_diffs_are_bounded(hostile_run: store.RunDir) -> None:
    page = html_report.run_page(hostile_run).html
    assert "<th>mode</th><td>0644</td><td>0755</td>" in page
    assert f"larger than {html_report.MAX_FILE_BYTES} bytes" in page
    assert f"more diff lines not shown (at most {html_report.MAX_FILE_DIFF_LINES} per file" in page
    assert page.count('<span class="add">') <= html_report.MAX_PAGE_DIFF_LINES


def test_old_content_is_shown_only_if_it_is_what_the_snapshot_hashed(
    hostile_run: store.RunDir,
) -> None:
    (hostile_run.paths.base / "src" / "calc.py").write_text(
        "something else\n"
    )  # as a later committed task would
    page = html_report.run_page(hostile_run).html
    assert "base/ no longer holds the content the snapshot hashed" in page
    assert "-    return a - b" not in page


def test_a_broken_journal_is_said_and_not_shown_past_the_break(hostile_run: store.RunDir) -> None:
    journal = hostile_run.paths.attempt(1).journal
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text(
        "".join(lines[:2]) + lines[2].replace('"fs.write"', '"fs.read"') + "".join(lines[3:])
    )
    page = html_report.run_page(hostile_run).html
    assert "hash chain breaks here" in page and "Gateway journal (2 lines shown)" in page
    assert_inert(page)


def test_a_suite_page_charts_outcomes_and_durations(tmp_path: Path, short_tmp: str) -> None:
    runs_dir, folder = suite_run(tmp_path, short_tmp)
    page = html_report.render(folder.name, runs_dir)
    parsed = assert_inert(page.html, frozenset(f"{p.name}.html" for p in page.linked))
    assert parsed.tags.count("svg") == 2 and parsed.tags.count("rect") == 6 + 2
    text = "".join(parsed.text)
    assert "UNEXPECTED" in text and "1 of 2 specs as expected" in text
    assert "suite demo <b>" in text and "b" not in parsed.tags
    assert "fake-fixer" in text and "fake-idle" in text and "assertion_failed" in text
    bars = re.findall(r'<rect x="\d+" y="(\d+)" width="50" height="(\d+)"', page.html)
    assert [int(h) for _, h in bars] == [140, 0, 140, 0, 0, 0]  # pass 1, contained 0, fail 1, ...
    assert set(page.sources) >= {folder} and len(page.sources) == 3
    ids = [e["run_id"] for e in store.read_json(folder / layout.STATE)["runs"]]
    assert page.linked == tuple(runs_dir / i for i in ids)
    assert [h for h in parsed.values("href") if not h.startswith("#")] == [f"{i}.html" for i in ids]


def test_the_command_writes_a_suite_page_and_its_runs_pages_together(
    tmp_path: Path, short_tmp: str, monkeypatch
) -> None:
    runs_dir, folder = suite_run(tmp_path, short_tmp)
    ids = [e["run_id"] for e in store.read_json(folder / layout.STATE)["runs"]]
    here = tmp_path / "pages"
    here.mkdir()
    monkeypatch.chdir(here)

    done = CliRunner().invoke(app, ["report", "html", folder.name, "--runs-dir", str(runs_dir)])

    assert done.exit_code == 0, done.output
    assert sorted(p.name for p in here.iterdir()) == sorted(
        [f"{folder.name}.html", *(f"{i}.html" for i in ids)]
    )
    assert_inert((here / f"{folder.name}.html").read_text(), frozenset(f"{i}.html" for i in ids))
    for i in ids:
        assert f"run {i}" in "".join(assert_inert((here / f"{i}.html").read_text()).text)
    into_a_run = CliRunner().invoke(
        app,
        [
            "report",
            "html",
            str(folder),
            "-o",
            str(runs_dir / ids[0] / "x.html"),
            "--runs-dir",
            str(runs_dir),
        ],
    )
    assert into_a_run.exit_code != 0 and "sealed" in into_a_run.output


def suite_run(tmp_path: Path, short_tmp: str) -> tuple[Path, Path]:
    """A suite of two specs driven on the fake: one passes as expected, one fails unexpectedly."""
    specs = (
        write_spec(tmp_path, "fixer", contract=ratified(["fs:**"]), assertions=ACCEPTANCE),
        write_spec(
            tmp_path,
            "idle",
            contract=ratified(["fs:**"]),
            assertions=[{"file_exists": "out/never.txt"}],
        ),
    )
    suite = suite_mod.Suite("demo", tmp_path / "suite.yaml", "", specs, False)
    runs_dir = tmp_path / "runs"
    record = suite_mod.SuiteRun.create(layout.suites_base(runs_dir), suite)
    programs = {"fixer": fixer, "idle": idle}
    record.drive(
        runs_dir,
        lambda spec, run: drive(spec, run, short_tmp, programs)[0].verdict,
        lambda *_: None,
    )
    store.write_json(
        record.path / layout.STATE, {**record.state, "suite": "demo <b>"}
    )  # a name is text, whoever wrote it
    return runs_dir, record.path


def test_the_command_writes_beside_the_caller_never_into_the_run(
    hostile_run: store.RunDir, tmp_path: Path, monkeypatch
) -> None:
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    ok = CliRunner().invoke(
        app, ["report", "html", hostile_run.run_id, "--runs-dir", str(hostile_run.path.parent)]
    )
    assert ok.exit_code == 0, ok.output
    assert_inert((here / f"{hostile_run.run_id}.html").read_text())
    refused = CliRunner().invoke(
        app, ["report", "html", str(hostile_run.path), "-o", str(hostile_run.path / "page.html")]
    )
    assert (
        refused.exit_code != 0
        and "sealed" in refused.output
        and not (hostile_run.path / "page.html").exists()
    )
    printed = CliRunner().invoke(app, ["report", "html", str(hostile_run.path), "-o", "-"])
    assert printed.exit_code == 0 and printed.stdout.startswith("<!doctype html>")
    bad = CliRunner().invoke(
        app, ["report", "html", "../etc", "--runs-dir", str(hostile_run.path.parent)]
    )
    assert bad.exit_code != 0


def test_every_table_and_the_detailed_changes_are_capped(
    hostile_run: store.RunDir, monkeypatch
) -> None:
    monkeypatch.setattr(html_report, "MAX_CHANGES", 2)
    monkeypatch.setattr(html_report, "MAX_ROWS", 3)
    page = html_report.run_page(hostile_run).html
    changes = len(store.read_json(hostile_run.paths.attempt(1).verdict)["changes"])
    assert (
        page.count('<div class="change ') == 2
        and f"{changes - 2} more changed paths are not shown in detail" in page
    )
    assert "more rows not shown (at most 3 per table)" in page
    assert_inert(page)


def test_a_suite_row_whose_run_cannot_be_read_says_so(tmp_path: Path, short_tmp: str) -> None:
    runs_dir, folder = suite_run(tmp_path, short_tmp)
    state = store.read_json(folder / layout.STATE)
    (runs_dir / state["runs"][1]["run_id"] / "spec.json").unlink()
    rendered = html_report.render(str(folder), runs_dir)
    page = rendered.html
    assert_inert(page, frozenset(f"{p.name}.html" for p in rendered.linked))
    assert "its run directory cannot be read: missing spec.json" in page and "fake-fixer" in page


def summary(results: list[dict]) -> dict:
    """A suite summary as INTERFACES.md defines it (`assure suite --summary`, `assure report
    merge`)."""
    return {
        "schema_version": 1,
        "kind": "suite",
        "suite": "merged <i>",
        "suite_run_id": "s-20261201T000000Z-abcdef",
        "source": "suites/x.yaml",
        "shard": {"index": 2, "count": 3},
        "started_at": "2026-12-01T00:00:00Z",
        "finished_at": "2026-12-01T00:01:00Z",
        "as_expected": False,
        "counts": {},
        "results": results,
    }


def result(
    spec: str, verdict: str | None, expect: str, seconds: float | None, **fields: object
) -> dict:
    return {
        "spec": spec,
        "spec_path": f"{spec}.yaml",
        "run_id": None,
        "run_dir": None,
        "verdict": verdict,
        "expect": expect,
        "as_expected": verdict == expect,
        "started_at": None,
        "finished_at": None,
        "duration_seconds": seconds,
        "reason": None,
        "findings": [],
        **fields,
    }


def test_a_suite_summary_file_renders_the_suite_page(tmp_path: Path) -> None:
    path = tmp_path / "merged.json"
    store.write_json(
        path,
        summary(
            [
                result("ok", "pass", "pass", 3.0),
                result(
                    'x" onload="y',
                    "breach",
                    "pass",
                    1.5,
                    findings=[
                        {
                            "kind": "unattributed",
                            "severity": "breach",
                            "subject": "<svg onload=1>",
                            "message": "m",
                        }
                    ],
                ),
                result("cut", None, "pass", None, reason="not run: stop_on_unexpected"),
            ]
        ),
    )
    page = html_report.render(str(path), tmp_path / "runs")
    parsed = assert_inert(page.html, frozenset(f"{p.name}.html" for p in page.linked))
    text = "".join(parsed.text)
    assert (
        page.id == "s-20261201T000000Z-abcdef"
        and "suite merged <i>" in text
        and "shard 2 of 3" in text
    )
    assert (
        "1 of 3 specs as expected" in text
        and 'x" onload="y' in text
        and "unattributed: <svg onload=1>" in text
    )
    assert "not run: stop_on_unexpected" in text and parsed.tags.count("svg") == 2
    bars = re.findall(r'<rect x="\d+" y="\d+" width="50" height="(\d+)"', page.html)
    assert [int(h) for h in bars] == [
        140,
        0,
        0,
        140,
        0,
        140,
    ]  # pass, contained, fail, breach, error, not run


def test_a_merged_summary_names_its_shards_suite_runs_and_its_state(tmp_path: Path) -> None:
    """`assure report merge` has no suite run of its own (suite_run_id null): the page says which
    shards' runs it joins, never "suite run None", and a state from its end, never "-"."""
    doc = {
        **summary([result("ok", "pass", "pass", 3.0)]),
        "suite_run_id": None,
        "shard": None,
        "merged_from": [{"index": 1, "suite_run_id": "s-1"}, {"index": 2, "suite_run_id": "s-<2>"}],
    }
    path = tmp_path / "merged.json"
    store.write_json(path, doc)
    text = "".join(assert_inert(html_report.render(str(path), tmp_path / "runs").html).text)
    assert "merged from shard 1 (s-1), shard 2 (s-<2>)" in text and "None" not in text
    assert "state finished" in text
    store.write_json(path, {**doc, "finished_at": None})
    assert "state unfinished" in "".join(
        assert_inert(html_report.render(str(path), tmp_path / "runs").html).text
    )


def test_a_json_file_that_is_not_a_suite_summary_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    store.write_json(path, {"schema_version": 1, "kind": "run", "results": []})
    with pytest.raises(AssureError, match="not a suite summary"):
        html_report.render(str(path), tmp_path)


def test_a_failed_run_and_its_suite_row_say_why_as_the_box_does(
    tmp_path: Path, short_tmp: str
) -> None:
    """No contract: the run page names the gate's first denial and the agent's last lines, and a
    suite page read from the suite run's folder gives the same cause, not only the findings."""
    from tests.unit.test_reasons import FIXED_TEXT, fix_and_complain

    spec = write_spec(tmp_path, "complain", assertions=FIXED_TEXT)
    suite = suite_mod.Suite("why", tmp_path / "suite.yaml", "", (spec,), False)
    runs_dir = tmp_path / "runs"
    record = suite_mod.SuiteRun.create(layout.suites_base(runs_dir), suite)
    record.drive(
        runs_dir,
        lambda s, run: drive(s, run, short_tmp, {"complain": fix_and_complain})[0].verdict,
        lambda *_: None,
    )
    (run_id,) = [entry["run_id"] for entry in record.state["runs"]]
    cause = 'the gate denied agent:"fs.write" on agent:"src/calc.py": contract.missing'

    run_text = "".join(assert_inert(html_report.render(run_id, runs_dir).html).text)
    assert (
        f"attempt 1, why (as its box says): {cause}" in run_text and "agent: giving up" in run_text
    )
    assert "agent: \\x1b[31mGatewayError" in run_text  # the agent's bytes, escaped

    suite_page = html_report.render(record.path.name, runs_dir)
    suite_text = "".join(
        assert_inert(suite_page.html, frozenset(f"{p.name}.html" for p in suite_page.linked)).text
    )
    assert cause in suite_text


def test_an_unratified_contract_is_said_to_be_ratified_by_nobody() -> None:
    contract = {"scope": ["fs:src/**"], "proposed_by": "alice@example.org"}
    text = "".join(Parsed(html_report._scopes({"workspace": {}, "contract": contract})).text)
    assert (
        "ratified by nobody (unratified: the gate denies every mutation), proposed by"
        " alice@example.org" in text
    )
    assert "ratified by Bob," in "".join(
        Parsed(html_report._scopes({"contract": {**contract, "ratified_by": "Bob"}})).text
    )


def many_then_covert(ctx: Context) -> int:
    """Issue 21 item 12: allowed edits in out/ that sort before the one covert edit of
    src/calc.py."""
    workspace = ctx.path("/workspace")
    for i in range(6):
        (workspace / "out" / f"e{i}.txt").write_text(f"note {i}\n")
    with open(workspace / "src" / "calc.py", "a") as fh:
        fh.write("# covert\n")
    return 0


def test_the_only_breach_among_many_allowed_edits_is_listed_first_and_what_is_left_out_is_counted_by_group(  # noqa: E501 -- the test's name says what it checks
    tmp_path: Path, short_tmp: str, monkeypatch
) -> None:
    spec = write_spec(
        tmp_path,
        "many_then_covert",
        assertions=[{"no_unattributed_changes": True}],
        hostile=True,
        expect="breach",
    )
    run = new_run(tmp_path, spec)
    result, _ = drive(spec, run, short_tmp, {"many_then_covert": many_then_covert})
    assert result.verdict == "breach"
    monkeypatch.setattr(html_report, "MAX_CHANGES", 3)
    page = html_report.run_page(run).html
    shown = re.findall(
        r'<div class="change [a-z]+" id="[^"]+"><h4><span class="tag">[^<]*</span>'
        r" <code>([^<]*)</code>",
        page,
    )
    assert shown[0] == "src/calc.py" and len(shown) == 3, shown
    changes = len(store.read_json(run.paths.attempt(1).verdict)["changes"])
    assert (
        f"{changes - 3} more changed paths are not shown in detail (at most 3): {changes - 3}"
        " attributed;" in page
    )
