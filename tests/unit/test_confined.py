"""Confined file operations on a hostile tree: nothing followed, nothing special opened, nothing
materialized, every failure a bounded OSError or a report line, never a crash or a hang."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from assure.core import confined


@pytest.fixture(params=["openat2", "walk"])
def resolver(request, monkeypatch):
    """Every test runs twice: with openat2 (this kernel has it) and with the O_NOFOLLOW walk."""
    if request.param == "walk":
        monkeypatch.setattr(confined, "_openat2_ok", False)
    else:
        assert confined._openat2_ok, "this kernel (>= 5.6) should have openat2"
    return request.param


@pytest.fixture()
def host(tmp_path: Path) -> Path:
    """A host directory outside the tree, with a canary the tree's symlinks point at."""
    outside = tmp_path / "host"
    outside.mkdir()
    (outside / "canary").write_text("host data")
    return outside


def _write(root: Path, rel: str, data: bytes, **options) -> None:
    """Write `data` beneath root the way the host does: a confined copy of a file of its own."""
    source = root.parent / ".source"
    source.mkdir(exist_ok=True)
    (source / "f").write_bytes(data)
    confined.copy_file(source, "f", root, rel, max_bytes=1 << 20, **options)


def _symlinked_tree(root: Path, host: Path) -> None:
    """A symlink to the host directory at every depth, in place of a directory."""
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "a" / "b" / "c" / "f.txt").write_text("real")
    for d in (root, root / "a", root / "a" / "b", root / "a" / "b" / "c"):
        (d / "link").symlink_to(host)
    (root / "a" / "b" / "c" / "file_link").symlink_to(host / "canary")


def _unchanged(host: Path) -> None:
    assert sorted(p.name for p in host.iterdir()) == ["canary"]
    assert (host / "canary").read_text() == "host data"


def test_reads_never_follow_a_symlink_at_any_depth(tmp_path, host, resolver):
    root = tmp_path / "ws"
    _symlinked_tree(root, host)
    assert confined.read_file(root, "a/b/c/f.txt", 100) == b"real"
    for rel in (
        "link/canary",
        "a/link/canary",
        "a/b/link/canary",
        "a/b/c/link/canary",
        "a/b/c/file_link",
    ):
        with pytest.raises(OSError):
            confined.read_file(root, rel, 100)
        with pytest.raises(OSError):
            confined.copy_file(root, rel, tmp_path, "out", max_bytes=100)
    assert confined.lstat(root, "a/b/link/canary") is None
    assert stat.S_ISLNK(confined.lstat(root, "a/b/link").st_mode)
    for bad in ("../host/canary", "a/../../host/canary", "/etc/passwd", "", "a//b", "./a"):
        with pytest.raises(OSError):
            confined.read_file(root, bad, 100)
    _unchanged(host)


def test_writes_and_removals_never_reach_through_a_symlink(tmp_path, host, resolver):
    root = tmp_path / "ws"
    _symlinked_tree(root, host)
    for rel in ("link/canary", "a/link/canary", "a/b/c/link/new"):
        with pytest.raises(NotADirectoryError):
            _write(root, rel, b"evil")
        assert confined.remove(root, rel) is False
    assert confined.remove(root, "a/b/c/file_link") is True  # the link goes, not its target
    # clear_way (a tree the host owns): the symlinked parent is replaced by a real directory
    _write(root, "a/b/link/canary", b"restored", clear_way=True)
    assert (root / "a" / "b" / "link").is_dir() and not (root / "a" / "b" / "link").is_symlink()
    assert confined.read_file(root, "a/b/link/canary", 100) == b"restored"
    assert confined.remove(root, "a") is True
    assert not (root / "a").exists()
    _unchanged(host)


def test_copy_tree_recreates_links_and_skips_special_files(tmp_path, host, resolver):
    root = tmp_path / "ws"
    _symlinked_tree(root, host)
    os.mkfifo(root / "fifo")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(root / "sock"))
    (root / "hard1").write_text("shared")
    os.link(root / "hard1", root / "hard2")
    try:
        report = confined.copy_tree(root, tmp_path / "copy", max_bytes=1 << 20)
    finally:
        server.close()
    copy = tmp_path / "copy"
    assert os.readlink(copy / "a" / "b" / "link") == str(host)
    assert (copy / "a" / "b" / "c" / "f.txt").read_text() == "real"
    assert dict(report.skipped) == {"fifo": "fifo: not copied", "sock": "socket: not copied"}
    assert not (copy / "fifo").exists() and not (copy / "sock").exists()
    (copy / "hard2").write_text("changed")  # separate files now
    assert (copy / "hard1").read_text() == "shared"
    assert report.symlinks == 5 and report.files == 3 and not report.complete
    with pytest.raises(confined.NotRegular):  # a FIFO is refused without blocking
        confined.read_file(root, "fifo", 100)
    _unchanged(host)


