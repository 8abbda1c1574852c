"""What assure keeps is the invoking user's alone: its folders are 0700 whatever the umask, the
workspace copy carries no group or other access and no special bit, and a promoted file gets
one of git's two modes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from assure.core import confined, private
from assure.records import alerts, store
from assure.verify import judge
from assure.verify.snapshot import take


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_folders_are_made_private_whatever_the_umask_and_a_folder_already_there_is_left_alone(
    tmp_path: Path,
) -> None:
    old = os.umask(0)
    try:
        private.make_folder(tmp_path / "a" / "b" / "c")
        (tmp_path / "shared").mkdir(mode=0o777)
        private.make_folder(
            tmp_path / "shared", exist_ok=True
        )  # `--runs-dir /tmp` must not close /tmp
    finally:
        os.umask(old)
    assert [mode(tmp_path / p) for p in ("a", "a/b", "a/b/c")] == [0o700] * 3
    assert mode(tmp_path / "shared") == 0o777


def test_a_run_directory_and_the_runs_base_it_makes_are_private(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\n")
    old = os.umask(0o022)
    try:
        run = store.RunDir.new(tmp_path / ".assure" / "runs", "s", spec, {})
    finally:
        os.umask(old)
    assert (
        mode(tmp_path / ".assure") == mode(tmp_path / ".assure" / "runs") == mode(run.path) == 0o700
    )


def test_the_alert_sink_is_made_readable_by_its_owner_only(tmp_path: Path) -> None:
    sink = tmp_path / "alerts.jsonl"
    alerts._append_line(sink, b"{}\n")
    assert mode(sink) == private.FILE_MODE


def test_the_workspace_copy_normalizes_what_a_hostile_agent_left(tmp_path: Path) -> None:
    """0o666 files, 0o777 folders, setuid, setgid and sticky bits become owner-only modes, with
    the owner's execute bit kept where the agent set it; the recheck accepts exactly that copy."""
    mount = tmp_path / "mount"
    (mount / "open").mkdir(parents=True)
    (mount / "open" / "world.txt").write_text("rw for all")
    (mount / "suid").write_text("#!/bin/sh\n")
    (mount / "sgid-dir").mkdir()
    (mount / "plain").write_text("x")
    for rel, bits in (
        ("open", 0o777),
        ("open/world.txt", 0o666),
        ("suid", 0o4755),
        ("sgid-dir", 0o3775),
        ("plain", 0o640),
    ):
        os.chmod(mount / rel, bits)
    post = take(mount)
    report = confined.copy_tree(mount, tmp_path / "copy", max_bytes=2**20, modes=private.copy_mode)
    copy = tmp_path / "copy"
    assert {
        rel: mode(copy / rel) for rel in ("open", "open/world.txt", "suid", "sgid-dir", "plain")
    } == {"open": 0o700, "open/world.txt": 0o600, "suid": 0o700, "sgid-dir": 0o700, "plain": 0o600}
    assert mode(copy) == 0o700
    recorded = {**report.to_json(), "modes": private.COPY_MODES}  # as the copy-out records it
    assert not judge._workspace_moved(post, take(copy), recorded)
    os.chmod(
        copy / "open" / "world.txt", 0o666
    )  # the agent's mode put back: not what the copy-out made
    assert judge._workspace_moved(post, take(copy), recorded)
    older = confined.copy_tree(
        mount, tmp_path / "older", max_bytes=2**20
    )  # a run from before kept the agent's modes
    assert not judge._workspace_moved(post, take(tmp_path / "older"), older.to_json())


def test_a_promoted_file_gets_one_of_gits_modes() -> None:
    assert [private.promoted_mode(m) for m in (0o4777, 0o666, 0o100, 0o011, 0)] == [
        0o755,
        0o644,
        0o755,
        0o644,
        0o644,
    ]
