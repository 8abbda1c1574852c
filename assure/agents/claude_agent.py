"""The reference agent: a tool-use loop on the stock `anthropic` SDK, through the gateway only.

    python3 -m assure.agents.claude_agent [--task-file PATH] [TASK TEXT ...]

It runs in the sealed agent container. Its one way out is the gateway's unix socket
($ASSURE_GATEWAY_SOCKET, default /run/assure/gateway.sock): the SDK's HTTP client is bound to
that socket, so `POST /v1/messages` goes to the gateway, which holds the real API key (the
key the agent passes, `unused-by-sandbox`, is dropped there). The gateway's tools (the list
in `GET /v1/health`: fs.*, db.*, http.request, task.report) are offered to the model as
tools, their input schema derived from each tool's parameters; every tool_use block is
carried out with `assure.client.Client`, and a denial comes back to the model as a tool
error. The loop ends when the model stops asking for tools, or after $ASSURE_MAX_TURNS
model calls; if the model never called task.report, the agent reports for it.

Settings (environment): ASSURE_MODEL (default claude-sonnet-4-6), ASSURE_MAX_TURNS (20),
ASSURE_MAX_TOKENS (4096 per answer), the task from the arguments, else $ASSURE_TASK, else
the file named by --task-file or $ASSURE_TASK_FILE.

Deterministic on purpose: given the same model answers it sends the same requests (tool
results carry the tool's result or error, never the gateway's random action ids), so a
recorded run can be replayed with the gateway's `model.mode: replay`.

Exit codes: 0 the model finished, 1 a model or gateway error, 2 usage, 3 max turns reached.
"""

from __future__ import annotations

import argparse
import http.client
import importlib
import json
import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, TextIO, cast

import anthropic

from assure.client import DEFAULT_SOCKET, SOCKET_ENV, Client, GatewayError
from assure.core.limits import MODEL_EXCHANGE_SECONDS

if TYPE_CHECKING:
    from anthropic.types import MessageParam, ToolUnionParam

DEFAULT_MODEL = "claude-sonnet-4-6"  # override with $ASSURE_MODEL
DEFAULT_MAX_TURNS = 20
DEFAULT_MAX_TOKENS = 4096
BASE_URL = "http://gateway"  # any host: the transport goes to the unix socket
PLACEHOLDER_KEY = "unused-by-sandbox"  # the gateway drops it and adds the real key
MAX_RESULT_CHARS = 50_000
MAX_SUMMARY_CHARS = 8000
JSON_TYPES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "dict": "object",
    "list": "array",
}
PARAM_HINTS = {
    "path": "Path relative to the workspace root.",
    "content": "The file's new content, UTF-8 text.",
    "content_b64": "The file's new content as base64 (instead of content).",
    "mode": "Permission bits as a decimal integer, e.g. 420 for 0o644.",
    "db": "Name of the database.",
    "sql": "Exactly one SQL statement.",
    "params": "Values for the statement's ? placeholders.",
    "method": "HTTP method, e.g. GET or POST.",
    "url": "Absolute http(s) URL; only the run's allowlisted hosts are reachable.",
    "headers": "Request headers, name to value.",
    "body": "Request body, UTF-8 text.",
    "body_b64": "Request body as base64 (instead of body).",
    "status": "The outcome in a word or two, e.g. done, failed, blocked.",
    "summary": "What you did, what you found and anything left undone.",
}
SYSTEM = (
    "You are an autonomous agent working on a task in a sandbox. You act only through the tools"
    " given to you: they work on the task's workspace (paths are relative to its root) and on the"
    " resources the run grants. A gateway checks every call and may deny it; the reason comes back"
    " as a tool error, so adapt instead of repeating a denied call. Work step by step and check"
    " your work. When the task is done, or you cannot do it, call task_report once with a status"
    " and a short summary, then stop."
)
_KEPT_FIELDS = {
    "text": ("type", "text"),
    "tool_use": ("type", "id", "name", "input"),
    "thinking": ("type", "thinking", "signature"),
    "redacted_thinking": ("type", "data"),
}


def http_module() -> ModuleType:
    """The HTTP library the installed SDK is built on: `httpx2` (anthropic 2.x) or `httpx`."""
    for cls in getattr(anthropic, "DefaultHttpxClient", object).__mro__:
        root = cls.__module__.partition(".")[0]
        if root in ("httpx2", "httpx"):
            return importlib.import_module(root)
    return importlib.import_module("httpx")


def make_client(
    socket_path: str, *, max_retries: int = 2, timeout: float = MODEL_EXCHANGE_SECONDS
) -> anthropic.Anthropic:
    """The stock SDK with its HTTP client bound to the gateway's unix socket."""
    httpx = http_module()
    http_client = httpx.Client(transport=httpx.HTTPTransport(uds=socket_path), timeout=timeout)
    return anthropic.Anthropic(
        base_url=BASE_URL, api_key=PLACEHOLDER_KEY, http_client=http_client, max_retries=max_retries
    )


