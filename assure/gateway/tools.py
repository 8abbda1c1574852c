"""The one registry of tools: names, parameters, whether they mutate, and what they do.

The router, the gate's `known_tools` and the docs all read `TOOLS`, so a tool exists in
exactly one place. Handlers only run after the gate allowed the call; they return the
answer's `result` plus the fields the journal records about the effect.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Mapping

from assure.core.effects import Op
from assure.core.record import dataclass, field
from assure.gateway.errors import ArgError, ToolError
from assure.gateway.fspath import PathError, Workspace, normalize

TYPE_CHECKING = False  # typing.TYPE_CHECKING; the gateway boots without typing (core/__init__)
if TYPE_CHECKING:  # db.py needs apsw; only a gateway with databases imports it
    from typing import Any

    from assure.gateway.db import Databases
    from assure.gateway.egress import Egress

MAX_REPORT_STATUS = 64
MAX_REPORT_SUMMARY = 8192
DEFAULT_MODE = 0o644
# What the journal keeps of a sandbox operation's command (the Inspect sandbox, assure/inspect/):
# each string up to MAX_SHOWN_CHARS (a longer one by its digest), at most MAX_SHOWN_ITEMS of them.
MAX_SHOWN_CHARS = 256
MAX_SHOWN_ITEMS = 64
EXEC_SCOPE = "sandbox:exec"  # a command, or a file outside the workspace: the contract must name it
EXEC_RESULT = "sandbox.exec_result"  # a sandbox.exec's outcome: dispatch.py journals it, ungated

# Optional fields every tool accepts; the gate and the idempotency store read them, the journal
# records them (a long value by its digest: dispatch.py).
META_PARAMS: Mapping[str, tuple[type, bool]] = {
    "idempotency_key": (str, False),
    "reversible": (bool, False),
    "rollback_ref": (str, False),
    "human_gate": (str, False),
}


@dataclass(frozen=True)
class Env:
    """What handlers may touch."""

    workspace: Workspace
    max_file_bytes: int
    databases: Databases | None = None
    egress: Egress | None = None  # http.request: proxy + allowlist; None = no network


@dataclass(frozen=True)
class Outcome:
    """A handler's answer `result` and the extra journal fields (`effect`, `claim`)."""

    result: dict[str, Any]
    record: dict[str, Any] = field(default_factory=dict)


if TYPE_CHECKING:
    Handler = Callable[[Env, dict[str, Any]], Outcome]


@dataclass(frozen=True)
class Tool:
    """A tool the gateway serves: its name, whether it mutates, and its handler."""

    name: str
    mutates: bool
    params: Mapping[str, tuple[type, bool]]  # name -> (type, required)
    handler: Handler
    summary: str
    # (scope, resource_mode) of a call, e.g. ("db:shop", "live"); None: fs:<path>, sandbox.
    scope: Callable[[Env, dict[str, Any]], tuple[str, str]] | None = None
    # Per-call override of `mutates` (http.request: GET is safe, POST is an external effect).
    mutates_when: Callable[[dict[str, Any]], bool] | None = None
    # The arguments that name workspace paths: the gate checks every one (protected, scope).
    paths: tuple[str, ...] = ()
    # In the tool list agents read (/v1/health), which they offer their model: not the Inspect
    # shim's sandbox.* tools, which the harness calls for Inspect's own solver.
    listed: bool = True

    def __post_init__(self) -> None:
        undeclared = [p for p in self.paths if p not in self.params]
        if undeclared:
            raise ValueError(f"{self.name}: path arguments {undeclared} are not parameters")

    def mutating(self, args: dict[str, Any]) -> bool:
        """Whether this call mutates: the per-call override if the tool has one, else `mutates`."""
        return self.mutates if self.mutates_when is None else bool(self.mutates_when(args))


