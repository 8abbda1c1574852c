"""take(): a hostile workspace is recorded without following, opening or hanging on anything."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from assure.textsafe import display
from assure.verify.hasher import CHUNK_BYTES
from assure.verify.snapshot import (
    BATCH_BYTES,
    CHANGED,
    Entry,
    Limits,
    Snapshot,
    SnapshotError,
    take,
)

NOBODY = 65534
HELLO_SHA = hashlib.sha256(b"hello\n").hexdigest()


@pytest.fixture(autouse=True)
def no_hang() -> Iterator[None]:
    """Fail, rather than hang, if anything blocks (an opened FIFO would)."""

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError("snapshot test blocked for 30 s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every name that os.open is asked to open, in order."""
    names: list[str] = []
    real_open = os.open

    # stands in for os.open, whose signature it copies
    def recording_open(path, flags, mode=0o777, *, dir_fd=None):  # type: ignore[no-untyped-def]
        names.append(os.fsdecode(path))
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", recording_open)
    return names


def entry(path: str, kind: str = "file", **fields: object) -> Entry:
    """The Entry a root-owned default-umask node gets, with `fields` overriding."""
    base: dict[str, object] = {
        "path": path,
        "kind": kind,
        "mode": 0o755 if kind == "dir" else 0o644,
        "uid": 0,
        "gid": 0,
        "size": 0,
        "sha256": None,
        "target": None,
        "nlink": 2 if kind == "dir" else 1,
        "link_group": None,
        "xattrs": (),
        "note": None,
    }
    # test fields of any type: an Entry built as a test wants it
    return Entry(**{**base, **fields})  # type: ignore[arg-type]


def own(path: Path, mode: int) -> None:
    os.chown(path, 0, 0, follow_symlinks=False)
    os.chmod(path, mode)


def json_round_trip(snapshot: Snapshot) -> Snapshot:
    return Snapshot.from_json(json.loads(json.dumps(snapshot.to_json(), ensure_ascii=True)))


def test_files_and_directories_are_listed_with_hashes(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "hello.txt").write_bytes(b"hello\n")
    (tmp_path / "empty").write_bytes(b"")
    (
        own(tmp_path / "sub", 0o755),
        own(tmp_path / "sub" / "hello.txt", 0o644),
        own(tmp_path / "empty", 0o4755),
    )
    size = os.lstat(tmp_path / "sub").st_size

    snapshot = take(tmp_path)

    assert snapshot == Snapshot(
        entries={
            "empty": entry("empty", mode=0o4755, sha256=hashlib.sha256(b"").hexdigest()),
            "sub": entry("sub", "dir", size=size),
            "sub/hello.txt": entry("sub/hello.txt", size=6, sha256=HELLO_SHA),
        },
        truncated=False,
        notes=(),
    )
    assert list(snapshot.entries) == ["empty", "sub", "sub/hello.txt"]
    with pytest.raises(TypeError):
        # read-only mapping: the test is that the assignment fails
        snapshot.entries["x"] = snapshot.entries["empty"]  # type: ignore[index]


def test_symlinks_are_recorded_and_never_followed(tmp_path: Path, opened: list[str]) -> None:
    outside = Path(tempfile.mkdtemp())
    try:
        os.mkfifo(outside / "pipe")
        (outside / "secret").write_bytes(b"secret")
        ws = tmp_path / "ws"
        ws.mkdir()
        os.symlink("/etc/passwd", ws / "passwd")
        os.symlink(outside / "pipe", ws / "to-fifo")
        os.symlink(outside, ws / "to-dir")
        os.symlink("../..", ws / "up")
        os.symlink("loop", ws / "loop")

        snapshot = take(ws)
        opened_by_take = list(opened)
    finally:
        shutil.rmtree(outside)

    targets = {
        path: (e.kind, e.target, e.size, e.sha256, e.mode) for path, e in snapshot.entries.items()
    }
    assert targets == {
        "loop": ("symlink", "loop", 4, None, 0o777),
        "passwd": ("symlink", "/etc/passwd", 11, None, 0o777),
        "to-dir": ("symlink", str(outside), len(str(outside)), None, 0o777),
        "to-fifo": ("symlink", f"{outside}/pipe", len(f"{outside}/pipe"), None, 0o777),
        "up": ("symlink", "../..", 5, None, 0o777),
    }
    assert opened_by_take == [str(ws)]  # only the root itself: no symlink was opened or descended


