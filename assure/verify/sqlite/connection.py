"""Connections to hostile databases: defensive, time-bounded, and their errors in words."""

from __future__ import annotations

import time
import urllib.parse
from pathlib import Path
from typing import Any

import apsw

from assure.core.changeset import harden
from assure.errors import AssureError
from assure.textsafe import display

TIMEOUT_SECONDS = 600.0  # wall time of one capture, diff or replay
PROGRESS_OPS = 10_000  # VM instructions between deadline checks


class DatabaseError(AssureError):
    """A database could not be captured or compared: corrupt, too large, hostile or too slow."""


class DatabaseTooLarge(DatabaseError):
    """The database with its WAL and journal is over the capture size limit."""


def pragma_row(conn: apsw.Connection, statement: str) -> tuple[Any, ...]:
    """The one row a PRAGMA statement returns (those read here always return one)."""
    row = conn.execute(statement).fetchone()
    if row is None:
        raise DatabaseError(f"{statement} returned no row")
    return tuple(row)


class Deadline:
    def __init__(self, seconds: float):
        self.until = time.monotonic() + seconds
        self.hit = False

    def __call__(self) -> bool:
        if time.monotonic() > self.until:
            self.hit = True
        return self.hit


def configure(
    conn: apsw.Connection, deadline: Deadline, *, attached: int = 0, check_cells: bool = True
) -> None:
    """Defensive, untrusted schema, no extensions, no memory-mapped I/O, deadline.

    `check_cells` (PRAGMA cell_size_check) is on wherever a file is opened that has not yet
    passed an integrity check with it on; the comparisons run on captured copies that have
    (private files, never shared with the agent) and leave it off: it costs them about 20%.
    """
    harden(conn)
    if (
        conn.config(apsw.SQLITE_DBCONFIG_DEFENSIVE, -1) != 1
        or conn.config(apsw.SQLITE_DBCONFIG_TRUSTED_SCHEMA, -1) != 0
    ):
        raise DatabaseError("SQLite refused defensive mode")
    conn.limit(apsw.SQLITE_LIMIT_ATTACHED, attached)
    conn.set_progress_handler(deadline, PROGRESS_OPS)
    conn.execute(
        f"PRAGMA cell_size_check = {'ON' if check_cells else 'OFF'}; PRAGMA mmap_size = 0; PRAGMA"
        " trusted_schema = OFF"
    ).fetchall()


def uri(path: Path, *, immutable: bool) -> str:
    query = "?mode=ro&immutable=1" if immutable else "?mode=rw"
    return "file:" + urllib.parse.quote(str(path)) + query


def wrap(exc: BaseException, deadline: Deadline, what: str) -> DatabaseError:
    if deadline.hit:
        return DatabaseError(f"{what}: took longer than {TIMEOUT_SECONDS:g} s and was stopped")
    text = str(exc) or type(exc).__name__
    return DatabaseError(f"{what}: {display(text)[:500]}")
