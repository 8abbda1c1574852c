"""The driver's heartbeat is written at most once per DRIVER_BEAT_SECONDS by a process
(records/health.py `beat_driver`): an attempt's twenty phase and poll beats are two or three
writes, and the monitor still sees it far within DRIVER_STALE_SECONDS."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assure.records import health


def test_a_beat_soon_after_the_last_is_skipped_and_a_later_one_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(health.time, "monotonic", lambda: clock[0])
    path = tmp_path / health.HEALTH_DIR / "driver.json"
    health.beat_driver(path, phase="prepare")
    assert json.loads(path.read_text())["detail"] == {"phase": "prepare"}
    clock[0] += health.DRIVER_BEAT_SECONDS / 2
    health.beat_driver(path, phase="start")
    assert json.loads(path.read_text())["detail"] == {"phase": "prepare"}
    clock[0] += health.DRIVER_BEAT_SECONDS
    health.beat_driver(path, phase="run")
    written = json.loads(path.read_text())
    assert written["detail"] == {"phase": "run"} and written["component"] == health.DRIVER
    assert health.DRIVER_BEAT_SECONDS * 10 < health.DRIVER_STALE_SECONDS


def test_each_heartbeat_path_has_its_own_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(health.time, "monotonic", lambda: 5000.0)
    first, second = tmp_path / "a" / "driver.json", tmp_path / "b" / "driver.json"
    health.beat_driver(first)
    health.beat_driver(second)
    assert first.is_file() and second.is_file()
