"""The verifier's SQLite part: capture hostile files, diff two states, attribute rows to the
journal.

Databases are real files built with apsw; journaled changes are made by the real gateway code
(`assure.gateway.db.Databases`, in-process); covert changes are made directly on the file.
"""

from __future__ import annotations

import base64
import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import apsw
import pytest

from assure.gateway.db import Databases, DbSpec
from assure.gateway.errors import ToolError
from assure.verify import sqlite
from assure.verify.findings import Kind
from assure.verify.sqlite import (
    DatabaseError,
    DatabaseTooLarge,
    DbChange,
    attribute,
    capture,
    db_effects,
    diff,
)

SEEDS = range(20)


# ---------------------------------------------------------------- helpers


def make(path: Path, sql: str, *, wal: bool = False) -> Path:
    conn = apsw.Connection(str(path))
    if wal:
        conn.pragma("journal_mode", "wal")
    conn.execute(sql)
    conn.close()
    return path


def run_sql(path: Path, sql: str, params: Any = None, *, triggers: bool = True) -> None:
    conn = apsw.Connection(str(path))
    if not triggers:
        conn.config(apsw.SQLITE_DBCONFIG_ENABLE_TRIGGER, 0)
    conn.execute(sql, params)
    conn.close()


def rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def cap(tmp_path: Path, source: Path, name: str, **limits: int) -> Path:
    target = tmp_path / "captured"
    target.mkdir(exist_ok=True)
    return capture(source, target, name, **limits)


def pair(tmp_path: Path, schema: str, change: str) -> tuple[Path, Path]:
    """Captured PRE and POST (in a fresh directory): POST is PRE with `change` run on it."""
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    src = make(work / "src.db", schema)
    pre = cap(work, src, "pre")
    run_sql(src, change)
    return pre, cap(work, src, "post")


def row_changes(changes: list[DbChange]) -> list[tuple[str, str, Any, Any, Any, int]]:
    return sorted(
        ((c.table, c.op, c.key, c.before, c.after, c.count) for c in changes if c.kind == "row"),
        key=repr,
    )


# ---------------------------------------------------------------- capture


def test_capture_sees_a_commit_that_only_reached_the_wal(tmp_path: Path) -> None:
    src = make(
        tmp_path / "w.db",
        "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'a')",
        wal=True,
    )
    conn = apsw.Connection(str(src))
    conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
    conn.execute("INSERT INTO t VALUES (2, 'only in the wal')")
    conn.close()
    assert (tmp_path / "w.db-wal").stat().st_size > 0
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copyfile(src, alone / "w.db")  # the main file without its WAL does not have the commit
    assert rows(alone / "w.db", "SELECT id FROM t") == [(1,)]

    captured = cap(tmp_path, src, "w")
    assert captured == tmp_path / "captured" / "w.sqlite"
    assert sorted(p.name for p in captured.parent.iterdir()) == [
        "w.sqlite"
    ]  # one self-contained file
    assert rows(captured, "SELECT id, v FROM t ORDER BY id") == [(1, "a"), (2, "only in the wal")]
    assert rows(captured, "PRAGMA journal_mode") == [("delete",)]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("w.db")) == [
        "w.db",
        "w.db-shm",
        "w.db-wal",
    ]  # source untouched


def _hot_journal(directory: Path) -> tuple[Path, list[tuple[Any, ...]]]:
    """A copy of a database taken mid-transaction: uncommitted pages in the file, a hot journal
    beside it."""
    directory.mkdir()
    src = make(
        directory / "live.db",
        "CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);INSERT INTO t SELECT value, randomblob(200)"
        " FROM (WITH RECURSIVE s(value) AS (SELECT 1 UNION ALL SELECT value + 1 FROM s WHERE value"
        " < 2000) SELECT value FROM s)",
    )
    committed = rows(src, "SELECT id, v FROM t ORDER BY id")
    conn = apsw.Connection(str(src))
    conn.pragma("cache_size", 5)  # spill the uncommitted change into the database file
    conn.execute("BEGIN; UPDATE t SET v = randomblob(200)")
    shutil.copyfile(src, directory / "h.db")
    shutil.copyfile(directory / "live.db-journal", directory / "h.db-journal")
    conn.execute("ROLLBACK")
    conn.close()
    return directory / "h.db", committed


def test_capture_rolls_back_a_hot_journal(tmp_path: Path) -> None:
    hot, committed = _hot_journal(tmp_path / "hot")
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copyfile(hot, alone / "h.db")
    try:  # without its journal the file holds uncommitted pages (or is not even consistent)
        assert rows(alone / "h.db", "SELECT id, v FROM t ORDER BY id") != committed
    except apsw.Error:
        pass
    captured = cap(tmp_path, hot, "h")
    assert rows(captured, "SELECT id, v FROM t ORDER BY id") == committed
    assert sorted(p.name for p in captured.parent.iterdir()) == ["h.sqlite"]
    assert (tmp_path / "hot" / "h.db-journal").exists()  # the source is never opened by SQLite


CRASH_IN_MULTI_DB_COMMIT = textwrap.dedent("""
    import apsw, os, sys
    d = sys.argv[1]
    for n in ("a", "b"):
        c = apsw.Connection(f"{d}/{n}.db")
        c.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v); INSERT INTO t VALUES (1, 'old')")
        c.close()
    class Crash(apsw.VFS):
        def __init__(self):
            super().__init__("crash", "")
        def xDelete(self, name, syncdir):
            if "-mj" in name:
                # die at the commit point: the super-journal stays, the journals are hot
                os._exit(0)
            return super().xDelete(name, syncdir)
    vfs = Crash()
    c = apsw.Connection(f"{d}/a.db", vfs="crash")
    c.execute(f"ATTACH '{d}/b.db' AS b")
    c.execute("BEGIN; UPDATE main.t SET v = 'new'; UPDATE b.t SET v = 'new'; COMMIT")
""")


