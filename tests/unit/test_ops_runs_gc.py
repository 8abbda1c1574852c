"""The library behind `assure runs` and `assure gc`: listing runs, resolving a run reference,
and telling an orphaned resource from one a live process still owns."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from assure.errors import AssureError
from assure.ops import gc, runs
from assure.sandbox.backend import LABEL_HOST, LABEL_PID


def test_listing_reads_each_state_and_skips_garbage(tmp_path: Path) -> None:
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "state.json").write_text(
        json.dumps(
            {
                "state": "finished",
                "verdict": "pass",
                "started_at": "t0",
                "tasks": {"a": {"state": "done"}},
            }
        )
    )
    (tmp_path / "r1" / "placement.json").write_text('{"where": "mars", "lost": []}')
    (tmp_path / "r2").mkdir()
    (tmp_path / "r2" / "state.json").write_text("{not json")
    listed = runs.listing(tmp_path)
    assert [r.to_json() for r in listed] == [
        {
            "kind": "run",
            "run_id": "r1",
            "state": "finished",
            "verdict": "pass",
            "started_at": "t0",
            "tasks": {"a": "done"},
            "specs": None,
            "resume": None,
            "placement": None,  # a placement file of another shape is none
        }
    ]
    assert runs.listing(tmp_path / "missing") == []


def test_runs_and_suite_runs_are_listed_newest_first(tmp_path: Path) -> None:
    base = tmp_path / "runs"
    for run_id, started in (("b-old", "2026-01-01T00:00:00Z"), ("a-new", "2026-03-01T00:00:00.5Z")):
        (base / run_id).mkdir(parents=True)
        (base / run_id / "state.json").write_text(
            json.dumps({"state": "finished", "verdict": "pass", "started_at": started, "tasks": {}})
        )
    suite_run = tmp_path / "suites" / "s-mid"
    suite_run.mkdir(parents=True)
    (suite_run / "state.json").write_text(
        json.dumps(
            {
                "suite": "s",
                "source": "suites/s.yaml",
                "state": "running",  # nobody holds its lock: interrupted
                "shard": {"index": 2, "count": 3},
                "started_at": "2026-02-01T00:00:00Z",
                "runs": [
                    {"verdict": "pass"},
                    {"verdict": "breach"},
                    {"verdict": "pass"},
                    {"verdict": None},
                ],
            }
        )
    )

    listed = runs.listing(base)

    assert [(r.run_id, r.kind) for r in listed] == [
        ("a-new", "run"),
        ("s-mid", "suite"),
        ("b-old", "run"),
    ]
    suite = listed[1].to_json()
    assert (suite["state"], suite["specs"], suite["resume"]) == (
        "interrupted",
        {"pass": 2, "breach": 1, "not run": 1},
        f"assure suite suites/s.yaml --shard 2/3 --runs-dir {base}",
    )
    assert runs.locate_suite_run("s-mid", base) == suite_run
    assert runs.locate_suite_run(str(suite_run), base) == suite_run
    assert runs.locate_suite_run("a-new", base) is None  # a run's id names the run
    assert runs.locate_suite_run(str(base / "a-new"), base) is None


def test_a_run_reference_that_is_neither_an_id_nor_a_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative reference resolves against the working folder
    (tmp_path / "runs").mkdir()
    with pytest.raises(AssureError, match="neither a run.s folder nor a run id"):
        runs.find("../../no-such-run", tmp_path / "runs")


def test_a_resource_is_an_orphan_only_when_its_process_on_this_host_is_gone() -> None:
    host = socket.gethostname()
    alive = {LABEL_HOST: host, LABEL_PID: str(os.getpid())}
    gone = {LABEL_HOST: host, LABEL_PID: "999999999"}
    foreign = {LABEL_HOST: host + "-elsewhere", LABEL_PID: "1"}
    assert not gc.is_orphan(alive, host, everything=False)
    assert gc.is_orphan(gone, host, everything=False)
    assert not gc.is_orphan(foreign, host, everything=False)
    assert all(gc.is_orphan(labels, host, everything=True) for labels in (alive, gone, foreign))


class Listed:
    """An engine that lists resources and records removals (what `gc.collect` asks of one)."""

    def __init__(self, volumes: list[dict[str, str]]):
        self.volumes, self.removed = volumes, []

    def owned(self) -> dict[str, list[dict[str, str]]]:
        return {"containers": [], "networks": [], "volumes": self.volumes}

    def remove_volume(self, name: str) -> None:
        self.removed.append(name)

    remove_container = remove_network = remove_volume


def test_gc_removes_only_this_user_s_or_this_runs_folder_s_orphans_unless_all_users(
    tmp_path: Path, monkeypatch
) -> None:
    from assure.run import cluster
    from assure.sandbox import workspace_fs
    from assure.sandbox.backend import LABEL_RUN, LABEL_UID

    monkeypatch.setattr(
        workspace_fs, "release_orphans", lambda orphaned, owner: []
    )  # the host's mounts and temp folder are not this test's
    monkeypatch.setattr(workspace_fs, "workspace_mounts", lambda owner: [])
    monkeypatch.setattr(cluster, "release_orphan_scratch", lambda dry_run=False: [])
    runs = tmp_path / "runs"
    (runs / "here-20260101T000000Z-000000").mkdir(parents=True)
    dead = {LABEL_HOST: socket.gethostname(), LABEL_PID: "999999999"}
    volumes = [
        {**dead, "id": "mine", LABEL_UID: str(os.getuid()), LABEL_RUN: "x-20260101T000000Z-000000"},
        {**dead, "id": "foreign", LABEL_UID: "54321", LABEL_RUN: "x-20260101T000000Z-000000"},
        {**dead, "id": "here", LABEL_UID: "54321", LABEL_RUN: "here-20260101T000000Z-000000"},
        {**dead, "id": "unlabelled", LABEL_RUN: "../../etc"},
    ]
    engine = Listed(volumes)
    dry = gc.collect(engine, runs_dir=runs, dry_run=True)
    assert engine.removed == [] and dry.volumes == 2 and dry.names == ["volume mine", "volume here"]
    assert gc.collect(engine, runs_dir=runs).volumes == 2 and engine.removed == ["mine", "here"]
    engine.removed.clear()
    gc.collect(engine, runs_dir=runs, all_users=True)
    assert engine.removed == ["mine", "foreign", "here", "unlabelled"]


def test_a_halted_run_is_listed_with_the_verdict_halted(tmp_path: Path) -> None:
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "state.json").write_text(
        json.dumps({"state": "halted", "verdict": "fail", "started_at": "t0", "tasks": {}})
    )
    assert [r.verdict for r in runs.listing(tmp_path)] == ["halted"]
