"""SQLite hardening and changeset replay, shared by the gateway's databases and the verifier.

One list of connection options makes every connection to an agent-touched database
defensive (the gateway's own, and the verifier's copies), and one function applies a
journaled changeset, so the verifier's EXPECTED state is built exactly the way the
gateway's change would land. Needs apsw (pinned in images/gateway/requirements.txt); the
rest of core is standard library only.
"""

from __future__ import annotations

import apsw

DEFENSIVE_DBCONFIG = (  # every connection: the gateway's, and the verifier's copies
    ("SQLITE_DBCONFIG_DEFENSIVE", 1),
    ("SQLITE_DBCONFIG_TRUSTED_SCHEMA", 0),
    ("SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION", 0),
    ("SQLITE_DBCONFIG_ENABLE_FTS3_TOKENIZER", 0),
    ("SQLITE_DBCONFIG_WRITABLE_SCHEMA", 0),
    ("SQLITE_DBCONFIG_ENABLE_ATTACH_CREATE", 0),
    ("SQLITE_DBCONFIG_ENABLE_ATTACH_WRITE", 0),
)


def harden(conn: apsw.Connection) -> None:
    """Apply DEFENSIVE_DBCONFIG (the options this SQLite knows)."""
    for option, value in DEFENSIVE_DBCONFIG:
        if hasattr(apsw, option):
            conn.config(getattr(apsw, option), value)


def replay(conn: apsw.Connection, changeset: bytes) -> None:
    """Apply a journaled changeset so the target ends exactly where the gateway's file did.

    The changeset already holds what triggers and foreign-key actions did, so triggers are
    switched off and FK actions treated as NO ACTION while it applies (else they would
    fire twice). Any conflict aborts the whole apply: nothing is changed. Not used by the
    gateway itself; for the verifier, tests and audits (call outside a transaction).
    """
    triggers = conn.config(apsw.SQLITE_DBCONFIG_ENABLE_TRIGGER, -1)
    conn.config(apsw.SQLITE_DBCONFIG_ENABLE_TRIGGER, 0)
    try:
        apsw.Changeset.apply(changeset, conn, flags=apsw.SQLITE_CHANGESETAPPLY_FKNOACTION)
    finally:
        conn.config(apsw.SQLITE_DBCONFIG_ENABLE_TRIGGER, triggers)
