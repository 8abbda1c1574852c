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
    (tmp_path / "r2").mkdir()
    (tmp_path / "r2" / "state.json").write_text("{not json")
    listed = runs.listing(tmp_path)
    assert [r.to_json() for r in listed] == [
        {
            "run_id": "r1",
            "state": "finished",
            "verdict": "pass",
            "started_at": "t0",
            "tasks": {"a": "done"},
            "resume": None,
        }
    ]
    assert runs.listing(tmp_path / "missing") == []


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
        workspace_fs, "release_orphans", lambda orphaned: []
    )  # the host's mounts and temp folder are not this test's
    monkeypatch.setattr(workspace_fs, "workspace_mounts", lambda: [])
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