def test_capture_refuses_a_journal_that_names_a_file_outside_the_copy(tmp_path: Path) -> None:
    """A hot journal of a multi-database commit names its super-journal by absolute path;
    SQLite would read that file (and may delete it). The copy's VFS refuses."""
    origin = tmp_path / "origin"
    origin.mkdir()
    subprocess.run([sys.executable, "-c", CRASH_IN_MULTI_DB_COMMIT, str(origin)], check=True)
    supers = [p for p in origin.iterdir() if "-mj" in p.name]
    assert len(supers) == 1 and (origin / "a.db-journal").exists()
    source = tmp_path / "source"
    source.mkdir()
    shutil.copyfile(origin / "a.db", source / "a.db")
    shutil.copyfile(origin / "a.db-journal", source / "a.db-journal")
    with pytest.raises(DatabaseError, match="outside the database's own files"):
        cap(tmp_path, source / "a.db", "a")
    assert supers[0].exists()
    assert list((tmp_path / "captured").iterdir()) == []  # nothing half-made left behind


def test_capture_reports_a_failed_integrity_check(tmp_path: Path) -> None:
    src = make(
        tmp_path / "c.db",
        "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT); CREATE INDEX ix ON t(v);INSERT INTO t"
        " SELECT value, 'value-' || value FROM (WITH RECURSIVE s(value) AS (SELECT 1 UNION ALL"
        " SELECT value + 1 FROM s WHERE value < 500) SELECT value FROM s)",
    )
    page, size = (
        rows(src, "SELECT pageno FROM dbstat WHERE name = 'ix' AND pagetype = 'leaf' LIMIT 1")[0][
            0
        ],
        rows(src, "PRAGMA page_size")[0][0],
    )
    data = bytearray(src.read_bytes())
    for i in range(
        (page - 1) * size + 200, page * size
    ):  # change the digits of the index keys on one leaf page
        if data[i] in b"0123456789":
            data[i] = ord("0") + (data[i] - ord("0") + 1) % 10
    src.write_bytes(bytes(data))
    with pytest.raises(DatabaseError, match="integrity check failed: .*ix"):
        cap(tmp_path, src, "c")
    assert list((tmp_path / "captured").iterdir()) == []


def test_capture_reports_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    src = tmp_path / "junk.db"
    src.write_bytes(b"not a database, just text" * 200)
    with pytest.raises(DatabaseError, match="junk.db"):
        cap(tmp_path, src, "junk")


@pytest.mark.parametrize("suffix", ["", "-wal", "-journal", "-shm"])
def test_capture_refuses_a_symlinked_database_or_sidecar(tmp_path: Path, suffix: str) -> None:
    src = make(tmp_path / "s.db", "CREATE TABLE t(x); INSERT INTO t VALUES (1)")
    elsewhere = make(tmp_path / "elsewhere.db", "CREATE TABLE secret(x)")
    link = tmp_path / f"s.db{suffix}"
    if suffix == "":
        src.rename(tmp_path / "real.db")
        link.symlink_to(tmp_path / "real.db")
    else:
        link.symlink_to(elsewhere)
    with pytest.raises(DatabaseError, match=f"s.db{suffix} is a symlink"):
        cap(tmp_path, tmp_path / "s.db", "s")


def test_capture_refuses_a_sidecar_that_is_not_a_regular_file(tmp_path: Path) -> None:
    src = make(tmp_path / "s.db", "CREATE TABLE t(x)")
    os.mkfifo(tmp_path / "s.db-wal")
    with pytest.raises(DatabaseError, match="s.db-wal is not a regular file"):
        cap(tmp_path, src, "s")


def test_capture_refuses_a_database_over_the_size_limit(tmp_path: Path) -> None:
    src = make(tmp_path / "big.db", "CREATE TABLE t(x); INSERT INTO t VALUES (randomblob(100000))")
    with pytest.raises(DatabaseTooLarge, match="over the 50000-byte limit"):
        cap(tmp_path, src, "big", max_bytes=50_000)
    post = sqlite.error_finding("shop", DatabaseTooLarge("too big"), side="post")
    pre = sqlite.error_finding("shop", DatabaseTooLarge("too big"), side="pre")
    assert (post.kind, post.subject, pre.kind) == (Kind.UNATTRIBUTED, "db:shop", Kind.HARNESS_ERROR)


def test_capture_validates_its_name_and_missing_source(tmp_path: Path) -> None:
    src = make(tmp_path / "s.db", "CREATE TABLE t(x)")
    with pytest.raises(DatabaseError, match="must match"):
        cap(tmp_path, src, "../escape")
    with pytest.raises(DatabaseError, match="no such file"):
        cap(tmp_path, tmp_path / "missing.db", "m")


def test_diff_refuses_files_that_were_not_captured(tmp_path: Path) -> None:
    src = make(tmp_path / "w.db", "CREATE TABLE t(x)", wal=True)
    conn = apsw.Connection(str(src))
    conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
    conn.execute("INSERT INTO t VALUES (1)")
    conn.close()
    with pytest.raises(DatabaseError, match="-wal exists"):
        diff(src, src)


# ---------------------------------------------------------------- diff

SHOP = """
CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL, data BLOB);
CREATE TABLE pairs(a TEXT NOT NULL, b INTEGER NOT NULL, note TEXT, PRIMARY KEY (a, b)) WITHOUT ROWID;
CREATE TABLE log(msg TEXT, n INTEGER);
INSERT INTO items VALUES (1, 'apple', 1.5, x'00ff'), (2, 'pear', NULL, NULL), (3, 'plum', 0.25, x'');
INSERT INTO pairs VALUES ('a', 1, 'one'), ('a', 2, NULL), ('b', 1, 'three');
INSERT INTO log VALUES ('dup', 1), ('dup', 1), ('other', 2);
"""  # noqa: E501 -- SQL statements, one a line


def test_identical_databases_have_no_changes(tmp_path: Path) -> None:
    pre, post = pair(tmp_path, SHOP, "SELECT 1")
    assert diff(pre, post) == []


