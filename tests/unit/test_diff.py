"""diff(): every end-state change between PRE and POST, judged by hash, failing closed."""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from assure.verify.diff import Change, diff
from assure.verify.snapshot import Entry, Limits, Snapshot, take


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "a.txt").write_bytes(b"alpha\n")
    (tmp_path / "b.txt").write_bytes(b"bravo\n")
    os.symlink("b.txt", tmp_path / "link")
    return tmp_path


def changes_after(
    ws: Path, mutate: Callable[[Path], None], limits: Limits = Limits()
) -> tuple[list[Change], Snapshot, Snapshot]:
    pre = take(ws, limits)
    mutate(ws)
    post = take(ws, limits)
    return diff(pre, post), pre, post


def modified(path: str, fields: tuple[str, ...], pre: Snapshot, post: Snapshot) -> Change:
    return Change(path, "modified", fields, pre.entries[path], post.entries[path])


def test_nothing_changed(ws: Path) -> None:
    assert changes_after(ws, lambda ws: None)[0] == []


def test_content_change_with_size_and_mtime_restored_is_found(ws: Path) -> None:
    def rewrite(ws: Path) -> None:
        st = os.stat(ws / "b.txt")
        (ws / "b.txt").write_bytes(b"BRAVO\n")
        os.utime(ws / "b.txt", ns=(st.st_atime_ns, st.st_mtime_ns))

    changes, pre, post = changes_after(ws, rewrite)

    assert changes == [modified("b.txt", ("content",), pre, post)]
    assert (
        pre.entries["b.txt"].size,
        pre.entries["b.txt"].sha256 != post.entries["b.txt"].sha256,
    ) == (6, True)


def test_mode_change_including_setuid(ws: Path) -> None:
    changes, pre, post = changes_after(ws, lambda ws: os.chmod(ws / "b.txt", 0o4644))

    assert changes == [modified("b.txt", ("mode",), pre, post)]


def test_owner_change(ws: Path) -> None:
    changes, pre, post = changes_after(ws, lambda ws: os.chown(ws / "dir" / "a.txt", 1234, 5678))

    assert changes == [modified("dir/a.txt", ("owner",), pre, post)]
    assert (post.entries["dir/a.txt"].uid, post.entries["dir/a.txt"].gid) == (1234, 5678)


def test_xattr_change(ws: Path) -> None:
    try:
        os.setxattr(ws / "b.txt", "user.tag", b"one")
    except OSError as error:
        if error.errno != errno.ENOTSUP:
            raise
        pytest.skip(f"this filesystem has no user xattrs: {ws}")

    changes, pre, post = changes_after(ws, lambda ws: os.setxattr(ws / "b.txt", "user.tag", b"two"))

    assert changes == [modified("b.txt", ("xattrs",), pre, post)]


def test_hard_link_added(ws: Path) -> None:
    changes, pre, post = changes_after(ws, lambda ws: os.link(ws / "b.txt", ws / "dir" / "hard"))

    assert changes == [
        modified("b.txt", ("link",), pre, post),
        Change("dir/hard", "added", (), None, post.entries["dir/hard"]),
    ]
    assert [(post.entries[p].nlink, post.entries[p].link_group) for p in ("b.txt", "dir/hard")] == [
        (2, "b.txt")
    ] * 2


def test_hard_link_regrouped_without_count_change(ws: Path) -> None:
    os.link(ws / "b.txt", ws / "z")

    def relink(ws: Path) -> None:  # z now shares a.txt's inode instead of b.txt's
        os.unlink(ws / "z")
        os.link(ws / "dir" / "a.txt", ws / "z")

    changes, pre, post = changes_after(ws, relink)

    assert [(c.path, c.kind, c.fields) for c in changes] == [
        ("b.txt", "modified", ("link",)),
        ("dir/a.txt", "modified", ("link",)),
        ("z", "modified", ("content", "link")),
    ]


def test_symlink_retargeted(ws: Path) -> None:
    def retarget(ws: Path) -> None:
        os.unlink(ws / "link")
        os.symlink("/etc/shadow", ws / "link")

    changes, pre, post = changes_after(ws, retarget)

    assert changes == [modified("link", ("target",), pre, post)]


def test_file_replaced_by_directory(ws: Path) -> None:
    def replace(ws: Path) -> None:
        os.unlink(ws / "b.txt")
        (ws / "b.txt").mkdir()

    changes, pre, post = changes_after(ws, replace)

    assert changes == [modified("b.txt", ("kind",), pre, post)]


def test_change_reverted_before_the_end_is_no_change(ws: Path) -> None:
    def change_and_revert(ws: Path) -> None:
        (ws / "b.txt").write_bytes(b"evil\n")
        os.chmod(ws / "b.txt", 0o777)
        (ws / "tmp").mkdir()
        shutil.rmtree(ws / "tmp")
        (ws / "b.txt").write_bytes(b"bravo\n")
        os.chmod(ws / "b.txt", 0o644)

    assert changes_after(ws, change_and_revert)[0] == []


def test_rename_is_delete_plus_add(ws: Path) -> None:
    changes, pre, post = changes_after(
        ws, lambda ws: os.rename(ws / "dir" / "a.txt", ws / "dir" / "c.txt")
    )

    assert changes == [
        Change("dir/a.txt", "deleted", (), pre.entries["dir/a.txt"], None),
        Change("dir/c.txt", "added", (), None, post.entries["dir/c.txt"]),
    ]


