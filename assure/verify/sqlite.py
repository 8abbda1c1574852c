"""SQLite databases in the verifier: capture a hostile database, diff two states, attribute rows.

Three steps, each usable alone:

`capture(source, target_dir, name)` copies a database together with its `-wal` and
`-journal` files (never following a symlink, never opening anything lstat did not call a
regular file), opens the COPY so SQLite's own recovery runs (a commit that only reached the
WAL is seen, a hot journal is rolled back), runs `PRAGMA integrity_check`, and checkpoints
it into one self-contained file in rollback-journal mode. The `-shm` file is checked like
the others but not copied: it is only an index of the WAL, and the first connection to a
database rebuilds it from the WAL (SQLite truncates an index no other process holds), so
a hostile one could not change what the copy holds. Recovery runs under a VFS confined to
the copy's own four files: a hostile hot journal can name a "super-journal" anywhere on
the host, which SQLite would read and might delete; any such access is refused and the
capture fails.

`diff(pre, post)` compares two captured files inside SQLite (one connection, PRE as
`main`, POST attached read-only). What counts as a change, exactly:
- `schema`: a `sqlite_schema` row added, removed, or whose `tbl_name` or `sql` text
  differs, keyed by (type, name): tables, indexes (automatic ones included), triggers,
  views. Root pages are ignored (VACUUM moves them).
- `user_version`, and `header` for `application_id` and the text encoding (with different
  encodings the rows cannot be compared in one connection; the change is reported alone).
- `row`: in every ordinary table (shadow tables of virtual tables included, `sqlite_sequence`
  and `sqlite_stat*` included; virtual tables themselves are read through their shadow tables),
  rows are matched by PRIMARY KEY when the table declares one on both sides and the row's key
  values are non-NULL; all other rows (tables without a PRIMARY KEY, rows with a NULL in the
  key, tables whose key columns differ between the sides) are compared as MULTISETS of whole
  rows, never by rowid (VACUUM renumbers rowids). Two values are equal when they have the
  same storage class (`typeof`) and compare equal under BINARY collation: 1 and 1.0 differ,
  'a' and 'A' differ under a NOCASE column, text and blob with the same bytes differ; the one
  equality that is not byte-exact is 0.0 = -0.0. (The storage class is not compared in a
  column of TEXT affinity on both sides, where it cannot differ between equal values as
  long as one side was written by SQLite, as PRE and EXPECTED are: see `_differs`.)
  Generated columns are not compared (they
  follow from the other columns and the schema). A column present on one side only counts
  as NULL on the other. A table present on one side only is all inserts or all deletes.
  A change reverted before POST is no change.
Detection is never capped; `diff` returns at most `limit` changes, then one `omitted`
entry holding the count of the rest.

`attribute(db, pre, post, effects)` replays the allowed journaled changesets of this
database, in journal order, onto a copy of PRE (EXPECTED). Every difference between
EXPECTED and POST is `unattributed`; every PRE→POST change that EXPECTED also has is
`attributed` to the last action whose changeset touched that row.

Every database is hostile: connections are defensive (no schema writes, untrusted schema,
no extensions, no memory-mapped I/O; `cell_size_check` until a file has passed its
integrity check), time-bounded by a progress handler, and limited in size (`MAX_DB_BYTES`);
whatever cannot be checked raises `DatabaseError`, which `error_finding` turns into a
finding that is never a pass (`attribute` does that itself).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import math
import os
import re
import shutil
import stat
import struct
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import apsw

from assure.core import confined
from assure.errors import AssureError
from assure.core.changeset import harden, replay  # the one way a changeset is applied; one hardening
from assure.textsafe import display

from assure.verify.findings import Finding, Kind

MAX_DB_BYTES = 2 * 1024**3  # database + WAL + journal; larger is refused (see error_finding)
TIMEOUT_SECONDS = 600.0  # wall time of one capture, diff or replay
PROGRESS_OPS = 10_000  # VM instructions between deadline checks
MAX_CHANGES = 10_000  # changes reported by diff / findings per kind by attribute; the rest are counted
MAX_INTEGRITY_ERRORS = 20
MAX_CELL_BYTES = 1024  # a larger reported text/blob becomes {"omitted", "bytes", "sha256"}
MAX_SUBJECT_VALUE_CHARS = 48
MAX_SUBJECT_CHARS = 240
COPY_ATTEMPTS = 3
CHUNK_BYTES = 1 << 20
NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
SIDECARS = ("-wal", "-journal", "-shm")

_OPEN_FILE = confined.OPEN_FILE
_CODECS = {"UTF-8": ("utf-8", "surrogateescape"), "UTF-16le": ("utf-16-le", "surrogatepass"), "UTF-16be": ("utf-16-be", "surrogatepass")}


class DatabaseError(AssureError):
    """A database could not be captured or compared: corrupt, too large, hostile or too slow."""


class DatabaseTooLarge(DatabaseError):
    """The database with its WAL and journal is over MAX_DB_BYTES."""


# ---------------------------------------------------------------- values
#
# A value is kept as (typeof, payload): payload is None, an int, a float, or the bytes of a
# text (in the database's encoding) or blob, so nothing is decoded before it is reported.

Value = tuple[str, Any]


def _canon(value: Value) -> tuple[Any, ...]:
    """A hashable, bounded identity for a value (large payloads by length and hash)."""
    kind, payload = value
    if isinstance(payload, bytes) and len(payload) > 64:
        return (kind, len(payload), hashlib.sha256(payload).digest())
    return (kind, payload)


def _json_value(value: Value, encoding: str) -> Any:
    """JSON-safe: null, int, float, str, {"b64"}, {"real": "Infinity"}, or {"omitted", "bytes", "sha256"}."""
    kind, payload = value
    if kind == "integer" or kind == "null":
        return payload
    if kind == "real":
        return payload if math.isfinite(payload) else {"real": "Infinity" if payload > 0 else "-Infinity"}
    if len(payload) > MAX_CELL_BYTES:
        return {"omitted": kind, "bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
    if kind == "text":
        if encoding == "UTF-8":
            return payload.decode("utf-8", "surrogateescape")
        codec, errors = _CODECS.get(encoding, _CODECS["UTF-8"])
        return payload.decode(codec, errors)
    return {"b64": base64.b64encode(payload).decode("ascii")}


def _json_values(values: Iterable[Value], encoding: str) -> list[Any]:
    """`_json_value` of each, with the common cases inline (this runs for every reported row)."""
    out = []
    append = out.append
    utf8 = encoding == "UTF-8"
    for value in values:
        kind, payload = value
        if kind == "integer" or kind == "null":
            append(payload)
        elif kind == "text" and utf8 and len(payload) <= MAX_CELL_BYTES:
            append(payload.decode("utf-8", "surrogateescape"))
        else:
            append(_json_value(value, encoding))
    return out


def _literal(value: Any) -> str:
    """A JSON-safe value as a short SQL-like literal for a subject line."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        text = value if len(value) <= MAX_SUBJECT_VALUE_CHARS else value[:MAX_SUBJECT_VALUE_CHARS] + "…"
        return "'" + text.replace("'", "''") + "'"
    if "b64" in value:
        data = base64.b64decode(value["b64"])
        shown = data[: MAX_SUBJECT_VALUE_CHARS // 2].hex()
        return f"X'{shown}{'…' if len(data) > MAX_SUBJECT_VALUE_CHARS // 2 else ''}'"
    if "real" in value:
        return value["real"]
    return f"<{value['omitted']} {value['bytes']} bytes sha256:{value['sha256'][:12]}>"


# ---------------------------------------------------------------- changes


@dataclass(frozen=True)
class DbChange:
    """One difference between two states of a database (see the module docstring).

    kind `row`: `table`, `op` (insert | update | delete), `key` ({column: value} of the
    PRIMARY KEY, None for rows compared as a multiset), `before`/`after` ({column: value},
    JSON-safe; None on the side where the row is absent), `count` (multiset rows: how many
    copies of that row were added or removed), `columns` (update: the columns that differ).
    kind `schema`: `op` (added | removed | changed), `object_type`, `name`, `table`
    (tbl_name), `before`/`after` ({"tbl_name", "sql"}).
    kind `user_version` / `header`: `name` (header field), `before`/`after` the values.
    kind `omitted`: `count` changes found beyond the reporting limit.
    """

    db: str
    kind: str
    op: str
    table: str | None = None
    key: dict[str, Any] | None = None
    before: Any = None
    after: Any = None
    count: int = 1
    columns: tuple[str, ...] = ()
    object_type: str | None = None
    name: str | None = None

    @property
    def subject(self) -> str:
        """`db:shop:orders[id=3]`, `db:shop:log[msg='dup', n=1]`, `db:shop:schema:trigger t1`."""
        prefix = f"db:{self.db}"
        if self.kind == "schema":
            text = f"{prefix}:schema:{self.object_type} {self.name}"
        elif self.kind == "user_version":
            text = f"{prefix}:user_version"
        elif self.kind == "header":
            text = f"{prefix}:header:{self.name}"
        elif self.kind == "omitted":
            text = f"{prefix}:(more changes)"
        else:
            values = self.key if self.key is not None else (self.before if self.before is not None else self.after) or {}
            inner = ", ".join(f"{col}={_literal(v)}" for col, v in values.items())
            text = f"{prefix}:{self.table}[{inner}]"
        if len(text) > MAX_SUBJECT_CHARS:
            text = text[: MAX_SUBJECT_CHARS - 1] + "…"
        return display(text)

    def describe(self) -> str:
        if self.kind == "row":
            if self.op == "update":
                return f"row updated ({', '.join(self.columns)})"
            return f"row {'inserted' if self.op == 'insert' else 'deleted'}" + (f" x{self.count}" if self.count != 1 else "")
        if self.kind == "schema":
            return f"{self.object_type} {self.op}"
        if self.kind == "omitted":
            return f"{self.count} more changes (not listed)"
        return f"{self.name or self.kind} changed from {self.before!r} to {self.after!r}"

    def to_json(self) -> dict[str, Any]:
        return {
            "db": self.db, "kind": self.kind, "op": self.op, "table": self.table, "key": self.key,
            "before": self.before, "after": self.after, "count": self.count, "columns": list(self.columns),
            "object_type": self.object_type, "name": self.name,
        }


@dataclass(slots=True)
class _Raw:
    """A change as the comparison finds it, before anything is decoded (cheap to count)."""

    kind: str
    op: str
    table: str | None = None
    columns: tuple[str, ...] = ()  # row: the compared columns, in order
    key_columns: tuple[str, ...] = ()  # row compared by key: the key columns
    before: tuple[Value, ...] | None = None
    after: tuple[Value, ...] | None = None
    delta: int = 0  # multiset row: POST count minus PRE count
    extra: Mapping[str, Any] | None = None  # schema/header/user_version

    def keys(self) -> list[tuple[Any, ...]]:
        """Identities of a keyed row (its key on each side); of a multiset row, its values."""
        if self.kind != "row":
            extra = self.extra or {}
            return [(self.kind, extra.get("object_type"), extra.get("name"))]
        if not self.key_columns:
            values = self.before if self.before is not None else self.after
            return [("values", self.table, tuple(_canon(v) for v in values))]
        out = []
        for side in (self.before, self.after):
            if side is not None:
                key = tuple(_canon(side[self.columns.index(c)]) for c in self.key_columns)
                if ("key", self.table, key) not in out:
                    out.append(("key", self.table, key))
        return out

    def change(self, db: str, encoding: str) -> DbChange:
        if self.kind != "row":
            extra = self.extra or {}
            return DbChange(db, self.kind, self.op, table=extra.get("table"), before=extra.get("before"),
                            after=extra.get("after"), object_type=extra.get("object_type"), name=extra.get("name"))

        columns = self.columns
        before = None if self.before is None else dict(zip(columns, _json_values(self.before, encoding)))
        after = None if self.after is None else dict(zip(columns, _json_values(self.after, encoding)))
        if not self.key_columns:
            return DbChange(db, "row", self.op, table=self.table, before=before, after=after, count=abs(self.delta))
        side = before if before is not None else after
        key = {c: side[c] for c in self.key_columns}
        changed: tuple[str, ...] = ()
        if self.before is not None and self.after is not None:
            # (typeof, payload) pairs: equal exactly when the storage class and the value are
            changed = tuple(c for c, b, a in zip(columns, self.before, self.after) if b != a)
        return DbChange(db, "row", self.op, table=self.table, key=key, before=before, after=after, columns=changed)


# ---------------------------------------------------------------- connections


class _Deadline:
    def __init__(self, seconds: float):
        self.until = time.monotonic() + seconds
        self.hit = False

    def __call__(self) -> bool:
        if time.monotonic() > self.until:
            self.hit = True
        return self.hit


def _configure(conn: apsw.Connection, deadline: _Deadline, *, attached: int = 0, check_cells: bool = True) -> None:
    """Defensive, untrusted schema, no extensions, no memory-mapped I/O, deadline.

    `check_cells` (PRAGMA cell_size_check) is on wherever a file is opened that has not yet
    passed an integrity check with it on; the comparisons run on captured copies that have
    (private files, never shared with the agent) and leave it off: it costs them about 20%.
    """
    harden(conn)
    if conn.config(apsw.SQLITE_DBCONFIG_DEFENSIVE, -1) != 1 or conn.config(apsw.SQLITE_DBCONFIG_TRUSTED_SCHEMA, -1) != 0:
        raise DatabaseError("SQLite refused defensive mode")
    conn.limit(apsw.SQLITE_LIMIT_ATTACHED, attached)
    conn.set_progress_handler(deadline, PROGRESS_OPS)
    conn.execute(f"PRAGMA cell_size_check = {'ON' if check_cells else 'OFF'}; PRAGMA mmap_size = 0; PRAGMA trusted_schema = OFF").fetchall()


def _uri(path: Path, *, immutable: bool) -> str:
    query = "?mode=ro&immutable=1" if immutable else "?mode=rw"
    return "file:" + urllib.parse.quote(str(path)) + query


def _wrap(exc: BaseException, deadline: _Deadline, what: str) -> DatabaseError:
    if deadline.hit:
        return DatabaseError(f"{what}: took longer than {TIMEOUT_SECONDS:g} s and was stopped")
    text = str(exc) or type(exc).__name__
    return DatabaseError(f"{what}: {display(text)[:500]}")


# ---------------------------------------------------------------- capture


class _ConfinedVFS(apsw.VFS):
    """The default VFS, restricted to one database's own files (no super-journals, no extensions)."""

    def __init__(self, database: Path):
        self.vfs_name = f"assure-confined-{uuid.uuid4().hex}"
        base = os.path.realpath(database)
        self.allowed = frozenset({base, *(base + suffix for suffix in SIDECARS)})
        self.refused: list[str] = []
        super().__init__(self.vfs_name, "")

    def _check(self, name: str | None, what: str) -> None:
        if name is not None and os.path.realpath(name) not in self.allowed:
            self.refused.append(f"{what} {display(name)[:200]}")
            raise apsw.CantOpenError(f"access to {name!r} refused")

    def xOpen(self, name: Any, flags: list[int]) -> apsw.VFSFile:  # noqa: N802 (apsw's names)
        filename = name.filename() if isinstance(name, apsw.URIFilename) else name
        self._check(filename, "open")
        return apsw.VFSFile("", name, flags)

    def xAccess(self, pathname: str, flags: int) -> bool:  # noqa: N802
        self._check(pathname, "access")
        return super().xAccess(pathname, flags)

    def xDelete(self, filename: str, syncdir: bool) -> None:  # noqa: N802
        self._check(filename, "delete")
        super().xDelete(filename, syncdir)

    def xDlOpen(self, filename: str) -> int:  # noqa: N802
        self.refused.append(f"load extension {display(filename)[:200]}")
        return 0


def _lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _copy_at(src_dir: int, name: str, expect: os.stat_result, dst_dir: int, target: str, budget: int) -> int:
    """Copy one regular file without following symlinks; returns bytes copied."""
    fd = os.open(name, _OPEN_FILE, dir_fd=src_dir)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (expect.st_dev, expect.st_ino):
            raise DatabaseError(f"{display(name)} changed into something else while it was opened")
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dst_dir)
        copied = 0
        try:
            while chunk := os.read(fd, CHUNK_BYTES):
                copied += len(chunk)
                if copied > budget:
                    raise DatabaseTooLarge(f"the database and its WAL/journal exceed {MAX_DB_BYTES} bytes")
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]
        finally:
            os.close(out)
        return copied
    finally:
        os.close(fd)


