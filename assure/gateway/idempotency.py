"""The idempotency store: one effect per key, across attempts and restarts.

A SQLite file in the run's gateway state (it outlives attempts and driver restarts; the
agent has no path to it). `claim()` marks a key pending before the effect; `complete()`
stores the answer after it. A second call with a done key gets the original answer and
causes no effect; a key left pending by a crash is "in doubt" and refused, never re-run.
Each key is bound to the call that first used it (`binding`: the digest of its tool and
canonical arguments), so the dispatcher can refuse a key reused for another call. Keys
are stored as the caller gives them to `claim` (the dispatcher passes a digest).

A store written before keys were bound (a run resumed across that change) is migrated
when opened: its rows get the binding LEGACY (the call they were used for is unknown), and
its caller keys, stored then as `key:<the key>`, become `key:<sha256 of the key>` as they
are looked up now, so a key used before the change still finds its row.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from assure.core.chain import canonical, sha256_hex

SCHEMA = """
CREATE TABLE IF NOT EXISTS keys (
    key TEXT PRIMARY KEY,
    state TEXT NOT NULL CHECK (state IN ('pending', 'done')),
    action_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    status INTEGER,
    answer TEXT,
    binding TEXT NOT NULL,
    created_at REAL NOT NULL
)
"""
LEGACY = ""  # the binding of a row written before keys were bound: unknown


@dataclass(frozen=True)
class Prior:
    """What the store already holds for a key."""

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
        self._db.execute(SCHEMA)
        if "binding" not in {row[1] for row in self._db.execute("PRAGMA table_info(keys)")}:
            self._migrate()

    def _migrate(self) -> None:
        """Bring a store from before bindings up to date (module docstring), in one transaction."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute("ALTER TABLE keys ADD COLUMN binding TEXT NOT NULL DEFAULT ''")
            for (key,) in self._db.execute("SELECT key FROM keys WHERE key LIKE 'key:%'").fetchall():
                new = "key:" + sha256_hex(key[len("key:") :].encode("utf-8", "surrogatepass"))
                self._db.execute("UPDATE keys SET key = ? WHERE key = ?", (new, key))
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def claim(self, key: str, binding: str, *, action_id: str, attempt: int) -> Prior | None:
        """Record `key` as pending for the call `binding` and return None, or return what is already there."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            row = self._db.execute("SELECT state, action_id, attempt, status, answer, binding FROM keys WHERE key = ?", (key,)).fetchone()
            if row is None:
                self._db.execute(  # by name: a migrated store has `binding` as its last column
                    "INSERT INTO keys (key, state, action_id, attempt, binding, created_at) VALUES (?, 'pending', ?, ?, ?, ?)",
                    (key, action_id, attempt, binding, time.time()),
                )
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        if row is None:
            return None
        state, prior_action, prior_attempt, status, answer, prior_binding = row
        return Prior(state, prior_action, prior_attempt, status, json.loads(answer) if answer else None, prior_binding)

    def complete(self, key: str, status: int, answer: dict[str, Any]) -> None:
        self._db.execute("UPDATE keys SET state = 'done', status = ?, answer = ? WHERE key = ?", (status, json.dumps(answer, sort_keys=True), key))

    def release(self, key: str) -> None:
        """Forget a pending key whose call had no effect (denied or failed before acting)."""
        self._db.execute("DELETE FROM keys WHERE key = ? AND state = 'pending'", (key,))

    def close(self) -> None:
        self._db.close()