def test_changes_are_sorted_by_path(ws: Path) -> None:
    def many(ws: Path) -> None:
        (ws / "zz").write_bytes(b"")
        (ws / "0").write_bytes(b"")
        os.unlink(ws / "b.txt")

    changes, _, _ = changes_after(ws, many)

    assert [(c.path, c.kind) for c in changes] == [
        ("0", "added"),
        ("b.txt", "deleted"),
        ("zz", "added"),
    ]


def test_unhashed_file_is_reported_even_if_it_looks_unchanged(ws: Path) -> None:
    with open(ws / "big", "wb") as f:
        f.truncate(4096)

    changes, pre, post = changes_after(ws, lambda ws: None, Limits(max_hash_bytes=1024))

    assert changes == [modified("big", ("content",), pre, post)]
    assert post.entries["big"].note == "too large to hash (4096 bytes > 1024)"


def test_directory_cut_off_by_the_depth_limit_is_reported(ws: Path) -> None:
    os.makedirs(ws / "deep" / "er" / "est")

    changes, pre, post = changes_after(ws, lambda ws: None, Limits(max_depth=2))

    assert changes == [modified("deep/er", ("content",), pre, post)]


def _entry(**fields: object) -> Entry:
    base: dict[str, object] = dict(
        path="f", kind="file", mode=0o644, uid=0, gid=0, size=10, sha256=None, target=None,
        nlink=1, link_group=None, xattrs=(), note=None,
    )  # fmt: skip
    return Entry(**{**base, **fields})  # type: ignore[arg-type]  -- test fields of any type


@pytest.mark.parametrize(
    ("before", "after", "fields"),
    [
        (_entry(sha256="aa"), _entry(sha256="aa", size=99), ()),  # hashes rule when both exist
        (_entry(sha256="aa"), _entry(sha256="bb"), ("content",)),
        (_entry(), _entry(), ()),  # no hash and no note on either side: size decides
        (_entry(), _entry(size=11), ("content",)),
        (_entry(sha256="aa"), _entry(note="unreadable: Permission denied"), ("content",)),
        (_entry(note="too large"), _entry(note="too large"), ("content",)),
        (
            _entry(kind="fifo", note="not opened: fifo"),
            _entry(kind="fifo", note="not opened: fifo"),
            (),
        ),
        (
            _entry(kind="fifo", note="not opened: fifo"),
            _entry(kind="fifo", note="xattrs unreadable: I/O error"),
            ("content",),
        ),
        (_entry(kind="dir", nlink=2), _entry(kind="dir", nlink=3), ()),  # a subdirectory was added
        (
            _entry(kind="dir", note="unreadable: Permission denied"),
            _entry(kind="dir", note="unreadable: Permission denied"),
            ("content",),
        ),
        (_entry(kind="fifo", nlink=1), _entry(kind="fifo", nlink=2), ("link",)),
        (_entry(kind="chardev", target="1:3"), _entry(kind="chardev", target="1:5"), ("target",)),
        (_entry(kind="file"), _entry(kind="symlink", target="x"), ("kind",)),
        (
            _entry(sha256="aa", mode=0o644, uid=0, xattrs=(("user.a", "1"),)),
            _entry(sha256="bb", mode=0o600, gid=5, xattrs=()),
            ("content", "mode", "owner", "xattrs"),
        ),
    ],
)
def test_field_rules(before: Entry, after: Entry, fields: tuple[str, ...]) -> None:
    pre = Snapshot(entries={"f": before}, truncated=False, notes=())
    post = Snapshot(entries={"f": after}, truncated=False, notes=())

    assert [c.fields for c in diff(pre, post)] == ([fields] if fields else [])


def test_changes_round_trip_through_json(ws: Path) -> None:
    def hostile(ws: Path) -> None:
        (ws / os.fsdecode(b"new\n\x1b\xff")).write_bytes(b"x")
        os.unlink(ws / "b.txt")
        os.chmod(ws / "dir", 0o700)

    changes, _, _ = changes_after(ws, hostile)

    text = json.dumps([c.to_json() for c in changes], ensure_ascii=True)
    assert [Change.from_json(item) for item in json.loads(text)] == changes
    assert [(c.path, c.kind, c.fields) for c in changes] == [
        ("b.txt", "deleted", ()),
        ("dir", "modified", ("mode",)),
        ("new\n\x1b\udcff", "added", ()),
    ]


@pytest.mark.parametrize(
    ("entry", "fields"),
    [
        (_entry(sha256="aa"), ()),
        (_entry(note="too large"), ("content",)),  # what was not hashed is never vouched for
        (_entry(kind="dir", note="unreadable: Permission denied"), ("content",)),
    ],
)
def test_the_very_same_entry_on_both_sides_is_judged_by_the_field_rules(
    entry: Entry, fields: tuple[str, ...]
) -> None:
    """`take(reuse=)` hands on the earlier entry object; diff may skip it only without a note."""
    pre = Snapshot(entries={"f": entry, "g": _entry(path="g")}, truncated=False, notes=())
    post = Snapshot(entries={"f": entry, "h": _entry(path="h")}, truncated=False, notes=())

    assert [(c.path, c.kind, c.fields) for c in diff(pre, post)] == [
        *([("f", "modified", fields)] if fields else []),
        ("g", "deleted", ()),
        ("h", "added", ()),
    ]