def parse(tool: Tool, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a request body into (tool args, meta fields), checking names and types."""
    for key in body:
        if key not in tool.params and key not in META_PARAMS:
            known = ", ".join([*tool.params, *META_PARAMS])
            raise ArgError(
                "unknown_field", f"unknown field {key[:64]!r} for {tool.name} (known: {known})"
            )
    return _checked(tool.name, tool.params, body), _checked(tool.name, META_PARAMS, body)


def scope_of(
    tool: Tool, env: Env, args: dict[str, Any], path: str | None
) -> tuple[str | None, str]:
    """(scope, resource mode) of a call: the tool's own hook, else the workspace path (a
    sandbox)."""
    hook = getattr(tool, "scope", None)
    if hook is not None:
        scoped: tuple[str | None, str] = hook(env, args)
        return scoped
    return (f"fs:{path}" if path is not None else None), "sandbox"


def mutates(tool: Tool, args: dict[str, Any]) -> bool:
    """Whether this call mutates: the tool's per-call hook (e.g. HTTP by method), else its flag."""
    hook = getattr(tool, "mutating", None)
    return bool(hook(args)) if hook is not None else tool.mutates


def target_paths(tool: Tool, args: dict[str, Any]) -> tuple[str, ...]:
    """The normalized workspace paths a call touches, in `tool.paths` order (what the gate
    matches globs on)."""
    return tuple(normalize(args[name]) for name in tool.paths if name in args)


def run(tool: Tool, env: Env, args: dict[str, Any]) -> Outcome:
    """Run an allowed call. Raises `ToolError` for anything the agent should be told."""
    try:
        return tool.handler(env, args)
    except PathError as exc:
        raise ToolError(exc.code, exc.message) from None


