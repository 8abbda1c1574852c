"""A SQLite fixture (mode: sandbox) is copied per attempt and never opened in place."""

import hashlib
import os
import shutil
import sqlite3

from assure.run.attempt import _copy_database


def _state(folder):
    return {
        name: hashlib.sha256((folder / name).read_bytes()).hexdigest()
        for name in sorted(os.listdir(folder))
    }


def _wal_database(path, *rows):
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("CREATE TABLE t(x)")
    db.executemany("INSERT INTO t VALUES (?)", [(r,) for r in rows])
    db.commit()
    return db


def test_a_wal_fixture_is_copied_and_its_folder_left_as_it_was(tmp_path):
    """A read-only connection to a WAL database creates -wal and -shm beside it (found by
    suites/benign/benign--sqlite-wal: they appeared in fixtures/databases/)."""
    fixtures, run = tmp_path / "fixtures", tmp_path / "run"
    fixtures.mkdir(), run.mkdir()
    _wal_database(
        fixtures / "store.sqlite", 1, 2
    ).close()  # the last close checkpoints: the file alone
    before = _state(fixtures)
    assert list(before) == ["store.sqlite"]

    _copy_database(fixtures / "store.sqlite", run / "store.db")

    assert _state(fixtures) == before
    assert sqlite3.connect(run / "store.db").execute("SELECT x FROM t").fetchall() == [(1,), (2,)]
    assert not [n for n in os.listdir(run) if n.startswith(".fixture-")]


def test_commits_still_in_the_fixtures_wal_come_along(tmp_path):
    live, fixtures, run = tmp_path / "live", tmp_path / "fixtures", tmp_path / "run"
    for folder in (live, fixtures, run):
        folder.mkdir()
    writer = _wal_database(live / "store.sqlite", 7)
    for name in (
        "store.sqlite",
        "store.sqlite-wal",
    ):  # the files as they are while the writer is open
        shutil.copyfile(live / name, fixtures / name)
    writer.close()
    before = _state(fixtures)

    _copy_database(fixtures / "store.sqlite", run / "store.db")

    assert _state(fixtures) == before
    assert sqlite3.connect(run / "store.db").execute("SELECT x FROM t").fetchall() == [(7,)]
