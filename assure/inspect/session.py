"""One Inspect sample as one assure run of one attempt, driven by the ordinary driver.

The spec is the sample's config: its workspace, databases, limits, gateway, egress, contract
and assertions hold as for `assure run`; its `agent` is replaced by a process that only holds
the agent container open, since Inspect's solver is the agent and acts through `exec`. The
driver runs in a thread of its own: `start` returns once the agent container is up (or raises
why it never was), `finish` ends the hold (the run loop then collects, snapshots, judges,
signs and reports as for any run) and returns the run's result. Nothing here imports Inspect.

A sample that is cancelled (Ctrl-C, or the eval stopped) is finished with `cancelled`: it is
judged on what it left, with a harness error that keeps it from passing (a breach found stands).
A session that nobody finished by the time the interpreter exits (a second Ctrl-C before the
cleanup, a crash of the eval, `--no-sandbox-cleanup`) is finished as cancelled then: the exit
waits for it.
"""

from __future__ import annotations

import concurrent.futures.thread  # noqa: F401 - its exit hook first, so that ours runs before it
import functools
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from assure import spec as spec_mod
from assure.errors import AssureError, SandboxError, SpecError
from assure.inspect import channel
from assure.records import store
from assure.run import preflight
from assure.run.attempt import GATEWAY_READY_SECONDS, Attempt
from assure.run.driver import Driver, RunResult
from assure.sandbox import hardening

# The agent container's command: nothing but a wait, ended (exit 0) by the stop at `finish`.
HOLD = ("/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done")
START_SECONDS = 600.0  # prepare (images built first on a new host) and start, at most
FINISH_SECONDS = 600.0  # once the agent is stopped: collect, snapshot, checks, judge, seal
CANCELLED = (
    "inspect: the sample was cancelled before it ended (Ctrl-C, or the eval was stopped):"
    " what it left is judged, but it is never a pass"
)


def sample_spec(spec: spec_mod.Spec) -> spec_mod.Spec:
    """The spec an Inspect sample runs: one task, one attempt (a retry would have no agent),
    the holding command in place of the agent's, and the tools' /var/tmp."""
    if len(spec.tasks) != 1:
        raise SpecError(
            [f"{spec.path}: tasks: {len(spec.tasks)} tasks"],
            fix="give an Inspect sandbox a spec of one task (an Inspect sample is one attempt)",
        )
    agent = replace(spec.agent, command=HOLD, files=None, env={})
    return replace(
        spec,
        agent=agent,
        max_attempts=1,
        tasks=tuple(replace(t, max_attempts=1) for t in spec.tasks),
        sandbox=replace(spec.sandbox, tools_tmp=True),
    )


