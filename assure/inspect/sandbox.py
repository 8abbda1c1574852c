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

import errno
import os
from pathlib import Path
from typing import Any, Literal, overload

import anyio
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
from assure.records.store import RUNS_DIR

STORE_RUN_DIR = "assure:run_dir"  # the sample's store: where its run is, for a later scorer
KEY_ENV = "ASSURE_SIGNING_KEY"  # the receipts' key, as for `assure run --key`


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
        for env in environments.values():
            if isinstance(env, AssureSandbox):
                with anyio.CancelScope(shield=True):
                    await env.finish()

    async def finish(self) -> dict[str, Any]:
        """Judge the attempt and seal its run (once); its report (report.json)."""
        with anyio.CancelScope(shield=True):
            result = await anyio.to_thread.run_sync(self.session.finish)
        return result.report

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
            return await anyio.to_thread.run_sync(
                lambda: channel.call(
                    agent, request, data, sizes=sizes, limit=limit, timeout=timeout
                )
            )
        except AssureError as exc:
            raise SandboxUnavailableError(exc.explain()) from exc

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
