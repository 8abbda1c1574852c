"""Samples and epochs in a suite (issue 24 item 4): a spec's dataset makes one spec per row, a
suite runs each `epochs` times; the summary gives each sample's verdicts, the pass rate with its
standard error and pass@k; JUnit has one testcase per sample x epoch; `report merge` joins shards.
"""

from __future__ import annotations

import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from assure.records import junit, summary
from assure.run import suite as suite_mod
from assure.run.driver import Driver
from assure.sandbox.fake import Context
from tests.unit.test_driver_states import CALC, IMAGES, fake
from tests.unit.test_summary import assert_common_shape, cases, hostile, props, shards

SPEC = f"""\
version: 1
name: calc
dataset: {{file: rows.csv}}
agent: {{command: ["{{{{program}}}}"]}}
workspace: {{fixture: {CALC}, writable: ["out/**"], protected: ["tests/**"]}}
limits: {{wall_seconds: 30}}
assertions: [{{file_exists: out/notes.txt}}]
expect: "{{{{expect}}}}"
"""
ROWS = "id,program,expect\nok,notes,pass\nflaky,flaky,pass\nbad,hostile,breach\n"


def notes(ctx: Context) -> int:
    (ctx.path("/workspace") / "out" / "notes.txt").write_text("done\n")
    return 0


def flaky_program() -> Any:
    """Writes its notes on its first run only."""
    runs = []

    def flaky(ctx: Context) -> int:
        runs.append(1)
        return notes(ctx) if len(runs) == 1 else 0

    return flaky


class Ran:
    def __init__(self, folder: Path, short: str):
        (folder / "calc.yaml").write_text(SPEC)
        (folder / "rows.csv").write_text(ROWS)
        (folder / "s.yaml").write_text("version: 1\nname: s\nepochs: 2\nspecs: [calc.yaml]\n")
        self.suite = suite_mod.load(folder / "s.yaml")
        self.runs = folder / "runs"
        self.record = suite_mod.SuiteRun.create(folder / "suites", self.suite)
        programs = {"notes": notes, "flaky": flaky_program(), "hostile": hostile}
        backend = fake(programs, short)
        try:
            self.outcomes = self.record.drive(
                self.runs,
                lambda spec, run: (
                    Driver(spec, run, backend, IMAGES, lambda *_: None).drive().verdict
                ),
            )
        finally:
            backend.close()
        self.doc = summary.suite_document(self.suite, self.record.path, self.runs)


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    short = tempfile.mkdtemp(prefix="ep", dir="/tmp")
    return Ran(tmp_path_factory.mktemp("epochs"), short)


def test_each_sample_runs_each_epoch_and_the_summary_scores_them(ran: Ran) -> None:
    doc = ran.doc
    assert summary.problems(doc) == []
    assert [(o.spec, o.epoch, o.verdict) for o in ran.outcomes] == [
        ("calc.ok", 1, "pass"),
        ("calc.ok", 2, "pass"),
        ("calc.flaky", 1, "pass"),
        ("calc.flaky", 2, "fail"),
        ("calc.bad", 1, "breach"),
        ("calc.bad", 2, "breach"),
    ]
    assert [(r["position"], r["epoch"], r["sample"], r["as_expected"]) for r in doc["results"]] == [
        (1, 1, "ok", True),
        (1, 2, "ok", True),
        (2, 1, "flaky", True),
        (2, 2, "flaky", False),
        (3, 1, "bad", True),
        (3, 2, "bad", True),
    ]
    assert doc["samples"] == [
        {
            "spec": "calc.ok",
            "position": 1,
            "sample": "ok",
            "verdicts": ["pass", "pass"],
            "runs": 2,
            "as_expected": 2,
        },
        {
            "spec": "calc.flaky",
            "position": 2,
            "sample": "flaky",
            "verdicts": ["pass", "fail"],
            "runs": 2,
            "as_expected": 1,
        },
        {
            "spec": "calc.bad",
            "position": 3,
            "sample": "bad",
            "verdicts": ["breach", "breach"],
            "runs": 2,
            "as_expected": 2,
        },
    ]
    # rates 1, 1/2, 1: mean 5/6; sample sd sqrt(1/12), over sqrt(3) samples: 1/6
    assert doc["metrics"] == {
        "samples": 3,
        "runs": 6,
        "pass_rate": 0.833333,
        "pass_rate_stderr": 0.166667,
        "pass_at_k": {"1": 0.833333, "2": 1.0},
    }
    assert (doc["epochs"], doc["suite_size"], doc["pool"]) == (2, 3, None)
    assert {k: doc["counts"][k] for k in ("total", "as_expected", "pass", "fail", "breach")} == {
        "total": 6,
        "as_expected": 5,
        "pass": 3,
        "fail": 1,
        "breach": 2,
    }