def test_diff_primary_key_insert_update_delete(tmp_path: Path) -> None:
    pre, post = pair(
        tmp_path,
        SHOP,
        "UPDATE items SET price = 2.5 WHERE id = 1; DELETE FROM items WHERE id = 2;"
        "INSERT INTO items VALUES (9, 'kiwi', NULL, x'0102')",
    )
    changes = diff(pre, post, db="shop")
    by_key = {(c.op, c.key["id"]): c for c in changes}
    assert set(by_key) == {("update", 1), ("delete", 2), ("insert", 9)}
    update = by_key[("update", 1)]
    assert update.subject == "db:shop:items[id=1]" and update.columns == ("price",)
    assert update.before == {
        "id": 1,
        "name": "apple",
        "price": 1.5,
        "data": {"b64": base64.b64encode(b"\x00\xff").decode()},
    }
    assert update.after["price"] == 2.5
    assert by_key[("delete", 2)].after is None and by_key[("delete", 2)].before["name"] == "pear"
    assert by_key[("insert", 9)].before is None and by_key[("insert", 9)].after["data"] == {
        "b64": "AQI="
    }


def test_diff_composite_key_without_rowid(tmp_path: Path) -> None:
    pre, post = pair(
        tmp_path,
        SHOP,
        "UPDATE pairs SET note = 'changed' WHERE a = 'a' AND b = 2; DELETE FROM pairs WHERE a"
        " = 'b'",
    )
    got = {(c.op, tuple(c.key.values()), c.columns) for c in diff(pre, post)}
    assert got == {("update", ("a", 2), ("note",)), ("delete", ("b", 1), ())}
    assert {c.subject for c in diff(pre, post, db="shop")} == {
        "db:shop:pairs[a='a', b=2]",
        "db:shop:pairs[a='b', b=1]",
    }


def test_keyless_duplicates_are_a_multiset(tmp_path: Path) -> None:
    pre, post = pair(tmp_path, SHOP, "DELETE FROM log WHERE rowid = 1")  # one of the two ('dup', 1)
    [change] = diff(pre, post, db="shop")
    assert (change.table, change.op, change.key, change.before, change.count) == (
        "log",
        "delete",
        None,
        {"msg": "dup", "n": 1},
        1,
    )
    assert change.subject == "db:shop:log[msg='dup', n=1]"

    pre, post = pair(tmp_path, SHOP, "INSERT INTO log VALUES ('dup', 1), ('dup', 1), ('other', 2)")
    assert row_changes(diff(pre, post)) == sorted(
        [
            ("log", "insert", None, None, {"msg": "dup", "n": 1}, 2),
            ("log", "insert", None, None, {"msg": "other", "n": 2}, 1),
        ],
        key=repr,
    )


def test_keyless_update_is_a_delete_and_an_insert(tmp_path: Path) -> None:
    pre, post = pair(tmp_path, SHOP, "UPDATE log SET n = 7 WHERE msg = 'other'")
    assert row_changes(diff(pre, post)) == sorted(
        [
            ("log", "delete", None, {"msg": "other", "n": 2}, None, 1),
            ("log", "insert", None, None, {"msg": "other", "n": 7}, 1),
        ],
        key=repr,
    )


def test_vacuum_renumbering_rowids_is_not_a_change(tmp_path: Path) -> None:
    src = make(
        tmp_path / "v.db",
        SHOP
        + "INSERT INTO log SELECT 'filler', value FROM (WITH RECURSIVE s(value) AS (SELECT 1 UNION"
        " ALL SELECT value + 1 FROM s WHERE value < 300) SELECT value FROM s);DELETE FROM log"
        " WHERE n % 3 = 0;",
    )
    pre = cap(tmp_path, src, "pre")
    run_sql(src, "VACUUM")
    post = cap(tmp_path, src, "post")
    assert rows(pre, "SELECT rowid FROM log ORDER BY rowid") != rows(
        post, "SELECT rowid FROM log ORDER BY rowid"
    )  # renumbered
    assert diff(pre, post) == []
    run_sql(
        src, "DELETE FROM log WHERE rowid = (SELECT max(rowid) FROM log WHERE msg = 'filler')"
    )  # and after VACUUM, a real change is still seen
    post2 = cap(tmp_path, src, "post2")
    [change] = diff(pre, post2)
    assert (change.table, change.op, change.count) == ("log", "delete", 1)


def test_rowid_shadowed_by_columns_still_compares_as_multiset(tmp_path: Path) -> None:
    """Columns named rowid, oid and _rowid_ hide the real rowid: rows must not pair by those
    columns."""
    schema = (
        "CREATE TABLE s(rowid, oid, _rowid_, v); INSERT INTO s VALUES (1, 1, 1, 'x'), (1, 1, 1,"
        " 'x'), (2, 2, 2, 'y');"
    )
    pre, post = pair(
        tmp_path, schema, "DELETE FROM s WHERE v = 'x'; INSERT INTO s VALUES (1, 1, 1, 'x')"
    )  # two copies -> one
    assert row_changes(diff(pre, post)) == [
        ("s", "delete", None, {"rowid": 1, "oid": 1, "_rowid_": 1, "v": "x"}, None, 1)
    ]


def test_schema_changes(tmp_path: Path) -> None:
    schema = (
        SHOP
        + "CREATE INDEX items_name ON items(name); CREATE TRIGGER t1 AFTER INSERT ON items BEGIN"
        " SELECT 1; END;"
    )
    change = (
        "CREATE TABLE fresh(x); DROP INDEX items_name; DROP TRIGGER t1;CREATE TRIGGER t1 AFTER"
        " INSERT ON items BEGIN SELECT 2; END; CREATE VIEW v AS SELECT id FROM items"
    )
    pre, post = pair(tmp_path, schema, change)
    got = {(c.object_type, c.name, c.op) for c in diff(pre, post) if c.kind == "schema"}
    assert got == {
        ("table", "fresh", "added"),
        ("index", "items_name", "removed"),
        ("trigger", "t1", "changed"),
        ("view", "v", "added"),
    }
    trigger = next(c for c in diff(pre, post, db="shop") if c.name == "t1")
    assert trigger.subject == "db:shop:schema:trigger t1"
    assert "SELECT 1" in trigger.before["sql"] and "SELECT 2" in trigger.after["sql"]


