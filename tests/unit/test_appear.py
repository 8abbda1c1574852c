"""The gateway's ready file is waited for by an inotify watch on its folder (run/appear.py):
an entry made after the watch, even before the first wait, wakes it; with nothing new a wait
ends empty; a folder that cannot be watched still waits, by sleeping."""

from __future__ import annotations

import os
from pathlib import Path

from assure.core import atomic
from assure.run import appear


def test_an_atomic_write_after_the_watch_is_seen_and_drained(tmp_path: Path) -> None:
    with appear.Appearance(tmp_path) as arrival:
        atomic.write_bytes(tmp_path / "ready", b"{}", sync=False)  # tmp created, renamed in
        assert arrival.wait(5.0) is True
        assert arrival.wait(0.0) is False  # every event of that write was read


def test_a_rename_into_the_folder_is_seen(tmp_path: Path) -> None:
    watched, elsewhere = tmp_path / "state", tmp_path / "other"
    watched.mkdir()
    elsewhere.mkdir()
    (elsewhere / "ready").write_text("{}")
    with appear.Appearance(watched) as arrival:
        os.rename(elsewhere / "ready", watched / "ready")
        assert arrival.wait(5.0) is True


def test_a_change_to_an_existing_file_does_not_wake_it(tmp_path: Path) -> None:
    (tmp_path / "journal.jsonl").write_text("")
    with appear.Appearance(tmp_path) as arrival:
        with open(tmp_path / "journal.jsonl", "a") as fh:
            fh.write("a line\n")
        assert arrival.wait(0.0) is False


def test_an_unwatchable_folder_still_waits_and_closes(tmp_path: Path) -> None:
    arrival = appear.Appearance(tmp_path / "absent")
    assert arrival.wait(0.001) is False
    arrival.close()
    arrival.close()  # idempotent: the attempt closes it on every path
