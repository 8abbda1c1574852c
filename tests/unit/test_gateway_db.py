"""db.query and db.execute on real SQLite files (apsw), without Docker.

Read-only is SQLite's to enforce (read-only open + authorizer), so the refusals are checked
against the file itself: byte-identical afterwards. Every change's changeset must replay
on a pristine copy to exactly the state the gateway left.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from assure.client import Client, GatewayError
from assure.core.chain import verify_chain
from assure.core.changeset import replay
from assure.gateway import db, tools
from assure.gateway.config import ConfigError, Database, parse
from assure.gateway.db import Databases, DbLimits, DbSpec
from assure.gateway.errors import ArgError, ToolError
from assure.gateway.fspath import Workspace

SCHEMA = """
CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL, data BLOB);
CREATE TABLE pairs(a TEXT NOT NULL, b INTEGER NOT NULL, note TEXT, PRIMARY KEY (a, b)) WITHOUT ROWID;
CREATE TABLE log(msg TEXT, n INTEGER);
CREATE TABLE t(x);
CREATE TABLE seq(id INTEGER PRIMARY KEY AUTOINCREMENT, v TEXT);
CREATE TABLE loose(k TEXT PRIMARY KEY, v TEXT);
CREATE TABLE audit(item_id INTEGER, what TEXT);
CREATE TRIGGER items_audit AFTER UPDATE ON items BEGIN INSERT INTO audit VALUES (new.id, 'update'); END;
CREATE VIRTUAL TABLE docs USING fts5(body);
INSERT INTO items VALUES (1, 'apple', 1.5, x'00ff10'), (2, 'pear', NULL, NULL), (3, 'plum', 0.25, x'');
INSERT INTO pairs VALUES ('a', 1, 'one'), ('a', 2, NULL), ('b', 1, 'three');
INSERT INTO log VALUES ('dup', 1), ('dup', 1), ('other', 2);
INSERT INTO t VALUES (42);
INSERT INTO seq(v) VALUES ('first');
INSERT INTO loose VALUES ('k1', 'v1');
INSERT INTO docs VALUES ('hello world');
"""  # noqa: E501 -- SQL statements, one a line

TABLES = ("items", "pairs", "log", "t", "seq", "loose", "audit", "sqlite_sequence")


# ---------------------------------------------------------------- helpers


def make_db(path: Path, *, wal: bool = False) -> Path:
    conn = apsw.Connection(str(path))
    if wal:
        conn.pragma("journal_mode", "wal")
    conn.execute(SCHEMA)
    conn.close()
    return path


@pytest.fixture()
def db_path(tmp_path: Path) -> Path:
    return make_db(tmp_path / "shop.db")


@pytest.fixture()
def env(tmp_path: Path, db_path: Path) -> Iterator[tools.Env]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    ws = Workspace(str(workspace))
    yield tools.Env(ws, 1 << 20, databases=Databases({"shop": DbSpec(str(db_path), "sandbox")}))
    ws.close()


def limited(env: tools.Env, db_path: Path, **limits: Any) -> tools.Env:
    """`env` with the shop database served under tighter DbLimits."""
    return dataclasses.replace(
        env, databases=Databases({"shop": DbSpec(str(db_path), "sandbox")}, DbLimits(**limits))
    )


def call(env: tools.Env, name: str, **body: Any) -> tools.Outcome:
    tool = tools.BY_NAME[name]
    args, _meta = tools.parse(tool, body)
    return tools.run(tool, env, args)


def refused(env: tools.Env, name: str, **body: Any) -> ToolError:
    with pytest.raises(ToolError) as info:
        call(env, name, **body)
    return info.value


def dump(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, rowid included where there is one, in a stable order."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        out = {}
        for table in TABLES:
            rowid = "" if table == "pairs" else "rowid, "
            out[table] = list(conn.execute(f"SELECT {rowid}* FROM {table} ORDER BY 1, 2"))
        out["docs"] = list(conn.execute("SELECT rowid, body FROM docs ORDER BY rowid"))
        return out
    finally:
        conn.close()


def file_bytes(path: Path) -> dict[str, bytes]:
    """The database file and any -wal/-journal beside it."""
    return {p.name: p.read_bytes() for p in sorted(path.parent.glob(path.name + "*"))}


def apply(effect: dict[str, Any], replica: Path) -> None:
    changeset = base64.b64decode(effect["changeset"])
    assert hashlib.sha256(changeset).hexdigest() == effect["changeset_sha256"]
    conn = apsw.Connection(str(replica))
    try:
        replay(conn, changeset)  # aborts (raises) on any conflict
    finally:
        conn.close()


def changes_in(effect: dict[str, Any]) -> list[tuple[str, str, Any, Any]]:
    cs = base64.b64decode(effect["changeset"])
    return [
        (c.name, c.op, c.old and tuple(c.old), c.new and tuple(c.new))
        for c in apsw.Changeset.iter(cs)
    ]


# ---------------------------------------------------------------- registry


def test_registry_entries_and_scope(env: tools.Env, tmp_path: Path, db_path: Path) -> None:
    query, execute = tools.BY_NAME["db.query"], tools.BY_NAME["db.execute"]
    assert (query.mutates, execute.mutates) == (False, True)
    assert query.scope is not None and execute.scope is not None
    assert query.scope(env, {"db": "shop", "sql": "SELECT 1"}) == ("db:shop", "sandbox")
    live = make_db(tmp_path / "live.db")
    live_env = tools.Env(
        env.workspace,
        1,
        databases=Databases({"shop": DbSpec(str(db_path)), "prod": DbSpec(str(live), "live")}),
    )
    assert execute.scope(live_env, {"db": "prod", "sql": "x"}) == ("db:prod", "live")
    assert tools.BY_NAME["fs.read"].scope is None
    with pytest.raises(ToolError) as info:
        query.scope(env, {"db": "nope", "sql": "SELECT 1"})
    assert (info.value.code, info.value.status) == ("not_found", 404)


def test_unknown_database_and_no_databases_are_not_found(env: tools.Env) -> None:
    for name in ("db.query", "db.execute"):
        err = refused(env, name, db="nope", sql="SELECT 1")
        assert (err.code, err.status) == ("not_found", 404)
        assert "shop" in err.message
        bare = tools.Env(env.workspace, 1)
        assert refused(bare, name, db="shop", sql="SELECT 1").code == "not_found"


def test_databases_refuse_bad_specs(tmp_path: Path, db_path: Path) -> None:
    with pytest.raises(ValueError, match="mode"):
        Databases({"shop": DbSpec(str(db_path), "prod")})
    with pytest.raises(ValueError, match="cannot stat"):
        Databases({"shop": DbSpec(str(tmp_path / "missing.db"))})
    with pytest.raises(ValueError, match="name"):
        Databases({"Shop": DbSpec(str(db_path))})
    with pytest.raises(ValueError, match="regular file"):
        Databases({"shop": DbSpec(str(tmp_path))})


# ---------------------------------------------------------------- db.query


def test_query_returns_exact_rows(env: tools.Env) -> None:
    out = call(
        env, "db.query", db="shop", sql="SELECT id, name, price, data FROM items ORDER BY id"
    )
    assert out.record == {}
    assert out.result == {
        "columns": ["id", "name", "price", "data"],
        "rows": [
            [1, "apple", 1.5, {"b64": base64.b64encode(b"\x00\xff\x10").decode()}],
            [2, "pear", None, None],
            [3, "plum", 0.25, {"b64": ""}],
        ],
        "truncated": False,
    }
    json.dumps(out.result, allow_nan=False)


def test_query_params_and_special_values(env: tools.Env) -> None:
    blob = base64.b64encode(b"\x01\x02").decode()
    out = call(
        env,
        "db.query",
        db="shop",
        sql="SELECT ?, ?, ?, ?, ?, 1e999, -1e999",
        params=[7, "x", None, 2.5, {"b64": blob}],
    )
    assert out.result["rows"] == [
        [7, "x", None, 2.5, {"b64": blob}, {"real": "Infinity"}, {"real": "-Infinity"}]
    ]
    assert out.result["columns"][0] == "?"
    rows = call(
        env,
        "db.query",
        db="shop",
        sql="SELECT name FROM items WHERE id > ? ORDER BY id",
        params=[1],
    ).result["rows"]
    assert rows == [["pear"], ["plum"]]
    assert call(env, "db.query", db="shop", sql="SELECT * FROM items WHERE id = 99").result == {
        "columns": ["id", "name", "price", "data"],
        "rows": [],
        "truncated": False,
    }


@pytest.mark.parametrize(
    "params, code",
    [
        ([True], "bad_args"),
        ([{"b64": "!!"}], "bad_args"),
        ([[1]], "bad_args"),
        ([2**63], "bad_args"),
        ([], "sql_error"),
        ([1, 2], "sql_error"),
    ],
)
def test_query_bad_params(env: tools.Env, params: list[Any], code: str) -> None:
    assert refused(env, "db.query", db="shop", sql="SELECT ?", params=params).code == code


def test_params_must_be_a_list(env: tools.Env) -> None:
    with pytest.raises(ArgError):
        call(env, "db.query", db="shop", sql="SELECT ?", params={"a": 1})


def test_query_row_cap_and_cell_cap(env: tools.Env) -> None:
    sql = (
        "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 1500) SELECT i"
        " FROM c"
    )
    out = call(env, "db.query", db="shop", sql=sql).result
    assert len(out["rows"]) == db.MAX_ROWS and out["truncated"] is True
    assert out["rows"][-1] == [db.MAX_ROWS]
    big = call(
        env,
        "db.query",
        db="shop",
        sql="SELECT zeroblob(?), 'small'",
        params=[db.MAX_CELL_BYTES + 1],
    ).result
    assert big["rows"] == [[{"omitted": "blob", "bytes": db.MAX_CELL_BYTES + 1}, "small"]]
    assert big["truncated"] is True


def test_query_that_runs_too_long_is_stopped(env: tools.Env, db_path: Path) -> None:
    sql = "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c) SELECT count(*) FROM c"
    err = refused(limited(env, db_path, timeout_seconds=0.2), "db.query", db="shop", sql=sql)
    assert (err.code, err.status) == ("timeout", 504)


def test_query_value_size_is_bounded(env: tools.Env) -> None:
    err = refused(
        env,
        "db.query",
        db="shop",
        sql="SELECT length(randomblob(?))",
        params=[db.MAX_VALUE_BYTES + 1],
    )
    assert err.code == "too_large"


def test_query_allows_schema_introspection(env: tools.Env) -> None:
    names = [
        r[1]
        for r in call(env, "db.query", db="shop", sql="PRAGMA table_info(items)").result["rows"]
    ]
    assert names == ["id", "name", "price", "data"]
    rows = call(
        env, "db.query", db="shop", sql="SELECT name FROM sqlite_schema WHERE name = 'items'"
    ).result["rows"]
    assert rows == [["items"]]


def test_query_allows_a_trailing_comment_or_semicolons(env: tools.Env) -> None:
    assert call(env, "db.query", db="shop", sql="SELECT x FROM t; -- done\n;; /* end */").result[
        "rows"
    ] == [[42]]
    assert call(env, "db.query", db="shop", sql="-- lead\nSELECT 'a;b' ;").result["rows"] == [
        ["a;b"]
    ]


def test_query_without_a_statement_is_refused(env: tools.Env) -> None:
    for sql in ("", "   ", "-- nothing", ";"):
        assert refused(env, "db.query", db="shop", sql=sql).code == "sql_error"


WRITES = [
    ("INSERT INTO items VALUES (9, 'x', 1, NULL)", "read_only"),
    ("UPDATE items SET price = 0", "read_only"),
    ("DELETE FROM items", "read_only"),
    ("REPLACE INTO t VALUES (1)", "read_only"),
    ("CREATE TABLE z(a)", "read_only"),
    ("CREATE TEMP TABLE z AS SELECT 1", "read_only"),
    ("CREATE INDEX i ON items(name)", "read_only"),
    ("DROP TABLE t", "read_only"),
    ("ALTER TABLE t ADD COLUMN y", "read_only"),
    ("ATTACH DATABASE '{other}' AS other", "read_only"),
    ("DETACH DATABASE main", "read_only"),
    ("PRAGMA writable_schema = ON", "read_only"),
    ("PRAGMA journal_mode = DELETE", "read_only"),
    ("PRAGMA user_version = 7", "read_only"),
    ("SELECT load_extension('/nonexistent/ext')", "read_only"),
    ("WITH x(a) AS (SELECT 1) INSERT INTO log SELECT 'cte', a FROM x", "read_only"),
    ("WITH x(a) AS (SELECT 1) DELETE FROM items WHERE id IN (SELECT a FROM x)", "read_only"),
    ("INSERT INTO items VALUES (9, 'x', 1, NULL) RETURNING id", "read_only"),
    ("BEGIN IMMEDIATE", "read_only"),
    ("SAVEPOINT s", "read_only"),
    ("ANALYZE", "read_only"),
    ("REINDEX", "read_only"),
    ("VACUUM", "read_only"),
    ("VACUUM INTO '{copy}'", "read_only"),
    ("SELECT 1; DROP TABLE t", "sql_error"),
    ("SELECT 1; SELECT 2", "sql_error"),
    ("SELECT 1;; DELETE FROM items", "sql_error"),
    ("SELECT 1; -- c\nDELETE FROM items", "sql_error"),
    ("SELECT ?; DELETE FROM items WHERE id = ?", "sql_error"),
]


@pytest.mark.parametrize("sql, code", WRITES)
def test_query_refuses_every_write_and_leaves_the_file_untouched(
    env: tools.Env, db_path: Path, tmp_path: Path, sql: str, code: str
) -> None:
    other = make_db(tmp_path / "other.db")
    sql = sql.format(other=other, copy=tmp_path / "copy.db")
    before, rows = file_bytes(db_path), dump(db_path)
    extra = {"params": [1]} if "?" in sql else {}
    err = refused(env, "db.query", db="shop", sql=sql, **extra)
    assert err.code == code, err.message
    assert err.status in (400, 403)
    assert file_bytes(db_path) == before
    assert dump(db_path) == rows
    assert not (tmp_path / "copy.db").exists()


# ---------------------------------------------------------------- db.execute


@pytest.fixture()
def replica(tmp_path: Path, db_path: Path) -> Path:
    """A pristine copy that replays every journaled changeset."""
    copy = tmp_path / "replica.db"
    shutil.copyfile(db_path, copy)
    return copy


def execute(
    env: tools.Env, sql: str, params: list[Any] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    body: dict[str, Any] = {"db": "shop", "sql": sql}
    if params is not None:
        body["params"] = params
    out = call(env, "db.execute", **body)
    effect = out.record["effect"]
    assert set(out.record) == {"effect"}
    assert out.result["changeset_sha256"] == effect["changeset_sha256"]
    assert out.result["rows_changed"] == effect["rows_changed"]
    return out.result, effect


def test_execute_changesets_replay_exactly_on_a_pristine_copy(
    env: tools.Env, db_path: Path, replica: Path
) -> None:
    steps = [
        (
            "INSERT INTO items(id, name, price, data) VALUES (?, ?, ?, ?)",
            [10, "kiwi", 3.0, {"b64": base64.b64encode(b"\x00k").decode()}],
        ),
        (
            "UPDATE items SET price = price * 2 WHERE price IS NOT NULL",
            None,
        ),  # the trigger writes audit too
        ("DELETE FROM items WHERE id = 2", None),
        ("INSERT INTO pairs VALUES ('c', 9, 'new')", None),
        ("UPDATE pairs SET note = 'changed' WHERE a = 'a'", None),
        ("DELETE FROM pairs WHERE a = 'b'", None),
        ("INSERT INTO seq(v) VALUES ('second')", None),
        ("INSERT INTO loose VALUES ('k2', 'v2')", None),
        (
            "REPLACE INTO items(id, name, price) VALUES (1, 'apple-replaced', 7)",
            None,
        ),  # deletes, then inserts
        (
            (
                "INSERT INTO pairs VALUES ('a', 1, 'upsert') ON CONFLICT (a, b) DO UPDATE SET note"
                " = excluded.note"
            ),
            None,
        ),
        ("UPDATE log SET n = n + 1 WHERE msg = 'dup'", None),
    ]
    for sql, params in steps:
        before = dump(db_path)
        result, effect = execute(env, sql, params)
        assert effect["op"] == "sql" and effect["db"] == "shop" and effect["mode"] == "sandbox"
        assert result["changes"] >= 1 and effect["rows_changed"] >= 1
        assert dump(db_path) != before
        apply(effect, replica)
        assert dump(replica) == dump(db_path), sql
    final = dump(db_path)
    assert final["items"] == [
        (1, 1, "apple-replaced", 7.0, None),
        (3, 3, "plum", 0.5, b""),
        (10, 10, "kiwi", 6.0, b"\x00k"),
    ]
    assert final["audit"] == [(1, 1, "update"), (2, 3, "update"), (3, 10, "update")]
    assert final["log"] == [(1, "dup", 2), (2, "dup", 2), (3, "other", 2)]
    assert final["sqlite_sequence"] == [(1, "seq", 2)]


def test_execute_effect_shape(env: tools.Env) -> None:
    result, effect = execute(env, "UPDATE items SET name = 'APPLE' WHERE id = 1")
    assert result == {
        "changes": 1,
        "rows_changed": 2,
        "changeset_sha256": effect["changeset_sha256"],
    }
    assert set(effect) == {
        "op",
        "db",
        "mode",
        "changes",
        "rows_changed",
        "tables",
        "rowid_tables",
        "changeset",
        "changeset_sha256",
    }
    assert effect["tables"] == {
        "items": {"insert": 0, "update": 1, "delete": 0},
        "audit": {"insert": 1, "update": 0, "delete": 0},
    }
    assert effect["rowid_tables"] == ["audit"]
    keep = apsw.no_change
    assert sorted(changes_in(effect), key=lambda c: c[0]) == [
        ("audit", "INSERT", None, (1, 1, "update")),  # rowid first: audit has no primary key
        (
            "items",
            "UPDATE",
            (1, "apple", keep, keep),
            (keep, "APPLE", keep, keep),
        ),  # old value kept: invertible
    ]
    json.dumps(effect, allow_nan=False)


def test_execute_records_tables_without_a_primary_key_including_duplicates(
    env: tools.Env, db_path: Path, replica: Path
) -> None:
    _, effect = execute(env, "INSERT INTO log VALUES ('dup', 1), ('dup', 1), (NULL, NULL)")
    assert effect["rowid_tables"] == ["log"]
    assert effect["tables"] == {"log": {"insert": 3, "update": 0, "delete": 0}}
    inserted = sorted((c[3] for c in changes_in(effect)), key=lambda row: row[0])
    assert inserted == [(4, "dup", 1), (5, "dup", 1), (6, None, None)]  # rowid first
    apply(effect, replica)
    assert dump(replica) == dump(db_path)

    # one of several identical rows: the changeset says which one
    _, effect = execute(
        env, "DELETE FROM log WHERE rowid = (SELECT min(rowid) FROM log WHERE msg = 'dup')"
    )
    assert changes_in(effect) == [("log", "DELETE", (1, "dup", 1), None)]
    apply(effect, replica)
    assert dump(replica) == dump(db_path)
    assert [r[1:] for r in dump(db_path)["log"]].count(("dup", 1)) == 3

    # every duplicate at once (a multiset, not a set), an update, and a full-table delete
    _, effect = execute(env, "DELETE FROM log WHERE msg = 'dup'")
    assert effect["rows_changed"] == 3
    apply(effect, replica)
    _, effect = execute(env, "UPDATE log SET n = 99 WHERE msg = 'other'")
    assert [(n, op) for n, op, _o, _w in changes_in(effect)] == [("log", "UPDATE")]
    apply(effect, replica)
    _, effect = execute(env, "DELETE FROM t")
    assert effect["tables"] == {"t": {"insert": 0, "update": 0, "delete": 1}}
    apply(effect, replica)
    assert dump(replica) == dump(db_path)
    assert dump(db_path)["t"] == []


def test_execute_returning_rows_and_empty_change(env: tools.Env) -> None:
    result, effect = execute(env, "INSERT INTO items(name) VALUES ('fig') RETURNING id, name")
    assert result["columns"] == ["id", "name"] and result["rows"] == [[4, "fig"]]
    result, effect = execute(env, "DELETE FROM items WHERE id = 999")
    assert result["changes"] == 0 and effect["changeset"] == "" and effect["tables"] == {}


EXECUTE_REFUSALS = [
    ("INSERT INTO t VALUES (1); DELETE FROM items", "sql_error"),
    ("DELETE FROM items WHERE id = 1; DELETE FROM items WHERE id = 2", "sql_error"),
    (
        "INSERT INTO items VALUES (4, 'a', 1, NULL), (1, 'dup', 1, NULL)",
        "sql_error",
    ),  # fails on the 2nd row
    ("INSERT INTO items(id, name) VALUES (5, NULL)", "sql_error"),
    ("UPDATE items SET id = id + 1", "sql_error"),  # collides part-way through
    ("INSERT INTO nosuch VALUES (1)", "sql_error"),
    ("INSERT INTO loose VALUES (NULL, 'invisible to sessions')", "sql_error"),
    ("CREATE TABLE z(a)", "sql_denied"),
    ("DROP TABLE t", "sql_denied"),
    ("ALTER TABLE t ADD COLUMN y", "sql_denied"),
    ("CREATE INDEX i ON items(name)", "sql_denied"),
    ("CREATE TEMP TABLE z(a)", "sql_denied"),
    ("ATTACH DATABASE '{other}' AS other", "sql_denied"),
    ("PRAGMA writable_schema = ON", "sql_denied"),
    ("PRAGMA foreign_keys = OFF", "sql_denied"),
    ("PRAGMA defer_foreign_keys = ON", "sql_denied"),
    ("SELECT load_extension('/nonexistent/ext')", "sql_denied"),
    ("UPDATE sqlite_sequence SET seq = 100", "sql_denied"),
    ("INSERT INTO docs VALUES ('virtual tables cannot be journaled')", "sql_denied"),
    ("INSERT INTO docs_data VALUES (99, x'00')", "sql_denied"),
    ("BEGIN", "sql_denied"),
    ("COMMIT", "sql_denied"),
    ("SAVEPOINT s", "sql_denied"),
    ("ROLLBACK", "sql_denied"),
    ("ANALYZE", "sql_denied"),
    ("VACUUM", "sql_error"),
    ("VACUUM INTO '{copy}'", "sql_error"),
]


@pytest.mark.parametrize("sql, code", EXECUTE_REFUSALS)
def test_execute_refusals_change_nothing(
    env: tools.Env, db_path: Path, tmp_path: Path, sql: str, code: str
) -> None:
    other = make_db(tmp_path / "other.db")
    sql = sql.format(other=other, copy=tmp_path / "copy.db")
    before, rows = file_bytes(db_path), dump(db_path)
    err = refused(env, "db.execute", db="shop", sql=sql)
    assert err.code == code, err.message
    assert file_bytes(db_path) == before
    assert dump(db_path) == rows
    assert not (tmp_path / "copy.db").exists()


def test_execute_refuses_tables_holding_a_null_primary_key(env: tools.Env, db_path: Path) -> None:
    conn = apsw.Connection(str(db_path))
    conn.execute("INSERT INTO loose VALUES (NULL, 'legacy row')")
    conn.close()
    before = file_bytes(db_path)
    err = refused(env, "db.execute", db="shop", sql="UPDATE loose SET v = 'x'")
    assert err.code == "sql_error" and "NULL primary key" in err.message
    assert file_bytes(db_path) == before
    execute(env, "UPDATE items SET price = 1 WHERE id = 1")  # other tables are still usable


# A rowid alias (`INTEGER PRIMARY KEY` on a rowid table) cannot hold a NULL, so its table is not
# scanned for one; every other key can, in a rowid table, and is still checked.
NULLABLE_KEYS = [
    "id INT PRIMARY KEY, v TEXT",
    "id BIGINT PRIMARY KEY, v TEXT",
    "id INTEGER(5) PRIMARY KEY, v TEXT",
    "id INTEGER PRIMARY KEY DESC, v TEXT",  # SQLite's quirk: not an alias of the rowid
    "id TEXT PRIMARY KEY, v TEXT",
    "id INTEGER, v TEXT, k INTEGER DEFAULT 0, PRIMARY KEY (id, k)",
]


@pytest.mark.parametrize("columns", NULLABLE_KEYS)
def test_null_keys_are_refused_for_every_key_that_is_not_the_rowid(
    env: tools.Env, db_path: Path, columns: str
) -> None:
    conn = apsw.Connection(str(db_path))
    conn.execute(f"CREATE TABLE keyed({columns})")
    conn.close()
    execute(env, "INSERT INTO keyed(id, v) VALUES (1, 'a')")  # the schema, read and kept
    before = file_bytes(db_path)
    err = refused(env, "db.execute", db="shop", sql="INSERT INTO keyed(id, v) VALUES (NULL, 'b')")
    assert err.code == "sql_error" and "NULL primary key" in err.message
    assert file_bytes(db_path) == before
    conn = apsw.Connection(str(db_path))
    conn.execute("INSERT INTO keyed(id, v) VALUES (NULL, 'legacy')")  # written behind our back
    conn.close()
    before = file_bytes(db_path)
    err = refused(env, "db.execute", db="shop", sql="UPDATE keyed SET v = 'x' WHERE id = 1")
    assert err.code == "sql_error" and "NULL primary key" in err.message
    assert file_bytes(db_path) == before


@pytest.mark.parametrize(
    "columns", ["id INTEGER PRIMARY KEY, v TEXT", "id integer, v TEXT, PRIMARY KEY (id DESC)"]
)
def test_a_rowid_alias_takes_null_as_a_new_rowid(
    env: tools.Env, db_path: Path, tmp_path: Path, columns: str
) -> None:
    conn = apsw.Connection(str(db_path))
    conn.execute(f"CREATE TABLE keyed({columns})")
    conn.close()
    replica = tmp_path / "replica.db"
    shutil.copyfile(db_path, replica)
    _, effect = execute(env, "INSERT INTO keyed(id, v) VALUES (NULL, 'b')")
    assert effect["tables"] == {"keyed": {"insert": 1, "update": 0, "delete": 0}}
    assert effect["rowid_tables"] == []
    apply(effect, replica)
    assert dump(replica) == dump(db_path)


def test_without_rowid_keys_are_not_null_by_sqlite(env: tools.Env, db_path: Path) -> None:
    before = file_bytes(db_path)
    err = refused(env, "db.execute", db="shop", sql="INSERT INTO pairs VALUES (NULL, 3, 'n')")
    assert err.code == "sql_error" and "NOT NULL" in err.message
    assert file_bytes(db_path) == before


def test_a_schema_changed_between_calls_is_read_again(env: tools.Env, db_path: Path) -> None:
    """The schema kept with a connection is dropped when the schema cookie moves: a table
    whose rowid-alias key becomes a nullable one is checked again."""
    execute(env, "INSERT INTO items(id, name) VALUES (NULL, 'kept')")
    conn = apsw.Connection(str(db_path))
    conn.execute(
        "DROP TRIGGER items_audit; DROP TABLE items;"
        " CREATE TABLE items(id INT PRIMARY KEY, name TEXT, price REAL, data BLOB);"
        " INSERT INTO items VALUES (NULL, 'legacy', NULL, NULL);"
    )
    conn.close()
    before = file_bytes(db_path)
    err = refused(env, "db.execute", db="shop", sql="UPDATE items SET price = 2")
    assert err.code == "sql_error" and "NULL primary key" in err.message
    assert file_bytes(db_path) == before
    conn = apsw.Connection(str(db_path))
    conn.execute("CREATE VIRTUAL TABLE later USING fts5(body)")  # not writable: not journaled
    conn.close()
    err = refused(env, "db.execute", db="shop", sql="INSERT INTO later VALUES ('x')")
    assert err.code == "sql_denied", err.message


def test_execute_too_large_to_journal_is_rolled_back(env: tools.Env, db_path: Path) -> None:
    before = file_bytes(db_path)
    err = refused(
        limited(env, db_path, max_changeset_bytes=64),
        "db.execute",
        db="shop",
        sql="UPDATE items SET name = name || '-renamed-with-a-long-suffix'",
    )
    assert (err.code, err.status) == ("too_large", 413)
    assert file_bytes(db_path) == before


def test_execute_session_memory_is_bounded(env: tools.Env, db_path: Path) -> None:
    env = limited(env, db_path, max_session_memory=1024)
    before = file_bytes(db_path)
    sql = (
        "INSERT INTO log SELECT 'row', value FROM (WITH RECURSIVE c(value) AS (SELECT 1 UNION ALL"
        " SELECT value + 1 FROM c WHERE value < 5000) SELECT value FROM c)"
    )
    assert refused(env, "db.execute", db="shop", sql=sql).code == "too_large"
    assert file_bytes(db_path) == before


def test_execute_that_runs_too_long_is_rolled_back(env: tools.Env, db_path: Path) -> None:
    env = limited(env, db_path, timeout_seconds=0.2)
    before = file_bytes(db_path)
    sql = (
        "INSERT INTO log SELECT 'x', i FROM (WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i +"
        " 1 FROM c) SELECT i FROM c)"
    )
    assert refused(env, "db.execute", db="shop", sql=sql).code == "timeout"
    assert file_bytes(db_path) == before


def test_execute_a_trailing_comment_is_one_statement(env: tools.Env, db_path: Path) -> None:
    result, _ = execute(env, "UPDATE items SET price = 9 WHERE id = 3; -- fix the plum\n")
    assert result["changes"] == 1
    assert dump(db_path)["items"][2][3] == 9.0


def test_execute_enforces_foreign_keys(tmp_path: Path) -> None:
    path = tmp_path / "fk.db"
    conn = apsw.Connection(str(path))
    conn.execute(
        "CREATE TABLE parent(id INTEGER PRIMARY KEY); CREATE TABLE child(id INTEGER PRIMARY KEY, p"
        " INTEGER REFERENCES parent(id)); INSERT INTO parent VALUES (1)"
    )
    conn.close()
    env = tools.Env(Workspace(str(tmp_path)), 1, databases=Databases({"fk": DbSpec(str(path))}))
    before = path.read_bytes()
    with pytest.raises(ToolError) as info:
        call(env, "db.execute", db="fk", sql="INSERT INTO child VALUES (1, 99)")
    assert info.value.code == "sql_error" and "FOREIGN KEY" in info.value.message
    assert path.read_bytes() == before


def test_foreign_key_cascades_are_recorded_and_replay_once(tmp_path: Path) -> None:
    path = tmp_path / "cascade.db"
    conn = apsw.Connection(str(path))
    conn.execute(
        "CREATE TABLE parent(id INTEGER PRIMARY KEY);CREATE TABLE child(id INTEGER PRIMARY KEY, p"
        " INTEGER REFERENCES parent(id) ON DELETE CASCADE);INSERT INTO parent VALUES (1), (2);"
        " INSERT INTO child VALUES (10, 1), (11, 1), (12, 2)"
    )
    conn.close()
    replica = tmp_path / "replica.db"
    shutil.copyfile(path, replica)
    env = tools.Env(Workspace(str(tmp_path)), 1, databases=Databases({"c": DbSpec(str(path))}))
    out = call(env, "db.execute", db="c", sql="DELETE FROM parent WHERE id = 1")
    effect = out.record["effect"]
    assert out.result["changes"] == 1 and effect["rows_changed"] == 3
    assert effect["tables"] == {
        "parent": {"insert": 0, "update": 0, "delete": 1},
        "child": {"insert": 0, "update": 0, "delete": 2},
    }
    target = apsw.Connection(str(replica))
    target.pragma("foreign_keys", 1)  # the cascade must not fire a second time
    replay(target, base64.b64decode(effect["changeset"]))
    assert list(target.execute("SELECT id, p FROM child ORDER BY id")) == [(12, 2)]
    assert list(target.execute("SELECT id FROM parent")) == [(2,)]
    target.close()


def test_wal_mode_database(tmp_path: Path) -> None:
    path = make_db(tmp_path / "wal.db", wal=True)
    holder = apsw.Connection(str(path))  # keeps the WAL from being checkpointed away
    holder.execute("INSERT INTO items(id, name) VALUES (50, 'in the wal')")
    assert (tmp_path / "wal.db-wal").stat().st_size > 0
    replica = tmp_path / "replica.db"
    backup_to(holder, replica)
    env = tools.Env(
        Workspace(str(tmp_path)), 1, databases=Databases({"w": DbSpec(str(path), "live")})
    )
    rows = call(env, "db.query", db="w", sql="SELECT name FROM items WHERE id = 50").result["rows"]
    assert rows == [["in the wal"]]
    out = call(env, "db.execute", db="w", sql="UPDATE items SET name = 'changed' WHERE id = 50")
    effect = out.record["effect"]
    assert effect["mode"] == "live" and effect["rows_changed"] == 2  # + the audit trigger
    out = call(env, "db.execute", db="w", sql="INSERT INTO log VALUES ('wal', 1)")
    assert list(holder.execute("SELECT name FROM items WHERE id = 50")) == [("changed",)]
    apply(effect, replica)
    apply(out.record["effect"], replica)
    current = tmp_path / "current.db"
    backup_to(holder, current)
    assert dump(replica) == dump(current)
    wal_before = file_bytes(path)
    refused(env, "db.query", db="w", sql="DELETE FROM items")
    refused(env, "db.execute", db="w", sql="PRAGMA journal_mode = DELETE")
    assert file_bytes(path) == wal_before
    holder.close()


def backup_to(source: apsw.Connection, target: Path) -> None:
    """Page-exact copy (rowids preserved), including what is still in the WAL."""
    dest = apsw.Connection(str(target))
    with dest.backup("main", source, "main") as backup:
        backup.step()
    dest.pragma("journal_mode", "delete")
    dest.close()


# ---------------------------------------------------------------- config


def test_config_databases(gateway_config: Callable[..., dict[str, Any]]) -> None:
    raw = gateway_config()
    assert parse(raw).databases == ()
    raw["databases"] = [
        {"name": "shop", "path": "/var/lib/assure/db/shop.db", "mode": "sandbox"},
        {"name": "prod", "path": "/data/p.db", "mode": "live"},
    ]
    assert parse(raw).databases == (
        Database("shop", "/var/lib/assure/db/shop.db", "sandbox"),
        Database("prod", "/data/p.db", "live"),
    )
    bad = [
        ({"name": "shop", "path": "/a", "mode": "sandbox", "fixture": "x"}, "databases[0].fixture"),
        ({"name": "Shop", "path": "/a", "mode": "sandbox"}, "databases[0].name"),
        ({"name": "shop", "path": "rel.db", "mode": "sandbox"}, "databases[0].path"),
        ({"name": "shop", "path": "/a"}, "databases[0].mode"),
        ({"name": "shop", "path": "/a", "mode": "external"}, "databases[0].mode"),
        ("shop", "databases[0]"),
    ]
    for item, field in bad:
        raw["databases"] = [item]
        with pytest.raises(ConfigError) as info:
            parse(raw)
        assert info.value.field == field
    raw["databases"] = [
        {"name": "a", "path": "/a", "mode": "live"},
        {"name": "a", "path": "/b", "mode": "live"},
    ]
    with pytest.raises(ConfigError) as info:
        parse(raw)
    assert info.value.field == "databases[1].name"
    raw["databases"] = {"name": "a"}
    with pytest.raises(ConfigError) as info:
        parse(raw)
    assert info.value.field == "databases"


# ---------------------------------------------------------------- through the in-process gateway


def test_db_tools_through_the_gateway(
    gateway_config: Callable[..., dict[str, Any]],
    db_path: Path,
    replica: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The dispatcher does not build `Env.databases` from the config yet: inject it here."""
    from assure.gateway.server import serve

    raw = gateway_config()
    raw["databases"] = [{"name": "shop", "path": str(db_path), "mode": "sandbox"}]
    contract = raw["policy"]["contract"]
    contract["scope"] = ["fs:**", "db:**"]
    from assure.core import gate

    contract.update(
        dataclasses.asdict(
            gate.ratify(
                gate.Contract(**{**contract, "scope": tuple(contract["scope"])}),
                protected=raw["protected"],
            )
        )
    )
    config = parse(raw)
    real_env = tools.Env

    def env_with_databases(*args: Any, **kwargs: Any) -> tools.Env:
        kwargs.setdefault("databases", Databases.from_config(config.databases))
        return real_env(*args, **kwargs)

    monkeypatch.setattr(tools, "Env", env_with_databases)
    gateway = serve(config)
    try:
        with Client(config.socket, connect_timeout=2, timeout=10) as client:
            answer = client.call(
                "db.query", db="shop", sql="SELECT id, name FROM items ORDER BY id"
            )
            assert answer["result"]["rows"] == [[1, "apple"], [2, "pear"], [3, "plum"]]
            with pytest.raises(GatewayError) as info:
                client.call("db.query", db="shop", sql="DELETE FROM items")
            assert info.value.status == 403
            answer = client.call(
                "db.execute", db="shop", sql="DELETE FROM items WHERE id = ?", params=[2]
            )
            assert answer["decision"] == "allow", answer
            assert answer["result"]["changes"] == 1
    finally:
        gateway.shutdown()
    calls = [r for r in verify_chain(config.journal) if r["event"] == "tool_call"]
    assert [(c["tool"], c["status"]) for c in calls] == [
        ("db.query", 200),
        ("db.query", 403),
        ("db.execute", 200),
    ]
    assert calls[0]["effect"] is None
    effect = calls[2]["effect"]
    assert calls[2]["scope"] == "db:shop" and calls[2]["resource_mode"] == "sandbox"
    apply(effect, replica)
    assert dump(replica) == dump(db_path)


