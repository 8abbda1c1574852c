"""What a database diff reports: values kept undecoded as (typeof, payload), `DbChange` (a
reported change, JSON-safe) and `Raw` (a change as the comparison finds it, cheap to count)."""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from assure.textsafe import display

MAX_CELL_BYTES = 1024  # a larger reported text/blob becomes {"omitted", "bytes", "sha256"}
MAX_SUBJECT_VALUE_CHARS = 48
MAX_SUBJECT_CHARS = 240
CODECS = {
    "UTF-8": ("utf-8", "surrogateescape"),
    "UTF-16le": ("utf-16-le", "surrogatepass"),
    "UTF-16be": ("utf-16-be", "surrogatepass"),
}


# ---------------------------------------------------------------- values
#
# A value is kept as (typeof, payload): payload is None, an int, a float, or the bytes of a
# text (in the database's encoding) or blob, so nothing is decoded before it is reported.

Value = tuple[str, Any]


def canon(value: Value) -> tuple[Any, ...]:
    """A hashable, bounded identity for a value (large payloads by length and hash)."""
    kind, payload = value
    if isinstance(payload, bytes) and len(payload) > 64:
        return (kind, len(payload), hashlib.sha256(payload).digest())
    return (kind, payload)


def _json_value(value: Value, encoding: str) -> Any:
    """JSON-safe: null, int, float, str, {"b64"}, {"real": "Infinity"}, or {"omitted", "bytes",
    "sha256"}."""
    kind, payload = value
    if kind == "integer" or kind == "null":
        return payload
    if kind == "real":
        return (
            payload
            if math.isfinite(payload)
            else {"real": "Infinity" if payload > 0 else "-Infinity"}
        )
    if len(payload) > MAX_CELL_BYTES:
        return {
            "omitted": kind,
            "bytes": len(payload),
            "sha256": hashlib.sha256(payload).hexdigest(),
        }
    if kind == "text":
        if encoding == "UTF-8":
            return payload.decode("utf-8", "surrogateescape")
        codec, errors = CODECS.get(encoding, CODECS["UTF-8"])
        return payload.decode(codec, errors)
    return {"b64": base64.b64encode(payload).decode("ascii")}


def _json_values(values: Iterable[Value], encoding: str) -> list[Any]:
    """`_json_value` of each, with the common cases inline (this runs for every reported row)."""
    out: list[Any] = []
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
        text = (
            value
            if len(value) <= MAX_SUBJECT_VALUE_CHARS
            else value[:MAX_SUBJECT_VALUE_CHARS] + "…"
        )
        return "'" + text.replace("'", "''") + "'"
    if "b64" in value:
        data = base64.b64decode(value["b64"])
        shown = data[: MAX_SUBJECT_VALUE_CHARS // 2].hex()
        return f"X'{shown}{'…' if len(data) > MAX_SUBJECT_VALUE_CHARS // 2 else ''}'"
    if "real" in value:
        return str(value["real"])  # "Infinity" or "-Infinity"
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
            values = (
                self.key
                if self.key is not None
                else (self.before if self.before is not None else self.after) or {}
            )
            inner = ", ".join(f"{col}={_literal(v)}" for col, v in values.items())
            text = f"{prefix}:{self.table}[{inner}]"
        if len(text) > MAX_SUBJECT_CHARS:
            text = text[: MAX_SUBJECT_CHARS - 1] + "…"
        return display(text)

    def describe(self) -> str:
        if self.kind == "row":
            if self.op == "update":
                return f"row updated ({', '.join(self.columns)})"
            return f"row {'inserted' if self.op == 'insert' else 'deleted'}" + (
                f" x{self.count}" if self.count != 1 else ""
            )
        if self.kind == "schema":
            return f"{self.object_type} {self.op}"
        if self.kind == "omitted":
            return f"{self.count} more changes (not listed)"
        return f"{self.name or self.kind} changed from {self.before!r} to {self.after!r}"

    def to_json(self) -> dict[str, Any]:
        return {
            "db": self.db,
            "kind": self.kind,
            "op": self.op,
            "table": self.table,
            "key": self.key,
            "before": self.before,
            "after": self.after,
            "count": self.count,
            "columns": list(self.columns),
            "object_type": self.object_type,
            "name": self.name,
        }


@dataclass(slots=True)
class Raw:
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
            assert values is not None  # a row change has a side at least
            return [("values", self.table, tuple(canon(v) for v in values))]
        out = []
        for side in (self.before, self.after):
            if side is not None:
                key = tuple(canon(side[self.columns.index(c)]) for c in self.key_columns)
                if ("key", self.table, key) not in out:
                    out.append(("key", self.table, key))
        return out

    def change(self, db: str, encoding: str) -> DbChange:
        if self.kind != "row":
            extra = self.extra or {}
            return DbChange(
                db,
                self.kind,
                self.op,
                table=extra.get("table"),
                before=extra.get("before"),
                after=extra.get("after"),
                object_type=extra.get("object_type"),
                name=extra.get("name"),
            )

        columns = self.columns
        before = (
            None
            if self.before is None
            else dict(zip(columns, _json_values(self.before, encoding), strict=False))
        )
        after = (
            None
            if self.after is None
            else dict(zip(columns, _json_values(self.after, encoding), strict=False))
        )
        if not self.key_columns:
            return DbChange(
                db,
                "row",
                self.op,
                table=self.table,
                before=before,
                after=after,
                count=abs(self.delta),
            )
        side = before if before is not None else after
        assert side is not None  # a row change has a side at least
        key = {c: side[c] for c in self.key_columns}
        changed: tuple[str, ...] = ()
        if self.before is not None and self.after is not None:
            # (typeof, payload) pairs: equal exactly when the storage class and the value are
            changed = tuple(
                c for c, b, a in zip(columns, self.before, self.after, strict=False) if b != a
            )
        return DbChange(
            db,
            "row",
            self.op,
            table=self.table,
            key=key,
            before=before,
            after=after,
            columns=changed,
        )
