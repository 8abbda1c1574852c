"""The ordinary tables of a database as the comparison and the replay read them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

import apsw


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[str, ...]  # compared (non-generated) columns
    key: tuple[str, ...]  # declared PRIMARY KEY columns in key order; () if none
    # the key is an INTEGER PRIMARY KEY: the rowid itself, never NULL, always an integer
    rowid_alias: bool
    # a name that reaches the true rowid (not shadowed by a column); None: WITHOUT ROWID or all
    # shadowed
    rowid: str | None
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


def read_tables(conn: apsw.Connection, schema: str) -> dict[str, Table]:
    """The ordinary tables of `schema` (shadow tables of virtual tables included; virtual tables
    themselves are not read: their content is in their shadow tables)."""
    out: dict[str, Table] = {}
    rows = conn.execute(
        "SELECT name, wr FROM pragma_table_list WHERE schema = ? AND type IN ('table', 'shadow') "
        "AND name NOT IN ('sqlite_schema', 'sqlite_temp_schema')",
        (schema,),
    ).fetchall()
    listed = cast("list[tuple[str, int]]", rows)  # the pragma's columns: name, wr
    for name, wr in listed:
        xinfo = cast(
            "list[tuple[str, int, int, str | None]]",  # its columns: name, pk, hidden, type
            conn.execute(
                f"SELECT name, pk, hidden, type FROM pragma_table_xinfo(?, '{schema}')", (name,)
            ).fetchall(),
        )
        names = {str(col).lower() for col, _pk, _h, _t in xinfo}
        columns = tuple(col for col, _pk, hidden, _t in xinfo if hidden == 0)
        affinities = {
            col: _affinity(str(declared or ""))
            for col, _pk, hidden, declared in xinfo
            if hidden == 0
        }
        key = tuple(
            col for col, _pk, _h, _t in sorted((r for r in xinfo if r[1] > 0), key=lambda r: r[1])
        )
        without_rowid = bool(wr)
        # an INTEGER PRIMARY KEY is the rowid itself; any other key has an index of origin 'pk'
        alias = (
            bool(key)
            and not without_rowid
            and not conn.execute(
                f"SELECT 1 FROM pragma_index_list(?, '{schema}') WHERE origin = 'pk'", (name,)
            ).fetchone()
        )
        collations = {
            col: str(conn.column_metadata(schema, name, col)[1] or "BINARY").upper()
            for col in columns
        }
        rowid = (
            None
            if without_rowid
            else next((n for n in ("rowid", "_rowid_", "oid") if n not in names), None)
        )
        out[name] = Table(name, columns, key, alias, rowid, collations, affinities)
    return out


def value_sql(expr: str) -> str:
    """typeof and payload of one column; text read as its bytes so nothing is decoded in SQLite."""
    return (
        f"typeof({expr}), CASE WHEN typeof({expr}) = 'text' THEN CAST({expr} AS BLOB) ELSE"
        f" {expr} END"
    )
