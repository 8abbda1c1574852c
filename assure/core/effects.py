"""The kinds of effect a tool call journals (`effect.op`): the gateway writes them, attribution
and promotion read them, so both sides name them from this one enum."""

from __future__ import annotations

from enum import StrEnum


class Op(StrEnum):
    WRITE = "write"  # a workspace file written: path, sha256, size, mode
    DELETE = "delete"  # a workspace file or symlink removed: path
    SQL = "sql"  # one statement on a named database: db, mode, changes (a changeset)
    HTTP = "http"  # an external request through the egress proxy: method, url, scope, status