def test_a_sparse_file_stays_sparse_and_counts_its_data_only(tmp_path, resolver):
    root = tmp_path / "ws"
    root.mkdir()
    with open(root / "big", "wb") as fh:
        fh.truncate(10 * 2**40)  # 10 TiB of hole
        fh.seek(5 * 2**40)
        fh.write(b"x" * 4096)  # one data extent in the middle
    report = confined.copy_tree(root, tmp_path / "copy", max_bytes=1 << 20)
    big = tmp_path / "copy" / "big"
    assert report.complete and report.files == 1
    assert big.stat().st_size == 10 * 2**40
    assert big.stat().st_blocks * 512 < 1 << 20  # the copy allocates the data, not the hole
    with open(big, "rb") as fh:
        fh.seek(5 * 2**40)
        assert fh.read(4096) == b"x" * 4096
    assert confined.copy_file(root, "big", tmp_path, "single", max_bytes=8192) <= 8192
    assert (tmp_path / "single").stat().st_blocks * 512 < 1 << 20


def test_a_file_with_more_data_than_the_bound_is_refused_whole(tmp_path, resolver):
    root = tmp_path / "ws"
    root.mkdir()
    (root / "small").write_bytes(b"s" * 100)
    (root / "large").write_bytes(b"L" * 10_000)
    report = confined.copy_tree(root, tmp_path / "copy", max_bytes=5_000)
    assert report.refused == ["large"] and report.data_bytes == 100
    assert sorted(os.listdir(tmp_path / "copy")) == ["small"]  # no partial file
    with pytest.raises(confined.TooLarge):
        confined.copy_file(root, "large", tmp_path, "out", max_bytes=5_000)
    assert (
        not (tmp_path / "out").exists()
        and [p for p in os.listdir(tmp_path) if p.startswith(".out")] == []
    )
    with pytest.raises(confined.TooLarge):
        confined.read_file(root, "large", 5_000)


def test_hostile_names_are_data(tmp_path, resolver):
    root = tmp_path / "ws"
    root.mkdir()
    names = [
        "new\nline",
        "[bold]x",
        "x]",
        "[link=https:evil]y",
        "-rf",
        "\x1b[31mred",
        os.fsdecode(b"bad\xffutf8"),
    ]
    for name in names:
        _write(root, f"d/{name}", name.encode("utf-8", "surrogateescape"))
    report = confined.copy_tree(root, tmp_path / "copy", max_bytes=1 << 20)
    assert report.complete and report.files == len(names)
    for name in names:
        assert confined.read_file(tmp_path / "copy", f"d/{name}", 100) == name.encode(
            "utf-8", "surrogateescape"
        )
    assert sorted(rel for rel, _ in confined.walk(root)) == sorted(
        ["d"] + [f"d/{n}" for n in names]
    )


def test_a_600_kb_path_gives_bounded_errors(tmp_path, resolver):
    """Deeper than any limit (2400 levels, 600 KB of path): errors and report lines only."""
    root = tmp_path / "ws"
    root.mkdir()
    part = "p" * 250
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(2400):
        os.mkdir(part, dir_fd=fd)
        nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    with open(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as fh:
        fh.write("deep")
    os.close(fd)
    try:
        rel = "/".join([part] * 2400 + ["leaf"])
        assert len(rel) > 600_000
        assert (
            confined.read_file(root, rel, 100) == b"deep"
        )  # fd-relative, so PATH_MAX does not apply
        report = confined.copy_tree(root, tmp_path / "copy", max_bytes=1 << 20)
        assert report.dirs == confined.MAX_DEPTH and report.skipped_count == 1
        assert "deeper than" in report.skipped[0][1]
        assert sum(1 for _ in confined.walk(root)) == confined.MAX_DEPTH
        assert confined.remove(root, part) is True
        assert os.listdir(root) == []
    finally:  # pytest's own cleanup (shutil.rmtree) recurses, and would fail on this tree
        confined.remove(tmp_path, "ws")


def test_chown_tree_changes_links_not_their_targets(tmp_path, host):
    if os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    root = tmp_path / "ws"
    _symlinked_tree(root, host)
    confined.chown_tree(root, 10001, 10001)
    owners = {os.lstat(p).st_uid for p in [root, *root.rglob("*")]}
    assert owners == {10001}
    assert os.lstat(host).st_uid == 0 and os.lstat(host / "canary").st_uid == 0
