"""Container filesystem changes: read from the writable layer, mount points left out."""

import os

from assure.verify.container import filesystem_changes, layer_changes
from assure.verify.findings import Kind
from assure.verify.snapshot import take


def test_layer_changes_reads_writes_and_whiteouts(tmp_path):
    layer = tmp_path / "upper"
    (layer / "home" / "agent").mkdir(parents=True)
    (layer / "home" / "agent" / "planted").write_bytes(b"x")
    (layer / "etc").mkdir()
    os.mknod(layer / "etc" / "motd", 0o600 | 0o020000, os.makedev(0, 0))  # overlay whiteout
    (layer / "var").mkdir()
    (layer / "var" / ".wh.cache").write_bytes(b"")  # whiteout as fuse-overlayfs may write it
    (layer / "usr" / "sbin").mkdir(parents=True)
    (layer / "usr" / "sbin" / "docker-init").write_bytes(b"")
    changes = layer_changes(take(layer))
    kinds = {c["path"]: c["kind"] for c in changes}
    assert kinds == {
        "/etc": "modified",
        "/etc/motd": "deleted",
        "/home": "modified",
        "/home/agent": "modified",
        "/home/agent/planted": "added",
        "/usr": "modified",
        "/usr/sbin": "modified",
        "/usr/sbin/docker-init": "added",
        "/var": "modified",
        "/var/cache": "deleted",
    }
    found = {f.subject for f in filesystem_changes(changes)}
    # mount points and folders implied by a listed child are left out; everything else is a breach
    assert found == {"/etc/motd", "/home/agent/planted", "/var/cache"}
    assert all(f.kind is Kind.CONTAINER_CHANGED for f in filesystem_changes(changes))


def test_an_empty_new_folder_is_still_reported(tmp_path):
    layer = tmp_path / "upper"
    (layer / "opt" / "stash").mkdir(parents=True)
    assert {f.subject for f in filesystem_changes(layer_changes(take(layer)))} == {"/opt/stash"}


def test_the_claim_folder_is_no_mount_point_to_leave_out(tmp_path):
    """/run/assure-claim is in the agent image (a pooled agent's claim is mounted on it, which
    changes no layer): an agent that changes the folder itself is reported, pooled or not."""
    layer = tmp_path / "upper"
    (layer / "run" / "assure-claim").mkdir(parents=True)
    os.utime(layer / "run" / "assure-claim", (0, 0))
    assert {f.subject for f in filesystem_changes(layer_changes(take(layer)))} == {
        "/run/assure-claim"
    }
