"""The hash helper processes: same digests as hashlib, checks on the descriptor, and a failed
helper costs time (the walk hashes its files itself), never a wrong digest or a finding."""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

import pytest

import assure.verify.snapshot as snapshot
from assure.verify import hasher
from assure.verify.hasher import CHANGED, HashPool, identity


@pytest.fixture
def pool():
    pool = HashPool(2)
    yield pool
    pool.close()


HELPED = snapshot.Hashing(
    helpers=2, helper_after_bytes=0
)  # every file hashed in two helpers, whatever this machine's CPUs


@pytest.fixture
def helped(monkeypatch: pytest.MonkeyPatch):
    """A pool of their own for snapshots taken with HELPED."""
    monkeypatch.setattr(hasher, "_shared", None)
    yield
    if hasher._shared is not None:
        hasher._shared.close()


def open_all(paths: list[Path]) -> list[tuple[int, hasher.Identity]]:
    files = []
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        files.append((fd, identity(os.fstat(fd))))
    return files


def test_helpers_answer_what_hashlib_computes_in_order(tmp_path: Path, pool: HashPool) -> None:
    contents = [b"", b"hello\n", os.urandom(3 * hasher.CHUNK_BYTES + 5)] * 3
    paths = []
    for n, data in enumerate(contents):
        (tmp_path / f"f{n}").write_bytes(data)
        paths.append(tmp_path / f"f{n}")
    batches = [open_all(paths[:4]), open_all(paths[4:])]
    for files in batches:
        pool.submit(files)
        for fd, _ in files:
            os.close(fd)  # the helper holds its own duplicate

    answers = pool.oldest() + pool.oldest()

    assert answers == [(hashlib.sha256(data).hexdigest(), None) for data in contents]
    assert not pool.failed


def test_a_descriptor_that_is_not_the_lstat_ed_file_is_not_hashed(
    tmp_path: Path, pool: HashPool
) -> None:
    (tmp_path / "a").write_bytes(b"one")
    (tmp_path / "b").write_bytes(b"two")
    [(fd, _)] = open_all([tmp_path / "a"])
    expected_b = identity(os.lstat(tmp_path / "b"))
    grew = identity(os.fstat(fd))[:3] + (2,) + identity(os.fstat(fd))[4:]  # lstat saw 2 bytes

    pool.submit([(fd, expected_b), (fd, grew)])
    os.close(fd)

    assert pool.oldest() == [(None, CHANGED), (None, CHANGED)]
    assert hasher.hash_here([]) == []


def test_a_pool_whose_helpers_died_takes_no_more_batches(tmp_path: Path, pool: HashPool) -> None:
    (tmp_path / "a").write_bytes(b"data")
    files = open_all([tmp_path / "a"])
    pool.submit(files)  # starts the helpers
    for process, _ in pool.helpers:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    pool.out.clear()  # the answer to that batch may or may not have been sent

    with pytest.raises(hasher.HasherError):
        pool.submit(files)
    os.close(files[0][0])
    assert pool.failed


def test_a_helper_that_answers_out_of_turn_is_not_believed(tmp_path: Path, pool: HashPool) -> None:
    (tmp_path / "a").write_bytes(b"data")
    files = open_all([tmp_path / "a"])
    pool.submit(files)
    os.close(files[0][0])
    pool.out[0] = (pool.out[0][0], 3)  # expect three answers where one will come

    assert pool.oldest() is None
    assert pool.failed


def test_snapshot_through_helpers_matches_hashlib_and_keeps_the_checks(
    tmp_path: Path, helped: None
) -> None:
    contents = {f"d{n % 3}/f{n}": os.urandom(n * 1000) for n in range(150)}
    for name, data in contents.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(data)

    entries = snapshot.take(tmp_path, hashing=HELPED).entries

    assert hasher._shared is not None and len(hasher._shared.helpers) == 2
    assert {p: (e.sha256, e.note) for p, e in entries.items() if e.kind == "file"} == {
        name: (hashlib.sha256(data).hexdigest(), None) for name, data in contents.items()
    }


def test_helpers_killed_mid_walk_cost_time_not_findings_and_the_next_snapshot_starts_new_ones(
    tmp_path: Path, helped: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(400):
        (tmp_path / f"f{n}").write_bytes(b"%d" % n)
    expected = {f"f{n}": (hashlib.sha256(b"%d" % n).hexdigest(), None) for n in range(400)}
    real_submit = HashPool.submit
    sent: list[int] = []

    def submit_then_kill(self: HashPool, files: list) -> None:  # every helper dies with batches out
        real_submit(self, files)
        sent.append(len(files))
        if len(sent) == 2:
            for process, _ in self.helpers:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()

    monkeypatch.setattr(HashPool, "submit", submit_then_kill)
    killed = snapshot.take(tmp_path, hashing=HELPED).entries
    monkeypatch.setattr(HashPool, "submit", real_submit)
    again = snapshot.take(tmp_path, hashing=HELPED).entries

    assert len(sent) >= 2  # the helpers did get batches before they died
    assert (
        {p: (e.sha256, e.note) for p, e in killed.items()}
        == expected
        == {p: (e.sha256, e.note) for p, e in again.items()}
    )
    assert all(process.poll() is None for process, _ in hasher._shared.helpers)


def test_an_interrupted_snapshot_stops_its_helpers(
    tmp_path: Path, helped: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(300):
        (tmp_path / f"f{n}").write_bytes(b"x" * n)
    snapshot.take(tmp_path, hashing=HELPED)
    helpers = [process for process, _ in hasher._shared.helpers]
    real_collect = snapshot._Walk._collect

    # stands in for _Walk._collect, whose signature it copies
    def interrupted(self, keep):  # type: ignore[no-untyped-def]
        if self.pool.out:
            raise KeyboardInterrupt
        real_collect(self, keep)

    monkeypatch.setattr(snapshot._Walk, "_collect", interrupted)
    with pytest.raises(KeyboardInterrupt):
        snapshot.take(tmp_path, hashing=HELPED)

    assert hasher._shared is None
    assert all(process.poll() is not None for process in helpers)


def test_after_a_stalled_helper_a_late_answer_is_never_taken_for_the_next(
    tmp_path: Path, pool: HashPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a").write_bytes(b"first")
    (tmp_path / "b").write_bytes(b"second")
    first, second = open_all([tmp_path / "a"]), open_all([tmp_path / "b"])
    pool.submit(first)
    pool.helpers[0][1].settimeout(0.000001)  # the answer to `first` comes "too late"
    assert pool.oldest() is None
    pool.helpers[0][1].settimeout(5)
    pool.turn = 0
    pool.out.append((0, 1))  # as if `second` had gone to the same helper before the failure

    assert pool.oldest() is None  # not first's digest, which is still queued
    for fd, _ in first + second:
        os.close(fd)
