"""The run directory's names are spelled once, in records/layout. The few the gateway image must
know and cannot take from there (it does not ship records/) must agree with it."""

from __future__ import annotations

from pathlib import Path

from assure.gateway import dispatch
from assure.records import health, layout
from assure.records.layout import RunPaths


def test_the_gateway_reads_the_verifier_heartbeat_where_the_host_writes_it() -> None:
    run = RunPaths(Path("/runs/r"))
    assert run.verifier_heartbeat == run.control / dispatch.VERIFIER_FILE


def test_the_monitors_default_heartbeats_are_the_layouts(tmp_path: Path) -> None:
    run = RunPaths(tmp_path / "r")
    assert health.default_path(health.VERIFIER, tmp_path, run.root) == run.verifier_heartbeat
    assert health.default_path(health.GATEWAY, tmp_path, run.root, 3) == run.attempt(3).heartbeat


def test_a_task_has_one_name_for_its_receipt_proposal_and_promotion() -> None:
    run, task = RunPaths(Path("/runs/r")), "../../Task A"
    slug = layout.task_slug(task)
    assert "/" not in slug and not slug.startswith(".")
    assert (
        run.receipt(task)
        == run.receipts / f"{slug}.json"
        == run.receipts / layout.receipt_filename(task)
    )
    assert (
        run.proposal(task).root == run.proposals / slug
        and run.promotion(task).root == run.promotions / slug
    )


def test_suite_runs_and_the_default_alert_sink_sit_beside_the_runs_base() -> None:
    base = Path("/work/.assure/runs")
    assert layout.suites_base(base) == Path("/work/.assure/suites")
    assert layout.SuitePaths(layout.suites_base(base) / "s1").state == Path(
        "/work/.assure/suites/s1/state.json"
    )
    assert layout.alerts_sink(base) == Path("/work/.assure/alerts.jsonl")
