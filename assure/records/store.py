"""The run directory: where a run keeps everything needed to re-verify it offline.

Made private to the invoking user (`core.private`): a run directory, and any runs base it
makes, are 0700, so no other local user reads or rewrites what a verifier saw.

Its file names are `layout`'s; `state.json` is written atomically (write-then-rename) and
`events.jsonl` is the host's hash-chained log.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from assure.core import atomic, control, private
from assure.core.chain import ChainWriter
from assure.errors import RunDirError
from assure.errors import read_json as read_json  # re-exported: records read run files with it
from assure.records.layout import LOCK, AttemptPaths, RunPaths
from assure.records.layout import RUNS_DIR as RUNS_DIR  # re-exported: the default runs base
from assure.records.states import RUN_OVER

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


NEW_ID_TRIES = (
    16  # fresh random suffixes tried before two processes are believed to collide for ever
)


def new_run_id(name: str) -> str:
    """`<name>-<UTC second>-<random>`: readable, in time order, and apart from every other run
    of the same spec begun in the same second (`new_dir` makes sure)."""
    return f"{name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(3)}"


def new_dir(base: Path, name: str) -> Path:
    """A folder `base/<new_run_id(name)>` that no other process made: the id is taken by an
    exclusive mkdir, and a taken one is drawn again, so runs (and suite runs) started side by
    side in one folder never share a directory."""
    with _making(base):
        private.make_folder(base, exist_ok=True)
    for _ in range(NEW_ID_TRIES):
        path = base / new_run_id(name)
        if not RUN_ID.match(path.name):
            raise RunDirError(
                f"unusable run id {path.name!r}", fix="give the spec (or suite) a shorter name"
            )
        try:
            with _making(path):
                private.make_folder(path)
            return path
        except RunDirError as exc:
            if not isinstance(exc.__cause__, FileExistsError):
                raise
    raise RunDirError(f"no free run id after {NEW_ID_TRIES} tries", where=str(base))


@contextlib.contextmanager
def _making(path: Path) -> Iterator[None]:
    """A folder of the runs base that cannot be made is said in words, with what to do."""
    try:
        yield
    except OSError as exc:
        raise RunDirError(
            f"cannot make the run directory: {exc.strerror or exc}",
            where=str(path),
            fix="pass --runs-dir a folder you can write to (the default is .assure/runs)",
        ) from exc


def write_json(path: Path, data: Any, *, mode: int = private.FILE_MODE) -> None:
    """A run-directory JSON file, written atomically (`core.atomic`): the invoking user's
    alone unless `mode` says a container reads it through its mount."""
    atomic.write_json(path, data, mode=mode)


class RunDir:
    """One run's directory and its host event log."""

    def __init__(self, path: Path):
        self.path = path.resolve()  # containers mount from it: Docker wants absolute paths
        self.paths = RunPaths(self.path)

    @classmethod
    def create(
        cls, base: Path, run_id: str, spec_source: Path, spec_json: dict[str, Any]
    ) -> RunDir:
        """The run `run_id`, which must not exist yet (a RunDirError if it does)."""
        if not RUN_ID.match(run_id):
            raise RunDirError(f"unusable run id {run_id!r}")
        with _making(base / run_id):
            private.make_folder(base, exist_ok=True)
            private.make_folder(base / run_id)
        return cls._populate(base / run_id, spec_source, spec_json)

    @classmethod
    def new(cls, base: Path, name: str, spec_source: Path, spec_json: dict[str, Any]) -> RunDir:
        """A new run of the spec `name` under a fresh id (`new_dir`)."""
        return cls._populate(new_dir(base, name), spec_source, spec_json)

    @classmethod
    def _populate(cls, root: Path, spec_source: Path, spec_json: dict[str, Any]) -> RunDir:
        paths = RunPaths(root.resolve())
        with _making(paths.root):
            paths.attempts.mkdir()
            paths.control.mkdir()
            paths.gateway_state.mkdir()
        shutil.copyfile(spec_source, paths.spec_yaml)
        os.chmod(paths.spec_yaml, private.FILE_MODE)
        write_json(paths.spec_json, spec_json)
        return cls(paths.root)

    @classmethod
    def open(cls, path: Path) -> RunDir:
        if not RunPaths(path).spec_json.is_file():
            raise RunDirError(
                f"not a run directory (it has no {RunPaths(path).spec_json.name})",
                where=str(path),
                fix="pass a run id or a run's folder: `assure runs` lists them",
            )
        return cls(path)

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def control_dir(self) -> Path:
        """Operator overrides (`assure halt|dial`); read-only to the gateway."""
        return self.paths.control

    @property
    def state_dir(self) -> Path:
        """Run-level gateway state that outlives attempts (the idempotency store)."""
        return self.paths.gateway_state

    def attempt(self, n: int) -> AttemptPaths:
        return self.paths.attempt(n)

    def attempts(self) -> list[Path]:
        found = [p for p in self.paths.attempts.iterdir() if p.name.isdigit()]
        return sorted(found, key=lambda p: int(p.name))

    def events(self) -> ChainWriter:
        return ChainWriter(self.paths.events, base={"run_id": self.run_id, "actor": "driver"})

    def spec_json(self) -> dict[str, Any]:
        spec: dict[str, Any] = read_json(self.paths.spec_json)  # written by RunDir.new
        return spec

    def save_state(self, state: dict[str, Any]) -> None:
        write_json(self.paths.state, state)

    def require_open(self, doing: str, instead: str) -> None:
        """Refuse `doing` once the run is over: its logs are sealed (`receipts/seal.json`), and a
        line appended to one would fail `assure receipts verify`. The one check every writer
        into a finished run goes through (operator requests, the monitor's escalations); `assure
        promote`, which re-seals, is the one command that may still change a finished run."""
        try:
            state = read_json(self.paths.state).get("state")
        except (RunDirError, AttributeError):
            state = None  # not known to be over: a halt still lands (the safe side)
        if state in RUN_OVER or (
            state is None and self.paths.seal.exists()
        ):  # a resumed run's old seal does not close it
            raise RunDirError(
                f"run {self.run_id} is {state or 'sealed'}: {doing} would append to its sealed"
                " logs, and `assure receipts verify` would then fail",
                where=str(self.path),
                fix=instead,
            )

    def override(
        self, actor: str, *, halt: bool | None = None, dial: str | None = None
    ) -> control.Override:
        """An operator's halt or dial for this run; refused once the run is over
        (`require_open`)."""
        doing = "a halt" if halt else f"a dial to {dial}"
        instead = (
            "nothing is left to halt or dial: the run is over; to commit a proposed result under"
            f" another dial, `assure promote {self.run_id} --dial LEVEL`"
        )
        return control.request(
            self.control_dir,
            run_id=self.run_id,
            actor=actor,
            halt=halt,
            dial=dial,
            check=lambda: self.require_open(doing, instead),
        )