def test_special_files_are_noted_and_not_opened(tmp_path: Path, opened: list[str]) -> None:
    os.mkfifo(tmp_path / "fifo")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock"))
        snapshot = take(tmp_path)

    kinds = {path: (e.kind, e.sha256, e.note) for path, e in snapshot.entries.items()}
    assert kinds == {
        "fifo": ("fifo", None, "not opened: fifo"),
        "sock": ("socket", None, "not opened: socket"),
    }
    assert opened == [str(tmp_path)]


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_device_node_records_its_numbers_and_is_not_opened(
    tmp_path: Path, opened: list[str]
) -> None:
    os.mknod(tmp_path / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))

    (null,) = take(tmp_path).entries.values()

    assert (null.kind, null.target, null.mode, null.note) == (
        "chardev",
        "1:3",
        0o600,
        "not opened: chardev",
    )
    assert opened == [str(tmp_path)]


def test_sparse_file_over_the_limit_is_noted_without_reading(tmp_path: Path) -> None:
    limits = Limits(max_hash_bytes=2**20)
    with open(tmp_path / "sparse", "wb") as f:
        f.truncate(2 * limits.max_hash_bytes)
    with open(tmp_path / "huge", "wb") as f:
        f.truncate(2**40)  # 1 TiB, default limits
    started = time.monotonic()

    small = take(tmp_path, limits).entries["sparse"]
    huge = take(tmp_path).entries["huge"]

    assert (small.size, small.sha256, small.note) == (
        2097152,
        None,
        "too large to hash (2097152 bytes > 1048576)",
    )
    assert (huge.size, huge.sha256, huge.note) == (
        2**40,
        None,
        "too large to hash (1099511627776 bytes > 268435456)",
    )
    assert time.monotonic() - started < 5


def test_big_files_hashed_by_the_pool_match_hashlib(tmp_path: Path) -> None:
    contents = {f"f{i}": bytes([i]) * (BATCH_BYTES + i * CHUNK_BYTES + 7) for i in range(6)}
    contents["small"] = b"hello\n"
    for name, data in contents.items():
        (tmp_path / name).write_bytes(data)

    entries = take(tmp_path).entries

    assert {path: (e.sha256, e.note) for path, e in entries.items()} == {
        name: (hashlib.sha256(data).hexdigest(), None) for name, data in contents.items()
    }


def test_total_hash_budget_is_shared_by_all_files(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / name).write_bytes(b"12345")

    entries = take(tmp_path, Limits(max_total_hash_bytes=12)).entries.values()

    assert sorted((e.sha256 is None, e.note) for e in entries) == [
        (False, None),
        (False, None),
        (True, "not hashed: max_total_hash_bytes (12) used up"),
    ]


def _take_unprivileged(root: Path) -> Snapshot:
    """take() in a forked child that runs as nobody, so permission bits really bite."""
    if os.geteuid() != 0:
        return take(root)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            with os.fdopen(write_end, "w") as out:
                json.dump(take(root).to_json(), out)
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as inp:
        data = inp.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return Snapshot.from_json(json.loads(data))


def test_unreadable_files_and_directories_are_noted() -> None:
    ws = Path(tempfile.mkdtemp())  # under /tmp, reachable by nobody (pytest's tmp_path is not)
    try:
        os.chmod(ws, 0o755)
        (ws / "locked").write_bytes(b"x")
        os.chmod(ws / "locked", 0o000)
        (ws / "closed").mkdir()
        (ws / "closed" / "inside").write_bytes(b"x")
        os.chmod(ws / "closed", 0o000)
        (ws / "listonly").mkdir()
        (ws / "listonly" / "inside").write_bytes(b"x")
        os.chmod(ws / "listonly", 0o444)

        snapshot = _take_unprivileged(ws)
    finally:
        shutil.rmtree(ws)

    notes = {path: (e.sha256, e.note) for path, e in snapshot.entries.items()}
    assert notes == {
        "closed": (None, "unreadable: Permission denied"),
        "listonly": (None, None),
        "locked": (None, "unreadable: Permission denied"),
    }
    assert (snapshot.truncated, snapshot.notes) == (
        True,
        ("not listed (unreadable: Permission denied): listonly/inside",),
    )


