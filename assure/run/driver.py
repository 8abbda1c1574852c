"""The dumb driver: a deterministic loop over durable state that runs a goal's tasks.

No model call and no network: it creates attempts, waits, verifies, promotes and records.
Every transition is appended to the run's hash-chained `events.jsonl` first and then
written to `state.json` (atomic), so after `kill -9` at any moment `resume()` picks up the
same run and task, reaps the orphaned containers, records the interrupted attempt, and
starts the next one (attempt counter + 1). An interrupted attempt (one the driver never
finished: Ctrl-C, SIGTERM, kill -9) does not use up `max_attempts`: it judged nothing.
Effects are not repeated: the gateway's idempotency store belongs to the run, and promotion
is idempotent.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from assure import __version__
from assure.core import confined, control
from assure.core.chain import canonical, sha256_hex, utc_now
from assure.errors import AssureError, RunDirError, describe
from assure.records import alerts, health, keys, layout, store
from assure.records.alerts import AlertKind
from assure.records.attempt_record import AttemptRecord, Records
from assure.records.layout import RunPaths
from assure.records.run_report import AttemptEntry, Reason, Report, TaskEntry
from assure.records.seal import seal_run, write_seal
from assure.records.states import RUN_OVER, STOPS_GOAL, TERMINAL, VERIFIED, RunState, TaskState
from assure.run import failpoints
from assure.run.attempt import PROMOTABLE, Attempt, Progress, fresh_copy
from assure.run.pool import WarmPool, remove_wakes
from assure.run.reasons import attempt_reason
from assure.sandbox import install, live, workspace_fs
from assure.sandbox.backend import SandboxBackend
from assure.sandbox.docker.images import ImageSet
from assure.spec import Spec, Task
from assure.textsafe import display
from assure.verify.findings import (
    Finding,
    Kind,
    Verdict,
    as_expected,
    breach_subjects,
    standing,
    unexplained_subjects,
    worst,
)
from assure.verify.judge import Judgement, judge
from assure.verify.stopped import StopReason


@dataclass(frozen=True)
class RunResult:
    run_dir: Path
    view: Report  # the report, typed: what the package's own readers use

    @property
    def verdict(self) -> str:
        return self.view.verdict.value

    @property
    def report(self) -> dict[str, Any]:
        """The report as `report.json` holds it, for callers outside the package (Inspect's
        metadata, tests, scripts)."""
        return self.view.to_json()


def task_spec(spec: Spec, task: Task, base: Path) -> Spec:
    """The spec one attempt of `task` runs: its assertions and contract, the current base."""
    agent = replace(spec.agent, env={**spec.agent.env, "ASSURE_TASK": task.description})
    return replace(
        spec,
        assertions=task.assertions,
        contract=task.contract,
        workspace=replace(spec.workspace, fixture=base),
        agent=agent,
    )


MAX_INTERRUPTED = (
    3  # interrupted attempts of one task (they use up no max_attempts) before it is quarantined
)


class Driver:
    def __init__(
        self,
        spec: Spec,
        run: store.RunDir,
        backend: SandboxBackend,
        images: ImageSet,
        progress: Progress,
        *,
        signing_key: Path | None = None,
        first_attempt: int = 1,
        pool: WarmPool | None = None,
        attempt: Callable[..., Attempt] = Attempt,
    ):
        self.attempt = (
            attempt  # what runs one attempt: `Attempt`, or an Inspect sample's (assure/inspect/)
        )
        self.spec, self.run, self.backend, self.images, self.progress = (
            spec,
            run,
            backend,
            images,
            progress,
        )
        self.pool = pool
        self.signing_key = signing_key
        self.first_attempt = (
            first_attempt  # above 1 when earlier attempts were lost elsewhere (a cluster node)
        )
        self.tasks = spec.tasks
        self.records = Records(run.paths)
        self._judged: dict[int, AttemptRecord] = {}  # the attempts judged in this process
        conf = spec.alerts
        self.sinks = alerts.Sinks(
            jsonl=Path(conf.file) if conf.file else layout.alerts_sink(run.path.parent),
            webhook=conf.webhook,
        )

    # --- state ----------------------------------------------------------------------------
    def _load_state(self) -> dict[str, Any]:
        path = self.run.paths.state
        self.resumed = path.is_file()
        if self.resumed:
            state: dict[str, Any] = store.read_json(path)  # written by _save_state
            return state
        return {
            "run_id": self.run.run_id,
            "spec": self.spec.name,
            "state": RunState.RUNNING,
            "next_attempt": self.first_attempt,
            "started_at": utc_now(),
            "tasks": {t.id: {"state": TaskState.PENDING, "attempts": []} for t in self.tasks},
            "order": [t.id for t in self.tasks],
        }

    def _record(self, event: str, **fields: Any) -> None:
        """Write-ahead: the event first, then the state that follows from it."""
        self.events.append(event, **fields)
        self.run.save_state(self.state)
        health.beat_driver(
            health.default_path(health.DRIVER, self.run.path.parent),
            run_id=self.run.run_id,
            event=event,
        )

    # --- the loop ---------------------------------------------------------------------------
    def drive(self) -> RunResult:
        with store.exclusive(self.run.path, "run"):
            self.state = self._load_state()
            if self.state["state"] in RUN_OVER:
                if not self.run.paths.seal.is_file():  # issuing them failed last time
                    issue_receipts(self.run, self.spec, self.state, self.signing_key, self.records)
                return RunResult(self.run.path, Report.read(self.run.paths.report))
            live.check(self.spec)  # before anything starts: a live database the gateway cannot use
            self.events = self.run.events()
            try:
                self._recover()
                for task in self.tasks:
                    if self.state["tasks"][task.id]["state"] in TERMINAL:
                        if self.state["tasks"][task.id]["state"] in STOPS_GOAL:
                            break
                        continue
                    if self._run_task(task) in STOPS_GOAL:
                        break
                self.state["state"] = (
                    RunState.HALTED
                    if control.read(self.run.control_dir).halted
                    else RunState.FINISHED
                )
                self.state["finished_at"] = utc_now()
                report = self._report()
                store.write_json(self.run.paths.report, report.to_json())
                self.state["verdict"] = report.verdict.value
                self._record(
                    "run_finished", verdict=report.verdict.value, state=self.state["state"]
                )
            except BaseException as exc:
                self.state["state"] = RunState.ABORTED
                self.state["reason"] = type(exc).__name__
                self._record("run_aborted", reason=type(exc).__name__)
                raise
            finally:
                self.events.close()  # sealed next: nothing more is appended to it
            issue_receipts(
                self.run,
                self.spec,
                self.state,
                self.signing_key,
                self.records,
                self._judged,
                sinks=self.sinks,
            )
            return RunResult(self.run.path, report)

    def _recover(self) -> None:
        """After a crash: reap the run's containers; an attempt that never finished is
        interrupted."""
        if not self.resumed:
            self._record(
                "run_started",
                spec=self.spec.name,
                tasks=[t.id for t in self.tasks],
                images={
                    "agent": install.agent_image(self.spec, self.images),
                    "gateway": self.images.gateway,
                },
            )
            return
        self.state["state"] = RunState.RUNNING
        reaped = reap(self.backend, self.run)
        mine = self.run.path.resolve()
        released = workspace_fs.release_orphans(lambda run_dir: run_dir == mine, layout.mount_owner)
        self._record(
            "run_resumed",
            reaped=reaped,
            released=[str(p.relative_to(mine)) for p in released],
            pid=os.getpid(),
        )
        for task_id, ts in self.state["tasks"].items():
            for attempt in ts["attempts"]:
                if attempt.get("verdict") is None and not attempt.get("interrupted"):
                    attempt["interrupted"] = True
                    self._record("attempt_interrupted", task=task_id, attempt=attempt["n"])

    def _run_task(self, task: Task) -> TaskState:
        ts = self.state["tasks"][task.id]
        if ts["state"] == TaskState.PROMOTING:
            return self._promote(task, ts["attempts"][-1]["n"])
        if ts["state"] == TaskState.PENDING:
            ts["state"] = TaskState.RUNNING
            self._record(
                "task_started",
                task=task.id,
                contract_id=task.contract.id if task.contract else None,
            )
            self._contract_events(task)
        while counted(ts["attempts"]) < task.max_attempts:
            interrupted = len(ts["attempts"]) - counted(ts["attempts"])
            if (
                interrupted >= MAX_INTERRUPTED
            ):  # an agent that gets its driver killed each time gets no endless retries
                return self._quarantine(
                    task, f"{interrupted} attempts interrupted (the driver was killed each time)"
                )
            if control.read(self.run.control_dir).halted:
                return self._finish_task(
                    task, TaskState.HALTED, "the operator halted the run: no new attempt"
                )
            n = self.state["next_attempt"]
            self.state["next_attempt"] = n + 1
            ts["attempts"].append({"n": n, "verdict": None})
            self._record("attempt_started", task=task.id, attempt=n)
            record = self._attempt(task, n)
            judgement = record.judgement
            assert judgement is not None
            ts["attempts"][-1]["verdict"] = judgement.verdict.value
            self._record(
                "attempt_verified",
                task=task.id,
                attempt=n,
                verdict=judgement.verdict.value,
                journal_head=judgement.journal_head,
            )
            self._escalate(record)
            if judgement.verdict in PROMOTABLE:
                return self._promote(task, n)  # refused (quarantine) if an earlier attempt breached
            if control.read(self.run.control_dir).halted:
                return self._finish_task(task, TaskState.HALTED, "the operator halted the run")
            if judgement.verdict is Verdict.BREACH and task.on_breach == "quarantine":
                return self._quarantine(task, f"breach in attempt {n}")
        breached = breached_attempt(ts["attempts"])
        return self._quarantine(
            task,
            (f"breach in attempt {breached}; " if breached is not None else "")
            + f"{task.max_attempts} attempts, none verified",
        )

    def _attempt(self, task: Task, n: int) -> AttemptRecord:
        base = self._base()
        spec = task_spec(self.spec, task, base)
        record = self.attempt(
            spec, self.run, n, self.backend, self.images, self.progress, pool=self.pool
        ).execute()
        self.records.keep(record)
        self._judged[n] = record
        store.write_json(record.paths.task, {"task": task.id, "spec": spec.to_json()})
        return record

    def _base(self) -> Path:
        """What a task starts from: the fixture, plus every task committed so far."""
        base = self.run.paths.base
        if not base.exists():
            tmp = self.run.paths.base_staging
            if tmp.exists():
                confined.remove(tmp.parent, tmp.name)
            fresh_copy(self.spec.workspace.fixture, tmp)
            os.replace(tmp, base)
        return base

    # --- outcomes ---------------------------------------------------------------------------
    def _promote(self, task: Task, n: int) -> TaskState:
        from assure.run import promote  # after the attempt: not part of the start

        ts = self.state["tasks"][task.id]
        breached = breached_attempt(ts["attempts"])
        if breached is not None:  # checked here, so that a resumed promotion is refused too
            return self._quarantine(
                task,
                f"breach in attempt {breached}; attempt {n} was then verified "
                f"({ts['attempts'][-1].get('verdict')}), but a breached task is never promoted",
            )
        record = self.records.get(n)
        decision = promote.decide(
            task_spec(self.spec, task, self._base()), self.run, record, signing_key=self.signing_key
        )
        if ts["state"] != TaskState.PROMOTING:
            ts["state"] = TaskState.PROMOTING
            self._record("promote_started", task=task.id, attempt=n, decision=decision.to_json())
        failpoints.hit("promote")
        try:
            if not decision.allowed:
                bundle = promote.propose(self.run, task.id, record)
                self._record(
                    "promote_proposed",
                    task=task.id,
                    attempt=n,
                    bundle=str(bundle.relative_to(self.run.path)),
                    rule=decision.rule,
                    reason=decision.reason,
                )
                return self._finish_task(task, TaskState.PROPOSED, decision.reason)
            commit = promote.commit(self.spec, self.run, task.id, record, self._base())
        # any failure of promote: commit_failed, an alert, a harness_error finding; never a crash
        except Exception as exc:
            message = describe(exc)
            self.records.keep(_add_harness_error(record, "promote", message, self.spec.hostile))
            alerts.raise_alert(
                self.run.path, AlertKind.COMMIT_FAILED, f"task {task.id!r}: {message}", self.sinks
            )
            return self._finish_task(task, TaskState.COMMIT_FAILED, message)
        self._record("promote_committed", task=task.id, attempt=n, **commit)
        return self._finish_task(task, TaskState.COMMITTED, "verified and committed")

    def _quarantine(self, task: Task, reason: str) -> TaskState:
        attempts = [
            a for a in self.state["tasks"][task.id]["attempts"] if a.get("verdict") is not None
        ]
        stands = attempts[standing([str(a["verdict"]) for a in attempts])] if attempts else None
        interrupted = stands is None or self.state["tasks"][task.id]["attempts"][-1].get(
            "interrupted"
        )
        alerts.raise_alert(
            self.run.path,
            AlertKind.QUARANTINE,
            f"task {task.id!r} quarantined: {reason}",
            self.sinks,
            expected=(
                None
                if interrupted or stands is None
                else self._expected(self._judgement(stands["n"]))
            ),
        )
        return self._finish_task(task, TaskState.QUARANTINED, reason)

    def _judgement(self, n: int) -> Judgement | None:
        """Attempt `n`'s judgement, or None when its record cannot be read (then its alert is
        pending)."""
        try:
            return self.records.get(n).judgement
        except AssureError:
            return None

    def _expected(self, judgement: Judgement | None) -> str | None:
        """Why an alert about `judgement` needs no person (the outcome this hostile spec expects,
        `findings.as_expected`: a breach only from covert changes), or None: it does."""
        if judgement is None or not self.spec.hostile:
            return None
        verdict = judgement.verdict.value
        if as_expected(
            verdict,
            self.spec.expect,
            ((f.kind.value, f.severity.value) for f in judgement.findings),
        ):
            return f"hostile spec {display(self.spec.name)} expects {verdict}"
        return None

    def _finish_task(self, task: Task, state: TaskState, reason: str) -> TaskState:
        self.state["tasks"][task.id]["state"] = state
        self.state["tasks"][task.id]["reason"] = reason
        self._record("task_resolved", task=task.id, state=state, reason=reason)
        return state

    def _contract_events(self, task: Task) -> None:
        contract = task.contract
        if not contract:
            return
        fields = {k: getattr(contract, k) for k in ("id", "proposed_by", "ratified_by", "hash")}
        if contract.ratified_by:
            self._record("contract_ratified", task=task.id, contract=fields)
        if contract.revoked:
            self._record("contract_revoked", task=task.id, contract=fields)

    def _escalate(self, record: AttemptRecord) -> None:
        """Journal how the attempt was stopped and raise its alerts: pending, unless the outcome is
        the one a hostile spec expects."""
        n, judgement, stop = record.number, record.judgement, record.facts.stopped
        assert judgement is not None
        if stop and stop.reason is StopReason.OPERATOR_HALT:
            self._record(
                "override_effective",
                attempt=n,
                request_id=stop.request_id,
                latency_ms=stop.latency_ms,
                effect="agent stopped; no new attempt or commit",
            )
            alerts.raise_alert(
                self.run.path,
                AlertKind.OVERRIDE_BLOCK,
                f"operator {stop.actor} halted the run; the agent was stopped",
                self.sinks,
                stop.to_json(),
            )
        elif stop:
            self._record(
                "budget_halt",
                attempt=n,
                counter=stop.counter,
                breach_at=stop.breach_at,
                halted_at=stop.halted_at,
                latency_ms=stop.latency_ms,
            )
            alerts.raise_alert(
                self.run.path,
                AlertKind.BUDGET_HALT,
                f"budget {stop.counter} exhausted; attempt halted {stop.latency_ms} ms"
                " after the breach",
                self.sinks,
                stop.to_json(),
                expected=self._expected(judgement),
            )
        if judgement.verdict is Verdict.BREACH:
            subjects = breach_subjects(judgement.findings)
            alerts.raise_alert(
                self.run.path,
                AlertKind.BREACH,
                f"{len(subjects)} breach findings: {', '.join(subjects[:5])}",
                self.sinks,
                {"subjects": subjects[:50]},
                expected=self._expected(judgement),
            )

    def _report(self) -> Report:
        return build_report(self.run, self.spec, self.state, self.records.get)


def breached_attempt(attempts: list[dict[str, Any]]) -> int | None:
    """The first of a task's attempts (as state.json lists them) judged a breach, or None.
    Such a task is never promoted: its breach stands, whatever a later attempt did."""
    return next((a["n"] for a in attempts if a.get("verdict") == Verdict.BREACH.value), None)


def counted(attempts: list[dict[str, Any]]) -> int:
    """The attempts that use up `max_attempts`: every one but those the driver never finished."""
    return sum(1 for a in attempts if not a.get("interrupted"))


def resume_note(run: store.RunDir, spec: Spec) -> str:
    """What resuming `run` will do, in a sentence: which attempts were interrupted (they do
    not count) and which attempt runs next, of how many."""
    state = store.read_json(run.paths.state)
    if state.get("state") in RUN_OVER:
        return (
            f"run {run.run_id} is over ({state.get('state')}): nothing to resume, its report"
            " follows"
        )
    for task in spec.tasks:
        ts = state["tasks"].get(task.id, {})
        if ts.get("state") in TERMINAL:
            continue
        which = f" of task {display(task.id)}" if len(spec.tasks) > 1 else ""
        if ts.get("state") == TaskState.PROMOTING:
            return (
                f"resuming run {run.run_id}: the last attempt{which} was verified; finishing its"
                " promotion (no attempt runs again)"
            )
        attempts = ts.get("attempts", [])
        lost = [a["n"] for a in attempts if a.get("verdict") is None or a.get("interrupted")]
        used = len(attempts) - len(lost)
        head = f"resuming run {run.run_id}: "
        if lost:
            head += (
                f"attempt{'s' if len(lost) > 1 else ''} {', '.join(map(str, lost))}"
                f" {'were' if len(lost) > 1 else 'was'} interrupted; "
            )
        if used >= task.max_attempts:
            return head + f"all {task.max_attempts} attempts{which} were used"
        return (
            head
            + f"running attempt {state['next_attempt']}{which} of max {task.max_attempts}"
            + (" (interrupted attempts don't count)" if lost else "")
        )
    return f"resuming run {run.run_id}: every task is resolved; finishing the run"


def _add_harness_error(
    record: AttemptRecord, subject: str, message: str, hostile: bool
) -> AttemptRecord:
    """Record a failure after the judgement (promote) in the attempt's verdict, recomputed by
    the same rule (a breach would stay a breach). Rewriting `verdict.json` is best effort: the
    task state and the alert carry the failure even when it cannot be rewritten."""
    if record.judgement is None:
        return record
    amended = record.judged(
        record.judgement.with_finding(
            Finding(Kind.HARNESS_ERROR, subject, message), hostile=hostile
        ),
        record.judged_at,
    )
    try:
        store.write_json(record.paths.verdict, amended.verdict_json())
    except OSError:
        pass
    return amended


def promote_proposed(
    spec: Spec,
    run: store.RunDir,
    task_id: str | None,
    signing_key: Path | None = None,
    dial: str | None = None,
) -> list[tuple[str, str, str]]:
    """`assure promote`: commit proposed tasks that a fresh gate decision now allows (`dial`:
    the operator's dial for this decision, else the run's). The one command that may change
    a finished run: it decides every task first, writes nothing unless one commits, and then
    seals the logs again and re-issues the receipts, signed as before."""
    from assure.run import promote

    with store.exclusive(run.path, "run"):
        state = store.read_json(run.paths.state)
        if (
            state.get("state") not in RUN_OVER
        ):  # a run that goes on (or will be resumed) is sealed by its driver, not here
            raise AssureError(
                f"run {run.run_id} is {state.get('state')}, not over: its driver may still"
                " change it",
                where=str(run.path),
                fix=(
                    f"let it finish (`assure resume {run.run_id}` if its driver was killed), then"
                    " promote"
                ),
            )
        records = Records(run.paths)
        wanted = [
            t
            for t in spec.tasks
            if state["tasks"][t.id]["state"] == TaskState.PROPOSED and task_id in (None, t.id)
        ]
        breached = {
            t.id: n
            for t in wanted
            if (n := breached_attempt(state["tasks"][t.id]["attempts"])) is not None
        }
        # a run recorded before a breach stood for its task: its later clean attempt was proposed
        if breached:
            why = "; ".join(f"task {display(t)}: attempt {n} breached" for t, n in breached.items())
            raise AssureError(
                f"run {run.run_id}: a breached task is never promoted ({why}); nothing was written",
                where=str(run.path),
                fix=(
                    f"`assure show {run.run_id}` and `assure diff {run.run_id} --attempt N` show"
                    " the breach; run the spec anew once it is understood"
                ),
            )
        if not wanted:
            raise AssureError(
                f"run {run.run_id} has no proposed task{' ' + repr(task_id) if task_id else ''} to"
                " promote",
                where=str(run.path),
                fix=f"`assure show {run.run_id}` lists its tasks and their states",
            )
        if spec.promote is None:
            bundles = ", ".join(
                str(run.paths.proposal(t.id).patch.relative_to(run.path)) for t in wanted
            )
            raise AssureError(
                f"run {run.run_id} is propose-only: its spec has no promote target, so nothing can"
                " be committed",
                where=str(run.path),
                fix=(
                    f"apply the proposal yourself ({bundles}, e.g. `git apply`), "
                    "or give the spec a promote.target and run it anew (`assure run SPEC --new`)"
                ),
            )
        _require_same_signer(run, signing_key)
        decided = [(t, records.get(state["tasks"][t.id]["attempts"][-1]["n"])) for t in wanted]
        decisions = [
            (
                t,
                r,
                promote.decide(
                    task_spec(spec, t, run.paths.base), run, r, dial=dial, signing_key=signing_key
                ),
            )
            for t, r in decided
        ]
        if not any(d.allowed for _, _, d in decisions):
            why = "; ".join(
                f"task {display(t.id)}: {d.rule}: {display(d.reason)}" for t, _, d in decisions
            )
            dialled = any(d.rule == "autonomy.insufficient" for _, _, d in decisions)
            raise AssureError(
                f"the gate still allows no commit in run {run.run_id} ({why}); nothing was written",
                where=str(run.path),
                fix=(
                    f"if a dial below commit is the cause: `assure promote {run.run_id} --dial"
                    " commit`; "
                    if dialled
                    else ""
                )
                + "else review the proposal in proposals/ and apply it yourself (the spec cannot"
                " change under a run)",
            )
        events = run.events()
        done: list[tuple[str, str, str]] = []  # task, state, reason
        try:
            for task, record, decision in decisions:
                ts = state["tasks"][task.id]
                events.append(
                    "promote_decided",
                    task=task.id,
                    attempt=record.number,
                    decision=decision.to_json(),
                    dial=dial,
                )
                if not decision.allowed:
                    done.append((task.id, TaskState.PROPOSED, decision.reason))
                    continue
                try:
                    commit = promote.commit(spec, run, task.id, record, run.paths.base)
                except (
                    promote.PromoteError
                ) as exc:  # the task stays proposed; the log says why nothing was written
                    events.append(
                        "promote_refused", task=task.id, attempt=record.number, reason=exc.message
                    )
                    raise
                ts["state"], ts["reason"] = (
                    TaskState.COMMITTED,
                    "committed later by an operator's promote",
                )
                events.append("promote_committed", task=task.id, attempt=record.number, **commit)
                run.save_state(state)
                done.append((task.id, TaskState.COMMITTED, ts["reason"]))
        finally:
            events.close()
            issue_receipts(
                run, spec, state, signing_key, records
            )  # the logs changed: seal them again
        return done


def _require_same_signer(run: store.RunDir, signing_key: Path | None) -> None:
    """Re-issued receipts are signed as the run's were: by the same key, or by none."""
    signed = run.paths.seal.is_file() and (
        store.read_json(run.paths.seal).get("signature") or {}
    ).get("key_id")
    mine = keys.key_id(keys.load_private(signing_key).public_key()) if signing_key else None
    if signed and signed != mine:
        raise AssureError(
            f"run {run.run_id}'s receipts are signed by {signed}: promote re-issues them, and would"
            " sign " + (f"with {mine}" if mine else "none"),
            where=str(run.path),
            fix="pass that key: --key (or ASSURE_SIGNING_KEY)",
        )


