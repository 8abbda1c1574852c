"""The idempotency store: one effect per call and key, and no channel between attempts.

A SQLite file in the run's gateway state (it outlives attempts and driver restarts; the
agent has no path to it). `claim()` marks a call pending before its effect; `complete()`
stores the answer after it. A second call finds the first and causes no effect: a done call
gets the original answer; one left pending by a crash is "in doubt" and refused, never re-run.
Each row is a `Call`: the key (the dispatcher passes a digest), the call it is bound to
(`binding`: the digest of its tool and canonical arguments) and the attempt that made it.

What a later attempt can learn from the store is bounded to what duplicate-effect safety
needs (issue 21):
- a sandbox call (`shared=False`: the attempt's own workspace and databases, thrown away with
  it) belongs to its attempt alone; a later attempt never sees its key, used or not;
- a live call (`shared=True`: an effect on the world, which must not repeat after a retry or a
  kill -9) answers later attempts for the identical call only, with the original answer. The
  same key with other arguments is, in a later attempt, a fresh key: nothing tells it from a
  key never used. Within one attempt a key is bound to its first call, whether that call was
  fresh or answered from an earlier attempt, and refused for any other (409): the caller sees
  its own doing, the same way whatever came before. What is left: a later attempt that
  repeats an earlier attempt's live call exactly learns that it was made (its answer is the
  original; an interrupted one is in doubt), which the world it changed holds anyway.

A store written by an older gateway (a run resumed across the change) is migrated when
opened: before keys were bound, rows get the binding LEGACY (the call is unknown) and caller
keys `key:<the key>` become `key:<sha256 of the key>`; before calls were scoped, rows are kept
as live ones (`shared`), the side that never repeats an effect.
"""

from __future__ import annotations

import json
import sqlite3
import time

from assure.core.chain import canonical, sha256_hex
from assure.core.record import dataclass

TYPE_CHECKING = False  # typing.TYPE_CHECKING; the gateway boots without typing (core/__init__)
if TYPE_CHECKING:
    from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key TEXT NOT NULL,
    binding TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    shared INTEGER NOT NULL CHECK (shared IN (0, 1)),
    state TEXT NOT NULL CHECK (state IN ('pending', 'done')),
    action_id TEXT NOT NULL,
    status INTEGER,
    answer TEXT,
    created_at REAL NOT NULL,
    PRIMARY KEY (key, binding, attempt)
)
"""
LEGACY = ""  # the binding of a row written before keys were bound: unknown
_COLUMNS = "state, action_id, attempt, status, answer, binding"


@dataclass(frozen=True)
class Call:
    """One call as the store knows it."""

    key: str
    binding: str
    attempt: int
    shared: bool  # a live effect: its row answers later attempts' identical calls


@dataclass(frozen=True)
class Prior:
    """What the store already holds for a call's key."""

    state: str
    action_id: str
    attempt: int
    status: int | None
    answer: dict[str, Any] | None
    binding: str


def derive_key(goal_id: str, tool: str, args: dict[str, Any]) -> str:
    """hash(goal id, tool, normalized arguments): the standard's default key."""
    return "derived:" + sha256_hex(canonical({"goal": goal_id, "tool": tool, "args": args}))


class Store:
    def __init__(self, path: str):
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._transaction(self._migrate)

    def _transaction(self, work: Any) -> Any:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            result = work()
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        return result

    def _migrate(self) -> None:
        """Bring a store of an older gateway up to date (module docstring)."""
        old = {row[1] for row in self._db.execute("PRAGMA table_info(keys)")}
        self._db.execute(SCHEMA)
        if not old:
            return
        if "binding" not in old:
            self._db.execute("ALTER TABLE keys ADD COLUMN binding TEXT NOT NULL DEFAULT ''")
            for (key,) in self._db.execute(
                "SELECT key FROM keys WHERE key LIKE 'key:%'"
            ).fetchall():
                new = "key:" + sha256_hex(key[len("key:") :].encode("utf-8", "surrogatepass"))
                self._db.execute("UPDATE keys SET key = ? WHERE key = ?", (new, key))
        self._db.execute(
            "INSERT INTO calls SELECT key, binding, attempt, 1, state, action_id, status, answer,"
            " created_at FROM keys"
        )
        self._db.execute("DROP TABLE keys")

    def claim(self, call: Call, *, action_id: str) -> Prior | None:
        """Record `call` as pending and return None, or return what already answers for its key:
        this attempt's use of it (the same call, or another), else for a live call an earlier
        attempt's identical one (or a LEGACY row), which then binds the key in this attempt too,
        as a fresh call would: what a later call with the key gets never depends on the past."""

        def work() -> tuple[Any, ...] | None:
            mine: tuple[Any, ...] | None = self._db.execute(
                f"SELECT {_COLUMNS} FROM calls WHERE key = ? AND attempt = ? ORDER BY binding = ?"
                " DESC LIMIT 1",
                (call.key, call.attempt, call.binding),
            ).fetchone()
            if mine is not None:
                return mine
            earlier: tuple[Any, ...] | None = None
            if call.shared:
                earlier = self._db.execute(
                    f"SELECT rowid, {_COLUMNS} FROM calls WHERE key = ? AND binding IN (?, ?) AND"
                    " shared = 1 ORDER BY binding = ? DESC LIMIT 1",
                    (call.key, call.binding, LEGACY, call.binding),
                ).fetchone()
            if earlier is None:
                self._db.execute(
                    "INSERT INTO calls (key, binding, attempt, shared, state, action_id,"
                    " created_at) VALUES (?, ?, ?, ?, 'pending', ?, ?)",
                    (
                        call.key,
                        call.binding,
                        call.attempt,
                        int(call.shared),
                        action_id,
                        time.time(),
                    ),
                )
                return None
            self._db.execute(  # the earlier row, as this attempt's: the key is now bound here too
                "INSERT INTO calls (key, binding, attempt, shared, state, action_id, status,"
                " answer, created_at) SELECT key, binding, ?, shared, state, action_id, status,"
                " answer, ? FROM calls WHERE rowid = ?",
                (call.attempt, time.time(), earlier[0]),
            )
            return earlier[1:]

        row = self._transaction(work)
        if row is None:
            return None
        state, prior_action, prior_attempt, status, answer, binding = row
        return Prior(
            state,
            prior_action,
            prior_attempt,
            status,
            json.loads(answer) if answer else None,
            binding,
        )

    def complete(self, call: Call, status: int, answer: dict[str, Any]) -> None:
        self._db.execute(
            "UPDATE calls SET state = 'done', status = ?, answer = ? WHERE key = ? AND binding = ?"
            " AND attempt = ?",
            (status, json.dumps(answer, sort_keys=True), call.key, call.binding, call.attempt),
        )

    def release(self, call: Call) -> None:
        """Forget a pending call that had no effect (denied or failed before acting)."""
        self._db.execute(
            "DELETE FROM calls WHERE key = ? AND binding = ? AND attempt = ? AND state = 'pending'",
            (call.key, call.binding, call.attempt),
        )

    def close(self) -> None:
        self._db.close()
