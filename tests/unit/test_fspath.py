"""Workspace confinement: no path string, symlink or special file gets the gateway out."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from assure.gateway.fspath import (
    MAX_NAME_BYTES,
    MAX_PATH_BYTES,
    PathError,
    Workspace,
    _read_bounded,
    normalize,
)


@pytest.fixture()
def outside(tmp_path: Path) -> Path:
    target = tmp_path / "outside"
    target.mkdir()
    (target / "secret.txt").write_text("secret")
    return target


@pytest.fixture()
def ws(tmp_path: Path):
    root = tmp_path / "ws"
    root.mkdir()
    workspace = Workspace(str(root))
    yield workspace, root
    workspace.close()


def code_of(call, *args) -> str:
    with pytest.raises(PathError) as info:
        call(*args)
    return info.value.code


@pytest.mark.parametrize(
    "raw, expected",
    [("a/b", "a/b"), ("./a//b/", "a/b"), (".", "."), ("./", "."), ("a/./b/.", "a/b")],
)
def test_normalize_collapses_empty_and_dot_components(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "/etc/passwd",
        "../x",
        "a/../../x",
        "a/..",
        "a\x00b",
        "a/\udc80",
        "x" * (MAX_NAME_BYTES + 1),
        "a/" * (MAX_PATH_BYTES // 2 + 1),
    ],
)
def test_normalize_refuses_bad_paths(raw: str) -> None:
    assert code_of(normalize, raw) == "bad_path"


def test_read_write_delete_list_round_trip(ws) -> None:
    workspace, root = ws
    workspace.write("src/deep/new.txt", b"hello", 0o640)
    assert (root / "src/deep/new.txt").read_bytes() == b"hello"
    assert (root / "src/deep/new.txt").stat().st_mode & 0o777 == 0o640
    assert (root / "src/deep").is_dir()
    assert workspace.read("src/deep/new.txt", 100) == b"hello"
    entries, truncated = workspace.listdir("src/deep")
    assert [(e.name, e.type, e.size) for e in entries] == [("new.txt", "file", 5)]
    assert truncated is False
    workspace.delete("src/deep/new.txt")
    assert not (root / "src/deep/new.txt").exists()
    assert os.listdir(root / "src/deep") == []  # no temp files left behind


def test_dotdot_and_absolute_paths_are_refused_for_every_operation(ws, outside: Path) -> None:
    workspace, _ = ws
    for path in ("../outside/secret.txt", str(outside / "secret.txt")):
        assert code_of(workspace.read, path, 100) == "bad_path"
        assert code_of(workspace.write, path, b"x", 0o644) == "bad_path"
        assert code_of(workspace.delete, path) == "bad_path"
        assert code_of(workspace.listdir, path) == "bad_path"
    assert (outside / "secret.txt").read_text() == "secret"


def test_root_is_only_listable(ws) -> None:
    workspace, _ = ws
    assert code_of(workspace.read, ".", 100) == "bad_path"
    assert code_of(workspace.write, ".", b"x", 0o644) == "bad_path"
    assert code_of(workspace.delete, ".") == "bad_path"
    assert workspace.listdir(".") == ([], False)


def test_symlinked_parent_directory_is_never_followed(ws, outside: Path) -> None:
    workspace, root = ws
    (root / "link").symlink_to(outside)
    assert code_of(workspace.read, "link/secret.txt", 100) == "path_escapes"
    assert code_of(workspace.write, "link/new.txt", b"x", 0o644) == "path_escapes"
    assert code_of(workspace.write, "link/sub/new.txt", b"x", 0o644) == "path_escapes"
    assert code_of(workspace.delete, "link/secret.txt") == "path_escapes"
    assert code_of(workspace.listdir, "link") == "path_escapes"
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "secret"


def test_symlinked_final_component(ws, outside: Path) -> None:
    workspace, root = ws
    (root / "alias.txt").symlink_to(outside / "secret.txt")
    assert code_of(workspace.read, "alias.txt", 100) == "path_escapes"
    workspace.delete("alias.txt")  # removes the link itself
    assert not (root / "alias.txt").is_symlink()
    assert (outside / "secret.txt").read_text() == "secret"


def test_write_replaces_a_symlink_without_touching_its_target(ws, outside: Path) -> None:
    workspace, root = ws
    (root / "alias.txt").symlink_to(outside / "secret.txt")
    workspace.write("alias.txt", b"mine", 0o644)
    assert not (root / "alias.txt").is_symlink()
    assert (root / "alias.txt").read_bytes() == b"mine"
    assert (outside / "secret.txt").read_text() == "secret"


def test_symlink_swapped_in_between_two_calls(ws, outside: Path) -> None:
    workspace, root = ws
    workspace.write("dir/file.txt", b"one", 0o644)
    assert workspace.read("dir/file.txt", 100) == b"one"
    (root / "dir").rename(root / "moved")
    (root / "dir").symlink_to(outside)
    (outside / "file.txt").write_text("outside")
    assert code_of(workspace.read, "dir/file.txt", 100) == "path_escapes"
    assert code_of(workspace.write, "dir/file.txt", b"two", 0o644) == "path_escapes"
    assert (outside / "file.txt").read_text() == "outside"


def test_symlink_swapped_in_mid_walk_is_not_followed(
    ws, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the lstat of a missing parent and its open, a symlink appears: the open refuses
    it."""
    workspace, root = ws
    real_mkdir = os.mkdir

    def racing_mkdir(name, mode=0o777, *, dir_fd=None):  # the agent wins the race
        os.symlink(str(outside), name, dir_fd=dir_fd)
        return real_mkdir(name, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "mkdir", racing_mkdir)
    assert code_of(workspace.write, "new/x.txt", b"x", 0o644) == "path_escapes"
    assert sorted(os.listdir(outside)) == ["secret.txt"]


