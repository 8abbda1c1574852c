"""SQLite databases in the verifier: capture a hostile database, diff two states, attribute rows.

One module a step: capturing.py, comparison.py, attribution.py (with changesets.py, the
changeset decoder); changes.py holds what is reported, connection.py and tables.py what
they share. This package exposes the steps by name.

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
integrity check), time-bounded by a progress handler, and limited in size (capture's `max_bytes`);
whatever cannot be checked raises `DatabaseError`, which `error_finding` turns into a
finding that is never a pass (`attribute` does that itself).
"""

from assure.verify.sqlite.attribution import attribute, db_effects, error_finding
from assure.verify.sqlite.capturing import capture
from assure.verify.sqlite.changes import DbChange
from assure.verify.sqlite.changesets import parse_changeset
from assure.verify.sqlite.comparison import diff
from assure.verify.sqlite.connection import DatabaseError, DatabaseTooLarge

__all__ = [
    "DatabaseError",
    "DatabaseTooLarge",
    "DbChange",
    "attribute",
    "capture",
    "db_effects",
    "diff",
    "error_finding",
    "parse_changeset",
]
