"""`diff`: compare two captured databases inside SQLite (see the package docstring)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import apsw

from assure.textsafe import display
from assure.verify.sqlite.changes import DbChange, Raw
from assure.verify.sqlite.connection import (
    TIMEOUT_SECONDS,
    DatabaseError,
    Deadline,
    configure,
    pragma_row,
    uri,
    wrap,
)
from assure.verify.sqlite.tables import Table, quote, read_tables, value_sql

MAX_CHANGES = (
    10_000  # changes reported by diff / findings per kind by attribute; the rest are counted
)


class _Side:
    """One side of a table comparison: a real table, or an empty stand-in when it is missing."""

    def __init__(
        self, schema: str, table: Table | None, alias: str, columns: tuple[str, ...], name: str
    ):
        self.alias = alias
        self.table = table
        if table is None:
            nulls = ", ".join(f"NULL AS {quote(c)}" for c in columns) or "NULL"
            self.source = f"(SELECT {nulls} WHERE 0) AS {alias}"
            self.exprs = {c: f"{alias}.{quote(c)}" for c in columns}
        else:
            self.source = f"{schema}.{quote(name)} AS {alias}"
            self.exprs = {
                c: f"{alias}.{quote(c)}" if c in table.collations else "NULL" for c in columns
            }
        self.rowid = None if table is None else table.rowid

    def values(self) -> str:
        return ", ".join(value_sql(e) for e in self.exprs.values())

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
    EXPECTED always are) makes the check redundant; and in a column of REAL affinity on both
    sides, which SQLite reads as REAL whatever the file stores (an integer too: it stores
    integral reals so itself), from the table or from an index alike, so no INTEGER is ever
    seen there. It costs ~40 ns a value.
    """
    terms = []
    for c in columns:
        if c in skip:
            continue
        a, b = left.exprs[c], right.exprs[c]
        collate = "" if left.binary(c) and right.binary(c) else " COLLATE BINARY"
        typed = (
            ""
            if left.affinity(c) == right.affinity(c) and left.affinity(c) in ("TEXT", "REAL")
            else f" OR typeof({a}) <> typeof({b})"
        )
        terms.append(f"{a} IS NOT {b}{collate}{typed}")
    return " OR ".join(terms) or "0"


