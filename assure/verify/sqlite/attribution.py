"""`attribute`: replay the journaled changesets onto PRE and explain every change to POST
(see the package docstring)."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, cast

import apsw

from assure.core.changeset import replay
from assure.core.effects import Op
from assure.textsafe import display
from assure.verify.findings import Finding, Kind
from assure.verify.sqlite.changes import CODECS, DbChange, Raw, Value, canon
from assure.verify.sqlite.changesets import Touch, parse_changeset
from assure.verify.sqlite.comparison import MAX_CHANGES, check_captured, stream
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


def db_effects(journal: Iterable[Mapping[str, Any]], db: str) -> list[dict[str, Any]]:
    """The allowed `sql` effects on database `db`, in journal order, each with its `action_id`."""
    out = []
    for record in journal:
        effect = record.get("effect")
        if (
            record.get("event") != "tool_call"
            or record.get("decision") != "allow"
            or not isinstance(effect, dict)
        ):
            continue
        if effect.get("op") == Op.SQL and effect.get("db") == db:
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
    return Finding(
        kind,
        f"db:{db}",
        f"{label} cannot be verified: {exc.message}",
        None,
        {"side": side, "error": type(exc).__name__},
    )


class _Replay:
    """EXPECTED: a copy of PRE with the journaled changesets applied, remembering who touched
    what."""

    def __init__(self, path: Path, db: str):
        self.path, self.db = path, db
        self.keys: dict[
            tuple[Any, ...], tuple[int, str]
        ] = {}  # ("key"|"values", table, canon) -> (index, action)
        self.tables: dict[
            str, tuple[int, str]
        ] = {}  # table -> last action inserting into it (sqlite_sequence)
        self.failure: Finding | None = None

    def run(self, effects: list[dict[str, Any]]) -> None:
        deadline = Deadline(TIMEOUT_SECONDS)
        conn = apsw.Connection(
            uri(self.path, immutable=False), flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_URI
        )
        try:
            configure(conn, deadline)
            tables = read_tables(conn, "main")
            encoding = pragma_row(conn, "PRAGMA encoding")[0]
            for index, effect in enumerate(effects):
                action = str(effect.get("action_id"))
                changeset = self._changeset(effect, action)
                if changeset is None:
                    return
                try:
                    touches = parse_changeset(changeset)
                except ValueError as exc:
                    self.failure = Finding(
                        Kind.HARNESS_ERROR,
                        f"db:{self.db}",
                        f"the changeset journaled by action {display(action)} is malformed ({exc});"
                        " changes from it on are not explained",
                        None,
                        {"action_id": action},
                    )
                    return
                counters = self._counters(effect, action)
                if counters is False:
                    return
                try:
                    before = self._rowid_rows(conn, tables, touches)
                    kept = self._read_counters(conn) if counters is None else None
                    replay(conn, changeset)
                    after = self._rowid_rows(conn, tables, touches)
                    if counters is not None:
                        self._set_counters(conn, counters, (index, action))
                    elif kept is not None:
                        self._keep_counters(conn, kept)
                except apsw.Error as exc:
                    why = "it ran too long" if deadline.hit else display(str(exc))[:300]
                    self.failure = Finding(
                        Kind.UNATTRIBUTED,
                        f"db:{self.db}",
                        f"the change journaled by action {display(action)} does not apply to the"
                        f" database as the journal says it was ({why}): something else changed it"
                        " first; changes from this action on are not explained",
                        None,
                        {"action_id": action, "effect_index": index},
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
            self.failure = Finding(
                Kind.HARNESS_ERROR,
                f"db:{self.db}",
                f"the changeset journaled by action {display(action)} is unreadable or does not"
                " match its sha256; changes from it on are not explained",
                None,
                {"action_id": action},
            )
            return None
        return data

    def _counters(
        self, effect: dict[str, Any], action: str
    ) -> list[tuple[str, int]] | None | Literal[False]:
        """The sqlite_sequence the gateway saw after this action, if it journaled one (it does
        when the statement moved a counter; no changeset holds that table). False if malformed."""
        if "sequence" not in effect:
            return None
        rows = effect["sequence"]
        if isinstance(rows, list) and all(
            isinstance(r, list) and len(r) == 2 and isinstance(r[0], str) and type(r[1]) is int
            for r in rows
        ):
            return [(name, seq) for name, seq in rows]
        self.failure = Finding(
            Kind.HARNESS_ERROR,
            f"db:{self.db}",
            f"the AUTOINCREMENT counters journaled by action {display(action)} are malformed;"
            " changes from it on are not explained",
            None,
            {"action_id": action},
        )
        return False

    def _set_counters(
        self, conn: apsw.Connection, counters: list[tuple[str, int]], stamp: tuple[int, str]
    ) -> None:
        """Make EXPECTED's sqlite_sequence what the gateway saw, and credit every counter that
        moved."""
        rows = conn.execute("SELECT name, seq FROM main.sqlite_sequence").fetchall()
        before = set(cast("list[tuple[str, int]]", rows))  # its columns: name, seq
        with conn:
            conn.execute("DELETE FROM main.sqlite_sequence")
            conn.executemany("INSERT INTO main.sqlite_sequence(name, seq) VALUES (?, ?)", counters)
        for name, _ in set(counters) ^ before:
            self.tables[name] = stamp

    @staticmethod
    def _read_counters(conn: apsw.Connection) -> list[tuple[Any, ...]] | None:
        if (
            conn.execute(
                "SELECT 1 FROM main.sqlite_schema WHERE name = 'sqlite_sequence'"
            ).fetchone()
            is None
        ):
            return None
        return conn.execute(
            "SELECT rowid, name, seq FROM main.sqlite_sequence ORDER BY rowid"
        ).fetchall()

    def _keep_counters(self, conn: apsw.Connection, kept: list[tuple[Any, ...]]) -> None:
        """Undo what replaying moved in sqlite_sequence for an action that journaled no counters:
        the statement moved none (an UPDATE to a higher AUTOINCREMENT key leaves the counter, but
        its changeset replays as an INSERT, which would move it), or too many to journal (then
        any move is the verifier's to report, as the gateway's `_sequence` says)."""
        if self._read_counters(conn) != kept:
            with conn:
                conn.execute("DELETE FROM main.sqlite_sequence")
                conn.executemany(
                    "INSERT INTO main.sqlite_sequence(rowid, name, seq) VALUES (?, ?, ?)", kept
                )

    @staticmethod
    def _rowid_rows(
        conn: apsw.Connection, tables: dict[str, Table], touches: list[Touch]
    ) -> dict[tuple[str, int], tuple[Value, ...]]:
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
                # every column shadows the rowid: such rows are attributed to the journal as a whole
                continue
            sql = (
                f"SELECT {rowid}, {', '.join(value_sql(quote(c)) for c in cols)} FROM"
                f" main.{quote(name)} WHERE {rowid} IN (SELECT value FROM json_each(?))"
            )
            ids = sorted(rowids)
            for start in range(0, len(ids), 10_000):
                for row in conn.execute(
                    sql, ("[" + ",".join(map(str, ids[start : start + 10_000])) + "]",)
                ):
                    out[(name, row[0])] = tuple(zip(row[1::2], row[2::2], strict=False))
        return out

    def _remember(
        self,
        index: int,
        action: str,
        tables: dict[str, Table],
        touches: list[Touch],
        before: dict[tuple[str, int], tuple[Value, ...]],
        after: dict[tuple[str, int], tuple[Value, ...]],
        encoding: str,
    ) -> None:
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
                    values = rows.get((t.table, rowid)) if rowid is not None else None
                    if values is not None:
                        self.keys[("values", t.table, tuple(canon(v) for v in values))] = stamp
                continue
            positions = sorted((p, i) for i, p in enumerate(t.pk) if p)
            for record in (t.old, t.new):
                if record is None:
                    continue
                cells = [record[i] for _p, i in positions]
                key = [v for v in cells if v is not None]
                if len(key) != len(cells):  # a key column undefined: no row to name
                    continue
                if (
                    encoding != "UTF-8"
                ):  # a changeset holds text as UTF-8; the database in its own encoding
                    codec, errors = CODECS.get(encoding, CODECS["UTF-8"])
                    key = [
                        (
                            (k, p.decode("utf-8", "surrogateescape").encode(codec, errors))
                            if k == "text"
                            else (k, p)
                        )
                        for k, p in key
                    ]
                self.keys[("key", t.table, tuple(canon(v) for v in key))] = stamp

    def who(self, raw: Raw) -> str | None:
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
    effects = [e for e in effects if e.get("op") == Op.SQL and e.get("db") == db]
    findings: list[Finding] = []
    with tempfile.TemporaryDirectory(prefix="assure-expected-") as tmp:
        expected = Path(tmp) / "expected.sqlite"
        try:
            check_captured(Path(pre))
            shutil.copyfile(pre, expected, follow_symlinks=False)
        except (DatabaseError, OSError) as exc:
            return [
                error_finding(
                    db,
                    exc if isinstance(exc, DatabaseError) else DatabaseError(str(exc)),
                    side="pre",
                )
            ]
        replayed = _Replay(expected, db)
        try:
            replayed.run(effects)
        except apsw.Error as exc:
            return [error_finding(db, wrap(exc, Deadline(0), "replaying the journal"), side="pre")]
        if replayed.failure is not None:
            findings.append(replayed.failure)
        try:
            findings += _judge_rows(db, Path(pre), expected, Path(post), replayed)
        except DatabaseError as exc:
            findings.append(error_finding(db, exc, side="post"))
    return findings


def _unexplained(raw: Raw, change: DbChange, who: str | None) -> str:
    """Why a difference between EXPECTED (PRE + journal) and POST is flagged, in words."""
    if raw.kind == "schema":
        return (
            f"{change.describe()}: db.execute cannot change the schema, so no journaled action"
            " explains it"
        )
    if raw.kind != "row":
        return f"{change.describe()}: no journaled action can change it"
    if not raw.key_columns:
        n = abs(raw.delta)
        what = (
            f"{n} {'more' if raw.delta > 0 else 'fewer'} cop{'y' if n == 1 else 'ies'} of this row"
            " than the journal explains"
        )
    else:
        what = {
            "insert": "a row the journal does not explain",
            "delete": "a row gone that the journal does not explain",
            "update": (
                f"a row whose {', '.join(change.columns)} differ from what the journal explains"
            ),
        }[raw.op]
    if who is not None:
        return (
            f"{what}; action {display(who)} wrote this row through the gateway, but the database"
            " does not hold what its changeset left"
        )
    return f"{what}; no allowed journaled action touched it"


def _judge_rows(db: str, pre: Path, expected: Path, post: Path, replayed: _Replay) -> list[Finding]:
    findings: list[Finding] = []
    unexplained: dict[
        tuple[Any, ...], int
    ] = {}  # identity -> multiset delta (or 0 for keyed/other)
    complete = True
    extra = 0
    for raw, encoding in stream(expected, post, f"comparing {display(db)} with its journal"):
        if len(findings) >= MAX_CHANGES:
            extra += 1
            complete = False
            continue
        change = raw.change(db, encoding)
        who = replayed.who(raw)
        for identity in raw.keys():
            unexplained[identity] = unexplained.get(identity, 0) + (
                raw.delta if raw.kind == "row" and not raw.key_columns else 0
            )
        findings.append(
            Finding(
                Kind.UNATTRIBUTED,
                change.subject,
                _unexplained(raw, change, who),
                None,
                {"change": change.to_json(), "journaled_by": who},
            )
        )
    if extra:
        findings.append(
            Finding(
                Kind.UNATTRIBUTED,
                f"db:{db}",
                f"{extra} more unexplained changes (not listed)",
                None,
                {"count": extra},
            )
        )
    attributed = 0
    more = 0
    not_checked = 0
    for raw, encoding in stream(pre, post, f"comparing {display(db)}"):
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
        findings.append(
            Finding(
                Kind.ATTRIBUTED,
                change.subject,
                f"{change.describe()} through the gateway",
                attribution,
                {"change": change.to_json()},
            )
        )
    if more:
        findings.append(
            Finding(
                Kind.ATTRIBUTED,
                f"db:{db}",
                f"{more} more changes explained by the journal (not listed)",
                "gateway:journal",
                {"count": more},
            )
        )
    if not_checked:
        findings.append(
            Finding(
                Kind.NOT_CHECKED,
                f"db:{db}",
                f"{not_checked} changes were not attributed: too many unexplained changes to tell"
                " them apart",
                None,
                {"count": not_checked},
            )
        )
    return findings