def test_user_version_and_application_id(tmp_path: Path) -> None:
    pre, post = pair(tmp_path, SHOP, "PRAGMA user_version = 7; PRAGMA application_id = 42")
    got = {(c.kind, c.name, c.before, c.after) for c in diff(pre, post, db="shop")}
    assert got == {("user_version", "user_version", 0, 7), ("header", "application_id", 0, 42)}
    assert {c.subject for c in diff(pre, post, db="shop")} == {
        "db:shop:user_version",
        "db:shop:header:application_id",
    }


def test_table_on_one_side_only(tmp_path: Path) -> None:
    pre, post = pair(
        tmp_path,
        SHOP,
        "CREATE TABLE extra(id INTEGER PRIMARY KEY, v); INSERT INTO extra VALUES (1, 'x'); DROP"
        " TABLE pairs",
    )
    changes = diff(pre, post)
    assert {(c.object_type, c.name, c.op) for c in changes if c.kind == "schema"} == {
        ("table", "extra", "added"),
        ("table", "pairs", "removed"),
    }
    assert (
        sorted((c.table, c.op) for c in changes if c.kind == "row")
        == [("extra", "insert")] + [("pairs", "delete")] * 3
    )


def test_exact_values_type_collation_nulls_blobs(tmp_path: Path) -> None:
    schema = (
        # no declared type: stores 1 and 1.0 as they are
        "CREATE TABLE u(id INTEGER PRIMARY KEY, v);"
        "CREATE TABLE c(k TEXT COLLATE NOCASE PRIMARY KEY, v TEXT COLLATE NOCASE);"
        "CREATE TABLE nk(k TEXT PRIMARY KEY, v);"  # a rowid table: its key may hold NULLs
        "INSERT INTO u VALUES (1, 1), (2, 'x'), (3, x'78'), (4, NULL), (5, 0.5);"
        "INSERT INTO c VALUES ('Key', 'value');"
        "INSERT INTO nk VALUES (NULL, 1), (NULL, 1), ('k', 2);"
    )
    change = (
        "UPDATE u SET v = 1.0 WHERE id = 1; UPDATE u SET v = x'78' WHERE id = 2; UPDATE u SET v ="
        " 'x' WHERE id = 3;UPDATE u SET v = NULL WHERE id = 4; UPDATE c SET v = 'VALUE'; UPDATE c"
        " SET k = 'KEY';DELETE FROM nk WHERE rowid = 2"
    )
    pre, post = pair(tmp_path, schema, change)
    got = row_changes(diff(pre, post))
    assert ("u", "update", {"id": 1}, {"id": 1, "v": 1}, {"id": 1, "v": 1.0}, 1) in got
    assert (
        "u",
        "update",
        {"id": 2},
        {"id": 2, "v": "x"},
        {"id": 2, "v": {"b64": "eA=="}},
        1,
    ) in got
    assert (
        "u",
        "update",
        {"id": 3},
        {"id": 3, "v": {"b64": "eA=="}},
        {"id": 3, "v": "x"},
        1,
    ) in got
    assert not any(c[0] == "u" and c[2] == {"id": 4} for c in got)  # NULL -> NULL is no change
    assert (
        "c",
        "update",
        {"k": "Key"},
        {"k": "Key", "v": "value"},
        {"k": "KEY", "v": "VALUE"},
        1,
    ) in got  # NOCASE-equal, not equal
    assert ("nk", "delete", None, {"k": None, "v": 1}, None, 1) in got
    assert len(got) == 5


def test_real_columns_compare_by_value_and_class_where_the_affinities_differ(
    tmp_path: Path,
) -> None:
    """REAL affinity on both sides skips the storage-class check (SQLite reads every number
    there as REAL); once one side's column has another affinity, 1 and 1.0 differ again."""
    schema = (
        "CREATE TABLE r(id INTEGER PRIMARY KEY, v REAL); INSERT INTO r VALUES (1, 1), (2, 2.5),"
        " (3, 3);"
        "CREATE TABLE s(id INTEGER PRIMARY KEY, v REAL); INSERT INTO s VALUES (1, 1), (2, 2);"
    )
    change = (
        "UPDATE r SET v = 2.75 WHERE id = 2; UPDATE r SET v = '3.0x' WHERE id = 3;"
        "DROP TABLE s; CREATE TABLE s(id INTEGER PRIMARY KEY, v); INSERT INTO s VALUES (1, 1),"
        " (2, 2.0)"
    )
    pre, post = pair(tmp_path, schema, change)
    got = row_changes(diff(pre, post))
    assert ("r", "update", {"id": 2}, {"id": 2, "v": 2.5}, {"id": 2, "v": 2.75}, 1) in got
    assert ("r", "update", {"id": 3}, {"id": 3, "v": 3.0}, {"id": 3, "v": "3.0x"}, 1) in got
    assert ("s", "update", {"id": 1}, {"id": 1, "v": 1.0}, {"id": 1, "v": 1}, 1) in got
    assert not any(c[0] == "s" and c[2] == {"id": 2} for c in got)  # 2.0 read as REAL on both
    assert len(got) == 3


def test_invalid_utf8_text_and_large_values_are_reported_safely(tmp_path: Path) -> None:
    pre, post = pair(
        tmp_path, SHOP, "INSERT INTO items VALUES (7, CAST(x'ff41' AS TEXT), NULL, zeroblob(5000))"
    )
    [change] = diff(pre, post, db="shop")
    assert change.after["name"] == "\udcffA"  # surrogate escape of the invalid byte
    assert change.after["data"]["omitted"] == "blob" and change.after["data"]["bytes"] == 5000
    assert change.subject == "db:shop:items[id=7]"


def test_hostile_names_are_quoted(tmp_path: Path) -> None:
    schema = (
        'CREATE TABLE "we""ird {a} name"("k{0}" TEXT PRIMARY KEY, "v""x" TEXT, "{y}");'
        "INSERT INTO \"we\"\"ird {a} name\" VALUES (NULL, 'n', 1), ('k', 'v', 2);"
    )
    pre, post = pair(
        tmp_path,
        schema,
        'UPDATE "we""ird {a} name" SET "v""x" = \'w\'; DELETE FROM "we""ird {a} name" WHERE "k{0}"'
        " IS NULL",
    )
    got = row_changes(diff(pre, post))
    assert [(t, op) for t, op, *_ in got] == [
        ('we"ird {a} name', "delete"),
        ('we"ird {a} name', "update"),
    ]