def issue_receipts(
    run: store.RunDir,
    spec: Spec,
    state: dict[str, Any],
    signing_key: Path | None,
    records: Records,
    judged: Mapping[int, AttemptRecord] | None = None,
    overruled: str | None = None,
    sinks: alerts.Sinks | None = None,
) -> None:
    """Seal the run's logs and issue one AAR per resolved task (signed when a key is given);
    `overruled` (why the run's verdict is not the one its record gives: a cluster's claimed
    breach): every receipt rejected, with that reason.

    Issued anew each time the run's record changes (e.g. a later `assure promote`), so every
    receipt carries the seal of the logs as they finally are. The journals of the attempts
    `judged` in this process are sealed with the heads their judge verified. Sealed under the
    control record's lock: an operator request either lands before the seal (and is sealed)
    or after the state says the run is over (and is refused, `RunDir.require_open`)."""
    from assure.records import receipts, trust  # at the end of a run only
    from assure.run import earned

    key = keys.load_private(signing_key) if signing_key else None
    principal = keys.key_id(key.public_key()) if key else "keyless"
    with control.locked(
        run.control_dir
    ):  # no operator request lands between the seal and its receipts
        shutil.rmtree(run.paths.receipts, ignore_errors=True)
        heads = {
            layout.journal_log(str(n)): (head["seq"], head["hash"])
            for n, r in (judged or {}).items()
            if r.judgement is not None and (head := r.judgement.journal_head) is not None
        }
        seal = seal_run(run.path, heads)
        pinned = earned.head(run.path.parent, signing_key)
        for task in spec.tasks:
            ts = state["tasks"][task.id]
            if ts["state"] not in TERMINAL or not ts["attempts"]:
                continue
            last = _standing_record(ts["attempts"], records)
            judgement = last.judgement or Judgement(Verdict.ERROR, (), (), None, None)
            verified = (
                ts["state"] in VERIFIED and judgement.verdict in PROMOTABLE and overruled is None
            )
            record = receipts.build_receipt(
                run_id=run.run_id,
                task_id=task.id,
                claim=_shown(
                    judgement.claim or {"status": "none", "summary": "the agent made no claim"}
                ),
                verdict="verified" if verified else "rejected",
                ground_truth="confirmed" if verified else "contradicted",
                reason=display(
                    f"{ts['state']}: {ts.get('reason', '')}"
                    + (f"; {overruled}" if overruled else "")
                ),
                checks=_checks(judgement, last.judged_at),
                subject=f"agent:{spec.agent.image}:{' '.join(spec.agent.command)}"[:200],
                principal=principal,
                verifier={
                    "id": f"assure-verifier/{__version__}",
                    "independence": (
                        "host-side, after the agent's container stopped; reads snapshots, the"
                        " gateway journal and the engine, never the agent's claim"
                    ),
                },
                deployment_id=receipts.deployment_id(),
                scope_id=task.contract.id if task.contract else "no-contract",
                seal=seal,
                changeset=(
                    receipts.changeset_of(run.path, last.number, last.changes())
                    if last.judgement is not None
                    else None
                ),
                trust=trust.receipt_trust(
                    ident=earned.identity(spec, last),
                    contract=task.contract,
                    attempt=f"{run.run_id}/{task.id}/{last.number}",
                    outcome=_outcome(ts["state"], judgement.verdict, verified, overruled),
                    head=pinned,
                ),
            )
            receipts.write_receipt(run.path, receipts.sign(record, key) if key else record)
        write_seal(run.path, seal, key)
    earned.record(run.path, signing_key, sinks or alerts.Sinks())


