"""The per-attempt workspace filesystem: refused where it cannot exist, bounded by the kernel,
released with nothing left behind; and how the verifier reads its counters and its copy."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from assure.errors import SandboxError
from assure.records import layout
from assure.sandbox import workspace_fs
from assure.sandbox.workspace_fs import Usage, WorkspaceFs
from assure.verify import judge
from assure.verify.findings import Kind
from assure.verify.snapshot import take

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/dev/loop-control"),
    reason="mounting needs root and loop devices",
)


def usage(bytes_free: int, inodes_free: int, total: int = 100 * 2**20, inodes: int = 1000) -> Usage:
    return Usage(
        bytes_total=total,
        bytes_free=bytes_free,
        inodes_total=inodes,
        inodes_free=inodes_free,
        limit_bytes=total,
        limit_inodes=inodes,
        host_bytes=total - bytes_free,
    )


def test_not_root_is_refused_naming_the_field_and_the_fix(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(SandboxError) as info:
        workspace_fs.require()
    assert info.value.where == "limits.disk"
    assert "assure runs as uid 1000, and mounting it needs root" in info.value.message
    assert "run assure as root" in info.value.fix


def test_a_loop_device_the_kernel_freed_meanwhile_is_no_failure_and_one_still_attached_is(
    monkeypatch, tmp_path
):
    """After umount the kernel's autoclear may free the device between the listing and
    `losetup -d` (ENXIO): seen twice in ~200 attempts of the bench. Only a device still backed
    by the image after the refusal is a failure."""
    image = tmp_path / "workspace.img"
    listings = iter([["/dev/loop9"], []])
    monkeypatch.setattr(workspace_fs, "_loops_backed_by", lambda _image: next(listings))

    def refused(args: list[str], what: str) -> None:
        raise SandboxError(
            f"{what}: `{' '.join(args)}` exited 1: losetup: /dev/loop9: detach failed: No such"
            " device or address"
        )

    monkeypatch.setattr(workspace_fs, "_command", refused)
    workspace_fs.detach_loops(image)  # freed by the kernel meanwhile
    monkeypatch.setattr(workspace_fs, "_loops_backed_by", lambda _image: ["/dev/loop9"])
    with pytest.raises(SandboxError, match="cannot free the workspace's loop device"):
        workspace_fs.detach_loops(image)


def test_full_means_less_than_one_percent_left_of_bytes_or_inodes():
    assert not usage(50 * 2**20, 500).bytes_full
    assert usage(2**20 - 1, 500).bytes_full and not usage(2**20 - 1, 500).inodes_full
    assert usage(50 * 2**20, 9).inodes_full
    assert usage(0, 0).to_json()["bytes_used"] == 100 * 2**20


def test_a_full_filesystem_is_a_disk_limit_failure_and_a_roomy_one_is_nothing():
    (finding,) = judge._disk_limit(usage(0, 500).to_json())
    assert finding.kind is Kind.DISK_LIMIT and finding.severity == "fail"
    assert finding.message.startswith(
        f"disk limit reached: {100 * 2**20} of {100 * 2**20} bytes / 500 of 1000 inodes used (bytes"
        " exhausted"
    )
    assert judge._disk_limit(usage(50 * 2**20, 500).to_json()) == []
    assert judge._disk_limit(None) == []  # a run from before bounded workspaces


def tree(root: Path) -> Path:
    (root / "d").mkdir(parents=True)
    (root / "d" / "f").write_text("x")
    (root / "link").symlink_to("d/f")
    os.mkfifo(root / "pipe")
    return root


def test_the_recheck_compares_what_the_copy_carries_and_nothing_else(tmp_path):
    from assure.core import confined, private

    post = take(tree(tmp_path / "mount"))
    report = {
        **confined.copy_tree(
            tmp_path / "mount", tmp_path / "workspace", max_bytes=2**20, modes=private.copy_mode
        ).to_json(),
        "modes": private.COPY_MODES,
    }  # as the copy-out records it
    assert [rel for rel, _ in report["skipped"]] == ["pipe"]
    assert not judge._workspace_moved(post, take(tmp_path / "workspace"), report)
    (tmp_path / "workspace" / "d" / "f").write_text("y")
    assert judge._workspace_moved(post, take(tmp_path / "workspace"), report)
    (finding,) = judge._not_carried(report)
    assert (finding.kind, finding.subject) == (Kind.NOT_CHECKED, "pipe")


@needs_root
def test_the_kernel_stops_writes_at_the_limit_and_release_leaves_nothing(tmp_path):
    fs = WorkspaceFs.create(tmp_path, size=16 * 2**20, inodes=1024)
    try:
        assert (
            fs.workspace.parent == fs.mount_point and not fs.workspace.exists()
        )  # the caller's copy makes it
        fs.workspace.mkdir()
        with pytest.raises(OSError) as info, open(fs.workspace / "zeros", "wb") as fh:
            for _ in range(32):
                fh.write(b"\0" * 2**20)
                fh.flush()
                os.fsync(fh.fileno())
        assert info.value.errno == errno.ENOSPC
        got = fs.usage()
        assert got.bytes_full and got.host_bytes <= 16 * 2**20
    finally:
        fs.release()
    fs.release()  # idempotent
    assert not fs.image.exists() and not fs.mount_point.exists()
    assert str(tmp_path) not in Path("/proc/self/mountinfo").read_text()
    assert (
        str(tmp_path)
        not in subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    )


@needs_root
def test_orphans_are_released_only_when_their_run_is_not_driven(tmp_path):
    attempt = tmp_path / "run-1" / "attempts" / "1"
    attempt.mkdir(parents=True)
    fs = WorkspaceFs.create(attempt, size=8 * 2**20, inodes=1024)
    try:
        assert workspace_fs.release_orphans(lambda run_dir: False, layout.mount_owner) == []
        assert fs.mount_point.resolve() in [
            p for p, _ in workspace_fs.workspace_mounts(layout.mount_owner)
        ]
        assert workspace_fs.release_orphans(
            lambda run_dir: run_dir == (tmp_path / "run-1").resolve(), layout.mount_owner
        ) == [fs.mount_point.resolve()]
        assert (
            fs.mount_point.resolve()
            not in [p for p, _ in workspace_fs.workspace_mounts(layout.mount_owner)]
            and not fs.image.exists()
        )
    finally:
        fs.release()


@needs_root
def test_a_check_copys_filesystem_left_by_a_dead_driver_is_an_orphan_too(tmp_path):
    attempt = tmp_path / "run-1" / "attempts" / "1"
    attempt.mkdir(parents=True)
    fs = WorkspaceFs.create(attempt, size=8 * 2**20, inodes=1024, name=workspace_fs.CHECK)
    try:
        assert fs.mount_point == attempt / "check.fs"
        # only this test's run counts as orphaned: another session's live mounts are never touched
        assert workspace_fs.release_orphans(
            lambda run_dir: run_dir == (tmp_path / "run-1").resolve(), layout.mount_owner
        ) == [fs.mount_point.resolve()]
        assert not fs.image.exists() and not fs.mount_point.exists()
    finally:
        fs.release()