@pytest.fixture
def swap_on_open(monkeypatch: pytest.MonkeyPatch) -> Callable[[str, Callable[[int], None]], None]:
    """Run `swap(dir_fd)` just before the walk opens `name`: a race the agent could win."""

    def install(name: str, swap: Callable[[int], None]) -> None:
        real_open = os.open

        # stands in for os.open, whose signature it copies
        def racing_open(path, flags, mode=0o777, *, dir_fd=None):  # type: ignore[no-untyped-def]
            if path == name and dir_fd is not None:
                monkeypatch.setattr(os, "open", real_open)  # swap once
                swap(dir_fd)
            return real_open(path, flags, mode, dir_fd=dir_fd)

        monkeypatch.setattr(os, "open", racing_open)

    return install


def _replace_with_fifo(dir_fd: int) -> None:
    os.unlink("victim", dir_fd=dir_fd)
    os.mkfifo("victim", dir_fd=dir_fd)


def _replace_with_symlink(dir_fd: int) -> None:
    os.unlink("victim", dir_fd=dir_fd)
    os.symlink("/etc/passwd", "victim", dir_fd=dir_fd)


def _append(dir_fd: int) -> None:
    fd = os.open("victim", os.O_WRONLY | os.O_APPEND, dir_fd=dir_fd)
    os.write(fd, b"more")
    os.close(fd)


@pytest.mark.parametrize("swap", [_replace_with_fifo, _replace_with_symlink, _append])
def test_file_changed_between_lstat_and_open_is_noted(
    tmp_path: Path,
    swap_on_open: Callable[[str, Callable[[int], None]], None],
    swap: Callable[[int], None],
) -> None:
    (tmp_path / "victim").write_bytes(b"hello\n")
    swap_on_open("victim", swap)

    victim = take(tmp_path).entries["victim"]

    assert (victim.kind, victim.size, victim.sha256, victim.note) == ("file", 6, None, CHANGED)


def test_directory_swapped_for_symlink_is_not_entered(
    tmp_path: Path, swap_on_open: Callable[[str, Callable[[int], None]], None]
) -> None:
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "inside").write_bytes(b"x")

    def to_symlink(dir_fd: int) -> None:
        shutil.rmtree(tmp_path / "victim")
        os.symlink("/etc", "victim", dir_fd=dir_fd)

    swap_on_open("victim", to_symlink)

    snapshot = take(tmp_path)

    assert {path: (e.kind, e.note) for path, e in snapshot.entries.items()} == {
        "victim": ("dir", CHANGED)
    }


def test_hostile_names_survive_json_and_are_displayed_escaped(tmp_path: Path) -> None:
    names = [
        b"new\nline",
        b"\x1b[2Jclear",
        b"bad\xff\xfeutf8",
        b"bidi\xe2\x80\xaetxt",
        b"back\\slash",
    ]
    for name in names:
        with open(os.path.join(os.fsencode(tmp_path), name), "wb") as f:
            f.write(b"x")

    snapshot = take(tmp_path)

    assert sorted(os.fsencode(path) for path in snapshot.entries) == sorted(names)
    assert json_round_trip(snapshot) == snapshot
    assert json.dumps(snapshot.to_json(), ensure_ascii=True).isascii()
    assert sorted(display(path) for path in snapshot.entries) == [
        "\\x1b[2Jclear",
        "back\\\\slash",
        "bad\\xff\\xfeutf8",
        "bidi\\u202etxt",
        "new\\nline",
    ]


def test_json_form_is_exact(tmp_path: Path) -> None:
    (tmp_path / "hello.txt").write_bytes(b"hello\n")
    own(tmp_path / "hello.txt", 0o640)
    st = os.lstat(tmp_path / "hello.txt")

    assert take(tmp_path).to_json() == {
        "version": 1,
        "truncated": False,
        "notes": [],
        "entries": [
            {
                "path": "hello.txt",
                "kind": "file",
                "mode": 0o640,
                "uid": 0,
                "gid": 0,
                "size": 6,
                "sha256": HELLO_SHA,
                "target": None,
                "nlink": 1,
                "link_group": None,
                "xattrs": [],
                "note": None,
                "stamp": f"{st.st_dev}:{st.st_ino}:6:{st.st_mtime_ns}:{st.st_ctime_ns}",
            }
        ],
    }