def _outcome(state: str, verdict: Verdict, verified: bool, overruled: str | None) -> str:
    """What the trust ledger counts a receipt as: a pass, a fail, or a fall."""
    if verdict == Verdict.BREACH or overruled is not None:
        return "breach"
    if state == TaskState.QUARANTINED:
        return "quarantine"
    return "pass" if verified else "fail"


def _standing_record(attempts: list[dict[str, Any]], records: Records) -> AttemptRecord:
    """The record of the attempt a receipt vouches for: the task's first breach, else its last."""
    judged = [a for a in attempts if a.get("verdict") is not None] or attempts[-1:]
    return records.get(judged[standing([str(a.get("verdict")) for a in judged])]["n"])


def _shown(value: Any) -> Any:
    """The agent's claim with every string escaped (`display`): a receipt is canonical UTF-8,
    which a lone surrogate from the agent's JSON could not be, and it is read by people."""
    if isinstance(value, str):
        return display(value)
    if isinstance(value, dict):
        return {display(str(k)): _shown(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shown(v) for v in value]
    return value


def _checks(judgement: Judgement, judged_at: str | None) -> list[dict[str, Any]]:
    """The verifier's checks behind a receipt: each assertion, plus the attribution of changes."""
    observed = judged_at or utc_now()
    findings = [f.to_json() for f in judgement.findings]
    items = [f for f in findings if f["kind"] in (Kind.ASSERTION_PASSED, Kind.ASSERTION_FAILED)]
    unexplained = unexplained_subjects(judgement.findings)
    checks = [
        {
            "source": "verifier:assertion",
            "query": display(f["subject"]),
            "observed_at": observed,
            "response_sha256": sha256_hex(canonical(f)),
            "excerpt": display(f"{f['kind']}: {f['message']}")[:200],
        }
        for f in items
    ]
    checks.append(
        {
            "source": "verifier:attribution",
            "query": "every change explained by an allowed journal entry or a writable scope",
            "observed_at": observed,
            "response_sha256": sha256_hex(canonical(findings)),
            "excerpt": (
                f"{len(unexplained)} unexplained: {', '.join(display(s) for s in unexplained[:5])}"[
                    :200
                ]
            ),
        }
    )
    return checks


def reap(backend: SandboxBackend, run: store.RunDir) -> int:
    """Remove every container, network and volume left by an earlier driver of this run: by
    the run's label, and the pooled pairs its attempts claimed (their `pool.json`)."""
    owned = backend.owned(run.run_id)
    for attempt in run.attempts():
        try:
            claimed = store.read_json(layout.AttemptPaths(attempt).pool_claim)
        except RunDirError:
            continue
        if isinstance(claimed, dict):
            remove_wakes(attempt)
            owned["containers"] += [
                {"id": str(claimed.get(k))} for k in ("agent", "gateway") if claimed.get(k)
            ]
            owned["volumes"] += [{"id": str(claimed["volume"])}] if claimed.get("volume") else []
    for c in owned["containers"]:
        backend.remove_container(c["id"])
    for n in owned["networks"]:
        backend.remove_network(n["id"])
    for v in owned["volumes"]:
        backend.remove_volume(v["id"])
    return sum(len(v) for v in owned.values())


def build_report(
    run: store.RunDir,
    spec: Spec,
    state: dict[str, Any],
    records: Callable[[int], AttemptRecord | None],
) -> Report:
    """The machine-readable report: tasks, every judged attempt's findings, and an overall
    verdict: the worst of the tasks' verdicts (by `findings.VERDICT_ORDER`), each task's
    that of the attempt that stands for it (`findings.standing`: a breach, once, stands)."""
    attempts: list[AttemptEntry] = []
    tasks: list[TaskEntry] = []
    for task_id in state["order"]:
        ts = state["tasks"][task_id]
        for a in ts["attempts"]:
            try:
                record = records(a["n"])
            except AssureError:  # an unreadable record is a missing one
                record = None
            if record is None or record.judgement is None:
                if (
                    a.get("verdict") == Verdict.BREACH.value
                ):  # the breach state.json recorded stands, record or not
                    attempts.append(_unrecorded_breach(a["n"], task_id))
                continue
            judgement, facts = record.judgement, record.facts
            attempts.append(
                AttemptEntry(
                    attempt=a["n"],
                    task=task_id,
                    verdict=judgement.verdict,
                    exit_code=facts.exit_code,
                    timed_out=facts.timed_out,
                    stopped=facts.stopped,
                    timings=facts.timings,
                    claim=judgement.claim,
                    journal_head=judgement.journal_head,
                    findings=judgement.findings,
                    # why it did not pass, from the records (never the claim)
                    reason=attempt_reason(record, spec),
                )
            )
        judged = [a for a in attempts if a.task == task_id]
        stands = judged[standing([a.verdict.value for a in judged])] if judged else None
        tasks.append(
            TaskEntry(
                id=task_id,
                state=TaskState(ts["state"]),
                reason=ts.get("reason"),
                attempts=tuple(a["n"] for a in ts["attempts"]),
                verdict=stands.verdict if stands else None,
                verdict_attempt=stands.attempt if stands else None,
            )
        )
    finals = [t.verdict.value for t in tasks if t.verdict is not None]
    return Report(
        run_id=run.run_id,
        spec=spec.name,
        hostile=spec.hostile,
        expect=spec.expect,
        verdict=Verdict(worst(finals)) if finals else Verdict.ERROR,
        state=RunState(state["state"]),
        tasks=tuple(tasks),
        attempts=tuple(attempts),
    )


def _unrecorded_breach(n: int, task_id: str) -> AttemptEntry:
    """A report's attempt for one that state.json says was a breach but whose judgement is gone
    or damaged: still a breach (it stands for its task), with a harness finding saying why."""
    missing = Finding(
        Kind.HARNESS_ERROR,
        f"attempt {n}",
        "state.json records a breach, but the attempt's judgement (verdict.json) is missing or"
        " unreadable",
    )
    return AttemptEntry(
        attempt=n,
        task=task_id,
        verdict=Verdict.BREACH,
        exit_code=None,
        timed_out=None,
        stopped=None,
        timings={},
        claim=None,
        journal_head=None,
        findings=(missing,),
        reason=Reason(f"breach recorded in state.json; {missing.message}", None, ()),
    )


def reverify(run_dir: Path) -> RunResult:
    """Recompute every attempt's verdict from the run directory alone, into `reverify.json`."""
    return rejudge(run_dir)[0]


def rejudge(run_dir: Path, spec: Spec | None = None) -> tuple[RunResult, dict[int, AttemptRecord]]:
    """The run's report as judged again here, and each attempt's record with that judgement:
    each record loaded from its folder and judged by the same judge as the live attempt.

    With `spec` (cluster mode: the caller's own), every attempt is judged against it, never
    against the spec files the run directory carries; otherwise against those."""
    run = store.RunDir.open(run_dir)
    state = store.read_json(run.paths.state)
    tasks = {t.id: t for t in spec.tasks} if spec is not None else {}
    rejudged: dict[int, AttemptRecord] = {}
    for path in run.attempts():
        paths = run.attempt(int(path.name))
        if not paths.container.is_file():
            continue
        recorded = store.read_json(paths.task) if paths.task.is_file() else None
        if spec is None:
            attempt_spec = Spec.from_json(recorded["spec"] if recorded else run.spec_json())
        else:
            task_id = recorded.get("task") if isinstance(recorded, dict) else spec.tasks[0].id
            if task_id not in tasks:
                raise RunDirError(
                    f"attempt {paths.number} names a task the spec does not have:"
                    f" {display(str(task_id))}",
                    where=str(paths.root),
                )
            attempt_spec = task_spec(spec, tasks[task_id], run.paths.base)
        record = AttemptRecord.load(paths, judged=False)
        judgement = judge(record, attempt_spec, recheck_workspace=True)
        store.write_json(paths.reverify, judgement.to_json())
        rejudged[paths.number] = record.judged(judgement, None)
    report = build_report(
        run, spec if spec is not None else Spec.from_json(run.spec_json()), state, rejudged.get
    )
    return RunResult(run.path, report), rejudged


def _suite_runs_of(runs_base: Path) -> set[str]:
    """The run ids the suite runs beside `runs_base` name (layout.suites_base)."""
    owned: set[str] = set()
    base = layout.suites_base(runs_base)
    for path in base.iterdir() if base.is_dir() else ():
        try:
            state = store.read_json(layout.SuitePaths(path).state)
        except AssureError:
            continue
        entries = state.get("runs") if isinstance(state, dict) else None
        owned |= {
            e["run_id"]
            for e in entries or ()
            if isinstance(e, dict) and isinstance(e.get("run_id"), str)
        }
    return owned


def find_unfinished(runs_base: Path, spec: Spec) -> store.RunDir | None:
    """The newest run of this same spec file that did not finish, that nobody drives and that
    no suite run names (`assure suite` continues those: a standalone run once finished one)."""
    if not runs_base.is_dir():
        return None
    candidates, owned = [], _suite_runs_of(runs_base)
    for path in runs_base.iterdir():
        if path.name in owned:
            continue
        paths = RunPaths(path)
        state_file = paths.state
        try:
            state = store.read_json(state_file)
            source = store.read_json(paths.spec_json).get("_source")
        except AssureError:
            continue
        resumable = isinstance(state, dict) and {"tasks", "order", "next_attempt"} <= state.keys()
        if (
            resumable
            and source == str(spec.path)
            and state.get("state") in (RunState.RUNNING, RunState.ABORTED)
            and not store.is_locked(path)
        ):
            candidates.append((state_file.stat().st_mtime, path))
    return store.RunDir(max(candidates)[1]) if candidates else None