def tool_specs(health: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The model's tools from the gateway's tool list, and model tool name -> gateway tool.

    Model tool names may not contain dots, so `fs.read` is offered as `fs_read`."""
    specs: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for tool in health.get("tools", []):
        name = str(tool["name"]).replace(".", "_")
        properties: dict[str, Any] = {}
        required: list[str] = []
        for param, info in tool.get("params", {}).items():
            prop: dict[str, Any] = {"type": JSON_TYPES.get(str(info.get("type")), "string")}
            if param in PARAM_HINTS:
                prop["description"] = PARAM_HINTS[param]
            properties[param] = prop
            if info.get("required"):
                required.append(param)
        schema = {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }
        specs.append(
            {"name": name, "description": str(tool.get("summary", "")), "input_schema": schema}
        )
        names[name] = str(tool["name"])
    return specs, names


def as_param(block: Any) -> dict[str, Any]:
    """A response content block as request content (only the fields the API takes back)."""
    data = block.model_dump(exclude_none=True) if hasattr(block, "model_dump") else dict(block)
    kept = _KEPT_FIELDS.get(str(data.get("type")))
    return {k: data[k] for k in kept if k in data} if kept else data


def run_tool(
    gateway: Client, names: dict[str, str], block: Any
) -> tuple[dict[str, Any], str | None]:
    """Carry out one tool_use block: (its tool_result block, the gateway tool it called)."""
    tool = names.get(block.name)
    args = block.input if isinstance(block.input, dict) else {}
    error: dict[str, Any] | None = None
    if tool is None:
        error = {"code": "unknown_tool", "message": f"no tool named {block.name!r}"}
    else:
        try:
            answer = gateway.call(tool, **args)
        except GatewayError as exc:
            error = {"status": exc.status, "code": exc.code, "message": exc.message}
        except (OSError, http.client.HTTPException) as exc:
            error = {"code": "gateway_unreachable", "message": f"{type(exc).__name__}: {exc}"}
    content = json.dumps(
        {"error": error} if error else answer.get("result"), ensure_ascii=False, sort_keys=True
    )
    if len(content) > MAX_RESULT_CHARS:
        content = content[:MAX_RESULT_CHARS] + f"... [truncated: {len(content)} characters in all]"
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.id, "content": content}
    if error:
        result["is_error"] = True
    return result, tool


def run(
    task: str,
    *,
    socket_path: str | None = None,
    model: str | None = None,
    max_turns: int | None = None,
    max_tokens: int | None = None,
    log: TextIO = sys.stderr,
) -> int:
    """Work on `task` until the model stops asking for tools; return the exit code."""
    socket_path = socket_path or os.environ.get(SOCKET_ENV, DEFAULT_SOCKET)
    model = model or os.environ.get("ASSURE_MODEL", DEFAULT_MODEL)
    max_turns = (
        max_turns if max_turns is not None else _env_int("ASSURE_MAX_TURNS", DEFAULT_MAX_TURNS)
    )
    max_tokens = (
        max_tokens if max_tokens is not None else _env_int("ASSURE_MAX_TOKENS", DEFAULT_MAX_TOKENS)
    )
    with Client(socket_path) as gateway:
        specs, names = tool_specs(gateway.health())
        client = make_client(socket_path)
        messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
        reported, status, final_text = False, "max_turns", ""
        try:
            for turn in range(1, max_turns + 1):
                response = client.messages.create(
                    model=model,
                    max_tokens=max_tokens,
                    system=SYSTEM,
                    # JSON as the API takes it: the gateway's tool list, the blocks it answered
                    tools=cast("list[ToolUnionParam]", specs),
                    messages=cast("list[MessageParam]", messages),
                )
                messages.append(
                    {"role": "assistant", "content": [as_param(b) for b in response.content]}
                )
                final_text = (
                    "\n".join(b.text for b in response.content if b.type == "text").strip()
                    or final_text
                )
                uses = [b for b in response.content if b.type == "tool_use"]
                print(
                    f"claude_agent: turn {turn}: stop_reason={response.stop_reason}"
                    f" tools={[b.name for b in uses]}",
                    file=log,
                )
                if not uses:
                    status = (
                        "done"
                        if response.stop_reason in ("end_turn", "stop_sequence")
                        else str(response.stop_reason)
                    )
                    break
                results = []
                for block in uses:
                    result, tool = run_tool(gateway, names, block)
                    results.append(result)
                    reported = reported or (tool == "task.report" and not result.get("is_error"))
                messages.append({"role": "user", "content": results})
        except anthropic.APIError as exc:
            print(f"claude_agent: model call failed: {type(exc).__name__}: {exc}", file=log)
            status, final_text = (
                "error",
                f"model call failed: {type(exc).__name__}: {str(exc)[:2000]}",
            )
        finally:
            client.close()
        if not reported:
            _report(
                gateway,
                status,
                final_text or f"the agent ended with status {status} without a summary",
                log,
            )
    return {"done": 0, "max_turns": 3, "error": 1}.get(status, 0)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise UsageError(f"${name} must be a positive integer, got {value!r}")
    return int(value)


class UsageError(Exception):
    """A setting is unusable (exit code 2)."""


def _report(gateway: Client, status: str, summary: str, log: TextIO) -> None:
    try:
        gateway.call("task.report", status=status, summary=summary[:MAX_SUMMARY_CHARS])
    except (GatewayError, OSError, http.client.HTTPException) as exc:
        print(f"claude_agent: task.report failed: {exc}", file=log)


def _task(args: argparse.Namespace) -> str:
    if args.task:
        return " ".join(args.task)
    if os.environ.get("ASSURE_TASK"):
        return os.environ["ASSURE_TASK"]
    path = args.task_file or os.environ.get("ASSURE_TASK_FILE")
    if not path:
        raise SystemExit(
            "claude_agent: no task: pass it as arguments, in $ASSURE_TASK, or as a file"
            " (--task-file / $ASSURE_TASK_FILE)"
        )
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"claude_agent: cannot read the task file {path}: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m assure.agents.claude_agent",
        description="Run the reference Claude agent through the gateway.",
    )
    parser.add_argument("--task-file", help="read the task from this UTF-8 file")
    parser.add_argument(
        "task", nargs="*", help="the task text (else $ASSURE_TASK or the task file)"
    )
    args = parser.parse_args(argv)
    try:
        return run(_task(args))
    except (SystemExit, UsageError) as exc:
        print(f"claude_agent: {exc}" if isinstance(exc, UsageError) else exc, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
