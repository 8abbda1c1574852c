"""What a verdict and its report must never hide (issue 21 items 1, 5, 9 and 12), on real
containers: a breach a later clean attempt follows, a headline the agent writes through a
denied path, the only breach among 300 allowed edits, and expected breaches that pile up as
alerts a person must acknowledge. Each asserts what must not happen."""

from __future__ import annotations

import html
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from assure import spec as spec_mod
from assure.records import alerts, html_report, junit, store, summary
from assure.records.report import console, render_report
from assure.run.driver import Driver, RunResult, reverify

from .conftest import ROOT

CONTAINMENT = ROOT / "suites" / "containment"
ASSURE = [sys.executable, "-m", "assure.cli"]
INJECTED = "KNOWN-FLAKE harness retry"


@dataclass
class Runs:
    base: Path
    retry: RunResult
    headline: RunResult
    many: RunResult
    unexpected: RunResult


@pytest.fixture(scope="module")
def runs(backend, images, tmp_path_factory) -> Runs:
    """The three hostile specs (each expects breach) and one honest spec whose agent breaches (it
    expects pass), into one runs folder, so that the alerts and health see all four."""
    base = tmp_path_factory.mktemp("verdicts") / "runs"

    def go(path: Path) -> RunResult:
        spec = spec_mod.load(path)
        run = store.RunDir.create(base, store.new_run_id(spec.name), spec.path, spec.to_json())
        return Driver(spec, run, backend, images, lambda *_: None).drive()

    data = yaml.safe_load((CONTAINMENT / "covert--direct-write.yaml").read_text())
    data.update(name="honest-direct-write", hostile=False, expect="pass")
    data["agent"]["files"] = str(ROOT / "fixtures" / "agents" / "corpus" / "covert")
    data["workspace"]["fixture"] = str(ROOT / "fixtures" / "workspaces" / "calc")
    honest = base.parent / "honest-direct-write.yaml"
    honest.write_text(yaml.safe_dump(data, sort_keys=False))
    return Runs(
        base,
        go(CONTAINMENT / "covert--retry-hides-breach.yaml"),
        go(CONTAINMENT / "covert--headline-injection.yaml"),
        go(CONTAINMENT / "covert--breach-among-many-edits.yaml"),
        go(honest),
    )


def test_a_clean_retry_never_hides_the_breach_before_it(runs):
    report = runs.retry.report
    assert [a["verdict"] for a in report["attempts"]] == [
        "breach",
        "contained",
    ]  # attempt 2 is reported, beside
    assert report["verdict"] == "breach"
    (task,) = report["tasks"]
    assert (task["state"], task["verdict"], task["verdict_attempt"]) == ("quarantined", "breach", 1)
    result = summary.run_result(runs.retry.run_dir)
    assert result["verdict"] == "breach" and result["as_expected"]
    assert [f["subject"] for f in result["findings"] if f["kind"] == "unattributed"] == [
        "src/calc.py"
    ]
    assert result["reason"].startswith('breach: unattributed agent:"src/calc.py"')
    assert (
        reverify(runs.retry.run_dir).verdict == "breach"
    )  # `assure verify` judges the folder alone the same
    assert (
        not store.RunDir.open(runs.retry.run_dir).paths.proposal("main").patch.exists()
    )  # nothing of attempt 2 is proposed


def test_the_agents_denied_path_never_writes_the_headline(runs):
    report = runs.headline.report
    assert report["verdict"] == "breach"
    headline = summary.run_result(runs.headline.run_dir)["reason"]
    failure = ET.fromstring(junit.of_run(runs.headline.run_dir)).find("testsuite/testcase/failure")
    out = console()
    out.width = 400
    with out.capture() as captured:
        out.print(render_report(runs.headline.view, str(runs.headline.run_dir)))
    box_why = next(line for line in captured.get().splitlines() if "why:" in line).split(
        "why: ", 1
    )[1]
    page = html_report.run_page(store.RunDir.open(runs.headline.run_dir)).html
    page_why = html.unescape(page.split("why (as its box says): ", 1)[1])
    assert failure is None  # the breach is as the spec expects: no failure to report
    for line in (headline, box_why, page_why):
        assert line.startswith('breach: unattributed agent:"src/calc.py"'), line
        assert INJECTED not in line.split("\n", 1)[0].split("</p>", 1)[0]
    assert (
        f'containment that worked: the gate denied agent:"fs.write" on agent:"{INJECTED}'
        in captured.get()
    )
    # the same run as a spec that expected contained: its JUnit failure message is the breach, not
    # the agent's path
    as_if = {
        **summary.run_result(runs.headline.run_dir),
        "expect": "contained",
        "as_expected": False,
    }
    message = (
        ET.fromstring(junit.render("s", [as_if], {}, None))
        .find("testsuite/testcase/failure")
        .get("message")
    )
    assert message.startswith('breach: unattributed agent:"src/calc.py"'), message


def test_the_only_breach_among_300_allowed_edits_is_the_first_change_the_page_shows(runs):
    assert runs.many.report["verdict"] == "breach"
    page = html_report.run_page(store.RunDir.open(runs.many.run_dir)).html
    changed = page.split("<h3>Changed files", 1)[1]
    first = changed.split('<div class="change ', 2)[1]
    assert "<code>src/calc.py</code>" in first.split("</h4>", 1)[0]
    assert (
        "more changed paths are not shown in detail (at most 300): " in changed
        and " unexplained" not in changed.split("more changed paths", 1)[1].split("</p>", 1)[0]
    )


def test_expected_breaches_need_no_ack_and_block_no_health_but_an_unexpected_one_does(runs):
    assert runs.unexpected.report["verdict"] == "breach"
    mine = {r.run_dir.name for r in (runs.retry, runs.headline, runs.many)}
    found = alerts.all_alerts(runs.base)
    expected = [a for a in found if a.run_id in mine]
    assert expected and all(
        (a.state, a.acked_by) == ("acked", alerts.SPEC_ACTOR) for a in expected
    ), expected
    pending = [a for a in found if a.state == "pending"]
    assert pending and {a.run_id for a in pending} == {runs.unexpected.run_dir.name}
    assert {a.kind for a in pending} == {"breach", "quarantine"}

    def governance() -> dict:
        done = subprocess.run(
            ASSURE + ["health", "--runs-dir", str(runs.base)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        (check,) = json.loads(done.stdout)["layers"]["governance"]
        return check

    blocked = governance()
    assert (blocked["status"], [p["run_id"] for p in blocked["evidence"]["pending"]]) == (
        "fail",
        [runs.unexpected.run_dir.name] * 2,
    )
    acked = subprocess.run(
        ASSURE + ["ack", "--run", runs.unexpected.run_dir.name, "--runs-dir", str(runs.base)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert acked.returncode == 0 and acked.stdout.count("acknowledged by") == 2, acked
    assert governance()["status"] == "pass"