def _fingerprint(st: os.stat_result | None) -> tuple[int, ...] | None:
    return None if st is None else (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def capture(source: Path, target_dir: Path, name: str) -> Path:
    """Copy `source` with its WAL and journal into `target_dir`, recover, check, checkpoint.

    Returns `target_dir/<name>.sqlite`: one self-contained file (journal_mode DELETE, no
    sidecar files) holding exactly what a new connection to `source` would have seen.
    Raises DatabaseError (DatabaseTooLarge over MAX_DB_BYTES) naming the problem: a
    symlink or non-regular file, a file that kept changing while copied, a journal that
    reaches outside the copy, a failed integrity check, a timeout.
    """
    if not NAME_PATTERN.fullmatch(name):
        raise DatabaseError(f"capture name {name!r} must match {NAME_PATTERN.pattern}")
    source = Path(source)
    base = source.name
    shown = display(str(source))
    try:
        src_dir = os.open(source.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise DatabaseError(f"{shown}: cannot open its directory: {exc.strerror}") from None
    try:
        dst_dir = os.open(target_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        os.close(src_dir)
        raise DatabaseError(f"{display(str(target_dir))}: not a usable directory: {exc.strerror}") from None
    target = Path(target_dir) / f"{name}.sqlite"
    try:
        _copy_all(src_dir, base, shown, dst_dir, target.name)
    except OSError as exc:
        _remove_copies(dst_dir, target.name)
        raise DatabaseError(f"{shown}: cannot copy: {exc.strerror or exc}") from None
    except BaseException:
        _remove_copies(dst_dir, target.name)
        raise
    finally:
        os.close(src_dir)
        os.close(dst_dir)
    try:
        _recover(target, shown)
    except BaseException:
        for suffix in ("", *SIDECARS):
            Path(str(target) + suffix).unlink(missing_ok=True)
        raise
    return target


def _copy_all(src_dir: int, base: str, shown: str, dst_dir: int, target: str) -> None:
    """Copy the database, WAL and journal; again if any of them changed meanwhile (live databases)."""
    for _attempt in range(COPY_ATTEMPTS):
        stats = _source_stats(src_dir, base, shown)
        total = sum(st.st_size for suffix, st in stats.items() if st is not None and suffix != "-shm")
        if total > MAX_DB_BYTES:
            raise DatabaseTooLarge(f"{shown}: the database and its WAL/journal are {total} bytes, over the {MAX_DB_BYTES}-byte limit")
        _remove_copies(dst_dir, target)
        budget = MAX_DB_BYTES
        for suffix in ("", "-wal", "-journal"):
            st = stats[suffix]
            if st is not None:
                try:
                    budget -= _copy_at(src_dir, base + suffix, st, dst_dir, target + suffix, budget)
                except FileNotFoundError:
                    break  # a sidecar vanished (checkpoint): copy again
        if {s: _fingerprint(st) for s, st in _source_stats(src_dir, base, shown).items()} == {s: _fingerprint(st) for s, st in stats.items()}:
            return
    _remove_copies(dst_dir, target)
    raise DatabaseError(f"{shown}: the database kept changing while it was copied ({COPY_ATTEMPTS} attempts)")


def _source_stats(src_dir: int, base: str, shown: str) -> dict[str, os.stat_result | None]:
    stats: dict[str, os.stat_result | None] = {}
    for suffix in ("", *SIDECARS):
        st = _lstat_at(src_dir, base + suffix)
        what = f"{shown}{suffix}"
        if st is None and suffix == "":
            raise DatabaseError(f"{what}: no such file")
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise DatabaseError(f"{what} is a symlink; refusing to follow it")
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise DatabaseError(f"{what} is not a regular file")
        stats[suffix] = st
    return stats


def _remove_copies(dst_dir: int, name: str) -> None:
    for suffix in ("", *SIDECARS):
        try:
            os.unlink(name + suffix, dir_fd=dst_dir)
        except FileNotFoundError:
            pass


def _recover(target: Path, shown: str) -> None:
    """Open the copy (recovery), check it, checkpoint it into one file in rollback mode."""
    vfs = _ConfinedVFS(target)
    deadline = _Deadline(TIMEOUT_SECONDS)
    conn = None
    try:
        try:
            conn = apsw.Connection(str(target), flags=apsw.SQLITE_OPEN_READWRITE, vfs=vfs.vfs_name)
            _configure(conn, deadline)
            problems = [row[0] for row in conn.execute(f"PRAGMA integrity_check({MAX_INTEGRITY_ERRORS})")]
            if problems != ["ok"]:
                listed = "; ".join(display(str(p))[:200] for p in problems)
                raise DatabaseError(f"{shown}: integrity check failed: {listed}")
            busy, _log, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            mode = conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0]
            if busy or str(mode).lower() != "delete":
                raise DatabaseError(f"{shown}: could not checkpoint the copy into one file (journal mode {mode})")
            conn.close()
            conn = None
        except apsw.Error as exc:
            if vfs.refused:
                raise DatabaseError(f"{shown}: its journal reaches outside the database's own files ({'; '.join(vfs.refused[:3])}); refusing to recover it") from None
            raise _wrap(exc, deadline, shown) from None
        finally:
            if conn is not None:
                conn.close()
    finally:
        vfs.unregister()
    if vfs.refused:
        raise DatabaseError(f"{shown}: its journal reaches outside the database's own files ({'; '.join(vfs.refused[:3])})")
    left = [suffix for suffix in SIDECARS if os.path.lexists(str(target) + suffix)]
    if left:
        raise DatabaseError(f"{shown}: the copy still has {', '.join(left)} after a checkpoint")


# ---------------------------------------------------------------- diff


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class _Table:
    name: str
    columns: tuple[str, ...]  # compared (non-generated) columns
    key: tuple[str, ...]  # declared PRIMARY KEY columns in key order; () if none
    rowid_alias: bool  # the key is an INTEGER PRIMARY KEY: the rowid itself, never NULL, always an integer
    rowid: str | None  # a name that reaches the true rowid (not shadowed by a column); None: WITHOUT ROWID or all shadowed
    collations: Mapping[str, str]  # column -> declared collation (upper case)
    affinities: Mapping[str, str]  # column -> affinity of its declared type (TEXT, INTEGER, ...)


def _affinity(declared: str) -> str:
    """SQLite's rules (datatype3.html, 3.1) for the affinity of a declared column type."""
    upper = declared.upper()
    if "INT" in upper:
        return "INTEGER"
    if "CHAR" in upper or "CLOB" in upper or "TEXT" in upper:
        return "TEXT"
    if "BLOB" in upper or not upper:
        return "BLOB"
    if "REAL" in upper or "FLOA" in upper or "DOUB" in upper:
        return "REAL"
    return "NUMERIC"


def _tables(conn: apsw.Connection, schema: str) -> dict[str, _Table]:
    """The ordinary tables of `schema` (shadow tables of virtual tables included; virtual tables
    themselves are not read: their content is in their shadow tables)."""
    out: dict[str, _Table] = {}
    listed = conn.execute(
        "SELECT name, wr FROM pragma_table_list WHERE schema = ? AND type IN ('table', 'shadow') "
        "AND name NOT IN ('sqlite_schema', 'sqlite_temp_schema')", (schema,)).fetchall()
    for name, wr in listed:
        xinfo = conn.execute(f"SELECT name, pk, hidden, type FROM pragma_table_xinfo(?, '{schema}')", (name,)).fetchall()
        names = {str(col).lower() for col, _pk, _h, _t in xinfo}
        columns = tuple(col for col, _pk, hidden, _t in xinfo if hidden == 0)
        affinities = {col: _affinity(str(declared or "")) for col, _pk, hidden, declared in xinfo if hidden == 0}
        key = tuple(col for col, _pk, _h, _t in sorted((r for r in xinfo if r[1] > 0), key=lambda r: r[1]))
        without_rowid = bool(wr)
        # an INTEGER PRIMARY KEY is the rowid itself; any other key has an index of origin 'pk'
        alias = bool(key) and not without_rowid and not conn.execute(
            f"SELECT 1 FROM pragma_index_list(?, '{schema}') WHERE origin = 'pk'", (name,)).fetchone()
        collations = {col: str(conn.column_metadata(schema, name, col)[1] or "BINARY").upper() for col in columns}
        rowid = None if without_rowid else next((n for n in ("rowid", "_rowid_", "oid") if n not in names), None)
        out[name] = _Table(name, columns, key, alias, rowid, collations, affinities)
    return out


def _value_sql(expr: str) -> str:
    """typeof and payload of one column; text read as its bytes so nothing is decoded in SQLite."""
    return f"typeof({expr}), CASE WHEN typeof({expr}) = 'text' THEN CAST({expr} AS BLOB) ELSE {expr} END"


class _Side:
    """One side of a table comparison: a real table, or an empty stand-in when it is missing."""

    def __init__(self, schema: str, table: _Table | None, alias: str, columns: tuple[str, ...], name: str):
        self.alias = alias
        self.table = table
        if table is None:
            nulls = ", ".join(f"NULL AS {_quote(c)}" for c in columns) or "NULL"
            self.source = f"(SELECT {nulls} WHERE 0) AS {alias}"
            self.exprs = {c: f"{alias}.{_quote(c)}" for c in columns}
        else:
            self.source = f"{schema}.{_quote(name)} AS {alias}"
            self.exprs = {c: (f"{alias}.{_quote(c)}" if c in table.collations else "NULL") for c in columns}
        self.rowid = None if table is None else table.rowid

    def values(self) -> str:
        return ", ".join(_value_sql(e) for e in self.exprs.values())

    def binary(self, column: str) -> bool:
        return self.table is None or self.table.collations.get(column, "BINARY") == "BINARY"

    def affinity(self, column: str) -> str | None:
        return None if self.table is None else self.table.affinities.get(column)


def _nulls(columns: tuple[str, ...]) -> str:
    return ", ".join("'null', NULL" for _ in columns)


def _differs(columns: tuple[str, ...], left: _Side, right: _Side, skip: Iterable[str] = ()) -> str:
    """SQL that is true when two rows differ in any column: storage class, or value under BINARY.

    `IS NOT` alone misses only INTEGER vs REAL with equal values (1 and 1.0), so the storage
    classes are compared too, except in a column of TEXT affinity on both sides: there a
    value SQLite wrote is TEXT, BLOB or NULL, which `IS` never finds equal to another class
    (two TEXT-affinity operands get no conversion), so one SQLite-written side (PRE and
    EXPECTED always are) makes the check redundant. It costs ~40 ns a value.
    """
    terms = []
    for c in columns:
        if c in skip:
            continue
        a, b = left.exprs[c], right.exprs[c]
        collate = "" if left.binary(c) and right.binary(c) else " COLLATE BINARY"
        typed = "" if left.affinity(c) == right.affinity(c) == "TEXT" else f" OR typeof({a}) <> typeof({b})"
        terms.append(f"{a} IS NOT {b}{collate}{typed}")
    return " OR ".join(terms) or "0"


class _Compare:
    """The comparison of `main` (left) against `post` (right) on one connection."""

    def __init__(self, conn: apsw.Connection, left: str = "main", right: str = "post"):
        self.conn, self.left, self.right = conn, left, right

    def changes(self) -> Iterator[_Raw]:
        yield from self._schema()
        yield from self._pragmas()
        lt, rt = _tables(self.conn, self.left), _tables(self.conn, self.right)
        for name in sorted(lt.keys() | rt.keys()):
            yield from self._table(name, lt.get(name), rt.get(name))

    def _schema(self) -> Iterator[_Raw]:
        def objects(schema: str) -> dict[tuple[str, str], tuple[Any, Any]]:
            rows = self.conn.execute(f"SELECT type, name, tbl_name, sql FROM {schema}.sqlite_schema")
            return {(str(t), str(n)): (tbl, sql) for t, n, tbl, sql in rows}

        before, after = objects(self.left), objects(self.right)
        for obj in sorted(before.keys() | after.keys()):
            b, a = before.get(obj), after.get(obj)
            if b == a:
                continue
            op = "added" if b is None else "removed" if a is None else "changed"
            extra = {
                "object_type": obj[0], "name": obj[1], "table": (a or b)[0],
                "before": None if b is None else {"tbl_name": b[0], "sql": b[1]},
                "after": None if a is None else {"tbl_name": a[0], "sql": a[1]},
            }
            yield _Raw("schema", op, extra=extra)

    def _pragmas(self) -> Iterator[_Raw]:
        for pragma, kind in (("user_version", "user_version"), ("application_id", "header")):
            b = self.conn.execute(f"PRAGMA {self.left}.{pragma}").fetchone()[0]
            a = self.conn.execute(f"PRAGMA {self.right}.{pragma}").fetchone()[0]
            if b != a:
                yield _Raw(kind, "changed", extra={"name": pragma, "before": b, "after": a})

    def _table(self, name: str, lt: _Table | None, rt: _Table | None) -> Iterator[_Raw]:
        columns = tuple(dict.fromkeys((lt.columns if lt else ()) + (rt.columns if rt else ())))
        if not columns:
            return
        left = _Side(self.left, lt, "A", columns, name)
        right = _Side(self.right, rt, "B", columns, name)
        keys = [t.key for t in (lt, rt) if t is not None]
        key = keys[0] if all(k == keys[0] for k in keys) else ()
        if not key:
            yield from self._multiset(name, columns, left, right, None)
            return
        alias = all(t.rowid_alias for t in (lt, rt) if t is not None)
        yield from self._keyed(name, columns, key, left, right, alias)
        if not alias:  # rows whose key holds a NULL have no identity: compare them as a multiset
            yield from self._multiset(name, columns, left, right, key)

    def _keyed(self, name: str, columns: tuple[str, ...], key: tuple[str, ...], left: _Side, right: _Side, alias: bool) -> Iterator[_Raw]:
        la, ra = left.exprs, right.exprs

        def join(inner: dict[str, str], outer: dict[str, str]) -> str:
            # the probed side's column on the left: its collation applies, so its key index is usable
            return " AND ".join(f"{inner[c]} = {outer[c]}" for c in key)

        def not_null(side: dict[str, str]) -> str:
            return "1" if alias else " AND ".join(f"{side[c]} IS NOT NULL" for c in key)

        # an INTEGER PRIMARY KEY joined by equality is equal (same integer) on both sides
        differs = _differs(columns, left, right, skip=key if alias else ())
        missing = f"{ra[key[0]]} IS NULL"  # after the join, only a row without partner has a NULL key
        sql = (
            f"SELECT {missing}, {left.values()}, {right.values()} FROM {left.source} LEFT JOIN {right.source} ON {join(ra, la)} "
            f"WHERE {not_null(la)} AND ({missing} OR {differs}) "
            f"UNION ALL SELECT 2, {_nulls(columns)}, {right.values()} FROM {right.source} "
            f"WHERE {not_null(ra)} AND NOT EXISTS (SELECT 1 FROM {left.source} WHERE {join(la, ra)})"
        )
        n = len(columns)
        for row in self.conn.execute(sql):
            op = row[0]
            before = None if op == 2 else tuple(zip(row[1 : 2 * n + 1 : 2], row[2 : 2 * n + 1 : 2]))
            after = None if op == 1 else tuple(zip(row[2 * n + 1 :: 2], row[2 * n + 2 :: 2]))
            yield _Raw("row", _OPS[op], name, columns, key, before, after)

    def _multiset(self, name: str, columns: tuple[str, ...], left: _Side, right: _Side, null_key: tuple[str, ...] | None) -> Iterator[_Raw]:
        """Rows as multisets of whole rows (with `null_key`: only the rows with a NULL in those columns).

        Rows at the same rowid on both sides that are identical cancel out first (any pairing
        of equal rows leaves the multiset difference as it is), so only rows that changed,
        appeared or vanished at their rowid are grouped and counted, and rows that are only
        on one side are found by rowid alone, as sqldiff does. After a VACUUM renumbered the
        rowids, nothing pairs and every row is grouped: slower, same answer.
        """
        def values(side: _Side) -> str:
            return ", ".join(f"typeof({e}) AS t{i}, {e} COLLATE BINARY AS v{i}" for i, e in enumerate(side.exprs.values()))

        def domain(side: _Side) -> str:
            return "(" + " OR ".join(f"{side.exprs[c]} IS NULL" for c in null_key) + ")" if null_key else "1"

        if left.rowid is not None and right.rowid is not None:
            la, ra = f"A.{left.rowid}", f"B.{right.rowid}"
            # one pass over PRE: its rows with no partner at their rowid, or a partner that differs
            head = (f"WITH changed(r, alone) AS MATERIALIZED (SELECT {la}, {ra} IS NULL FROM {left.source} LEFT JOIN {right.source} ON {ra} = {la} "
                    f"WHERE {ra} IS NULL OR {_differs(columns, left, right)}) ")
            parts = (
                f"SELECT {values(left)}, 1 AS n FROM changed JOIN {left.source} ON {la} = changed.r WHERE {domain(left)} "
                f"UNION ALL SELECT {values(right)}, -1 FROM changed JOIN {right.source} ON {ra} = changed.r WHERE NOT changed.alone AND {domain(right)} "
                f"UNION ALL SELECT {values(right)}, -1 FROM {right.source} WHERE {domain(right)} AND NOT EXISTS (SELECT 1 FROM {left.source} WHERE {la} = {ra})"
            )
        else:
            head = ""
            parts = f"SELECT {values(left)}, 1 AS n FROM {left.source} WHERE {domain(left)} UNION ALL SELECT {values(right)}, -1 FROM {right.source} WHERE {domain(right)}"
        group = ", ".join(f"t{i}, v{i}" for i in range(len(columns)))
        out = ", ".join(f"t{i}, CASE WHEN t{i} = 'text' THEN CAST(v{i} AS BLOB) ELSE v{i} END" for i in range(len(columns)))
        sql = f"{head}SELECT sum(n), {out} FROM ({parts}) GROUP BY {group} HAVING sum(n) <> 0"
        for row in self.conn.execute(sql):
            values_ = tuple(zip(row[1::2], row[2::2]))
            delta = -row[0]  # POST count minus PRE count
            if delta > 0:
                yield _Raw("row", "insert", name, columns, (), None, values_, delta)
            else:
                yield _Raw("row", "delete", name, columns, (), values_, None, delta)


_OPS = ("update", "delete", "insert")


def _check_captured(path: Path) -> None:
    st = _lstat(path)
    if st is None or not stat.S_ISREG(st.st_mode):
        raise DatabaseError(f"{display(str(path))}: not a regular file (compare only what capture() produced)")
    for suffix in ("-wal", "-journal"):
        if os.path.lexists(str(path) + suffix):
            raise DatabaseError(f"{display(str(path))}{suffix} exists: compare only what capture() produced")


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


class _Pair:
    """One read-only connection: `left` as main, `right` attached as `post`."""

    def __init__(self, left: Path, right: Path):
        _check_captured(left)
        _check_captured(right)
        self.deadline = _Deadline(TIMEOUT_SECONDS)
        self.conn = apsw.Connection(_uri(left, immutable=True), flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        try:
            _configure(self.conn, self.deadline, attached=1, check_cells=False)
            self.encoding = self.conn.execute("PRAGMA main.encoding").fetchone()[0]
            other = apsw.Connection(_uri(right, immutable=True), flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
            try:
                _configure(other, self.deadline, check_cells=False)
                self.right_encoding = other.execute("PRAGMA main.encoding").fetchone()[0]
            finally:
                other.close()
            if self.encoding == self.right_encoding:
                self.conn.execute("ATTACH ? AS post", (_uri(right, immutable=True),))
        except BaseException:
            self.conn.close()
            raise

    def changes(self) -> Iterator[_Raw]:
        if self.encoding != self.right_encoding:
            yield _Raw("header", "changed", extra={"name": "encoding", "before": self.encoding, "after": self.right_encoding})
            return
        yield from _Compare(self.conn).changes()

    def close(self) -> None:
        self.conn.close()


def _stream(left: Path, right: Path, what: str) -> Iterator[tuple[_Raw, str]]:
    """Every change from `left` to `right`, with the encoding to decode its text; DatabaseError on failure."""
    deadline = None
    try:
        pair = _Pair(left, right)
    except apsw.Error as exc:
        raise _wrap(exc, _Deadline(TIMEOUT_SECONDS), what) from None
    deadline = pair.deadline
    try:
        for raw in pair.changes():
            yield raw, pair.encoding
    except apsw.Error as exc:
        raise _wrap(exc, deadline, what) from None
    finally:
        pair.close()


def diff(pre: Path, post: Path, *, db: str | None = None, limit: int = MAX_CHANGES) -> list[DbChange]:
    """Every change from `pre` to `post` (captured files), at most `limit` then an `omitted` count."""
    name = db if db is not None else Path(post).stem
    out: list[DbChange] = []
    extra = 0
    for raw, encoding in _stream(Path(pre), Path(post), f"comparing {display(name)}"):
        if len(out) < limit:
            out.append(raw.change(name, encoding))
        else:
            extra += 1
    if extra:
        out.append(DbChange(name, "omitted", "omitted", count=extra))
    return out


# ---------------------------------------------------------------- changesets


@dataclass(frozen=True)
class _Touch:
    table: str
    op: str
    pk: tuple[int, ...]  # per changeset column: 0, or its 1-based position in the key
    old: tuple[Value | None, ...] | None  # None inside: undefined (an update's unchanged column)
    new: tuple[Value | None, ...] | None


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for i in range(9):
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        if i == 8:
            return (value << 8) | byte, pos
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, pos
    raise AssertionError("unreachable")


def _record(data: bytes, pos: int, n: int) -> tuple[tuple[Value | None, ...], int]:
    out: list[Value | None] = []
    for _ in range(n):
        if pos >= len(data):
            raise ValueError("truncated record")
        kind = data[pos]
        pos += 1
        if kind == 0:
            out.append(None)
        elif kind == 5:
            out.append(("null", None))
        elif kind in (1, 2):
            if pos + 8 > len(data):
                raise ValueError("truncated number")
            out.append(("integer", struct.unpack(">q", data[pos : pos + 8])[0]) if kind == 1 else ("real", struct.unpack(">d", data[pos : pos + 8])[0]))
            pos += 8
        elif kind in (3, 4):
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ValueError("truncated text/blob")
            out.append(("text" if kind == 3 else "blob", data[pos : pos + size]))
            pos += size
        else:
            raise ValueError(f"unknown value type {kind}")
    return tuple(out), pos


def parse_changeset(data: bytes) -> list[_Touch]:
    """Decode a changeset (the session extension's format) without decoding any text.

    apsw's iterator decodes TEXT as UTF-8 and stops at the first invalid byte sequence,
    which a hostile agent can store; this keeps text as its bytes. ValueError if malformed.
    """
    out: list[_Touch] = []
    pos, table, ncol, pk = 0, "", 0, ()
    ops = {0x12: "insert", 0x17: "update", 0x09: "delete"}
    while pos < len(data):
        marker = data[pos]
        if marker == 0x54:  # 'T'
            ncol, pos = _varint(data, pos + 1)
            if ncol <= 0 or pos + ncol > len(data):
                raise ValueError("bad table header")
            pk = tuple(data[pos : pos + ncol])
            pos += ncol
            end = data.find(b"\x00", pos)
            if end < 0:
                raise ValueError("unterminated table name")
            table = data[pos:end].decode("utf-8", "surrogateescape")
            pos = end + 1
            continue
        if marker not in ops or not table:
            raise ValueError(f"unexpected byte 0x{marker:02x} at offset {pos}")
        op = ops[marker]
        pos += 2  # op, indirect flag
        old = new = None
        if op in ("delete", "update"):
            old, pos = _record(data, pos, ncol)
        if op in ("insert", "update"):
            new, pos = _record(data, pos, ncol)
        out.append(_Touch(table, op, pk, old, new))
    return out


# ---------------------------------------------------------------- attribution


def db_effects(journal: Iterable[Mapping[str, Any]], db: str) -> list[dict[str, Any]]:
    """The allowed `sql` effects on database `db`, in journal order, each with its `action_id`."""
    out = []
    for record in journal:
        effect = record.get("effect")
        if record.get("event") != "tool_call" or record.get("decision") != "allow" or not isinstance(effect, dict):
            continue
        if effect.get("op") == "sql" and effect.get("db") == db:
            out.append({**effect, "action_id": record.get("action_id")})
    return out


def error_finding(db: str, exc: DatabaseError, *, side: str) -> Finding:
    """The finding for a database that could not be captured or compared (never a pass).

    POST (what the run left) over the size limit, corrupt, hostile or too slow to compare is
    `unattributed`: the agent may have made it so to hide a change, and a change we cannot
    see is a change we cannot explain (as judge.py treats a POST workspace over its limits).
    PRE (the fixture, before the run) is a `harness_error`: the setup exceeds the verifier.
    """
    kind = Kind.HARNESS_ERROR if side == "pre" else Kind.UNATTRIBUTED
    label = "the fixture" if side == "pre" else "the database after the run"
    return Finding(kind, f"db:{db}", f"{label} cannot be verified: {exc.message}", None, {"side": side, "error": type(exc).__name__})


class _Replay:
    """EXPECTED: a copy of PRE with the journaled changesets applied, remembering who touched what."""

    def __init__(self, path: Path, db: str):
        self.path, self.db = path, db
        self.keys: dict[tuple[Any, ...], tuple[int, str]] = {}  # ("key"|"values", table, canon) -> (index, action)
        self.tables: dict[str, tuple[int, str]] = {}  # table -> last action inserting into it (sqlite_sequence)
        self.failure: Finding | None = None

    def run(self, effects: list[dict[str, Any]]) -> None:
        deadline = _Deadline(TIMEOUT_SECONDS)
        conn = apsw.Connection(_uri(self.path, immutable=False), flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_URI)
        try:
            _configure(conn, deadline)
            tables = _tables(conn, "main")
            encoding = conn.execute("PRAGMA encoding").fetchone()[0]
            for index, effect in enumerate(effects):
                action = str(effect.get("action_id"))
                changeset = self._changeset(effect, action)
                if changeset is None:
                    return
                try:
                    touches = parse_changeset(changeset)
                except ValueError as exc:
                    self.failure = Finding(Kind.HARNESS_ERROR, f"db:{self.db}", f"the changeset journaled by action {display(action)} is malformed ({exc}); changes from it on are not explained", None, {"action_id": action})
                    return
                counters = self._counters(effect, action)
                if counters is False:
                    return
                try:
                    before = self._rowid_rows(conn, tables, touches)
                    replay(conn, changeset)
                    after = self._rowid_rows(conn, tables, touches)
                    if counters is not None:
                        self._set_counters(conn, counters, (index, action))
                except apsw.Error as exc:
                    why = "it ran too long" if deadline.hit else display(str(exc))[:300]
                    self.failure = Finding(
                        Kind.UNATTRIBUTED, f"db:{self.db}",
                        f"the change journaled by action {display(action)} does not apply to the database as the journal says it was ({why}): "
                        "something else changed it first; changes from this action on are not explained",
                        None, {"action_id": action, "effect_index": index},
                    )
                    return
                self._remember(index, action, tables, touches, before, after, encoding)
        finally:
            conn.close()

    def _changeset(self, effect: dict[str, Any], action: str) -> bytes | None:
        try:
            data = base64.b64decode(str(effect.get("changeset", "")), validate=True)
        except (binascii.Error, ValueError):
            data = None
        if data is None or hashlib.sha256(data).hexdigest() != effect.get("changeset_sha256"):
            self.failure = Finding(Kind.HARNESS_ERROR, f"db:{self.db}", f"the changeset journaled by action {display(action)} is unreadable or does not match its sha256; changes from it on are not explained", None, {"action_id": action})
            return None
        return data

    def _counters(self, effect: dict[str, Any], action: str) -> list[tuple[str, int]] | None | Literal[False]:
        """The sqlite_sequence the gateway saw after this action, if it journaled one (it does
        when the statement moved a counter; no changeset holds that table). False if malformed."""
        if "sequence" not in effect:
            return None
        rows = effect["sequence"]
        if isinstance(rows, list) and all(isinstance(r, list) and len(r) == 2 and isinstance(r[0], str) and type(r[1]) is int for r in rows):
            return [(name, seq) for name, seq in rows]
        self.failure = Finding(Kind.HARNESS_ERROR, f"db:{self.db}",
                               f"the AUTOINCREMENT counters journaled by action {display(action)} are malformed; changes from it on are not explained",
                               None, {"action_id": action})
        return False

    def _set_counters(self, conn: apsw.Connection, counters: list[tuple[str, int]], stamp: tuple[int, str]) -> None:
        """Make EXPECTED's sqlite_sequence what the gateway saw, and credit every counter that moved."""
        before = set(conn.execute("SELECT name, seq FROM main.sqlite_sequence").fetchall())
        with conn:
            conn.execute("DELETE FROM main.sqlite_sequence")
            conn.executemany("INSERT INTO main.sqlite_sequence(name, seq) VALUES (?, ?)", counters)
        for name, _ in set(counters) ^ before:
            self.tables[name] = stamp

    @staticmethod
    def _rowid_rows(conn: apsw.Connection, tables: dict[str, _Table], touches: list[_Touch]) -> dict[tuple[str, int], tuple[Value, ...]]:
        """Full rows of the rowid-keyed (no PRIMARY KEY) tables a changeset touches, by rowid."""
        wanted: dict[str, set[int]] = {}
        for t in touches:
            table = tables.get(t.table)
            if table is not None and not table.key:
                record = t.old if t.old is not None else t.new
                if record and record[0] is not None and record[0][0] == "integer":
                    wanted.setdefault(t.table, set()).add(record[0][1])
        out: dict[tuple[str, int], tuple[Value, ...]] = {}
        for name, rowids in wanted.items():
            cols, rowid = tables[name].columns, tables[name].rowid
            if not cols or rowid is None:
                continue  # every column shadows the rowid: such rows are attributed to the journal as a whole
            sql = f"SELECT {rowid}, {', '.join(_value_sql(_quote(c)) for c in cols)} FROM main.{_quote(name)} WHERE {rowid} IN (SELECT value FROM json_each(?))"
            ids = sorted(rowids)
            for start in range(0, len(ids), 10_000):
                for row in conn.execute(sql, ("[" + ",".join(map(str, ids[start : start + 10_000])) + "]",)):
                    out[(name, row[0])] = tuple(zip(row[1::2], row[2::2]))
        return out

    def _remember(self, index: int, action: str, tables: dict[str, _Table], touches: list[_Touch],
                  before: dict[tuple[str, int], tuple[Value, ...]], after: dict[tuple[str, int], tuple[Value, ...]], encoding: str) -> None:
        stamp = (index, action)
        for t in touches:
            table = tables.get(t.table)
            if t.op == "insert":
                self.tables[t.table] = stamp
            if table is None:
                continue
            if not table.key:
                record = t.old if t.old is not None else t.new
                rowid = record[0][1] if record and record[0] is not None else None
                for rows in (before, after):
                    values = rows.get((t.table, rowid))
                    if values is not None:
                        self.keys[("values", t.table, tuple(_canon(v) for v in values))] = stamp
                continue
            positions = sorted((p, i) for i, p in enumerate(t.pk) if p)
            for record in (t.old, t.new):
                if record is None:
                    continue
                key = [record[i] for _p, i in positions]
                if any(v is None for v in key):
                    continue
                if encoding != "UTF-8":  # a changeset holds text as UTF-8; the database in its own encoding
                    codec, errors = _CODECS.get(encoding, _CODECS["UTF-8"])
                    key = [(k, p.decode("utf-8", "surrogateescape").encode(codec, errors)) if k == "text" else (k, p) for k, p in key]
                self.keys[("key", t.table, tuple(_canon(v) for v in key))] = stamp

    def who(self, raw: _Raw) -> str | None:
        """The last action that touched the row (or object) of this change."""
        stamps = [self.keys[k] for k in raw.keys() if k in self.keys]
        if raw.kind == "row" and raw.table == "sqlite_sequence":
            values = raw.before if raw.before is not None else raw.after
            if values and values[0][0] == "text":
                owner = values[0][1].decode("utf-8", "surrogateescape")
                if owner in self.tables:
                    stamps.append(self.tables[owner])
        return max(stamps)[1] if stamps else None


def attribute(db: str, pre: Path, post: Path, effects: list[dict[str, Any]]) -> list[Finding]:
    """Findings for every change from `pre` to `post` (both from capture()) of database `db`.

    `effects`: the allowed journaled `sql` effects, in journal order, each with `action_id`
    (see `db_effects`); effects of other databases are ignored. Never raises DatabaseError:
    a database that cannot be compared becomes an `unattributed` finding.
    """
    effects = [e for e in effects if e.get("op") == "sql" and e.get("db") == db]
    findings: list[Finding] = []
    with tempfile.TemporaryDirectory(prefix="assure-expected-") as tmp:
        expected = Path(tmp) / "expected.sqlite"
        try:
            _check_captured(Path(pre))
            shutil.copyfile(pre, expected, follow_symlinks=False)
        except (DatabaseError, OSError) as exc:
            return [error_finding(db, exc if isinstance(exc, DatabaseError) else DatabaseError(str(exc)), side="pre")]
        replayed = _Replay(expected, db)
        try:
            replayed.run(effects)
        except apsw.Error as exc:
            return [error_finding(db, _wrap(exc, _Deadline(0), "replaying the journal"), side="pre")]
        if replayed.failure is not None:
            findings.append(replayed.failure)
        try:
            findings += _judge_rows(db, Path(pre), expected, Path(post), replayed)
        except DatabaseError as exc:
            findings.append(error_finding(db, exc, side="post"))
    return findings


def _unexplained(raw: _Raw, change: DbChange, who: str | None) -> str:
    """Why a difference between EXPECTED (PRE + journal) and POST is flagged, in words."""
    if raw.kind == "schema":
        return f"{change.describe()}: db.execute cannot change the schema, so no journaled action explains it"
    if raw.kind != "row":
        return f"{change.describe()}: no journaled action can change it"
    if not raw.key_columns:
        n = abs(raw.delta)
        what = f"{n} {'more' if raw.delta > 0 else 'fewer'} cop{'y' if n == 1 else 'ies'} of this row than the journal explains"
    else:
        what = {"insert": "a row the journal does not explain", "delete": "a row gone that the journal does not explain",
                "update": f"a row whose {', '.join(change.columns)} differ from what the journal explains"}[raw.op]
    if who is not None:
        return f"{what}; action {display(who)} wrote this row through the gateway, but the database does not hold what its changeset left"
    return f"{what}; no allowed journaled action touched it"


def _judge_rows(db: str, pre: Path, expected: Path, post: Path, replayed: _Replay) -> list[Finding]:
    findings: list[Finding] = []
    unexplained: dict[tuple[Any, ...], int] = {}  # identity -> multiset delta (or 0 for keyed/other)
    complete = True
    extra = 0
    for raw, encoding in _stream(expected, post, f"comparing {display(db)} with its journal"):
        if len(findings) >= MAX_CHANGES:
            extra += 1
            complete = False
            continue
        change = raw.change(db, encoding)
        who = replayed.who(raw)
        for identity in raw.keys():
            unexplained[identity] = unexplained.get(identity, 0) + (raw.delta if raw.kind == "row" and not raw.key_columns else 0)
        findings.append(Finding(Kind.UNATTRIBUTED, change.subject, _unexplained(raw, change, who), None, {"change": change.to_json(), "journaled_by": who}))
    if extra:
        findings.append(Finding(Kind.UNATTRIBUTED, f"db:{db}", f"{extra} more unexplained changes (not listed)", None, {"count": extra}))
    attributed = 0
    more = 0
    not_checked = 0
    for raw, encoding in _stream(pre, post, f"comparing {display(db)}"):
        identities = raw.keys()
        if raw.kind != "row":
            continue  # replay changes no schema, version or header: any such change is listed above
        count = None
        if not raw.key_columns:
            u = unexplained.get(identities[0], 0)
            journaled = raw.delta - u
            if not complete and identities[0] not in unexplained:
                not_checked += 1
                continue
            if journaled == 0 or (journaled > 0) != (raw.delta > 0):
                continue
            count = min(abs(journaled), abs(raw.delta))
        elif any(i in unexplained for i in identities):
            continue
        elif not complete:
            not_checked += 1
            continue
        attributed += 1
        if attributed > MAX_CHANGES:
            more += 1
            continue
        change = raw.change(db, encoding)
        if count is not None and count != change.count:
            change = dataclasses.replace(change, count=count)
        who = replayed.who(raw)
        attribution = f"gateway:{who}" if who is not None else "gateway:journal"
        findings.append(Finding(Kind.ATTRIBUTED, change.subject, f"{change.describe()} through the gateway", attribution, {"change": change.to_json()}))
    if more:
        findings.append(Finding(Kind.ATTRIBUTED, f"db:{db}", f"{more} more changes explained by the journal (not listed)", "gateway:journal", {"count": more}))
    if not_checked:
        findings.append(Finding(Kind.NOT_CHECKED, f"db:{db}", f"{not_checked} changes were not attributed: too many unexplained changes to tell them apart", None, {"count": not_checked}))
    return findings
