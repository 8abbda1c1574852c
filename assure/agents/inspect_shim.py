"""Inside the agent container: one Inspect sandbox operation (exec, read_file, write_file) per
run, asked of the gateway first (gated and journaled like any tool call), then done as the
agent's own user. The host starts it with `docker exec` (assure/inspect/channel.py).

stdin: one JSON line (the request), then `input_size` raw bytes (the command's stdin, or the
file's content). stdout: one JSON line (the reply), then its payload: a command's stdout and
stderr (`stdout_size`, `stderr_size` bytes), or the file's bytes (`size`). Standard library and
the gateway client only. Started with `python3 -S -P` from `/`, so that nothing the agent left
in a working directory is imported in its place.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import selectors
import signal
import subprocess
import sys
import threading
import time
from typing import Any, BinaryIO

from assure.client import Client, GatewayError

WORKSPACE = "/workspace"
STREAM_GRACE_SECONDS = 1.0  # after the command exits: what its background children still print
CHUNK = 1 << 16


def _reply(out: BinaryIO, head: dict[str, Any], *payload: bytes) -> None:
    out.write(json.dumps(head).encode() + b"\n")
    for part in payload:
        out.write(part)
    out.flush()


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": code, "message": message}


def _place(file: str, cwd: str) -> tuple[str, dict[str, str]]:
    """The absolute path (symlinks resolved, as the agent's processes would follow them) and
    how the gateway sees it: a workspace `path` (the gate matches protected and scope on it)
    or another `file` of the container."""
    full = os.path.realpath(os.path.join(cwd, file))
    if full == WORKSPACE or full.startswith(WORKSPACE + "/"):
        rel = os.path.relpath(full, WORKSPACE)
        return full, {"path": rel}
    return full, {"file": full}


def _ask(tool: str, args: dict[str, Any]) -> dict[str, Any] | None:
    """The gateway's answer: None when allowed, else the error reply."""
    denied, _ = _allowed(tool, args)
    return denied


def _allowed(tool: str, args: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """(None, the call's action_id) when the gateway allowed it, else (the error reply, None)."""
    try:
        with Client() as client:
            answer = client.call(tool, **args)
    except GatewayError as exc:
        code = "denied" if exc.status in (403, 409, 429) else "unavailable"
        return _error(code, f"{tool} refused by the gateway: {exc.message} ({exc.code})"), None
    except OSError as exc:
        return _error("unavailable", f"the gateway cannot be reached: {exc}"), None
    return None, str(answer.get("action_id") or "")


def _report(action_id: str | None, outcome: dict[str, Any]) -> None:
    """Journal what came of an allowed command (sandbox.exec_result). Best effort: the
    command already ran and its effect is judged from the snapshots either way; a journal
    without this line only lacks the exit code and digests."""
    if not action_id:
        return
    try:
        with Client() as client:
            client.call("sandbox.exec_result", action_id=action_id, **outcome)
    except (GatewayError, OSError):
        pass


class _Tail:
    """The last `limit` bytes of a stream, how many came in all and the digest of all."""

    def __init__(self, limit: int):
        self.limit, self.data, self.total = limit, bytearray(), 0
        self.digest = hashlib.sha256()

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.digest.update(chunk)
        self.data += chunk
        if len(self.data) > self.limit:
            del self.data[: len(self.data) - self.limit]


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
    try:
        assert proc.stdin is not None
        proc.stdin.write(data)
    except (BrokenPipeError, OSError):
        pass
    finally:
        try:
            # stdin is Optional in the stubs; Popen was given stdin=PIPE, so it is set
            proc.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """The whole process group: the command and every child it started."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


def _pump(
    proc: subprocess.Popen[bytes], limit: int, deadline: float | None
) -> tuple[_Tail, _Tail, bool]:
    out, err = _Tail(limit), _Tail(limit)
    sel = selectors.DefaultSelector()
    for stream, tail in ((proc.stdout, out), (proc.stderr, err)):
        # stdout and stderr are Optional in the stubs; both were made with PIPE
        sel.register(stream, selectors.EVENT_READ, tail)  # type: ignore[arg-type]
    timed_out, exited_at = False, None
    while sel.get_map():
        now = time.monotonic()
        if deadline is not None and now >= deadline and proc.poll() is None:
            timed_out = True
            _kill(proc)
            deadline = None
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > STREAM_GRACE_SECONDS:
            break  # a background child keeps the pipe open: it is not waited for
        wait = 0.1 if deadline is None else max(0.0, min(0.1, deadline - now))
        for key, _ in sel.select(wait):
            chunk = os.read(key.fd, CHUNK)
            if chunk:
                key.data.add(chunk)
            else:
                sel.unregister(key.fileobj)
    sel.close()
    return out, err, timed_out


def _exec(req: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes, bytes]:
    argv, cwd = req["argv"], os.path.join(WORKSPACE, req.get("cwd") or ".")
    if not os.path.isdir(cwd):
        return _error("bad_cwd", f"working directory {cwd} does not exist"), b"", b""
    args = {"argv": argv, "cwd": cwd, "input_size": len(data)}
    if req.get("input") is not None:
        args["input_sha256"] = hashlib.sha256(data).hexdigest()
    if req.get("env"):
        args["env"] = req["env"]
    if req.get("timeout") is not None:
        args["timeout"] = int(req["timeout"])
    denied, action_id = _allowed("sandbox.exec", args)
    if denied:
        return denied, b"", b""
    started = time.monotonic()
    head, out, err = _run(argv, cwd, req, data)
    _report(
        action_id,
        {
            "returncode": head["returncode"],
            "timed_out": bool(head.get("timed_out")),
            "stdout_sha256": head.pop("_stdout_sha256", hashlib.sha256(out).hexdigest()),
            "stdout_bytes": head.get("stdout_total", len(out)),
            "stderr_sha256": head.pop("_stderr_sha256", hashlib.sha256(err).hexdigest()),
            "stderr_bytes": head.get("stderr_total", len(err)),
            "duration_ms": int((time.monotonic() - started) * 1000),
        }
        if "returncode" in head
        else {},
    )
    return head, out, err


def _run(
    argv: list[str], cwd: str, req: dict[str, Any], data: bytes
) -> tuple[dict[str, Any], bytes, bytes]:
    env = {**os.environ, **(req.get("env") or {})}
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError:
        return {"returncode": 127}, b"", f"{argv[0]}: command not found\n".encode()
    except PermissionError as exc:
        return _error("permission", f"{argv[0]}: {exc.strerror}"), b"", b""
    except OSError as exc:
        return {"returncode": 126}, b"", f"{argv[0]}: {exc.strerror}\n".encode()
    feeder = threading.Thread(target=_feed, args=(proc, data), daemon=True)
    feeder.start()
    timeout = req.get("timeout")
    deadline = time.monotonic() + timeout if timeout is not None else None
    out, err, timed_out = _pump(proc, int(req["limit"]), deadline)
    code = proc.wait()
    head = {
        "returncode": 128 - code if code < 0 else code,
        "timed_out": timed_out,
        "stdout_total": out.total,
        "stderr_total": err.total,
        "_stdout_sha256": out.digest.hexdigest(),
        "_stderr_sha256": err.digest.hexdigest(),
    }
    return head, bytes(out.data), bytes(err.data)


def _os_error(exc: OSError, file: str) -> dict[str, Any]:
    code = {
        FileNotFoundError: "not_found",
        PermissionError: "permission",
        IsADirectoryError: "is_directory",
        NotADirectoryError: "not_found",
    }.get(type(exc), "os_error")
    return _error(code, f"{file}: {exc.strerror or exc}")


def _read(req: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    full, where = _place(req["file"], WORKSPACE)
    denied = _ask("sandbox.read_file", where)
    if denied:
        return denied, b""
    limit = int(req["limit"])
    try:
        with open(full, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                return _error("too_large", f"{req['file']} is {size} bytes"), b""
            data = fh.read(limit + 1)
    except OSError as exc:
        return _os_error(exc, req["file"]), b""
    if len(data) > limit:
        return _error("too_large", f"{req['file']} is over {limit} bytes"), b""
    return {"size": len(data)}, data


def _write(req: dict[str, Any], data: bytes) -> dict[str, Any]:
    full, where = _place(req["file"], WORKSPACE)
    sha = hashlib.sha256(data).hexdigest()
    denied = _ask("sandbox.write_file", {**where, "size": len(data), "sha256": sha})
    if denied:
        return denied
    if os.path.isdir(full):
        return _error("is_directory", f"{req['file']} is a directory")
    try:
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as fh:
            fh.write(data)
    except OSError as exc:
        return _os_error(exc, req["file"])
    return {"size": len(data), "sha256": sha}


def _user_refused(user: str | None) -> dict[str, Any] | None:
    """Only the attempt's own user: the engine is never asked to exec as another (root
    would be uid 0 on the host's kernel)."""
    if user is None:
        return None
    me = pwd.getpwuid(os.getuid()).pw_name if _has_name() else str(os.getuid())
    if user in (me, str(os.getuid())):
        return None
    return _error("user", f"commands run as the attempt's user {me} only, not {user}")


def _has_name() -> bool:
    try:
        pwd.getpwuid(os.getuid())
    except KeyError:
        return False
    return True


def main() -> int:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    req = json.loads(stdin.readline())
    size = int(req.get("input_size", 0))
    data = stdin.read(size) if size else b""
    if len(data) != size:
        _reply(stdout, _error("bad_request", f"{size} input bytes announced, {len(data)} sent"))
        return 0
    op = req.get("op")
    if op == "exec":
        refused = _user_refused(req.get("user"))
        if refused:
            _reply(stdout, refused)
            return 0
        head, out, err = _exec(req, data)
        _reply(stdout, {**head, "stdout_size": len(out), "stderr_size": len(err)}, out, err)
    elif op == "read":
        head, content = _read(req)
        _reply(stdout, head, content)
    elif op == "write":
        _reply(stdout, _write(req, data))
    else:
        _reply(stdout, _error("bad_request", f"unknown op {op!r}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
