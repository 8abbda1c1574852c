"""Live databases are checked before a run: a folder of their own, writable by the sandbox user."""

import os
import sqlite3
from pathlib import Path

import pytest
import yaml

from assure import spec
from assure.errors import SpecError
from assure.sandbox import hardening, live
from assure.sandbox.backend import Mount

ROOT = Path(__file__).resolve().parents[2]


def ledger(folder: Path) -> Path:
    folder.mkdir()
    path = folder / "ledger.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE entries (id INTEGER PRIMARY KEY)")
    db.commit()
    db.close()
    return path


def load(tmp_path, db: Path, user: str):
    data = {
        "version": 1,
        "name": "live",
        "agent": {"command": ["true"]},
        "assertions": [],
        "expect": "pass",
        "workspace": {"fixture": str(ROOT / "fixtures" / "workspaces" / "calc")},
        "databases": [{"name": "ledger", "fixture": str(db), "mode": "live"}],
        "sandbox": {"user": user},
    }
    path = tmp_path / "live.yaml"
    path.write_text(yaml.safe_dump(data))
    return spec.load(path)


OWNER = "4242:4242"  # the sandbox user that owns the database (as root: chown'd to it)
STRANGER = "4343:4343"  # a sandbox user that does not


def me(*paths: Path) -> str:
    """A sandbox user that owns `paths`: ourselves, or (as root, never a sandbox user) 4242."""
    if os.geteuid() != 0:
        return f"{os.getuid()}:{os.getgid()}"
    for path in paths:
        os.chown(path, 4242, 4242, follow_symlinks=False)
    return OWNER


def problem(tmp_path, db, user) -> str:
    with pytest.raises(SpecError) as info:
        live.check(load(tmp_path, db, user))
    [message] = info.value.problems
    assert "live.yaml: databases[0].fixture (ledger)" in message
    return message


def test_a_database_in_its_own_folder_writable_by_the_sandbox_user_is_accepted(tmp_path):
    db = ledger(tmp_path / "ledger")
    for companion in ("-wal", "-shm", "-journal"):
        (db.parent / (db.name + companion)).write_bytes(b"")
    user = me(db.parent, *db.parent.iterdir())
    live.check(load(tmp_path, db, user))
    mounted = hardening.live_database_mounts(load(tmp_path, db, user))
    assert mounted == (Mount(str(db.parent), f"{hardening.GATEWAY_LIVE}/ledger", read_only=False),)


def test_a_folder_shared_with_other_files_is_refused_naming_them(tmp_path):
    db = ledger(tmp_path / "home")
    (db.parent / "secrets.txt").write_text("hunter2")
    (db.parent / "projects").mkdir()
    message = problem(tmp_path, db, me(db.parent, db))
    assert (
        "'projects', 'secrets.txt'" in message
        and "folder of its own" in message
        and "fix: move ledger.sqlite" in message
    )


def test_a_file_the_sandbox_user_cannot_write_is_refused_naming_owner_and_fix(tmp_path):
    db = ledger(tmp_path / "ledger")
    db.chmod(0o644)
    message = problem(tmp_path, db, STRANGER)
    assert (
        f"cannot write {db} (owned by " in message
        and f"({os.getuid()}:{os.getgid()}), mode -rw-r--r--" in message
    )
    assert f"fix: `chown {STRANGER} {db.parent} {db}*`" in message


def test_a_folder_the_sandbox_user_cannot_create_a_journal_in_is_refused(tmp_path):
    db = ledger(tmp_path / "ledger")
    db.chmod(0o666)
    db.parent.chmod(0o755)
    assert f"cannot write {db.parent} (" in problem(tmp_path, db, STRANGER)


def test_an_unwritable_companion_file_is_refused(tmp_path):
    db = ledger(tmp_path / "ledger")
    db.chmod(0o666)
    db.parent.chmod(0o777)
    wal = db.parent / "ledger.sqlite-wal"
    wal.write_bytes(b"")
    wal.chmod(0o644)
    assert f"cannot write {wal} (" in problem(tmp_path, db, STRANGER)


def test_a_symlinked_database_is_refused(tmp_path):
    real = ledger(tmp_path / "real")
    folder = tmp_path / "ledger"
    folder.mkdir()
    (folder / "ledger.sqlite").symlink_to(real)
    assert "(a symlink)" in problem(
        tmp_path, folder / "ledger.sqlite", me(folder, folder / "ledger.sqlite", real.parent, real)
    )


def test_sandbox_databases_are_not_checked(tmp_path):
    db = ledger(tmp_path / "home")
    (db.parent / "other").write_text("x")
    s = load(tmp_path, db, STRANGER)
    live.check(
        spec.Spec(
            **{
                **s.__dict__,
                "databases": tuple(
                    spec.Database(d.name, d.fixture, "sandbox") for d in s.databases
                ),
            }
        )
    )