def _checked(
    tool: str, params: Mapping[str, tuple[type, bool]], body: dict[str, Any]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, (kind, required) in params.items():
        if name not in body:
            if required:
                raise ArgError("missing_field", f"{tool} needs field {name!r} ({kind.__name__})")
            continue
        value = body[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ArgError(
                "bad_type",
                f"field {name!r} of {tool} must be {kind.__name__}, got {type(value).__name__}",
            )
        out[name] = value
    return out


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fs_read(env: Env, args: dict[str, Any]) -> Outcome:
    data = env.workspace.read(args["path"], env.max_file_bytes)
    result: dict[str, Any] = {"sha256": _sha256(data), "size": len(data)}
    try:
        result["content"] = data.decode("utf-8")
    except UnicodeDecodeError:
        result["content_b64"] = base64.b64encode(data).decode("ascii")
    return Outcome(result)


def _fs_write(env: Env, args: dict[str, Any]) -> Outcome:
    data = _content(args)
    mode = args.get("mode", DEFAULT_MODE)
    if not 0 <= mode <= 0o777:
        raise ToolError(
            "bad_args",
            f"mode must be permission bits 0..511 (0o777), e.g. 420 for 0o644; got {mode}",
        )
    if len(data) > env.max_file_bytes:
        raise ToolError(
            "too_large", f"content is {len(data)} bytes, over the {env.max_file_bytes}-byte limit"
        )
    path = normalize(args["path"])
    env.workspace.write(path, data, mode)
    digest = _sha256(data)
    effect = {"op": Op.WRITE, "path": path, "sha256": digest, "size": len(data), "mode": mode}
    return Outcome({"sha256": digest, "size": len(data)}, {"effect": effect})


def _content(args: dict[str, Any]) -> bytes:
    if ("content" in args) == ("content_b64" in args):
        raise ToolError(
            "bad_args",
            "fs.write needs exactly one of 'content' (UTF-8 text) or 'content_b64' (base64)",
        )
    if "content" in args:
        text: str = args["content"]
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolError(
                "bad_args", "'content' is not valid UTF-8 text; send bytes as 'content_b64'"
            ) from None
    try:
        return base64.b64decode(args["content_b64"], validate=True)
    except (binascii.Error, ValueError):
        raise ToolError("bad_args", "'content_b64' is not valid base64") from None


def _fs_delete(env: Env, args: dict[str, Any]) -> Outcome:
    path = normalize(args["path"])
    env.workspace.delete(path)
    return Outcome({"deleted": True}, {"effect": {"op": Op.DELETE, "path": path}})


def _fs_list(env: Env, args: dict[str, Any]) -> Outcome:
    entries, truncated = env.workspace.listdir(args.get("path", "."))
    listed = [{"name": e.name, "type": e.type, "size": e.size} for e in entries]
    return Outcome({"entries": listed, "truncated": truncated})


def _task_report(_env: Env, args: dict[str, Any]) -> Outcome:
    status, summary = args["status"], args["summary"]
    if not 0 < len(status) <= MAX_REPORT_STATUS:
        raise ToolError("bad_args", f"'status' must be 1..{MAX_REPORT_STATUS} characters")
    if len(summary) > MAX_REPORT_SUMMARY:
        raise ToolError("bad_args", f"'summary' must be at most {MAX_REPORT_SUMMARY} characters")
    return Outcome({"recorded": True}, {"claim": {"status": status, "summary": summary}})


def _shown(value: str) -> str:
    if len(value) <= MAX_SHOWN_CHARS:
        return value
    return "sha256:" + _sha256(value.encode("utf-8", "surrogatepass"))


def _sandbox_op(_env: Env, args: dict[str, Any]) -> Outcome:
    """An Inspect sandbox operation (assure/inspect/) that the agent container's shim performs
    once the gate allowed it: journaled here (its command bounded, every argument in the
    digest), its effect judged from the snapshots like any direct edit, never attributed to it."""
    argv = args.get("argv")
    if argv is not None and (not argv or not all(isinstance(a, str) for a in argv)):
        raise ToolError("bad_args", "'argv' must be a non-empty list of strings")
    shown: dict[str, Any] = {k: _shown(v) for k, v in args.items() if isinstance(v, str)}
    if argv is not None:
        more = len(argv) - MAX_SHOWN_ITEMS
        shown["argv"] = [_shown(a) for a in argv[:MAX_SHOWN_ITEMS]] + (
            [f"({more} more)"] if more > 0 else []
        )
    if isinstance(args.get("env"), dict):
        shown["env"] = sorted(_shown(str(k)) for k in args["env"])[:MAX_SHOWN_ITEMS]
    shown.update({k: v for k, v in args.items() if isinstance(v, int)})
    return Outcome({"allowed": True}, {"sandbox": shown})


def _exec_result(_env: Env, args: dict[str, Any]) -> Outcome:
    """What came of an allowed sandbox.exec, as its shim saw it: exit code, whether it timed
    out, and each output stream by digest and size (never its text), so the journal shows
    what ran and what came of it."""
    for name in ("stdout_sha256", "stderr_sha256"):
        value = args.get(name)
        if value is not None and (
            len(value) != 64 or any(c not in "0123456789abcdef" for c in value)
        ):
            raise ToolError("bad_args", f"'{name}' must be a sha256 hex digest")
    for name in ("returncode", "stdout_bytes", "stderr_bytes", "duration_ms"):
        value = args.get(name)
        if value is not None and not -(2**31) <= value < 2**63:
            raise ToolError("bad_args", f"'{name}' is out of range")
    shown = {k: v for k, v in args.items() if k != "action_id"}
    return Outcome({"recorded": True}, {"outcome": shown})


def _sandbox_scope(_env: Env, args: dict[str, Any]) -> tuple[str, str]:
    """A workspace file is `fs:<path>`, as for fs.write; a command or any other file of the
    agent's container is `sandbox:exec`."""
    return (f"fs:{normalize(args['path'])}" if "path" in args else EXEC_SCOPE), "sandbox"


def _databases(env: Env) -> Databases:
    if env.databases is None:
        raise ToolError("not_found", "this gateway has no databases")
    return env.databases


def _db_scope(env: Env, args: dict[str, Any]) -> tuple[str, str]:
    name = args["db"]
    return f"db:{name}", _databases(env).mode(name)


def _db_query(env: Env, args: dict[str, Any]) -> Outcome:
    return Outcome(_databases(env).query(args["db"], args["sql"], args.get("params")))


def _db_execute(env: Env, args: dict[str, Any]) -> Outcome:
    result, effect = _databases(env).execute(args["db"], args["sql"], args.get("params"))
    return Outcome(result, {"effect": effect})


# http.py is imported on first use, not at the top: http.client and ssl cost a tenth of a
# second of every gateway boot, and most runs have no egress.
def _http_request(env: Env, args: dict[str, Any]) -> Outcome:
    from assure.gateway import http

    try:
        result, record = http.request(env.egress, args)
    except http.Refused as exc:
        raise ToolError(exc.code, exc.message) from None
    return Outcome(result, record)


def _http_scope(env: Env, args: dict[str, Any]) -> tuple[str, str]:
    from assure.gateway import http

    try:
        return http.scope(env, args)
    except http.Refused as exc:
        raise ToolError("bad_args", exc.message) from None


def _http_mutating(args: dict[str, Any]) -> bool:
    from assure.gateway import http

    return http.mutating(args)


_DB_PARAMS: Mapping[str, tuple[type, bool]] = {
    "db": (str, True),
    "sql": (str, True),
    "params": (list, False),
}

_FILE_PARAMS: Mapping[str, tuple[type, bool]] = {
    "path": (str, False),  # a workspace file, relative
    "file": (str, False),  # any other file of the agent's container, absolute
    "size": (int, False),
    "sha256": (str, False),
}

TOOLS: tuple[Tool, ...] = (
    Tool(
        "fs.read",
        False,
        {"path": (str, True)},
        _fs_read,
        "Read a workspace file: content (or content_b64), sha256, size.",
        paths=("path",),
    ),
    Tool(
        "fs.write",
        True,
        {
            "path": (str, True),
            "content": (str, False),
            "content_b64": (str, False),
            "mode": (int, False),
        },
        _fs_write,
        "Atomically write a workspace file (parents created); mode defaults to 0o644.",
        paths=("path",),
    ),
    Tool(
        "fs.delete",
        True,
        {"path": (str, True)},
        _fs_delete,
        "Delete a workspace file or symlink (never its target).",
        paths=("path",),
    ),
    Tool(
        "fs.list",
        False,
        {"path": (str, False)},
        _fs_list,
        "List a workspace directory; symlinks are reported, never followed.",
        paths=("path",),
    ),
    Tool(
        "task.report",
        False,
        {"status": (str, True), "summary": (str, True)},
        _task_report,
        "Report the task's outcome (journaled as a claim, never trusted).",
    ),
    Tool(
        "db.query",
        False,
        _DB_PARAMS,
        _db_query,
        "Run one read-only SQL statement on a named database: columns, rows (blobs as {b64}),"
        " truncated.",
        _db_scope,
    ),
    Tool(
        "db.execute",
        True,
        _DB_PARAMS,
        _db_execute,
        "Run one INSERT/UPDATE/DELETE on a named database, atomically; the change is journaled as a"
        " changeset.",
        _db_scope,
    ),
    Tool(
        "http.request",
        True,  # the fail-closed static answer; `mutating(args)` decides per call
        {
            "method": (str, True),
            "url": (str, True),
            "headers": (dict, False),
            "body": (str, False),
            "body_b64": (str, False),
        },
        _http_request,
        "HTTP(S) through the egress proxy to allowlisted host:port only: status, headers, body (or"
        " body_b64), truncated.",
        scope=_http_scope,
        mutates_when=_http_mutating,
    ),
    Tool(
        "sandbox.exec",
        True,
        {
            "argv": (list, True),
            "cwd": (str, False),
            "env": (dict, False),
            "input_sha256": (str, False),
            "input_size": (int, False),
            "timeout": (int, False),
        },
        _sandbox_op,
        "Inspect's exec: a command the agent container's shim runs once allowed (scope"
        " sandbox:exec).",
        _sandbox_scope,
        listed=False,
    ),
    Tool(
        EXEC_RESULT,
        False,
        {
            "action_id": (str, True),  # the sandbox.exec's, once: any other is refused
            "returncode": (int, False),
            "timed_out": (bool, False),
            "stdout_sha256": (str, False),  # of the whole stream, not only what was kept
            "stdout_bytes": (int, False),
            "stderr_sha256": (str, False),
            "stderr_bytes": (int, False),
            "duration_ms": (int, False),
        },
        _exec_result,
        "The outcome of an allowed sandbox.exec (exit code, output digests): journaled, not a"
        " tool call of its own.",
        _sandbox_scope,
        listed=False,
    ),
    Tool(
        "sandbox.read_file",
        False,
        _FILE_PARAMS,
        _sandbox_op,
        "Inspect's read_file: a file of the agent's container the shim reads once allowed.",
        _sandbox_scope,
        listed=False,
        paths=("path",),
    ),
    Tool(
        "sandbox.write_file",
        True,
        _FILE_PARAMS,
        _sandbox_op,
        "Inspect's write_file: a file the shim writes once allowed (a workspace file: fs:<path>,"
        " protected refused).",
        _sandbox_scope,
        listed=False,
        paths=("path",),
    ),
)

BY_NAME: Mapping[str, Tool] = {tool.name: tool for tool in TOOLS}