def test_from_json_rejects_another_version_and_repeated_paths() -> None:
    one = entry("a").to_json()
    with pytest.raises(ValueError, match="snapshot version 2 is not 1"):
        Snapshot.from_json({"version": 2, "truncated": False, "notes": [], "entries": []})
    with pytest.raises(ValueError, match="snapshot lists a path twice"):
        Snapshot.from_json({"version": 1, "truncated": False, "notes": [], "entries": [one, one]})


def test_hard_links_share_the_smallest_path_as_group(tmp_path: Path) -> None:
    (tmp_path / "b").write_bytes(b"hello\n")
    (tmp_path / "d").mkdir()
    os.link(tmp_path / "b", tmp_path / "d" / "a")
    os.link(tmp_path / "b", tmp_path / "c")
    (tmp_path / "single").write_bytes(b"hello\n")

    entries = take(tmp_path).entries

    groups = {path: (e.nlink, e.link_group) for path, e in entries.items() if e.kind == "file"}
    assert groups == {"b": (3, "b"), "c": (3, "b"), "d/a": (3, "b"), "single": (1, None)}


def test_hard_links_to_one_node_are_hashed_once_and_spend_the_budget_once(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").write_bytes(b"12345678")
    for name in ("b", "c", "d"):
        os.link(tmp_path / "a", tmp_path / name)

    entries = take(tmp_path, Limits(max_total_hash_bytes=10)).entries

    digest = hashlib.sha256(b"12345678").hexdigest()
    assert {p: (e.sha256, e.note, e.link_group) for p, e in entries.items()} == {
        p: (digest, None, "a") for p in "abcd"
    }
    assert len({id(e) for e in entries.values()}) == 4


def test_a_hard_link_written_through_changes_every_link_and_the_earlier_snapshot_is_kept(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").write_bytes(b"old")
    os.link(tmp_path / "a", tmp_path / "b")
    pre = take(tmp_path)
    (tmp_path / "b").write_bytes(b"new!")
    os.link(tmp_path / "a", tmp_path / "0")

    post = take(tmp_path, reuse=pre).entries

    assert {p: (e.sha256, e.link_group) for p, e in post.items()} == {
        p: (hashlib.sha256(b"new!").hexdigest(), "0") for p in ("0", "a", "b")
    }
    assert {p: e.link_group for p, e in pre.entries.items()} == {"a": "a", "b": "a"}


def _xattrs_supported(path: Path) -> bool:
    try:
        os.setxattr(path, "user.probe", b"1")
    except OSError as error:
        if error.errno == errno.ENOTSUP:
            return False
        raise
    os.removexattr(path, "user.probe")
    return True


def test_xattrs_are_recorded_as_name_and_value_hash(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    (tmp_path / "d").mkdir()
    os.symlink("f", tmp_path / "link")
    if not _xattrs_supported(tmp_path / "f"):
        pytest.skip(f"this filesystem has no user xattrs: {tmp_path}")
    os.setxattr(tmp_path / "f", "user.b", b"2")
    os.setxattr(tmp_path / "f", "user.a", b"1")
    os.setxattr(tmp_path / "d", "user.dir", b"")

    entries = take(tmp_path).entries

    sha = lambda data: hashlib.sha256(data).hexdigest()
    assert entries["f"].xattrs == (("user.a", sha(b"1")), ("user.b", sha(b"2")))
    assert entries["d"].xattrs == (("user.dir", sha(b"")),)
    assert entries["link"].xattrs == ()  # the link's own (none), not its target's


def test_root_must_be_a_real_directory(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    os.symlink("real", tmp_path / "link")
    (tmp_path / "file").write_bytes(b"")

    for name, reason in [
        ("link", "Not a directory"),
        ("file", "Not a directory"),
        ("missing", "No such file or directory"),
    ]:
        with pytest.raises(SnapshotError) as raised:
            take(tmp_path / name)
        assert raised.value.explain() == (
            f"{tmp_path / name}: cannot snapshot the workspace: {reason}\n"
            "fix: point the snapshot at an existing directory, not a symlink or a file"
        )


def test_deep_nesting_stops_at_the_depth_limit(tmp_path: Path) -> None:
    os.makedirs(tmp_path / "/".join(["d"] * 300))

    snapshot = take(tmp_path)

    deepest = "/".join(["d"] * 256)
    assert len(snapshot.entries) == 256
    assert (snapshot.truncated, snapshot.notes) == (True, (f"depth limit at {deepest}",))
    assert (
        snapshot.entries[deepest].note
        == "not listed: its entries would be deeper than max_depth (256)"
    )
    assert [e.note for e in snapshot.entries.values()].count(None) == 255


def test_paths_longer_than_path_max_are_walked(tmp_path: Path) -> None:
    name = "n" * 250
    fd = os.open(tmp_path, os.O_RDONLY)
    for _ in range(20):  # 5020 characters, beyond PATH_MAX: only descriptor-relative calls work
        os.mkdir(name, dir_fd=fd)
        fd, parent = os.open(name, os.O_RDONLY, dir_fd=fd), fd
        os.close(parent)
    with open(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "wb") as leaf:
        leaf.write(b"hello\n")
    os.close(fd)

    snapshot = take(tmp_path)

    leaf_entry = snapshot.entries["/".join([name] * 20 + ["leaf"])]
    assert (len(snapshot.entries), snapshot.truncated, leaf_entry.sha256) == (21, False, HELLO_SHA)


def test_many_files(tmp_path: Path) -> None:
    for d in range(20):
        (tmp_path / f"d{d:02}").mkdir()
        dir_fd = os.open(tmp_path / f"d{d:02}", os.O_RDONLY)
        for f in range(1000):
            fd = os.open(f"f{f:04}", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=dir_fd)
            os.write(fd, b"hello\n")
            os.close(fd)
        os.close(dir_fd)
    started = time.monotonic()

    snapshot = take(tmp_path)

    assert (len(snapshot.entries), snapshot.truncated) == (20_020, False)
    assert {e.sha256 for e in snapshot.entries.values() if e.kind == "file"} == {HELLO_SHA}
    assert time.monotonic() - started < 10


def test_max_files_stops_the_walk(tmp_path: Path) -> None:
    for f in range(50):
        (tmp_path / f"f{f:02}").write_bytes(b"")

    snapshot = take(tmp_path, Limits(max_files=20))

    assert (len(snapshot.entries), snapshot.truncated, snapshot.notes) == (
        20,
        True,
        ("stopped after max_files (20 entries)",),
    )


def test_max_total_path_chars_stops_the_walk(tmp_path: Path) -> None:
    for f in range(10):
        (tmp_path / f"{f}".rjust(100, "x")).write_bytes(b"")

    snapshot = take(tmp_path, Limits(max_total_path_chars=450))

    assert (len(snapshot.entries), snapshot.truncated, snapshot.notes) == (
        4,
        True,
        ("stopped after max_total_path_chars (450 characters)",),
    )


def test_reuse_gives_the_same_snapshot_and_opens_only_what_changed(
    tmp_path: Path, opened: list[str]
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    for i in range(20):
        (root / f"f{i}.txt").write_bytes(b"%d" % i * 100)
    pre = take(root)
    (root / "f3.txt").write_bytes(b"changed")
    opened.clear()

    post = take(root, reuse=pre)

    assert [name for name in opened if not name.endswith("ws")] == [
        "f3.txt"
    ]  # the root is opened too
    assert post.to_json() == take(root).to_json()


def test_reuse_still_finds_content_changed_with_size_and_mtime_restored(tmp_path):
    from assure.verify.diff import diff
    from assure.verify.snapshot import take

    root = tmp_path / "ws"
    root.mkdir()
    target = root / "a.txt"
    target.write_bytes(b"original")
    before = os.stat(target)
    pre = take(root)
    target.write_bytes(b"ORIGINAL")  # same size
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))  # mtime put back; ctime cannot be
    changes = diff(pre, take(root, reuse=pre))
    assert [(c.path, c.fields) for c in changes] == [("a.txt", ("content",))]


def test_reuse_still_finds_xattrs_mode_and_owner_changed_on_unchanged_content(
    tmp_path: Path,
) -> None:
    from assure.verify.diff import diff

    for name in ("x", "m", "o"):
        (tmp_path / name).write_bytes(b"same")
    if not _xattrs_supported(tmp_path / "x"):
        pytest.skip(f"this filesystem has no user xattrs: {tmp_path}")
    pre = take(tmp_path)
    os.setxattr(tmp_path / "x", "user.mark", b"1")
    os.chmod(tmp_path / "m", 0o600)
    os.chown(tmp_path / "o", 4242, 4242)

    changes = diff(pre, take(tmp_path, reuse=pre))

    assert [(c.path, c.fields) for c in changes] == [
        ("m", ("mode",)),
        ("o", ("owner",)),
        ("x", ("xattrs",)),
    ]