PROBE_GRACE_SECONDS = (
    0.5  # `is_locked` holds the lock for a moment: a driver taking it meanwhile waits this long
)


class Busy(RunDirError):
    """Another process (or thread) drives this run or suite run."""


@contextlib.contextmanager
def exclusive(folder: Path, what: str) -> Iterator[None]:
    """One process drives a run (or a suite run) at a time: a second one, or a resume while the
    first lives, is refused. The lock is `folder/lock` (`layout.LOCK`), released when the process
    dies.
    """
    with open(folder / LOCK, "a+") as fh:
        deadline = time.monotonic() + PROBE_GRACE_SECONDS
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise Busy(
                        f"another assure process is driving this {what}",
                        where=str(folder),
                        fix="wait for it, or stop it first",
                    ) from None
                time.sleep(0.01)
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}@{socket.gethostname()}\n")
        fh.flush()
        yield


def is_locked(folder: Path) -> bool:
    """Whether a live process holds `exclusive(folder)` (`lock_held`); a missing or unusable
    lock file is held by nobody. Opened read-only, never made, no link followed."""
    try:
        fd = os.open(folder / LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return lock_held(fd)
    finally:
        os.close(fd)


def lock_held(fd: int) -> bool:
    """Whether a live process holds `exclusive` on the lock file open at `fd`. The kernel
    drops an flock when its holder dies, kill -9 included: ground truth a pid in a file is
    not (a pid is reused). Probing takes a shared lock for an instant, which is why
    `exclusive` does not refuse at the first try."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False
