"""The attempt record: the live one (in memory) and the one `assure verify` loads from the
attempt folder are judged alike; what does not load is reported, never passed."""

from __future__ import annotations

from pathlib import Path

import yaml

from assure.core.chain import ChainWriter
from assure.records.attempt_record import AttemptRecord, Records
from assure.records.layout import AttemptPaths, RunPaths
from assure.records.store import write_json
from assure.spec import Spec, load
from assure.verify.facts import ContainerFacts
from assure.verify.findings import Kind, Verdict
from assure.verify.judge import Judgement, judge
from assure.verify.snapshot import take


def spec_for(tmp_path: Path) -> Spec:
    """A minimal spec: exit code 0, writes allowed under out/."""
    (tmp_path / "fixture").mkdir(exist_ok=True)
    data = {
        "version": 1,
        "name": "record",
        "agent": {"command": ["true"]},
        "expect": "pass",
        "assertions": [{"exit_code": 0}],
        "workspace": {"fixture": "fixture", "writable": ["out/**"], "protected": []},
    }
    (tmp_path / "record.yaml").write_text(yaml.safe_dump(data))
    return load(tmp_path / "record.yaml")


FACTS = {
    "harness_errors": [],
    "exit_code": 0,
    "gateway": {"exit_code": 0, "oom_killed": False},
    "timings": {"run": 1.0},
}


def test_the_run_directory_names_are_the_contract(tmp_path: Path) -> None:
    run = RunPaths(tmp_path)
    assert (run.state, run.events, run.report, run.seal, run.operator_log) == (
        tmp_path / "state.json",
        tmp_path / "events.jsonl",
        tmp_path / "report.json",
        tmp_path / "receipts" / "seal.json",
        tmp_path / "control" / "operator.jsonl",
    )
    attempt = run.attempt(3)
    assert attempt.number == 3
    assert (
        attempt.pre,
        attempt.post,
        attempt.container,
        attempt.verdict,
        attempt.commands,
        attempt.cases,
    ) == tuple(
        tmp_path / "attempts" / "3" / name
        for name in (
            "pre.json",
            "post.json",
            "container.json",
            "verdict.json",
            "commands.json",
            "cases.json",
        )
    )
    assert attempt.journal == tmp_path / "attempts" / "3" / "gateway" / "journal.jsonl"
    assert (
        attempt.db_capture("post", "shop")
        == tmp_path / "attempts" / "3" / "db-post" / "shop.sqlite"
    )


def _attempt(tmp_path: Path) -> AttemptPaths:
    paths = AttemptPaths(tmp_path / "attempts" / "1")
    (paths.workspace / "out").mkdir(parents=True)
    paths.gateway_state.mkdir()
    journal = ChainWriter(paths.journal, base={"actor": "gateway"})
    journal.append("tool_call", tool="task.report", decision="allow", claim={"status": "done"})
    journal.append("gateway_stopped")
    journal.close()
    return paths


def test_the_record_loaded_from_the_folder_is_judged_as_the_live_one(tmp_path: Path) -> None:
    spec = spec_for(tmp_path)
    paths = _attempt(tmp_path)
    pre = take(paths.workspace)
    (paths.workspace / "out" / "notes.txt").write_text("hi")
    post = take(paths.workspace)
    live = AttemptRecord.collected(
        paths, ContainerFacts(FACTS), pre=pre, post=post, checks={"command": None, "cases": None}
    )
    assert live.unreadable == {} and live.checks == {
        "command": [],
        "cases": [],
    }  # no check ran: nothing on disk either
    judged = judge(live, spec)
    assert (
        judged.verdict is Verdict.PASS
        and judged.claim == {"status": "done"}
        and [c.path for c in judged.changes] == ["out/notes.txt"]
    )
    for path, data in (
        (paths.container, FACTS),
        (paths.pre, pre.to_json()),
        (paths.post, post.to_json()),
    ):
        write_json(path, data)
    loaded = AttemptRecord.load(paths)
    assert (
        loaded.unreadable == {}
        and loaded.facts == live.facts
        and loaded.pre == pre
        and loaded.post == post
    )
    assert judge(loaded, spec) == judged
    assert judge(loaded, spec, recheck_workspace=True) == judged


def test_what_does_not_load_is_a_harness_error_never_a_pass(tmp_path: Path) -> None:
    spec = spec_for(tmp_path)
    paths = _attempt(tmp_path)
    paths.container.write_text("{not json")
    paths.commands.write_text("[")
    record = AttemptRecord.load(paths)
    assert set(record.unreadable) == {"container.json", "snapshot", "commands.json"}
    judged = judge(record, spec)
    assert judged.verdict is Verdict.ERROR
    errors = {f.subject for f in judged.findings if f.kind is Kind.HARNESS_ERROR}
    assert {"container.json", "snapshot"} <= errors
    live = AttemptRecord.collected(
        paths, ContainerFacts(FACTS), pre=None, post=None, checks={"command": None, "cases": None}
    )
    assert set(live.unreadable) == {
        "snapshot",
        "commands.json",
    }  # a part the attempt never held is loaded as verify would


def test_a_judgement_round_trips_through_verdict_json_and_records_load_each_once(
    tmp_path: Path,
) -> None:
    spec = spec_for(tmp_path)
    paths = _attempt(tmp_path)
    pre = take(paths.workspace)
    (paths.workspace / "out" / "notes.txt").write_text("hi")
    live = AttemptRecord.collected(
        paths,
        ContainerFacts(FACTS),
        pre=pre,
        post=take(paths.workspace),
        checks={"command": [], "cases": []},
    )
    record = live.judged(judge(live, spec), "2026-01-01T00:00:00Z")
    write_json(paths.verdict, record.verdict_json())
    write_json(paths.container, FACTS)
    assert Judgement.from_json(record.verdict_json()) == record.judgement
    records = Records(RunPaths(tmp_path))
    loaded = records.get(1)
    assert (loaded.judgement, loaded.judged_at, loaded.facts) == (
        record.judgement,
        record.judged_at,
        record.facts,
    )
    assert (
        loaded.pre is None and records.get(1) is loaded
    )  # the report and receipts need no snapshots; loaded once
    records.keep(record)
    assert records.get(1) is record