def test_a_kept_connection_carries_nothing_from_one_call_to_the_next(
    env: tools.Env, db_path: Path
) -> None:
    """A sandbox database's connections outlive a call (Databases keeps them): a read-only
    call's authorizer, a refused or failing statement's transaction and a timed-out call's
    deadline stay behind with it, never reaching the next call."""
    call(env, "db.query", db="shop", sql="SELECT name FROM items")  # its authorizer: reads only
    assert (
        call(env, "db.execute", db="shop", sql="INSERT INTO log VALUES ('q', 9)").result["changes"]
        == 1
    )
    assert refused(env, "db.execute", db="shop", sql="INSERT INTO items(id, name) VALUES (1, 'x')")
    assert refused(env, "db.execute", db="shop", sql="DROP TABLE log").code == "sql_denied"
    env = limited(env, db_path, timeout_seconds=0.2)  # one Databases from here on
    endless = (
        "INSERT INTO log SELECT 'x', i FROM (WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i +"
        " 1 FROM c) SELECT i FROM c)"
    )
    assert refused(env, "db.execute", db="shop", sql=endless).code == "timeout"
    time.sleep(0.3)  # past the timed-out call's deadline
    assert (
        call(env, "db.execute", db="shop", sql="DELETE FROM log WHERE n = 9").result["changes"] == 1
    )
    assert dump(db_path)["log"] == dump(make_db(db_path.parent / "fresh.db"))["log"]


def test_only_a_sandbox_database_not_in_wal_mode_keeps_its_connection(tmp_path: Path) -> None:
    """A live database is opened per call (others write it too), and so is one in WAL mode,
    whose changes would stay in its -wal file until the gateway stops."""
    specs = {
        "kept": DbSpec(str(make_db(tmp_path / "kept.db")), "sandbox"),
        "live": DbSpec(str(make_db(tmp_path / "live.db")), "live"),
        "wal": DbSpec(str(make_db(tmp_path / "wal.db", wal=True)), "sandbox"),
    }
    dbs = Databases(specs)
    env = tools.Env(Workspace(str(tmp_path)), 1, databases=dbs)
    for name in specs:
        call(env, "db.execute", db=name, sql="INSERT INTO log VALUES ('x', 1)")
        call(env, "db.query", db=name, sql="SELECT * FROM log")
    assert sorted(dbs._kept) == [("kept", False), ("kept", True)]
    dbs.close()
    assert dbs._kept == {}