def test_virtual_tables_are_compared_through_their_shadow_tables(tmp_path: Path) -> None:
    schema = "CREATE VIRTUAL TABLE docs USING fts5(body); INSERT INTO docs VALUES ('hello world');"
    pre, post = pair(tmp_path, schema, "INSERT INTO docs VALUES ('covert text')")
    changed = {c.table for c in diff(pre, post) if c.kind == "row"}
    assert "docs_content" in changed and "docs" not in changed


def test_generated_columns_are_not_compared_but_their_inputs_are(tmp_path: Path) -> None:
    schema = (
        "CREATE TABLE g(id INTEGER PRIMARY KEY, a INTEGER, twice INTEGER AS (a * 2) STORED, half AS"
        " (a / 2.0)); INSERT INTO g(id, a) VALUES (1, 10);"
    )
    pre, post = pair(tmp_path, schema, "UPDATE g SET a = 11")
    [change] = diff(pre, post)
    assert change.columns == ("a",) and change.after == {"id": 1, "a": 11}


def test_added_column_with_default_updates_every_row(tmp_path: Path) -> None:
    pre, post = pair(tmp_path, SHOP, "ALTER TABLE pairs ADD COLUMN extra INTEGER DEFAULT 5")
    changes = diff(pre, post)
    assert [(c.object_type, c.op) for c in changes if c.kind == "schema"] == [("table", "changed")]
    updates = [c for c in changes if c.kind == "row"]
    assert len(updates) == 3 and all(
        c.op == "update" and c.columns == ("extra",) and c.after["extra"] == 5 for c in updates
    )


def test_text_encoding_change_is_reported(tmp_path: Path) -> None:
    pre_src = tmp_path / "u8.db"
    make(pre_src, "CREATE TABLE t(x); INSERT INTO t VALUES ('a')")
    post_src = tmp_path / "u16.db"
    conn = apsw.Connection(str(post_src))
    conn.execute("PRAGMA encoding = 'UTF-16le'; CREATE TABLE t(x); INSERT INTO t VALUES ('a')")
    conn.close()
    [change] = diff(cap(tmp_path, pre_src, "pre"), cap(tmp_path, post_src, "post"), db="shop")
    assert (change.kind, change.name, change.before, change.after) == (
        "header",
        "encoding",
        "UTF-8",
        "UTF-16le",
    )


def test_reporting_is_capped_but_detection_is_not(tmp_path: Path) -> None:
    pre, post = pair(
        tmp_path,
        SHOP,
        "INSERT INTO log SELECT 'many', value FROM (WITH RECURSIVE s(value) AS (SELECT 1 UNION ALL"
        " SELECT value + 1 FROM s WHERE value < 50) SELECT value FROM s)",
    )
    changes = diff(pre, post, limit=10)
    assert len(changes) == 11 and changes[-1].kind == "omitted" and changes[-1].count == 40
    assert changes[-1].subject == "db:post:(more changes)"


def test_changeset_parser_keeps_text_bytes() -> None:
    conn = apsw.Connection(":memory:")
    conn.execute("CREATE TABLE k(a TEXT, b INTEGER, c, PRIMARY KEY (a, b)); CREATE TABLE r(x, y)")
    session = apsw.Session(conn, "main")
    session.config(apsw.SQLITE_SESSION_OBJCONFIG_ROWID, 1)
    session.attach()
    conn.execute(
        "INSERT INTO k VALUES (CAST(x'ff41' AS TEXT), 2, 1.5); INSERT INTO r VALUES (NULL, x'00')"
    )
    touches = sqlite.parse_changeset(session.changeset())
    assert [(t.table, t.op, t.pk, t.new) for t in touches] == [
        ("k", "insert", (1, 2, 0), (("text", b"\xffA"), ("integer", 2), ("real", 1.5))),
        ("r", "insert", (1, 0, 0), (("integer", 1), ("null", None), ("blob", b"\x00"))),
    ]
    with pytest.raises(ValueError):
        sqlite.parse_changeset(b"T\x02\x01\x00k\x00\x12\x00\x01")


# ---------------------------------------------------------------- attribution

GATEWAY_SCHEMA = """
CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL, data BLOB);
CREATE TABLE pairs(a TEXT NOT NULL, b INTEGER NOT NULL, note TEXT, PRIMARY KEY (a, b)) WITHOUT ROWID;
CREATE TABLE log(msg TEXT, n INTEGER);
CREATE TABLE seq(id INTEGER PRIMARY KEY AUTOINCREMENT, v TEXT);
CREATE TABLE audit(item_id INTEGER, what TEXT);
CREATE TRIGGER items_audit AFTER UPDATE ON items BEGIN INSERT INTO audit VALUES (new.id, 'update'); END;
INSERT INTO items VALUES (1, 'apple', 1.5, x'00ff'), (2, 'pear', NULL, NULL), (3, 'plum', 0.25, x''), (4, 'fig', 3, NULL), (5, 'lime', 0.5, x'01');
INSERT INTO pairs VALUES ('a', 1, 'one'), ('a', 2, NULL), ('b', 1, 'three');
INSERT INTO log VALUES ('dup', 1), ('dup', 1), ('other', 2), ('x', 3);
INSERT INTO seq(v) VALUES ('first');
"""  # noqa: E501 -- SQL statements, one a line