def test_file_in_the_middle_of_a_path_is_not_a_directory(ws) -> None:
    workspace, root = ws
    (root / "plain").write_text("x")
    assert code_of(workspace.read, "plain/x", 100) == "not_a_directory"
    assert code_of(workspace.write, "plain/x", b"x", 0o644) == "not_a_directory"
    assert code_of(workspace.listdir, "plain") == "not_a_directory"


def test_fifo_is_refused_without_blocking(ws) -> None:
    workspace, root = ws
    os.mkfifo(root / "pipe")
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(code_of(workspace.read, "pipe", 100)))
    reader.start()
    reader.join(timeout=5)
    assert not reader.is_alive(), "reading a FIFO blocked"
    assert result == ["not_a_regular_file"]
    assert code_of(workspace.delete, "pipe") == "not_a_regular_file"
    workspace.write("pipe", b"now a file", 0o644)  # replaced by rename, never opened
    assert (root / "pipe").read_bytes() == b"now a file"


def test_directories_are_refused_where_a_file_is_expected(ws) -> None:
    workspace, root = ws
    (root / "d").mkdir()
    assert code_of(workspace.read, "d", 100) == "is_a_directory"
    assert code_of(workspace.write, "d", b"x", 0o644) == "is_a_directory"
    assert code_of(workspace.delete, "d") == "is_a_directory"
    assert (root / "d").is_dir()


def test_missing_files(ws) -> None:
    workspace, _ = ws
    assert code_of(workspace.read, "nope", 100) == "not_found"
    assert code_of(workspace.read, "no/such/file", 100) == "not_found"
    assert code_of(workspace.delete, "nope") == "not_found"
    assert code_of(workspace.listdir, "nope") == "not_found"


def test_read_is_bounded(ws) -> None:
    workspace, root = ws
    (root / "big").write_bytes(b"x" * 101)
    assert code_of(workspace.read, "big", 100) == "too_large"
    assert workspace.read("big", 101) == b"x" * 101


def test_a_file_that_grew_after_fstat_is_read_whole_and_still_bounded(tmp_path: Path) -> None:
    """The first read is sized from fstat; a file longer by then is read on to its end, in
    steps, and refused once past the limit, as a file read in one go would be."""
    grown = tmp_path / "grown"
    grown.write_bytes(bytes(range(256)) * 1000)  # 256,000 bytes: several READ_CHUNK_BYTES steps
    fd = os.open(grown, os.O_RDONLY)
    try:
        assert _read_bounded(fd, 300_000, "grown", expected=10) == grown.read_bytes()
        os.lseek(fd, 0, os.SEEK_SET)
        with pytest.raises(PathError) as refused:
            _read_bounded(fd, 255_999, "grown", expected=10)
        assert refused.value.code == "too_large"
    finally:
        os.close(fd)


def test_list_reports_symlinks_and_never_follows_them(ws, outside: Path) -> None:
    workspace, root = ws
    (root / "f").write_bytes(b"abc")
    (root / "d").mkdir()
    (root / "l").symlink_to(outside)
    os.mkfifo(root / "p")
    entries, _ = workspace.listdir(".")
    assert [(e.name, e.type) for e in entries] == [
        ("d", "dir"),
        ("f", "file"),
        ("l", "symlink"),
        ("p", "other"),
    ]
    assert entries[1].size == 3