class SampleAttempt(Attempt):
    """An attempt that tells its session which container the agent is, once it started."""

    def __init__(
        self,
        *args: Any,
        started: Callable[[str], None],
        cancelled: Callable[[], bool],
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self._started_cb, self._cancelled = started, cancelled

    def _start(self, facts: dict[str, Any]) -> None:
        super()._start(facts)
        self._started_cb(self._agent)

    def _run(self, facts: dict[str, Any]) -> None:
        super()._run(facts)
        if self._cancelled():  # set before the stop that ended the run
            facts["harness_errors"].append(CANCELLED)


class Session:
    """One sample's run: `start`, any number of execs into `agent`, `finish` (idempotent)."""

    def __init__(self, spec_path: Path, runs_dir: Path, key: Path | None):
        self.spec = sample_spec(spec_mod.load(spec_path))
        self.runs_dir, self.key = runs_dir, key
        self.agent: str | None = None
        self.run: store.RunDir | None = None
        self.result: RunResult | None = None
        self.error: BaseException | None = None
        self._up = threading.Event()
        self._done = threading.Event()
        self._cancelled = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def run_dir(self) -> Path | None:
        return self.run.path if self.run is not None else None

    def start(self, say: Callable[[str], None] = lambda _: None) -> None:
        """Build what is missing, make the run and start its driver; return once the agent
        container runs. SandboxError if the attempt ended before that (its run is kept)."""
        backend, images = preflight.engine([self.spec], say)  # the driver's thread's own
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self.run = store.RunDir.new(
            self.runs_dir, self.spec.name, self.spec.path, self.spec.to_json()
        )
        attempt = functools.partial(
            SampleAttempt, started=self._started, cancelled=self._cancelled.is_set
        )
        driver = Driver(
            self.spec,
            self.run,
            backend,
            images,
            lambda *_: None,
            signing_key=self.key,
            attempt=attempt,
        )
        self._thread = threading.Thread(
            target=self._drive, args=(driver,), name=f"assure-{self.run.run_id}", daemon=True
        )
        _unfinished.add(self)
        self._thread.start()
        if not self._up.wait(START_SECONDS + GATEWAY_READY_SECONDS) or self.agent is None:
            self.finish()
            raise SandboxError(
                f"the assure attempt did not start: {self._why()}",
                where=str(self.run.path),
                fix=f"`assure show {self.run.run_id}` shows what happened",
            )

    def _started(self, agent: str) -> None:
        self.agent = agent
        self._up.set()

    def _drive(self, driver: Driver) -> None:
        try:
            self.result = driver.drive()
        except BaseException as exc:  # kept for `finish`, which raises it where it is waited for
            self.error = exc
        finally:
            self._done.set()
            self._up.set()

    def _why(self) -> str:
        if self.error is not None:
            return str(self.error)
        if self.result is None:
            return "unknown"
        report = self.result.view
        reason = report.attempts[-1].reason if report.attempts else None
        return (reason.summary if reason else None) or report.verdict.value

    def finish(self, *, cancelled: bool = False) -> RunResult:
        """End the hold, wait for the run to be judged and sealed, return it. Safe to call
        again, and from cleanup after a failure or a cancel: the containers are gone after it.
        `cancelled`: the sample did not end by itself (its verdict is at best an error)."""
        with self._lock:
            if self._thread is None:
                raise SandboxError("this sample's assure run never started")
            if cancelled:  # before the stop: the attempt still running reads it after
                self._cancelled.set()
            if self.agent is not None and not self._done.is_set():
                try:
                    channel.backend(self.spec.sandbox.backend).stop(
                        self.agent, hardening.STOP_GRACE_SECONDS
                    )
                except AssureError:
                    pass  # already gone: the run loop sees it exit either way
            self._thread.join(FINISH_SECONDS)
            _unfinished.discard(self)  # a driver stuck this long is not waited for again
            if self._thread.is_alive():
                assert self.run is not None
                raise SandboxError(
                    f"the assure run was not judged within {FINISH_SECONDS:.0f} s of its stop",
                    where=str(self.run.path),
                    fix="`assure gc` removes its containers once this process is gone",
                )
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class _Unfinished:
    """The sessions started and not yet finished in this process, finished (as cancelled) as
    the interpreter begins to exit: before it joins its threads and before concurrent.futures
    refuses new work (the attempt's collect and cleanup use an executor), by the hook that
    concurrent.futures itself uses, registered after it so that it runs first."""

    def __init__(self) -> None:
        self._sessions: set[Session] = set()
        self._lock = threading.Lock()
        self._hooked = False

    def add(self, session: Session) -> None:
        with self._lock:
            self._sessions.add(session)
            if not self._hooked:
                # private and untyped: it runs before the threads are joined (atexit: too late)
                threading._register_atexit(self._at_exit)  # type: ignore[attr-defined]
                self._hooked = True

    def discard(self, session: Session) -> None:
        with self._lock:
            self._sessions.discard(session)

    def _at_exit(self) -> None:
        with self._lock:
            left = list(self._sessions)
        for session in left:
            try:
                session.finish(cancelled=True)
            except BaseException:  # noqa: BLE001 - the next one is cleaned up all the same
                continue


_unfinished = _Unfinished()
