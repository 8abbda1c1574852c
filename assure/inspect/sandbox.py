"""The `assure` sandbox environment for Inspect AI: each sample is a fresh assure attempt.

`Task(..., sandbox=("assure", "spec.yaml"))`, or `AssureConfig(spec=..., runs_dir=...)` as the
config. Every `exec`, `read_file` and `write_file` goes through the shim in the agent
container (channel.py), which asks the gateway first: the gate decides and the journal
records it. Its errors are Inspect's: a refusal of the gate or of the file system is a
`PermissionError`, a command past its timeout a `TimeoutError`, a user other than the
attempt's own `SandboxUserUnsupportedError`, a container that is gone (the spec's deadline,
an operator halt, a budget) `SandboxUnavailableError`. At sample cleanup (or at the scorer,
whichever is first) the attempt is judged and the run sealed; its directory is kept.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar, cast, overload

import anyio
import anyio.from_thread
import anyio.lowlevel
from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxConnection,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
    SandboxUnavailableError,
    SandboxUserUnsupportedError,
    sandboxenv,
    store,
)
from pydantic import BaseModel

from assure.errors import AssureError
from assure.inspect import channel
from assure.inspect.session import Session
from assure.records.run_report import Report
from assure.records.store import RUNS_DIR

STORE_RUN_DIR = "assure:run_dir"  # the sample's store: where its run is, for a later scorer
KEY_ENV = "ASSURE_SIGNING_KEY"  # the receipts' key, as for `assure run --key`
T = TypeVar("T")


class AssureConfig(BaseModel, frozen=True):
    """The spec (an ordinary assure spec; its `agent` is not used) and where runs go."""

    spec: str
    runs_dir: str = str(RUNS_DIR)


def _config(config: SandboxEnvironmentConfigType | None) -> AssureConfig:
    if isinstance(config, AssureConfig):
        return config
    if isinstance(config, str):
        return AssureConfig(spec=config)
    raise ValueError(
        "the assure sandbox takes a spec's path, e.g. sandbox=('assure', 'spec.yaml'), "
        f"or an AssureConfig; got {type(config).__name__}"
    )


@sandboxenv(name="assure")
class AssureSandbox(SandboxEnvironment):
    def __init__(self, session: Session):
        super().__init__()
        self.session = session
        self.abandoned = False  # a call of this sample was cancelled in flight

    @property
    def run_dir(self) -> Path | None:
        return self.session.run_dir

    # --- lifecycle ----------------------------------------------------------------------
    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return AssureConfig(**config)

    @classmethod
    async def sample_init(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, metadata: dict[str, str]
    ) -> dict[str, SandboxEnvironment]:
        conf = _config(config)
        key = os.environ.get(KEY_ENV)
        session = Session(
            Path(conf.spec).resolve(), Path(conf.runs_dir).resolve(), Path(key) if key else None
        )
        try:
            await anyio.to_thread.run_sync(session.start, abandon_on_cancel=False)
        except AssureError as exc:
            raise RuntimeError(exc.explain()) from exc
        store().set(STORE_RUN_DIR, str(session.run_dir))
        return {"default": cls(session)}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        # Inspect catches a sample's cancel above its sandbox and then says interrupted=False
        # (0.3.285); a sample that reached the scorer is finished already, as not cancelled
        pending = _cancel_pending()
        for env in environments.values():
            if isinstance(env, AssureSandbox):
                cancelled = interrupted or (env.abandoned if pending is None else pending)
                with anyio.CancelScope(shield=True):
                    await env.finish(cancelled=cancelled)

    async def finish(self, *, cancelled: bool = False) -> Report:
        """Judge the attempt and seal its run (once); its report (report.json). `cancelled`:
        the sample was interrupted, so it does not pass (Session.finish)."""
        with anyio.CancelScope(shield=True):
            result = await anyio.to_thread.run_sync(
                functools.partial(self.session.finish, cancelled=cancelled)
            )
        return result.view

    # --- operations ---------------------------------------------------------------------
    def _agent(self) -> str:
        if self.session.agent is None or self.session.result is not None:
            raise SandboxUnavailableError("the assure attempt is over: its agent container is gone")
        return self.session.agent

    async def _call(
        self,
        request: dict[str, Any],
        data: bytes,
        sizes: tuple[str, ...],
        limit: int,
        timeout: float | None,
    ) -> channel.Reply:
        agent = self._agent()
        try:
            return await _abandoned_on_cancel(
                lambda: channel.call(
                    self.session.spec.sandbox.backend,
                    agent,
                    request,
                    data,
                    sizes=sizes,
                    limit=limit,
                    timeout=timeout,
                )
            )
        except AssureError as exc:
            raise SandboxUnavailableError(exc.explain()) from exc
        except anyio.get_cancelled_exc_class():
            self.abandoned = True  # a time limit, or a cancel: sample_cleanup tells which
            raise

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        data = input.encode("utf-8") if isinstance(input, str) else (input or b"")
        request = {
            "op": "exec",
            "argv": list(cmd),
            "cwd": cwd,
            "env": env or {},
            "user": user,
            "timeout": timeout,
            "input": None if input is None else True,
        }
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        reply = await self._call(request, data, ("stdout_size", "stderr_size"), limit, timeout)
        if reply.error == "user":
            raise SandboxUserUnsupportedError(reply.message)
        if reply.error in ("denied", "permission"):
            raise PermissionError(errno.EACCES, reply.message)
        if reply.error is not None:
            raise RuntimeError(f"exec {cmd[:1]}: {reply.message}")
        stdout, stderr = (p.decode("utf-8", "replace") for p in reply.parts)
        if reply.head.get("timed_out"):
            error = TimeoutError(f"Command timed out after {timeout} seconds")
            # Inspect reads `truncated_output` off the TimeoutError; typeshed's has no such field
            error.truncated_output = stdout + stderr  # type: ignore[attr-defined]
            raise error
        code = int(reply.head.get("returncode", -1))
        return ExecResult(success=code == 0, returncode=code, stdout=stdout, stderr=stderr)

    async def write_file(self, file: str, contents: str | bytes) -> None:
        data = contents.encode("utf-8") if isinstance(contents, str) else contents
        reply = await self._call({"op": "write", "file": file}, data, (), 0, None)
        _raise_file_error(reply, file)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        limit = SandboxEnvironmentLimits.MAX_READ_FILE_SIZE
        reply = await self._call({"op": "read", "file": file}, b"", ("size",), limit, None)
        if reply.error == "too_large":
            raise OutputLimitExceededError(SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, None)
        _raise_file_error(reply, file)
        data = reply.parts[0]
        return data.decode("utf-8") if text else data

    async def connection(self, *, user: str | None = None) -> SandboxConnection:
        agent = self._agent()
        return SandboxConnection(
            type="assure",
            command=f"docker exec -it {agent[:12]} bash -l",
            container=agent,
        )


def _cancel_pending() -> bool | None:
    """Whether the sample's task has a cancel pending (one Inspect caught): asyncio counts
    them (`Task.cancelling`; a time limit's own scope takes its cancel back). None where
    nothing counts them (trio): then a call cut off in flight (`abandoned`) is the sign."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # not asyncio's loop
        return None
    return None if task is None else task.cancelling() > 0


class _DaemonWorkers:
    """Daemon threads that run one call at a time and are reused (each keeps its own engine
    client, `channel.backend`); one more is started when all are busy."""

    def __init__(self) -> None:
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            jobs = self._idle.pop() if self._idle else None
        if jobs is None:
            jobs = queue.SimpleQueue()
            threading.Thread(
                target=self._work, args=(jobs,), name="assure-inspect-call", daemon=True
            ).start()
        jobs.put(job)

    def _work(self, jobs: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            jobs.get()()
            with self._lock:
                self._idle.append(jobs)


_workers = _DaemonWorkers()


async def _abandoned_on_cancel(fn: Callable[[], T]) -> T:
    """`fn()` (a `docker exec` that may block for as long as its command runs) in a daemon
    thread, left behind if the sample is cancelled: the cancel reaches the sample's cleanup at
    once, whose stop of the agent container ends the exec, and a thread still reading it can
    never hold up the interpreter's exit (anyio's worker threads, which it joins, would)."""
    token = anyio.lowlevel.current_token()
    done = anyio.Event()
    outcome: list[tuple[bool, Any]] = []

    def job() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - raised again where it is awaited
            outcome.append((False, exc))
        try:
            anyio.from_thread.run_sync(done.set, token=token)
        except anyio.RunFinishedError:
            pass  # the eval's event loop is gone: nobody waits for this any more

    _workers.submit(job)
    await done.wait()
    ok, value = outcome[0]
    if ok:
        return cast(T, value)
    raise value


def _raise_file_error(reply: channel.Reply, file: str) -> None:
    """A file operation's refusal as the exception Inspect's contract names."""
    kinds = {
        "denied": PermissionError,
        "permission": PermissionError,
        "not_found": FileNotFoundError,
        "is_directory": IsADirectoryError,
    }
    if reply.error is None:
        return
    kind = kinds.get(reply.error)
    if kind is None:
        raise RuntimeError(f"{file}: {reply.message}")
    code = {PermissionError: errno.EACCES, FileNotFoundError: errno.ENOENT}.get(kind, errno.EISDIR)
    message = reply.message if reply.error == "denied" else os.strerror(code)
    if kind is IsADirectoryError:
        message = "Is a directory"
    raise kind(code, message, file)