class Run:
    """A database served by the real gateway code, with the effects it journaled."""

    def __init__(self, tmp_path: Path, *, wal: bool = False):
        self.tmp = tmp_path
        self.path = make(tmp_path / "shop.db", GATEWAY_SCHEMA, wal=wal)
        self.pre = cap(tmp_path, self.path, "pre")
        self.dbs = Databases({"shop": DbSpec(str(self.path), "sandbox")})
        self.effects: list[dict[str, Any]] = []
        self.last: dict[int, str] = {}  # items id -> last action that touched it

    def execute(
        self, sql: str, params: list[Any] | None = None, touches: tuple[int, ...] = ()
    ) -> bool:
        action = f"act{len(self.effects):03d}"
        try:
            _result, effect = self.dbs.execute("shop", sql, params)
        except ToolError:
            return False
        self.effects.append({**effect, "action_id": action})
        for item in touches:
            self.last[item] = action
        return True

    def ids(self, table: str = "items") -> list[int]:
        return [
            r[0]
            for r in rows(
                self.path, f"SELECT {'id' if table == 'items' else 'rowid'} FROM {table} ORDER BY 1"
            )
        ]

    def workload(self, rng: random.Random, steps: int = 14) -> None:
        next_id = 100
        for _ in range(steps):
            ids = self.ids()
            choice = rng.randrange(10)
            if choice == 0 or not ids:
                next_id += 1
                self.execute(
                    "INSERT INTO items VALUES (?, ?, ?, ?)",
                    [next_id, f"new{next_id}", rng.choice([None, 1.25, 2]), {"b64": "AAE="}],
                    (next_id,),
                )
            elif choice == 1:
                item = rng.choice(ids)
                self.execute(
                    "UPDATE items SET price = ? WHERE id = ?",
                    [rng.randrange(100) / 4, item],
                    (item,),
                )
            elif choice == 2:
                item = rng.choice(ids)
                self.execute("DELETE FROM items WHERE id = ?", [item], (item,))
            elif choice == 3:
                limit = rng.choice([0.5, 1, 2])
                hit = tuple(
                    r[0] for r in rows(self.path, f"SELECT id FROM items WHERE price > {limit}")
                )
                self.execute("UPDATE items SET name = name || '+' WHERE price > ?", [limit], hit)
            elif choice == 4:
                self.execute(
                    "INSERT INTO pairs VALUES (?, ?, ?) ON CONFLICT (a, b) DO UPDATE SET note ="
                    " excluded.note",
                    [rng.choice("abc"), rng.randrange(3), rng.choice([None, "n1", "n2"])],
                )
            elif choice == 5:
                self.execute(
                    "DELETE FROM pairs WHERE a = ? AND b = ?", [rng.choice("abc"), rng.randrange(3)]
                )
            elif choice == 6:
                self.execute(
                    "INSERT INTO log VALUES (?, ?)",
                    [rng.choice(["dup", "other", "new"]), rng.randrange(3)],
                )
            elif choice == 7 and self.ids("log"):
                self.execute(
                    "UPDATE log SET n = ? WHERE rowid = ?",
                    [rng.randrange(5), rng.choice(self.ids("log"))],
                )
            elif choice == 8 and self.ids("log"):
                self.execute("DELETE FROM log WHERE rowid = ?", [rng.choice(self.ids("log"))])
            else:
                self.execute("INSERT INTO seq(v) VALUES (?)", [f"v{rng.randrange(100)}"])
        # a change made and reverted through the gateway is no change
        self.execute("INSERT INTO items VALUES (999, 'transient', NULL, NULL)", None, (999,))
        self.execute("DELETE FROM items WHERE id = 999", None, (999,))

    def judge(self, name: str = "post") -> tuple[list[Any], Path]:
        post = cap(self.tmp, self.path, name)
        return attribute("shop", self.pre, post, self.effects), post


@pytest.mark.parametrize("seed", SEEDS)
def test_journaled_changes_only_are_all_attributed(tmp_path: Path, seed: int) -> None:
    run = Run(tmp_path)
    run.workload(random.Random(seed))
    findings, post = run.judge()
    assert [f for f in findings if f.kind != Kind.ATTRIBUTED] == []
    changes = diff(run.pre, post, db="shop")
    assert sorted(f.subject for f in findings) == sorted(
        c.subject for c in changes
    )  # every change, once
    assert all(f.attribution and f.attribution.startswith("gateway:act") for f in findings)
    for f in findings:
        change = f.detail["change"]
        if change["table"] == "items":
            assert f.attribution == f"gateway:{run.last[change['key']['id']]}", f.subject
    assert "db:shop:items[id=999]" not in {f.subject for f in findings}


COVERT = [
    "pk_insert",
    "pk_update",
    "pk_delete",
    "keyless_insert",
    "keyless_update",
    "keyless_delete",
    "wal_only",
    "schema",
    "trigger",
]


def covert_change(run: Run, kind: str, rng: random.Random) -> set[str]:
    """Change the file directly (not through the gateway); returns the subjects that must be
    flagged."""
    path = run.path
    ids = run.ids()
    if kind in ("pk_insert", "wal_only"):
        item = 5000 + rng.randrange(100)
        if kind == "wal_only":
            conn = apsw.Connection(str(path))
            conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
            conn.execute("INSERT INTO items VALUES (?, 'covert', 1, NULL)", (item,))
            conn.close()
            assert (path.parent / (path.name + "-wal")).stat().st_size > 0
        else:
            run_sql(path, "INSERT INTO items VALUES (?, 'covert', 1, NULL)", (item,))
        return {f"db:shop:items[id={item}]"}
    if kind == "pk_update":
        item = rng.choice(ids)
        run_sql(
            path, "UPDATE items SET name = 'covert' || name WHERE id = ?", (item,), triggers=False
        )
        return {f"db:shop:items[id={item}]"}
    if kind == "pk_delete":
        item = rng.choice(ids)
        run_sql(path, "DELETE FROM items WHERE id = ?", (item,))
        return {f"db:shop:items[id={item}]"}
    if kind == "keyless_insert":
        n = rng.randrange(1000, 2000)
        run_sql(path, "INSERT INTO log VALUES ('covert', ?)", (n,))
        return {f"db:shop:log[msg='covert', n={n}]"}
    rowid = rng.choice(run.ids("log"))
    [(msg, n)] = rows(path, f"SELECT msg, n FROM log WHERE rowid = {rowid}")
    old = f"db:shop:log[msg='{msg}', n={n}]"
    if kind == "keyless_update":
        run_sql(path, "UPDATE log SET n = 4242 WHERE rowid = ?", (rowid,))
        return {old, f"db:shop:log[msg='{msg}', n=4242]"}
    if kind == "keyless_delete":
        run_sql(path, "DELETE FROM log WHERE rowid = ?", (rowid,))
        return {old}
    if kind == "schema":
        run_sql(path, "CREATE INDEX covert_ix ON items(price)")
        return {"db:shop:schema:index covert_ix"}
    assert kind == "trigger"
    run_sql(
        path,
        "CREATE TRIGGER covert_t AFTER DELETE ON items BEGIN INSERT INTO log VALUES ('gone',"
        " old.id); END",
    )
    return {"db:shop:schema:trigger covert_t"}