class _Compare:
    """The comparison of `main` (left) against `post` (right) on one connection."""

    def __init__(self, conn: apsw.Connection, left: str = "main", right: str = "post"):
        self.conn, self.left, self.right = conn, left, right

    def changes(self) -> Iterator[Raw]:
        yield from self._schema()
        yield from self._pragmas()
        lt, rt = read_tables(self.conn, self.left), read_tables(self.conn, self.right)
        for name in sorted(lt.keys() | rt.keys()):
            yield from self._table(name, lt.get(name), rt.get(name))

    def _schema(self) -> Iterator[Raw]:
        def objects(schema: str) -> dict[tuple[str, str], tuple[Any, Any]]:
            rows = self.conn.execute(
                f"SELECT type, name, tbl_name, sql FROM {schema}.sqlite_schema"
            )
            return {(str(t), str(n)): (tbl, sql) for t, n, tbl, sql in rows}

        before, after = objects(self.left), objects(self.right)
        for obj in sorted(before.keys() | after.keys()):
            b, a = before.get(obj), after.get(obj)
            if b == a:
                continue
            op = "added" if b is None else "removed" if a is None else "changed"
            side = a or b
            assert side is not None  # an object of the union of both sides' keys
            extra = {
                "object_type": obj[0],
                "name": obj[1],
                "table": side[0],
                "before": None if b is None else {"tbl_name": b[0], "sql": b[1]},
                "after": None if a is None else {"tbl_name": a[0], "sql": a[1]},
            }
            yield Raw("schema", op, extra=extra)

    def _pragmas(self) -> Iterator[Raw]:
        for pragma, kind in (("user_version", "user_version"), ("application_id", "header")):
            b = pragma_row(self.conn, f"PRAGMA {self.left}.{pragma}")[0]
            a = pragma_row(self.conn, f"PRAGMA {self.right}.{pragma}")[0]
            if b != a:
                yield Raw(kind, "changed", extra={"name": pragma, "before": b, "after": a})

    def _table(self, name: str, lt: Table | None, rt: Table | None) -> Iterator[Raw]:
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

    def _keyed(
        self,
        name: str,
        columns: tuple[str, ...],
        key: tuple[str, ...],
        left: _Side,
        right: _Side,
        alias: bool,
    ) -> Iterator[Raw]:
        la, ra = left.exprs, right.exprs

        def join(inner: dict[str, str], outer: dict[str, str]) -> str:
            # the probed side's column on the left: its collation applies, so its key index is
            # usable
            return " AND ".join(f"{inner[c]} = {outer[c]}" for c in key)

        def not_null(side: dict[str, str]) -> str:
            return "1" if alias else " AND ".join(f"{side[c]} IS NOT NULL" for c in key)

        # an INTEGER PRIMARY KEY joined by equality is equal (same integer) on both sides
        differs = _differs(columns, left, right, skip=key if alias else ())
        missing = (  # after the join, only a row without partner has a NULL key
            f"{ra[key[0]]} IS NULL"
        )
        # POST's rows without a partner: an outer join too (a NOT EXISTS subquery probes the same
        # index but costs about twice as much per row)
        sql = (
            f"SELECT {missing}, {left.values()}, {right.values()} FROM {left.source} LEFT JOIN"
            f" {right.source} ON {join(ra, la)} WHERE {not_null(la)} AND ({missing} OR {differs})"
            f" UNION ALL SELECT 2, {_nulls(columns)}, {right.values()} FROM {right.source} LEFT"
            f" JOIN {left.source} ON {join(la, ra)} WHERE {not_null(ra)} AND {la[key[0]]} IS NULL"
        )
        n = len(columns)
        for row in self.conn.execute(sql):
            op = row[0]
            before = (
                None
                if op == 2
                else tuple(zip(row[1 : 2 * n + 1 : 2], row[2 : 2 * n + 1 : 2], strict=False))
            )
            after = (
                None
                if op == 1
                else tuple(zip(row[2 * n + 1 :: 2], row[2 * n + 2 :: 2], strict=False))
            )
            yield Raw("row", _OPS[op], name, columns, key, before, after)

    def _multiset(
        self,
        name: str,
        columns: tuple[str, ...],
        left: _Side,
        right: _Side,
        null_key: tuple[str, ...] | None,
    ) -> Iterator[Raw]:
        """Rows as multisets of whole rows (with `null_key`: only the rows with a NULL in those
        columns).

        Rows at the same rowid on both sides that are identical cancel out first (any pairing
        of equal rows leaves the multiset difference as it is), so only rows that changed,
        appeared or vanished at their rowid are grouped and counted, and rows that are only
        on one side are found by rowid alone, as sqldiff does. After a VACUUM renumbered the
        rowids, nothing pairs and every row is grouped: slower, same answer.
        """

        def values(side: _Side) -> str:
            return ", ".join(
                f"typeof({e}) AS t{i}, {e} COLLATE BINARY AS v{i}"
                for i, e in enumerate(side.exprs.values())
            )

        def domain(side: _Side) -> str:
            return (
                "(" + " OR ".join(f"{side.exprs[c]} IS NULL" for c in null_key) + ")"
                if null_key
                else "1"
            )

        if left.rowid is not None and right.rowid is not None:
            la, ra = f"A.{left.rowid}", f"B.{right.rowid}"
            # one pass over PRE: its rows with no partner at their rowid, or a partner that differs
            head = (
                f"WITH changed(r, alone) AS MATERIALIZED (SELECT {la}, {ra} IS NULL FROM"
                f" {left.source} LEFT JOIN {right.source} ON {ra} = {la} WHERE {ra} IS NULL OR"
                f" {_differs(columns, left, right)}) "
            )
            parts = (
                f"SELECT {values(left)}, 1 AS n FROM changed JOIN {left.source} ON {la} = changed.r"
                f" WHERE {domain(left)} UNION ALL SELECT {values(right)}, -1 FROM changed JOIN"
                f" {right.source} ON {ra} = changed.r WHERE NOT changed.alone AND {domain(right)}"
                f" UNION ALL SELECT {values(right)}, -1 FROM {right.source} LEFT JOIN"
                f" {left.source} ON {la} = {ra} WHERE {domain(right)} AND {la} IS NULL"
            )
        else:
            head = ""
            parts = (
                f"SELECT {values(left)}, 1 AS n FROM {left.source} WHERE {domain(left)} UNION ALL"
                f" SELECT {values(right)}, -1 FROM {right.source} WHERE {domain(right)}"
            )
        group = ", ".join(f"t{i}, v{i}" for i in range(len(columns)))
        out = ", ".join(
            f"t{i}, CASE WHEN t{i} = 'text' THEN CAST(v{i} AS BLOB) ELSE v{i} END"
            for i in range(len(columns))
        )
        sql = f"{head}SELECT sum(n), {out} FROM ({parts}) GROUP BY {group} HAVING sum(n) <> 0"
        for row in self.conn.execute(sql):
            values_ = tuple(zip(row[1::2], row[2::2], strict=False))
            delta = -row[0]  # POST count minus PRE count
            if delta > 0:
                yield Raw("row", "insert", name, columns, (), None, values_, delta)
            else:
                yield Raw("row", "delete", name, columns, (), values_, None, delta)


