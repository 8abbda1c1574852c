"""The host-wide uid leases (sandbox/uids.py): a uid is never held twice, comes back on release
and on its holder's death, and is never one a process still runs as or the host knows."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from assure.errors import SandboxError
from assure.sandbox import uids

IDS = range(60600, 60603)
ROOT = Path(__file__).resolve().parents[2]
HOLDER = """
import sys
from pathlib import Path
from assure.sandbox import uids
uids.running_uids = set  # as no_sandbox_runs_here does here: a real run may run as 60600
lease = uids.lease(Path(sys.argv[1]), range(60600, 60603))
print(lease.uid, flush=True)
sys.stdin.read()
"""
RUNNING = uids.running_uids


@pytest.fixture(autouse=True)
def no_sandbox_runs_here(monkeypatch):
    """A real run of this host's (another test session) may run as 60600: these tests see none."""
    monkeypatch.setattr(uids, "running_uids", set)


def test_two_leases_never_hold_the_same_uid_and_a_released_one_comes_back(tmp_path):
    a, b = uids.lease(tmp_path, IDS), uids.lease(tmp_path, IDS)
    assert (a.uid, b.uid) == (60600, 60601) and a.gid == a.uid
    a.release()
    a.release()  # twice is harmless
    with uids.lease(tmp_path, IDS) as c:
        assert c.uid == 60600
    assert uids.lease(tmp_path, IDS).uid == 60600  # released by the with block


def test_when_every_uid_is_held_the_lease_is_refused_naming_the_range(tmp_path):
    held = [uids.lease(tmp_path, IDS) for _ in IDS]
    with pytest.raises(SandboxError, match="60600-60602"):
        uids.lease(tmp_path, IDS)
    assert sorted(h.uid for h in held) == list(IDS)


def test_a_uid_held_by_another_process_is_skipped_and_comes_back_when_that_process_is_killed(
    tmp_path,
):
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert child.stdout.readline().strip() == "60600"
        mine = uids.lease(tmp_path, IDS)
        assert mine.uid == 60601  # the child's lock holds 60600
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert uids.lease(tmp_path, IDS).uid == 60600  # the kernel dropped the dead holder's lock


def test_a_uid_a_process_still_runs_as_is_skipped_though_its_lock_is_free(tmp_path, monkeypatch):
    """A killed driver's containers run on until they are reaped: their uid is not handed out."""
    monkeypatch.setattr(uids, "running_uids", lambda: {60600})
    assert uids.lease(tmp_path, IDS).uid == 60601


def test_the_running_uids_are_read_from_every_process_of_the_host():
    assert os.getuid() in RUNNING()


def test_a_uid_the_host_knows_is_never_leased(tmp_path):
    with pytest.raises(SandboxError):
        uids.lease(tmp_path, range(0, 1))  # root


def test_a_lock_folder_others_can_write_is_refused(tmp_path):
    folder = tmp_path / "locks"
    folder.mkdir()
    os.chmod(folder, 0o777)
    with pytest.raises(SandboxError, match="alone"):
        uids.lease(folder, IDS)
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    with pytest.raises(SandboxError):
        uids.lease(link, IDS)


def test_the_range_is_apart_from_the_images_user_regular_users_and_systemds_dynamic_users():
    assert (
        10001 not in uids.IDS
        and uids.IDS.start > 60513
        and uids.IDS.stop <= 61184
        and uids.IDS.stop <= 65534
    )


def test_a_container_uid_running_under_a_userns_remap_counts_as_running(tmp_path, monkeypatch):
    """Under `userns-remap`, a sandbox's uid 60600 runs on the host as dockremap's start + 60600:
    /proc alone showed only that, and 60600 was handed out again."""
    subuid = tmp_path / "subuid"
    subuid.write_text("someone:100000:65536\ndockremap:165536:65536\nbroken:line\n")
    assert uids.remapped({165536 + 60600, 100000 + 60601, 42}, subuid) == {60600}
    assert uids.remapped({165536 + 60600}, tmp_path / "none") == set()
    monkeypatch.setattr(uids, "SUBUID", subuid)
    child = subprocess.Popen(["sleep", "60"], user=165536 + 60602, group=165536 + 60602)
    try:
        assert 60602 in RUNNING()  # what `lease` skips
    finally:
        child.kill()
        child.wait(timeout=30)
