"""The errors a tool call can end in, and the HTTP status of each code.

Their own module so that the tool registry and the handlers it calls (db.py, http.py)
share them without importing each other.
"""

from __future__ import annotations

# HTTP status for each error code a handler can produce.
STATUS = {
    "bad_args": 400,
    "bad_path": 400,
    "path_escapes": 403,
    "permission_denied": 403,
    "not_found": 404,
    "sql_error": 400,
    "read_only": 403,
    "sql_denied": 403,
    "is_a_directory": 409,
    "not_a_directory": 409,
    "not_a_regular_file": 409,
    "too_large": 413,
    "io_error": 500,
    "no_space": 507,
    "db_busy": 503,
    "timeout": 504,
    "no_egress": 403,
    "egress_denied": 403,
    "upstream_error": 502,
    "upstream_timeout": 504,
}


class ArgError(Exception):
    """The body does not fit the tool's parameters; refused before the gate (HTTP 400)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class ToolError(Exception):
    """An allowed call that could not be carried out; `status` is its HTTP status."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = STATUS[code]