_OPS = ("update", "delete", "insert")


def check_captured(path: Path) -> None:
    st = _lstat(path)
    if st is None or not stat.S_ISREG(st.st_mode):
        raise DatabaseError(
            f"{display(str(path))}: not a regular file (compare only what capture() produced)"
        )
    for suffix in ("-wal", "-journal"):
        if os.path.lexists(str(path) + suffix):
            raise DatabaseError(
                f"{display(str(path))}{suffix} exists: compare only what capture() produced"
            )


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


class _Pair:
    """One read-only connection: `left` as main, `right` attached as `post`."""

    def __init__(self, left: Path, right: Path):
        check_captured(left)
        check_captured(right)
        self.deadline = Deadline(TIMEOUT_SECONDS)
        self.conn = apsw.Connection(
            uri(left, immutable=True), flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
        )
        try:
            configure(self.conn, self.deadline, attached=1, check_cells=False)
            self.encoding = pragma_row(self.conn, "PRAGMA main.encoding")[0]
            other = apsw.Connection(
                uri(right, immutable=True), flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
            )
            try:
                configure(other, self.deadline, check_cells=False)
                self.right_encoding = pragma_row(other, "PRAGMA main.encoding")[0]
            finally:
                other.close()
            if self.encoding == self.right_encoding:
                self.conn.execute("ATTACH ? AS post", (uri(right, immutable=True),))
        except BaseException:
            self.conn.close()
            raise

    def changes(self) -> Iterator[Raw]:
        if self.encoding != self.right_encoding:
            yield Raw(
                "header",
                "changed",
                extra={"name": "encoding", "before": self.encoding, "after": self.right_encoding},
            )
            return
        yield from _Compare(self.conn).changes()

    def close(self) -> None:
        self.conn.close()


def stream(left: Path, right: Path, what: str) -> Iterator[tuple[Raw, str]]:
    """Every change from `left` to `right`, with the encoding to decode its text; DatabaseError on
    failure."""
    deadline = None
    try:
        pair = _Pair(left, right)
    except apsw.Error as exc:
        raise wrap(exc, Deadline(TIMEOUT_SECONDS), what) from None
    deadline = pair.deadline
    try:
        for raw in pair.changes():
            yield raw, pair.encoding
    except apsw.Error as exc:
        raise wrap(exc, deadline, what) from None
    finally:
        pair.close()


def diff(
    pre: Path, post: Path, *, db: str | None = None, limit: int = MAX_CHANGES
) -> list[DbChange]:
    """Every change from `pre` to `post` (captured files), at most `limit` then an `omitted`
    count."""
    name = db if db is not None else Path(post).stem
    out: list[DbChange] = []
    extra = 0
    for raw, encoding in stream(Path(pre), Path(post), f"comparing {display(name)}"):
        if len(out) < limit:
            out.append(raw.change(name, encoding))
        else:
            extra += 1
    if extra:
        out.append(DbChange(name, "omitted", "omitted", count=extra))
    return out
