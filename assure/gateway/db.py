"""The gateway-owned SQLite databases behind `db.query` and `db.execute`.

The agent never sees the files: it names a database and sends one SQL statement.
Everything that keeps it honest is enforced by SQLite itself, never by parsing SQL:

- `db.query` opens the file read-only (`mode=ro`) and installs an authorizer that allows
  only reads, SELECT, functions and recursive CTEs (plus the schema-describing pragmas
  such as table_info); the prepared statement must also be read-only
  (`sqlite3_stmt_readonly`, which catches VACUUM INTO, the one write with no authorizer code).
- `db.execute` runs one statement inside `BEGIN IMMEDIATE`, under an authorizer that
  allows only reads and INSERT/UPDATE/DELETE on ordinary tables of `main` (no DDL,
  ATTACH, transaction control, other pragmas, extension loading, no writes to sqlite_*,
  virtual or shadow tables); foreign keys are enforced. A session (the SQLite session
  extension) records the change, including what triggers and FK actions did; the
  changeset is journaled. Anything that fails, including a change too large to journal,
  rolls the transaction back. VACUUM cannot run inside the transaction.
- One statement per call: the statement SQLite prepares first is the only text run, and
  a call whose remaining text holds another statement is refused before anything runs.
- Every connection is defensive (`SQLITE_DBCONFIG_DEFENSIVE`, no attached databases, no
  extension loading, untrusted schema), bounded in value size, and interrupted past a
  deadline, so a runaway query cannot hold the gateway's effect lock.

Tables without a PRIMARY KEY are recorded exactly too: the session is configured with
`SQLITE_SESSION_OBJCONFIG_ROWID`, which keys them on their rowid (the changeset then has
the rowid as an extra leftmost column for those tables; they are listed in the effect's
`rowid_tables`). Rows whose declared PRIMARY KEY holds a NULL (legal in rowid tables) are
invisible to sessions, so a statement writing a table that has such a row, before or
after, is refused. `assure.core.changeset.replay()` applies a journaled changeset to a copy
of the database as it was (triggers off, FK actions as NO ACTION: their effects are already in it).

Requires apsw (pinned in images/gateway/requirements.txt); the rest of the gateway does
not import this module, so a gateway without databases runs on the standard library.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import os
import re
import stat
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import apsw

from assure.core.changeset import harden
from assure.core.effects import Op
from assure.core.record import dataclass
from assure.gateway.errors import ToolError

MODES = ("sandbox", "live")
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,31}")

MAX_ROWS = 1000  # rows returned by one call; more sets `truncated`
MAX_CELL_BYTES = 64 * 1024  # a larger text/blob cell is replaced by {"omitted": ..., "bytes": n}
MAX_RESULT_BYTES = (
    4 * 1024 * 1024
)  # approximate answer size; past it rows stop and `truncated` is set
MAX_VALUE_BYTES = 32 * 1024 * 1024  # SQLITE_LIMIT_LENGTH: largest string/blob a statement may build
MAX_PARAMS = 1000
MAX_SEQUENCE_ROWS = (
    1000  # sqlite_sequence rows journaled with a change; a bigger table is left to the verifier
)
BUSY_TIMEOUT_MS = 5000  # waiting for another connection's lock (live databases)
PROGRESS_OPS = 1000  # VM instructions between deadline checks
_MAX_INT64 = 2**63 - 1

DENIED_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer"})
# The only pragmas allowed (in both tools, also as pragma_* table functions): they describe the
# schema.
PRAGMAS = frozenset(
    {
        "table_info",
        "table_xinfo",
        "table_list",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
    }
)

_READ_OPS = frozenset({apsw.SQLITE_READ, apsw.SQLITE_SELECT, apsw.SQLITE_RECURSIVE})
_WRITE_OPS = frozenset({apsw.SQLITE_INSERT, apsw.SQLITE_UPDATE, apsw.SQLITE_DELETE})


@dataclass(frozen=True)
class DbSpec:
    """One database: its file (inside the gateway container) and its resource mode."""

    path: str
    mode: str = "sandbox"


@dataclass(frozen=True)
class DbLimits:
    """What one call may cost; past a limit the statement is stopped and nothing is changed."""

    timeout_seconds: float = 10.0  # wall time of one call's SQL, including our own checks
    max_changeset_bytes: int = (
        1024 * 1024
    )  # a larger change is refused (too_large): it could not be journaled
    max_session_memory: int = (
        64 * 1024 * 1024
    )  # session bookkeeping past this interrupts the statement


class Databases:
    """The databases this gateway serves, by name.

    A sandbox database's connections are kept between calls (opening one and reading its
    schema was a third of a db.execute's CPU): one writable, one read-only, each used by one
    call at a time and kept only when that call left it as it found it (no transaction open,
    no authorizer). Nothing the agent's SQL may do outlives its call on a connection (no DDL,
    no TEMP objects, no pragmas that set anything). A live database, or one in WAL mode (whose
    changes would stay in its -wal file until the gateway stops), is opened per call."""

    def __init__(self, specs: Mapping[str, DbSpec], limits: DbLimits | None = None):
        for name, spec in specs.items():
            if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
                raise ValueError(f"database name {name!r} must match {NAME_PATTERN.pattern}")
            if spec.mode not in MODES:
                raise ValueError(
                    f"database {name!r}: mode must be one of {', '.join(MODES)}, got {spec.mode!r}"
                )
            try:
                st = os.stat(spec.path)
            except OSError as exc:
                raise ValueError(
                    f"database {name!r}: cannot stat {spec.path}: {exc.strerror}"
                ) from None
            if not stat.S_ISREG(st.st_mode):
                raise ValueError(f"database {name!r}: {spec.path} is not a regular file")
        self._specs = dict(specs)
        self.limits = DbLimits() if limits is None else limits
        # (name, readonly) -> an idle connection and what db.execute read of its schema
        self._kept: dict[tuple[str, bool], tuple[apsw.Connection, _Schema]] = {}

    @classmethod
    def from_config(cls, entries: Iterable[Any]) -> Databases:
        """Build from `Config.databases` (objects with name, path, mode)."""
        return cls({entry.name: DbSpec(entry.path, entry.mode) for entry in entries})

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._specs))

    def spec(self, name: str) -> DbSpec:
        """The named database's spec; ToolError `not_found` if there is none."""
        spec = self._specs.get(name)
        if spec is None:
            known = ", ".join(self.names()) or "none configured"
            raise ToolError("not_found", f"no database named {name[:64]!r} (known: {known})")
        return spec

    def mode(self, name: str) -> str:
        return self.spec(name).mode

    def query(self, name: str, sql: str, params: list[Any] | None = None) -> dict[str, Any]:
        """Run one read-only statement; returns {columns, rows, truncated}."""
        spec = self.spec(name)
        bindings = _bindings(params)
        guard = _Guard(self.limits)
        conn, schema = self._connection(name, spec, readonly=True, guard=guard)
        try:
            policy = _Policy(write=False)
            conn.authorizer = policy
            try:
                stmt = _single(conn, sql, bindings, policy)
                if not stmt.readonly:
                    raise ToolError(
                        "read_only",
                        "db.query runs read-only statements only; use db.execute to change data",
                    )
                return _rows(conn, stmt, bindings, policy)
            except apsw.Error as exc:
                raise _tool_error(exc, policy, guard, "db.query") from None
        finally:
            self._release(name, spec, conn, schema, readonly=True)

    def execute(
        self, name: str, sql: str, params: list[Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Run one changing statement atomically; returns (result, journal effect)."""
        spec = self.spec(name)
        bindings = _bindings(params)
        guard = _Guard(self.limits)
        conn, schema = self._connection(name, spec, readonly=False, guard=guard)
        try:
            session = apsw.Session(conn, "main")
            try:
                session.config(apsw.SQLITE_SESSION_OBJCONFIG_ROWID, 1)
                session.attach()
                guard.session = session
                return self._execute(conn, session, schema, name, spec, sql, bindings, guard)
            finally:
                guard.session = None
                session.close()
        except apsw.Error as exc:
            raise _tool_error(exc, None, guard, "db.execute") from None
        finally:
            self._release(name, spec, conn, schema, readonly=False)

    def close(self) -> None:
        """Close the kept connections (the gateway stops)."""
        while self._kept:
            self._kept.popitem()[1][0].close()

    def _connection(
        self, name: str, spec: DbSpec, *, readonly: bool, guard: _Guard
    ) -> tuple[apsw.Connection, _Schema]:
        """A kept connection and its schema (the pop makes them this call's alone), or a new
        connection with nothing read of its schema yet."""
        kept = self._kept.pop((name, readonly), None)
        if kept is None:
            return _open(spec.path, readonly=readonly, guard=guard), _Schema()
        kept[0].set_progress_handler(guard, PROGRESS_OPS)
        return kept

    def _release(
        self, name: str, spec: DbSpec, conn: apsw.Connection, schema: _Schema, *, readonly: bool
    ) -> None:
        """Keep `conn` for the next call if it is a sandbox database's, not in WAL mode, and
        left as it was found; else close it."""
        key = (name, readonly)
        try:
            conn.authorizer = None
            conn.set_progress_handler(None)
            keep = (
                spec.mode == "sandbox"
                and key not in self._kept
                and conn.get_autocommit()
                and _journal_mode(conn) != "wal"
            )
        except apsw.Error:
            keep = False
        if keep:
            self._kept[key] = (conn, schema)
        else:
            conn.close()

    def _execute(
        self,
        conn: apsw.Connection,
        session: apsw.Session,
        schema: _Schema,
        name: str,
        spec: DbSpec,
        sql: str,
        bindings: list[Any],
        guard: _Guard,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            keys = schema.current(conn)  # read inside the transaction: no DDL can move it now
            policy = _Policy(write=True, unwritable=keys.unwritable())
            counters = _sequence(conn, keys)
            try:
                conn.authorizer = policy
                stmt = _single(conn, sql, bindings, policy)
                conn.authorizer = None
                _refuse_null_keys(conn, keys, policy.written)
                conn.authorizer = policy
                answer = _rows(conn, stmt, bindings, policy)
                changes = conn.changes()
                conn.authorizer = None
                _refuse_null_keys(conn, keys, policy.written)
            except apsw.Error as exc:
                raise _tool_error(exc, policy, guard, "db.execute") from None
            changeset = session.changeset()
            if len(changeset) > self.limits.max_changeset_bytes:
                raise ToolError(
                    "too_large",
                    f"the change is {len(changeset)} bytes as a changeset, over the"
                    f" {self.limits.max_changeset_bytes}-byte limit; split it into smaller"
                    " statements (nothing was changed)",
                )
            conn.authorizer = None
            effect = _effect(keys, name, spec, changeset, changes)
            if (after := _sequence(conn, keys)) is not None and after != counters:
                effect["sequence"] = after
            conn.execute("COMMIT")
        except BaseException:
            conn.authorizer = None
            if not conn.get_autocommit():
                conn.execute("ROLLBACK")
            raise
        result: dict[str, Any] = {
            "changes": changes,
            "rows_changed": effect["rows_changed"],
            "changeset_sha256": effect["changeset_sha256"],
        }
        if answer["columns"]:
            result.update(answer)  # RETURNING rows
        return result, effect


# ---------------------------------------------------------------- connections


class _Guard:
    """Interrupts a statement past the deadline or when the session grows too large."""

    def __init__(self, limits: DbLimits):
        self.limits = limits
        self.deadline = time.monotonic() + limits.timeout_seconds
        self.session: apsw.Session | None = None
        self.reason: str | None = None

    def __call__(self) -> bool:
        if time.monotonic() > self.deadline:
            self.reason = "timeout"
        elif self.session is not None and self.session.memory_used > self.limits.max_session_memory:
            self.reason = "too_large"
        return self.reason is not None


def _open(path: str, *, readonly: bool, guard: _Guard) -> apsw.Connection:
    uri = "file:" + urllib.parse.quote(path) + ("?mode=ro" if readonly else "?mode=rw")
    flags = apsw.SQLITE_OPEN_URI | (
        apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE
    )
    try:
        conn = apsw.Connection(uri, flags=flags)
    except apsw.Error as exc:
        raise ToolError("io_error", f"cannot open the database: {_message(exc)}") from None
    try:
        harden(conn)
        if conn.config(apsw.SQLITE_DBCONFIG_DEFENSIVE, -1) != 1:
            raise ToolError("io_error", "SQLite refused defensive mode")
        conn.limit(apsw.SQLITE_LIMIT_ATTACHED, 0)
        conn.limit(apsw.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        conn.set_progress_handler(guard, PROGRESS_OPS)
        if not readonly:
            conn.config(apsw.SQLITE_DBCONFIG_ENABLE_FKEY, 1)
    except BaseException:
        conn.close()
        raise
    return conn


class _Policy:
    """The authorizer: allow-list per tool; remembers denials and the tables written."""

    def __init__(self, *, write: bool, unwritable: frozenset[str] = frozenset()):
        self.write = write
        self.unwritable = unwritable
        self.denied: list[str] = []
        self.written: set[str] = set()

    def __call__(
        self, op: int, arg1: str | None, arg2: str | None, dbname: str | None, _trigger: str | None
    ) -> int:
        reason = self._check(op, arg1, arg2, dbname)
        if reason is None:
            return apsw.SQLITE_OK
        self.denied.append(reason)
        return apsw.SQLITE_DENY

    def _check(self, op: int, arg1: str | None, arg2: str | None, dbname: str | None) -> str | None:
        if op in _READ_OPS:
            return None
        if op == apsw.SQLITE_FUNCTION:
            return (
                f"the function {arg2}() is not allowed"
                if (arg2 or "").lower() in DENIED_FUNCTIONS
                else None
            )
        if op == apsw.SQLITE_PRAGMA:
            return None if (arg1 or "").lower() in PRAGMAS else f"PRAGMA {arg1} is not allowed"
        action = (
            str(apsw.mapping_authorizer_function.get(op, op))
            .removeprefix("SQLITE_")
            .replace("_", " ")
        )
        if not self.write:
            return f"{action} is not allowed in db.query (read-only)"
        if op in _WRITE_OPS:
            table = arg1 or ""
            if dbname != "main":
                return f"{action} on {dbname}.{table} is not allowed (only tables of main)"
            if table.lower().startswith("sqlite_"):
                return f"{action} on the internal table {table} is not allowed"
            if table in self.unwritable:
                return (
                    f"{action} on {table} is not allowed (virtual and shadow tables cannot be"
                    " journaled)"
                )
            self.written.add(table)
            return None
        return (
            f"{action} is not allowed in db.execute (only INSERT, UPDATE and DELETE on tables;"
            " schema changes cannot be journaled)"
        )


@dataclass(frozen=True)
class _Statement:
    text: str
    readonly: bool
    columns: list[str]


def _single(conn: apsw.Connection, sql: str, bindings: list[Any], policy: _Policy) -> _Statement:
    """Prepare (never run) the first statement of `sql` and refuse any statement after it."""
    found: list[_Statement] = []

    def first(cursor: apsw.Cursor, text: str, _bindings: Any) -> bool:
        if cursor.has_vdbe and not found:
            count = cursor.bindings_count
            if count != len(bindings):
                raise ToolError(
                    "sql_error",
                    f"the statement has {count} parameter(s) but 'params' has {len(bindings)}",
                )
            columns = [column[0] for column in cursor.get_description()]
            found.append(_Statement(text, cursor.is_readonly, columns))
        return False

    _prepare_only(conn, sql, bindings, first)
    if not found:
        raise ToolError("sql_error", "no SQL statement in 'sql'")
    stmt = found[0]
    if not sql.startswith(
        stmt.text
    ):  # the statement's text is a prefix of `sql`; fail closed if not
        raise ToolError("sql_error", "could not isolate the first SQL statement")
    rest = sql[len(stmt.text) :]
    if rest.strip() and _has_statement(conn, rest, policy):
        raise ToolError(
            "sql_error", "only one SQL statement per call; remove everything after the first ';'"
        )
    return stmt


def _has_statement(conn: apsw.Connection, text: str, policy: _Policy) -> bool:
    """Whether `text` holds any statement (not just whitespace, comments or ';'). Runs nothing."""
    seen: list[bool] = []

    def trace(cursor: apsw.Cursor, _text: str, _bindings: Any) -> bool:
        seen.append(bool(cursor.has_vdbe))
        return not cursor.has_vdbe  # let empty statements pass, stop at the first real one

    denied, written = len(policy.denied), set(policy.written)
    try:
        _prepare_only(conn, text, None, trace)
    except (apsw.Error, ToolError):
        return True  # anything SQLite had to say about it means it is not just a comment
    finally:
        del policy.denied[denied:]
        policy.written = written
    return any(seen)


def _prepare_only(
    conn: apsw.Connection, sql: str, bindings: list[Any] | None, trace: Callable[..., bool]
) -> None:
    cursor = conn.cursor()
    cursor.exec_trace = trace
    try:
        cursor.execute(sql, bindings, can_cache=False)
        for _ in cursor:  # only reached for text the trace let through (empty statements)
            pass
    except apsw.ExecTraceAbort:
        pass
    finally:
        cursor.close(force=True)


def _rows(
    conn: apsw.Connection, stmt: _Statement, bindings: list[Any], policy: _Policy
) -> dict[str, Any]:
    """Run the isolated statement; collect at most MAX_ROWS rows within MAX_RESULT_BYTES."""
    statements = 0

    def only_one(_cursor: apsw.Cursor, _text: str, _bindings: Any) -> bool:
        nonlocal statements
        statements += 1
        return statements == 1

    cursor = conn.cursor()
    cursor.exec_trace = only_one
    rows: list[list[Any]] = []
    size, full, omitted = 0, False, False
    try:
        for row in cursor.execute(stmt.text, bindings, can_cache=False):
            if full:
                continue  # keep stepping: a changing statement (RETURNING) must run to completion
            cells = [_cell(value) for value in row]
            size += sum(cost for _, cost in cells) + 2
            if len(rows) >= MAX_ROWS or size > MAX_RESULT_BYTES:
                full = True
                if not policy.write:
                    break
                continue
            omitted = omitted or any(isinstance(c, dict) and "omitted" in c for c, _ in cells)
            rows.append([c for c, _ in cells])
    except UnicodeDecodeError:
        raise ToolError(
            "sql_error", "a TEXT value is not valid UTF-8; select it as CAST(... AS BLOB)"
        ) from None
    finally:
        cursor.close(force=True)
    return {"columns": stmt.columns, "rows": rows, "truncated": full or omitted}


def _cell(value: Any) -> tuple[Any, int]:
    """A JSON-safe cell and its approximate encoded size."""
    if value is None or isinstance(value, int):
        return value, 20
    if isinstance(value, float):
        if math.isfinite(value):
            return value, 24
        return {"real": "Infinity" if value > 0 else "-Infinity"}, 24
    if isinstance(value, str):
        size = len(value.encode("utf-8", "surrogatepass"))
        return (
            ({"omitted": "text", "bytes": size}, 40) if size > MAX_CELL_BYTES else (value, size + 2)
        )
    data = bytes(value)
    if len(data) > MAX_CELL_BYTES:
        return {"omitted": "blob", "bytes": len(data)}, 40
    encoded = base64.b64encode(data).decode("ascii")
    return {"b64": encoded}, len(encoded) + 10


def _bindings(params: list[Any] | None) -> list[Any]:
    """JSON params to SQLite values: null, integer, finite real, text, {"b64": ...} for a blob."""
    if params is None:
        return []
    if len(params) > MAX_PARAMS:
        raise ToolError(
            "bad_args", f"'params' has {len(params)} items, over the {MAX_PARAMS} limit"
        )
    out: list[Any] = []
    for index, value in enumerate(params):
        where = f"params[{index}]"
        if value is None or isinstance(value, str):
            out.append(value)
        elif isinstance(value, bool):
            raise ToolError("bad_args", f"{where} is a boolean; SQLite has none: send 0 or 1")
        elif isinstance(value, int):
            if not -_MAX_INT64 - 1 <= value <= _MAX_INT64:
                raise ToolError("bad_args", f"{where} is outside the 64-bit integer range")
            out.append(value)
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise ToolError("bad_args", f"{where} is not a finite number")
            out.append(value)
        elif isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
            try:
                out.append(base64.b64decode(value["b64"], validate=True))
            except (binascii.Error, ValueError):
                raise ToolError("bad_args", f"{where}.b64 is not valid base64") from None
        else:
            raise ToolError(
                "bad_args", f'{where} must be null, a number, a string or {{"b64": ...}} for a blob'
            )
    return out


# ---------------------------------------------------------------- journaling a change


def _journal_mode(conn: apsw.Connection) -> str:
    row = conn.execute("PRAGMA main.journal_mode").fetchone()
    return str(row[0]).lower() if row else ""


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class _Schema:
    """What db.execute reads of a connection's schema (the kinds of its tables, each table's
    PRIMARY KEY, whether it is WITHOUT ROWID, whether sqlite_sequence exists), kept with the
    connection between calls: the four queries were ~60 us a call. It is valid while the
    schema cookie is (`PRAGMA schema_version`, which every schema change moves and SQLite's
    own parsed schema depends on), so `current()` reads the cookie in the call's transaction
    and forgets everything when it moved. Nothing an agent's statement may run sets the cookie
    (no DDL, no pragmas that set anything, defensive mode)."""

    def __init__(self) -> None:
        self._version: int | None = None
        self._conn: apsw.Connection | None = None
        self._forget()

    def _forget(self) -> None:
        self._kinds: dict[str, str] | None = None
        self._sequence: bool | None = None
        self._pk: dict[str, list[tuple[str, bool]]] = {}
        self._wr: dict[str, bool] = {}
        self._nullable: dict[str, list[str]] = {}

    def current(self, conn: apsw.Connection) -> _Schema:
        """This schema, up to date for `conn` (inside a transaction, so it cannot move)."""
        row = conn.execute("PRAGMA main.schema_version").fetchone()
        version = row[0] if row else None
        if self._conn is not conn or version is None or version != self._version:
            self._forget()
        self._conn, self._version = conn, version
        return self

    @property
    def _db(self) -> apsw.Connection:
        if self._conn is None:
            raise RuntimeError("_Schema.current() was not called")
        return self._conn

    def unwritable(self) -> frozenset[str]:
        """Tables of `main` that are not ordinary tables (virtual, shadow, views)."""
        if self._kinds is None:
            self._kinds = {
                row[1]: row[2]
                for row in self._db.execute(
                    "SELECT schema, name, type FROM pragma_table_list WHERE schema = 'main'"
                )
            }
        return frozenset(n for n, kind in self._kinds.items() if kind != "table")

    def has_sequence(self) -> bool:
        if self._sequence is None:
            self._sequence = (
                self._db.execute(
                    "SELECT 1 FROM main.sqlite_schema WHERE name = 'sqlite_sequence'"
                ).fetchone()
                is not None
            )
        return self._sequence

    def primary_key(self, table: str) -> list[tuple[str, bool]]:
        """The declared PRIMARY KEY columns of `table` as (name, declared NOT NULL), in key
        order."""
        if table not in self._pk:
            info = self._db.execute(
                "SELECT name, \"notnull\", pk FROM pragma_table_info(?, 'main') WHERE pk > 0"
                " ORDER BY pk",
                (table,),
            )
            self._pk[table] = [(name, bool(notnull)) for name, notnull, _pk in info]
        return self._pk[table]

    def without_rowid(self, table: str) -> bool:
        if table not in self._wr:
            row = self._db.execute(
                "SELECT wr FROM pragma_table_list WHERE schema = 'main' AND name = ?", (table,)
            ).fetchone()
            self._wr[table] = bool(row and row[0])
        return self._wr[table]

    def nullable_key(self, table: str) -> list[str]:
        """The key columns of `table` that may hold a NULL: none in a WITHOUT ROWID table
        (SQLite enforces NOT NULL there) or for the rowid's alias, which is exactly a rowid
        table's one key column declared `INTEGER` that has no 'pk' index (`INTEGER PRIMARY KEY
        DESC`, `INT PRIMARY KEY` and the like get one, and can hold NULLs)."""
        if table not in self._nullable:
            key = self.primary_key(table)
            nullable = [name for name, notnull in key if not notnull]
            if nullable and (self.without_rowid(table) or self._rowid_alias(table, key)):
                nullable = []
            self._nullable[table] = nullable
        return self._nullable[table]

    def _rowid_alias(self, table: str, key: list[tuple[str, bool]]) -> bool:
        if len(key) != 1:
            return False
        declared = self._db.execute(
            "SELECT type FROM pragma_table_info(?, 'main') WHERE pk = 1", (table,)
        ).fetchone()
        if not declared or str(declared[0]).upper() != "INTEGER":
            return False
        pk_index = self._db.execute(
            "SELECT 1 FROM pragma_index_list(?, 'main') WHERE origin = 'pk'", (table,)
        ).fetchone()
        return pk_index is None


def _refuse_null_keys(conn: apsw.Connection, keys: _Schema, tables: Iterable[str]) -> None:
    """Sessions silently skip rows whose PRIMARY KEY holds a NULL; refuse to touch such tables."""
    for table in sorted(tables):
        nullable = keys.nullable_key(table)
        if not nullable:
            continue
        where = " OR ".join(f"{_quote(name)} IS NULL" for name in nullable)
        if conn.execute(f"SELECT 1 FROM main.{_quote(table)} WHERE {where} LIMIT 1").fetchone():
            raise ToolError(
                "sql_error",
                f"table {table} has (or would have) a row with a NULL primary key, "
                "which cannot be journaled; nothing was changed",
            )


def _effect(
    keys: _Schema, name: str, spec: DbSpec, changeset: bytes, changes: int
) -> dict[str, Any]:
    digest = hashlib.sha256(changeset).hexdigest()
    counts: dict[str, dict[str, int]] = {}
    for change in apsw.Changeset.iter(changeset):
        per = counts.setdefault(change.name, {"insert": 0, "update": 0, "delete": 0})
        per[change.op.lower()] += 1
    rowid_tables = sorted(table for table in counts if not keys.primary_key(table))
    return {
        "op": Op.SQL,
        "db": name,
        "mode": spec.mode,
        "changes": changes,
        "rows_changed": sum(sum(per.values()) for per in counts.values()),
        "tables": counts,
        "rowid_tables": rowid_tables,
        "changeset": base64.b64encode(changeset).decode("ascii"),
        "changeset_sha256": digest,
    }


def _sequence(conn: apsw.Connection, keys: _Schema) -> list[list[Any]] | None:
    """The AUTOINCREMENT counters (sqlite_sequence, in rowid order), which no changeset
    records: the session extension skips sqlite_ tables. None if the table holds anything
    but (text, integer) rows, or more than MAX_SEQUENCE_ROWS: such a state is not journaled,
    so the verifier reports it."""
    if not keys.has_sequence():
        return []
    rows = conn.execute(
        f"SELECT name, seq FROM main.sqlite_sequence ORDER BY rowid LIMIT {MAX_SEQUENCE_ROWS + 1}"
    ).fetchall()
    if len(rows) > MAX_SEQUENCE_ROWS or not all(
        isinstance(n, str) and type(v) is int for n, v in rows
    ):
        return None
    return [[n, v] for n, v in rows]


# ---------------------------------------------------------------- errors


def _message(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.removeprefix(f"{type(exc).__name__}: ")[:512]


def _tool_error(exc: apsw.Error, policy: _Policy | None, guard: _Guard, tool: str) -> ToolError:
    if policy is not None and policy.denied:
        code = "sql_denied" if policy.write else "read_only"
        # DDL also writes sqlite_schema; name the statement's own action rather than that.
        reason = next((r for r in policy.denied if "internal table" not in r), policy.denied[0])
        return ToolError(code, f"{tool}: {reason}; nothing was changed")
    if isinstance(exc, apsw.InterruptError) and guard.reason == "timeout":
        return ToolError(
            "timeout",
            f"{tool}: the statement ran over {guard.limits.timeout_seconds:g} s and was stopped;"
            " nothing was changed",
        )
    if isinstance(exc, apsw.InterruptError) and guard.reason == "too_large":
        return ToolError(
            "too_large",
            f"{tool}: the change grew too large to journal and was stopped; nothing was changed",
        )
    if isinstance(exc, (apsw.TooBigError, apsw.NoMemError)):
        return ToolError("too_large", f"{tool}: {_message(exc)}")
    if isinstance(exc, (apsw.BusyError, apsw.LockedError)):
        return ToolError(
            "db_busy", f"{tool}: the database is locked by another connection; try again"
        )
    if isinstance(exc, apsw.FullError):
        return ToolError("no_space", f"{tool}: the database or disk is full; nothing was changed")
    if isinstance(exc, apsw.ReadOnlyError) and policy is None:
        return ToolError("io_error", f"{tool}: the database file is not writable")
    if isinstance(exc, (apsw.IOError, apsw.CorruptError, apsw.CantOpenError, apsw.NotADBError)):
        return ToolError("io_error", f"{tool}: {_message(exc)}")
    return ToolError("sql_error", f"{tool}: {_message(exc)}")