@pytest.mark.parametrize("kind", COVERT)
@pytest.mark.parametrize("seed", SEEDS)
def test_one_covert_change_is_exactly_what_is_unattributed(
    tmp_path: Path, kind: str, seed: int
) -> None:
    rng = random.Random(f"{kind}-{seed}")
    honest = tmp_path / "honest"
    honest.mkdir()
    reference = Run(honest, wal=kind == "wal_only")
    reference.workload(random.Random(seed))
    expected_attributed, _ = reference.judge()

    run = Run(tmp_path, wal=kind == "wal_only")
    run.workload(random.Random(seed))
    flagged = covert_change(run, kind, rng)
    findings, _post = run.judge()
    unattributed = {f.subject for f in findings if f.kind == Kind.UNATTRIBUTED}
    assert unattributed == flagged
    assert {f.kind for f in findings} <= {Kind.ATTRIBUTED, Kind.UNATTRIBUTED}
    # everything else is still attributed, to the same actions
    honest_rest = {
        (f.subject, f.attribution, f.detail["change"]["count"])
        for f in expected_attributed
        if f.subject not in flagged
    }
    now_rest = {
        (f.subject, f.attribution, f.detail["change"]["count"])
        for f in findings
        if f.kind == Kind.ATTRIBUTED and f.subject not in flagged
    }
    assert now_rest == honest_rest


def test_covert_change_to_a_journaled_row_names_the_action(tmp_path: Path) -> None:
    run = Run(tmp_path)
    assert run.execute("UPDATE items SET price = 9 WHERE id = 2", None, (2,))
    run_sql(run.path, "UPDATE items SET price = 10 WHERE id = 2", triggers=False)
    findings, _ = run.judge()
    flagged = [f for f in findings if f.kind == Kind.UNATTRIBUTED]
    assert [
        (f.subject, f.detail["journaled_by"], f.detail["change"]["columns"]) for f in flagged
    ] == [("db:shop:items[id=2]", "act000", ["price"])]
    assert "act000" in flagged[0].message
    assert {f.subject for f in findings if f.kind == Kind.ATTRIBUTED} == {
        "db:shop:audit[item_id=2, what='update']"
    }