def test_pass_at_k_is_the_unbiased_estimate() -> None:
    results = [
        {"position": 1, "epoch": e, "spec": "a", "verdict": "pass", "as_expected": e == 3}
        for e in (1, 2, 3)
    ] + [
        {"position": 2, "epoch": e, "spec": "b", "verdict": None, "as_expected": False}
        for e in (1, 2, 3)
    ]
    m = summary.metrics(results, 3)
    assert m["pass_at_k"] == {"1": round(1 / 3, 6), "2": round(1 - 1 / 3, 6), "3": 1.0}
    assert (m["samples"], m["pass_rate"], m["pass_rate_stderr"]) == (1, round(1 / 3, 6), None)
    assert summary.metrics([], 2) == {
        "samples": 0,
        "runs": 0,
        "pass_rate": None,
        "pass_rate_stderr": None,
        "pass_at_k": {"1": None, "2": None},
    }


def test_junit_has_a_testcase_per_sample_and_epoch(ran: Ran) -> None:
    xml = junit.of_summary(ran.doc)
    assert_common_shape(ET.fromstring(xml))
    suite, found = cases(xml)
    assert [c.get("name") for c in found] == [
        f"calc.{s} epoch {e}" for s in ("ok", "flaky", "bad") for e in (1, 2)
    ]
    assert [c.find("failure") is not None for c in found] == [
        False,
        False,
        False,
        True,
        False,
        False,
    ]
    assert (suite.get("tests"), suite.get("failures")) == ("6", "1")
    assert {k: props(suite)[k] for k in ("epochs", "pass_rate", "pass_at_1", "pass_at_2")} == {
        "epochs": "2",
        "pass_rate": "0.833333",
        "pass_at_1": "0.833333",
        "pass_at_2": "1.0",
    }


def test_shards_of_samples_and_epochs_merge_back_and_a_missing_epoch_is_refused(ran: Ran) -> None:
    parts = shards(ran.doc, 2)
    merged = summary.merge([(f"{n}.json", d) for n, d in enumerate(parts)])
    assert summary.problems(merged) == []
    assert merged["results"] == ran.doc["results"] and merged["metrics"] == ran.doc["metrics"]
    assert merged["samples"] == ran.doc["samples"]
    assert [c.get("name") for c in cases(junit.of_summary(merged))[1]] == [
        c.get("name") for c in cases(junit.of_summary(ran.doc))[1]
    ]
    short = [dict(parts[0], results=[r for r in parts[0]["results"] if r["epoch"] == 1]), parts[1]]
    with pytest.raises(Exception, match="no shard has the spec"):
        summary.merge([(f"{n}.json", d) for n, d in enumerate(short)])


def test_the_suite_page_names_each_epoch_and_the_pass_rate(ran: Ran) -> None:
    from assure.records import html_report
    from tests.unit.test_html_report import assert_inert

    page = html_report.render(str(ran.record.path), ran.runs)
    text = "".join(assert_inert(page.html, frozenset(f"{p.name}.html" for p in page.linked)).text)
    assert "calc.flaky epoch 2" in text and len(page.linked) == 6
    assert (
        "pass rate 0.83 ± 0.17 (standard error) over 3 samples and 6 runs; pass@1 0.83, pass@2 1.00"
        in text
    )


def test_the_suite_box_names_each_epoch_and_how_to_show_the_suite_run(ran: Ran) -> None:
    from assure.records import report

    console = report.console()
    console.width = 200
    with console.capture() as captured:
        console.print(
            report.render_suite("s", ran.record.suite_run_id, ran.outcomes, len(ran.suite.trials))
        )
    text = captured.get()
    assert "calc.flaky epoch 2" in text and "FAIL (expects pass)" in text
    assert f"assure show {ran.record.suite_run_id}" in text


def test_a_cluster_refuses_epochs_and_datasets_before_anything_runs(
    ran: Ran, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from assure.cli import app

    done = CliRunner().invoke(
        app,
        [
            "suite",
            str(ran.suite.path),
            "--cluster",
            "127.0.0.1:1",
            "--runs-dir",
            str(tmp_path / "r"),
        ],
    )
    assert done.exit_code == 1 and "epochs and datasets do not run on a cluster yet" in done.output
    assert not (tmp_path / "r").exists()


def test_check_with_a_cluster_refuses_epochs_and_datasets_as_the_run_would(ran: Ran) -> None:
    """`--check --cluster` applies the cluster's rules: it does not say `ok` to a suite the same
    command without --check refuses."""
    from typer.testing import CliRunner

    from assure.cli import app

    done = CliRunner().invoke(
        app, ["suite", str(ran.suite.path), "--check", "--cluster", "127.0.0.1:1"]
    )
    assert done.exit_code == 1 and "epochs and datasets do not run on a cluster yet" in done.output
    plain = CliRunner().invoke(app, ["suite", str(ran.suite.path), "--check"])
    assert plain.exit_code == 0 and "epochs each" in plain.output
