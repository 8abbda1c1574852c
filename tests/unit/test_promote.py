"""Promote applies every change or none, and never follows a link in the workspace or the target."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from assure import promote


def _file(path: str, kind: str = "added", mode: int = 0o644) -> dict:
    return {"path": path, "kind": kind, "after": {"kind": "file", "mode": mode}}


def _dir(path: str, kind: str = "added") -> dict:
    return {"path": path, "kind": kind, "after": {"kind": "dir", "mode": 0o755}}


def _deleted(path: str) -> dict:
    return {"path": path, "kind": "deleted", "after": None}


def _commit(workspace: Path, target: Path, items: list[dict]) -> None:
    promote.preflight(workspace, target, items)
    promote._apply(workspace, target, items)


def _tree(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            out[rel] = "link" if p.is_symlink() else "dir" if p.is_dir() else p.read_text()
    return out


@pytest.fixture()
def trees(tmp_path):
    ws, target = tmp_path / "ws", tmp_path / "target"
    ws.mkdir()
    target.mkdir()
    return ws, target


def test_a_file_where_the_target_has_a_folder_fails_before_anything_is_applied(trees):
    ws, target = trees
    (ws / "a.txt").write_text("new a")
    (ws / "d").write_text("a file now")
    (target / "d").mkdir()
    (target / "d" / "keep").write_text("kept")
    before = _tree(target)
    with pytest.raises(promote.PromoteError, match="something else there"):
        _commit(ws, target, [_file("a.txt"), _file("d", "modified")])
    assert _tree(target) == before


def test_a_folder_where_the_target_has_a_file_fails_before_anything_is_applied(trees):
    ws, target = trees
    (ws / "a.txt").write_text("new a")
    (ws / "f").mkdir()
    (ws / "f" / "new.txt").write_text("inside")
    (target / "f").write_text("a file in the target")
    before = _tree(target)
    with pytest.raises(promote.PromoteError, match="something else there"):
        _commit(ws, target, [_file("a.txt"), _dir("f", "modified"), _file("f/new.txt")])
    with pytest.raises(promote.PromoteError, match="f in .* is not a folder"):
        _commit(ws, target, [_file("a.txt"), _file("f/new.txt")])
    assert _tree(target) == before


def test_a_deletion_in_the_same_commit_clears_the_way(trees):
    ws, target = trees
    (ws / "d").write_text("a file now")
    (target / "d").mkdir()
    (target / "d" / "old").write_text("old")
    _commit(ws, target, [_deleted("d/old"), _deleted("d"), _file("d", "added")])
    assert _tree(target) == {"d": "a file now"}


def test_links_in_the_target_or_the_workspace_are_never_followed(trees, tmp_path):
    ws, target = trees
    host = tmp_path / "host"
    host.mkdir()
    (host / "canary").write_text("host data")
    (target / "docs").symlink_to(host)
    (ws / "docs").mkdir()
    (ws / "docs" / "canary").write_text("overwritten?")
    with pytest.raises(promote.PromoteError, match="not a folder"):
        _commit(ws, target, [_file("docs/canary")])
    (ws / "src").symlink_to(host)
    with pytest.raises(promote.PromoteError, match="workspace has no file"):
        _commit(ws, target, [_file("src/canary")])
    with pytest.raises(promote.PromoteError, match="refusing to promote a symlink"):
        _commit(ws, target, [{"path": "src", "kind": "added", "after": {"kind": "symlink", "mode": 0o777}}])
    assert _tree(host) == {"canary": "host data"}
    (ws / "link").symlink_to(host / "canary")
    assert promote._text(ws, "link") is None  # a patch never shows the link target's content
    assert promote._text(ws, "src/canary") == []  # nothing beneath the workspace has that path


def test_files_are_applied_with_their_mode_and_sparse_files_stay_sparse(trees):
    ws, target = trees
    (ws / "out").mkdir()
    (ws / "out" / "run.sh").write_text("echo hi")
    with open(ws / "out" / "big", "wb") as fh:
        fh.truncate(2**40)
    _commit(ws, target, [_dir("out"), _file("out/run.sh", mode=0o755), _file("out/big")])
    assert (target / "out" / "run.sh").read_text() == "echo hi"
    assert (target / "out" / "run.sh").stat().st_mode & 0o777 == 0o755
    assert (target / "out" / "big").stat().st_size == 2**40
    assert (target / "out" / "big").stat().st_blocks == 0
