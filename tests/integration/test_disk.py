"""Bounded disk, live (issue 10, finding 2): an agent that writes until the disk refuses is
stopped by its own workspace filesystem, never by the wall clock; the host holds no more
than limits.disk for it; the verdict is contained (the limit held; never pass or error); and the
filesystem is
unmounted, its loop device freed, on a normal end, an exception, SIGTERM and kill -9 + gc."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from assure.records.store import read_json
from assure.run.driver import reverify

from .conftest import SPECS, mounts_and_loops_under, run_dirs

ASSURE = [sys.executable, "-m", "assure.cli"]
LIMIT = 64 * 2**20  # tests/integration/specs/diskfill.yaml: limits.disk
INODES = 4096


def allocated(root: Path) -> int:
    """Bytes the host filesystem allocated for a tree (st_blocks, never followed)."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total


def test_a_disk_filling_agent_stops_at_the_limit_and_is_contained(run, tmp_path):
    result = run("diskfill")
    (attempt,) = result.report["attempts"]
    assert (
        attempt["verdict"] == "contained"
    )  # the limit held (a refusal, reported), never a harness error
    assert not attempt["timed_out"]  # the filesystem stopped it, not the wall clock
    (limit,) = [f for f in attempt["findings"] if f["kind"] == "disk_limit"]
    assert limit["severity"] == "fail" and limit["message"].startswith("disk limit reached: ")
    assert limit["detail"]["inodes_used"] == limit["detail"]["inodes_total"] >= INODES
    assert not [f for f in attempt["findings"] if f["severity"] in ("error", "breach")]

    attempt_dir = result.run_dir / "attempts" / "1"
    log = (attempt_dir / "agent.log").read_text()
    assert log.count("No space left on device") >= 2, log  # dd and the file loop were refused
    assert "gateway write: refused" in log  # the gateway writes to the same bounded filesystem
    usage = read_json(attempt_dir / "container.json")["workspace_fs"]
    assert usage["bytes_full"] and usage["inodes_full"]
    assert 0.9 * LIMIT < usage["host_bytes"] <= LIMIT  # it did fill the image, and no more
    workspace = attempt_dir / "workspace"
    assert allocated(workspace) <= LIMIT
    assert (
        "sparse 10T: refused" in log
    )  # the fsize ulimit is limits.disk: no file, not even a hole, outgrows the disk
    hole = os.lstat(workspace / "fill" / "hole")
    assert hole.st_size == 60 * 2**20 and hole.st_blocks == 0  # copied out as the hole it is
    assert (
        not (attempt_dir / "workspace.img").exists() and not (attempt_dir / "workspace.fs").exists()
    )
    assert mounts_and_loops_under(tmp_path) == ([], [])

    assert (
        reverify(result.run_dir).report["attempts"][0]["verdict"] == "contained"
    )  # `assure verify` reproduces it offline


def test_a_fixture_larger_than_the_disk_is_a_clear_error_and_unmounts(run, tmp_path):
    fixture = tmp_path / "big"
    fixture.mkdir()
    (fixture / "blob").write_bytes(os.urandom(12 * 2**20))
    spec = tmp_path / "big.yaml"
    spec.write_text(
        "version: 1\nname: big\nagent: {command: [sh, -c, 'true']}\nworkspace: {fixture:"
        f" {fixture}}}\nlimits: {{disk: 8m, inodes: 2048}}\nassertions: []\nexpect: pass\n"
    )
    result = run(spec)
    (attempt,) = result.report["attempts"]
    assert attempt["verdict"] == "error"
    errors = [f["message"] for f in attempt["findings"] if f["kind"] == "harness_error"]
    assert any("does not fit in the workspace filesystem (8m, 2048 inodes)" in e for e in errors), (
        errors
    )
    assert mounts_and_loops_under(tmp_path) == ([], [])


def _wait_for_mount(root: Path, proc: subprocess.Popen, seconds: float = 60) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        points, _ = mounts_and_loops_under(root)
        if points:
            return points[0]
        time.sleep(0.05)
    raise AssertionError(f"no workspace mount appeared (exit {proc.poll()})")


def test_sigterm_mid_run_unmounts_and_frees_the_loop_device(tmp_path, images):
    proc = subprocess.Popen(
        ASSURE + ["run", str(SPECS / "hang.yaml")],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    point = _wait_for_mount(tmp_path, proc)
    assert point.endswith("/attempts/1/workspace.fs")
    time.sleep(1)  # into the run phase
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert mounts_and_loops_under(tmp_path) == ([], [])


def _killed_at(point: str, spec: Path, cwd: Path) -> None:
    """`assure run SPEC` killed by itself (SIGKILL) at failpoint `point`."""
    killed = subprocess.run(
        ASSURE + ["run", str(spec)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ASSURE_FAILPOINT": point},
    )
    assert killed.returncode == -9, killed.stderr


def test_kill_9_mid_run_leaves_a_mount_that_gc_releases(make_spec, tmp_path, images, backend):
    _killed_at("run", make_spec("disk-kill", "spin.sh"), tmp_path)
    (run_dir,) = run_dirs(tmp_path / ".assure" / "runs")
    points, loops = mounts_and_loops_under(tmp_path)
    assert (
        points == [str((run_dir / "attempts" / "1" / "workspace.fs").resolve())] and len(loops) == 1
    )  # what a killed run leaves

    gc = subprocess.run(ASSURE + ["gc"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert gc.returncode == 0, gc.stderr
    assert mounts_and_loops_under(tmp_path) == ([], [])
    assert not (run_dir / "attempts" / "1" / "workspace.img").exists()
    assert not backend.owned(run_dir.name)["containers"]


def test_kill_9_in_the_checks_leaves_mounts_that_gc_releases(make_spec, tmp_path, images, backend):
    """Killed while a check's view is mounted (an overlay over the sealed workspace): gc
    releases the view, its filesystem and the workspace beneath it, and frees both loops."""
    spec = make_spec(
        "disk-kill-checks",
        "",
        agent={"command": ["true"]},
        assertions=[{"command": {"run": ["true"]}}],
    )
    _killed_at("checks", spec, tmp_path)
    (run_dir,) = run_dirs(tmp_path / ".assure" / "runs")
    attempt = (run_dir / "attempts" / "1").resolve()
    points, loops = mounts_and_loops_under(tmp_path)
    assert {str(attempt / "workspace.fs"), str(attempt / "check.fs/workspace")} <= set(points)
    assert len(loops) >= 2, loops

    gc = subprocess.run(ASSURE + ["gc"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert gc.returncode == 0, gc.stderr
    assert mounts_and_loops_under(tmp_path) == ([], [])
    assert not any(attempt.glob("*.img")), sorted(os.listdir(attempt))