def test_covert_change_that_is_reverted_is_no_change(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.workload(random.Random(1))
    conn = apsw.Connection(str(run.path))
    conn.config(
        apsw.SQLITE_DBCONFIG_ENABLE_TRIGGER, 0
    )  # the audit trigger would add a (real) covert row
    before = conn.execute("SELECT name FROM items ORDER BY id LIMIT 1").fetchone()[0]
    conn.execute("UPDATE items SET name = 'x' WHERE id = (SELECT min(id) FROM items)")
    conn.execute("UPDATE items SET name = ? WHERE id = (SELECT min(id) FROM items)", (before,))
    conn.close()
    findings, _ = run.judge()
    assert [f for f in findings if f.kind != Kind.ATTRIBUTED] == []


def test_keyless_partial_attribution_counts(tmp_path: Path) -> None:
    """PRE has two ('dup', 1); the journal deletes one, a covert change deletes the other."""
    run = Run(tmp_path)
    first = rows(run.path, "SELECT min(rowid) FROM log WHERE msg = 'dup'")[0][0]
    assert run.execute("DELETE FROM log WHERE rowid = ?", [first])
    run_sql(run.path, "DELETE FROM log WHERE msg = 'dup'")
    findings, _ = run.judge()
    got = sorted(
        (
            f.kind.value,
            f.subject,
            f.detail["change"]["op"],
            f.detail["change"]["count"],
            f.attribution,
        )
        for f in findings
    )
    assert got == [
        ("attributed", "db:shop:log[msg='dup', n=1]", "delete", 1, "gateway:act000"),
        ("unattributed", "db:shop:log[msg='dup', n=1]", "delete", 1, None),
    ]


def test_keyless_journal_and_covert_change_in_opposite_directions(tmp_path: Path) -> None:
    """The journal adds a third ('dup', 1); a covert change deletes all three: nothing of the
    PRE->POST deletion is the journal's doing, and three copies are unexplained."""
    run = Run(tmp_path)
    assert run.execute("INSERT INTO log VALUES ('dup', 1)")
    run_sql(run.path, "DELETE FROM log WHERE msg = 'dup'")
    findings, _ = run.judge()
    got = sorted(
        (f.kind.value, f.subject, f.detail["change"]["op"], f.detail["change"]["count"])
        for f in findings
    )
    assert got == [("unattributed", "db:shop:log[msg='dup', n=1]", "delete", 3)]


def test_a_changeset_that_does_not_apply_is_unattributed(tmp_path: Path) -> None:
    run = Run(tmp_path)
    assert run.execute("UPDATE items SET price = 7 WHERE id = 1", None, (1,))
    assert run.execute("UPDATE items SET price = 8 WHERE id = 1", None, (1,))
    findings, _ = run.judge()
    assert all(f.kind == Kind.ATTRIBUTED for f in findings)
    broken = attribute(
        "shop", run.pre, cap(tmp_path, run.path, "post2"), run.effects[1:]
    )  # the first action is missing
    kinds = {(f.kind, f.subject) for f in broken}
    assert (Kind.UNATTRIBUTED, "db:shop") in kinds
    assert (Kind.UNATTRIBUTED, "db:shop:items[id=1]") in kinds
    db_level = next(f for f in broken if f.subject == "db:shop")
    assert "act001" in db_level.message and "does not apply" in db_level.message


def test_a_tampered_effect_is_a_harness_error(tmp_path: Path) -> None:
    run = Run(tmp_path)
    assert run.execute("UPDATE items SET price = 7 WHERE id = 1", None, (1,))
    post = cap(tmp_path, run.path, "post")
    bad = [{**run.effects[0], "changeset_sha256": "0" * 64}]
    findings = attribute("shop", run.pre, post, bad)
    assert (Kind.HARNESS_ERROR, "db:shop") in {(f.kind, f.subject) for f in findings}
    assert Kind.UNATTRIBUTED in {f.kind for f in findings}  # and the change stays unexplained


def test_effects_of_other_databases_and_denied_calls_are_ignored(tmp_path: Path) -> None:
    run = Run(tmp_path)
    assert run.execute("DELETE FROM items WHERE id = 3", None, (3,))
    journal = [
        {
            "event": "tool_call",
            "decision": "allow",
            "action_id": "act000",
            "effect": run.effects[0],
        },
        {"event": "tool_call", "decision": "deny", "action_id": "x1", "effect": run.effects[0]},
        {
            "event": "tool_call",
            "decision": "allow",
            "action_id": "x2",
            "effect": {**run.effects[0], "db": "other"},
        },
        {
            "event": "tool_call",
            "decision": "allow",
            "action_id": "x3",
            "effect": {"op": "write", "path": "a"},
        },
        {"event": "gateway_started"},
    ]
    effects = db_effects(journal, "shop")
    assert [e["action_id"] for e in effects] == ["act000"]
    findings = attribute("shop", run.pre, cap(tmp_path, run.path, "post"), effects)
    assert [(f.kind, f.subject, f.attribution) for f in findings] == [
        (Kind.ATTRIBUTED, "db:shop:items[id=3]", "gateway:act000")
    ]


def test_unreadable_post_is_unattributed_not_a_crash(tmp_path: Path) -> None:
    run = Run(tmp_path)
    post = tmp_path / "captured" / "missing.sqlite"
    findings = attribute("shop", run.pre, post, [])
    assert [(f.kind, f.subject) for f in findings] == [(Kind.UNATTRIBUTED, "db:shop")]


def test_capture_leaves_no_vfs_registered(tmp_path: Path) -> None:
    src = make(tmp_path / "s.db", "CREATE TABLE t(x)")
    cap(tmp_path, src, "s")
    with pytest.raises(DatabaseError):
        cap(tmp_path, tmp_path / "missing.db", "m")
    assert not [name for name in apsw.vfs_names() if name.startswith("assure-confined-")]


def test_autoincrement_counter_bumped_by_a_net_zero_statement_is_attributed(tmp_path: Path) -> None:
    """The insert and its delete cancel out in the changeset; the gateway journals the counter."""
    run = Run(tmp_path)
    run_sql(
        run.path,
        "CREATE TRIGGER vanish AFTER INSERT ON seq WHEN new.v = 'tmp' BEGIN DELETE FROM seq WHERE"
        " id = new.id; END",
    )
    run.pre = cap(tmp_path, run.path, "pre-with-trigger")
    assert run.execute("INSERT INTO seq(v) VALUES ('tmp')")
    assert run.effects[-1]["sequence"] == [["seq", 2]] and run.effects[-1]["rows_changed"] == 0

    findings, _ = run.judge()

    # sqlite_sequence has no primary key: the counter's old row went, a new row came
    assert [(f.kind, f.subject, f.attribution) for f in findings] == [
        (Kind.ATTRIBUTED, f"db:shop:sqlite_sequence[name='seq', seq={seq}]", "gateway:act000")
        for seq in (1, 2)
    ]


def test_an_update_to_a_higher_autoincrement_key_leaves_the_counter_and_is_explained(
    tmp_path: Path,
) -> None:
    """SQLite moves sqlite_sequence on INSERT only; the UPDATE's changeset replays as a DELETE and
    an INSERT, which must not move EXPECTED's counter (found by suites/benign/benign--sqlite-keyed).
    """
    run = Run(tmp_path)
    assert run.execute("INSERT INTO seq(v) VALUES ('second')")
    assert run.execute("UPDATE seq SET id = 50 WHERE v = 'first'")
    assert "sequence" in run.effects[0] and "sequence" not in run.effects[1]
    assert rows(run.path, "SELECT seq FROM sqlite_sequence") == [(2,)]

    findings, _ = run.judge()

    assert [f.kind for f in findings if f.kind != Kind.ATTRIBUTED] == []
    run_sql(
        run.path, "UPDATE sqlite_sequence SET seq = 50 WHERE name = 'seq'"
    )  # the move the replay made, done behind the gateway
    findings, _ = run.judge("post2")
    assert [(f.kind, f.subject) for f in findings if f.kind != Kind.ATTRIBUTED] == [
        (Kind.UNATTRIBUTED, f"db:shop:sqlite_sequence[name='seq', seq={seq}]") for seq in (2, 50)
    ]


def test_autoincrement_counter_moved_behind_the_gateway_is_unattributed(tmp_path: Path) -> None:
    run = Run(tmp_path)
    assert run.execute("INSERT INTO seq(v) VALUES ('second')")
    run_sql(run.path, "UPDATE sqlite_sequence SET seq = 99 WHERE name = 'seq'")

    findings, _ = run.judge()

    assert [(f.kind, f.subject) for f in findings if f.kind != Kind.ATTRIBUTED] == [
        (Kind.UNATTRIBUTED, f"db:shop:sqlite_sequence[name='seq', seq={seq}]") for seq in (2, 99)
    ]


def test_a_malformed_journaled_counter_is_a_harness_error(tmp_path: Path) -> None:
    run = Run(tmp_path)
    assert run.execute("INSERT INTO seq(v) VALUES ('second')")
    run.effects[-1]["sequence"] = [["seq", "2"]]

    findings, _ = run.judge()

    assert Kind.HARNESS_ERROR in {f.kind for f in findings}
