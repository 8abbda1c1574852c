"""core.atomic: the one write-then-rename, used by the host and the gateway alike."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from assure.core import atomic


def test_concurrent_writers_of_one_file_never_leave_a_torn_or_foreign_file(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(50):
                atomic.write_json(target, {"writer": n, "i": i, "pad": "x" * 4096})
        except BaseException as exc:  # a shared temp name makes one writer's rename fail
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert json.loads(target.read_text())["i"] == 49
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_the_mode_is_the_one_asked_for_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        atomic.write_bytes(tmp_path / "ready", b"{}\n", mode=0o644)
    finally:
        os.umask(old)
    assert (tmp_path / "ready").stat().st_mode & 0o777 == 0o644


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "verdict.json"
    atomic.write_json(target, {"verdict": "pass"})
    with pytest.raises(TypeError):
        atomic.write_json(target, {"verdict": object()})
    assert json.loads(target.read_text()) == {"verdict": "pass"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["verdict.json"]


def test_a_symlink_planted_at_the_temporary_name_is_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("keep")
    folder = tmp_path / "run"
    folder.mkdir()
    atomic.write_bytes(folder / "file", b"new")
    assert outside.read_text() == "keep" and (folder / "file").read_bytes() == b"new"
    (folder / "file").unlink()
    os.symlink(
        outside, folder / "file"
    )  # the final name may be a link: it is replaced, not followed
    atomic.write_bytes(folder / "file", b"new")
    assert outside.read_text() == "keep" and not (folder / "file").is_symlink()
