"""`assure health`: the facts of a run (or of the runs base) as `frontier.machine.health.v1`
checks (the format and the aggregate are in health_v1.py).

One pass reads, never writes; it reads the runs base as the monitor does (runsbase.Tree: no
symlink followed, every read bounded) and judges only what it read:

| layer | check | fails when | reason_code |
|---|---|---|---|
| process | `process.driver` | a run is `running` and no process holds its lock (its driver is gone: kill -9, a reboot), or the driver's heartbeat is overdue | `driver_gone`, `heartbeat_stale`, `heartbeat_missing` |
| process | `process.monitor` (optional) | the monitor's heartbeat is overdue: nobody watches | `heartbeat_stale`, `heartbeat_missing` |
| process | `process.gateway@RUN` | an attempt is in progress and its gateway's heartbeat is overdue | `heartbeat_stale`, `heartbeat_missing` |
| scheduler | `scheduler.runs` (runs base only) | a run's `state.json` is unreadable | `state_unreadable` |
| scheduler | `scheduler.run_state@RUN` | the run was interrupted (`running`, its driver gone) or aborted (either needs `assure resume`), or halted | `run_interrupted`, `run_aborted`, `run_halted`, `state_unreadable` |
| scheduler | `scheduler.tasks@RUN` | a task is quarantined or its commit failed | `task_quarantined`, `commit_failed` |
| execution | `execution.engine` | the Docker engine does not answer | `engine_unreachable` |
| execution | `execution.images` | the images of this checkout are not built | `images_missing` |
| execution | `execution.model_provider@RUN` | the last model call of the latest attempt failed at the provider | `provider_credit`, `provider_auth`; `provider_unavailable` (optional) |
| governance | `governance.operator@RUN` | the operator halted the run, or dialled it to `propose` | `operator_halt`, `operator_dial_propose` |
| governance | `governance.verifier@RUN` | no verifier (no assertion, or `verifier_trust: propose`), or its heartbeat is stale during an attempt | `verifier_missing`, `verifier_stale` |
| governance | `governance.contract@RUN` | the gate's own box-0 rule denies a task's mutations: contract missing, unratified, self-ratified, changed since ratified, revoked or expired | `contract_missing`, `contract_unratified`, `contract_self_ratified`, `contract_hash`, `contract_revoked`, `contract_expired` |
| governance | `governance.alerts` | an alert is pending acknowledgement | `alerts_pending` |

With a RUN, the `@RUN` checks are about that run, whatever its state. Without one, they are
about every live run (`running`, or `aborted`: the driver died and a resume continues it,
or with an unreadable `state.json`); finished and halted runs are history, but their
pending alerts still count. The provider is observed only through the run's own journaled
calls: the host never calls a model (box 2). `observed_at` is the heartbeat's
`last_success_at` for a heartbeat, otherwise the time of this pass (the files were read now).
"""  # noqa: E501 -- a table, one row a line

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from assure import spec as spec_mod
from assure.core import control, gate
from assure.ops import health_v1
from assure.ops.anomalies import staleness
from assure.ops.health_v1 import FAIL, PASS, UNKNOWN, Check
from assure.ops.runs import resume_command
from assure.ops.runsbase import Refused, Tree, parse_json
from assure.records import health, layout, receipts
from assure.records.alerts import AlertState
from assure.records.states import INTERRUPTED, RunState, TaskState
from assure.records.store import RUN_ID, lock_held
from assure.run import policy

MAX_JSON_BYTES = 1 << 20  # state.json, spec.json, an alert, a heartbeat
MAX_JOURNAL_TAIL_BYTES = 1 << 20  # the last model call is looked for in the journal's last MiB
MAX_ERROR_BODY_BYTES = 64 << 10  # a provider's error body, read from the blob store
MAX_EVIDENCE_ITEMS = 20  # alerts, runs or tasks listed in one check's evidence
FILE_FACTS_STALE_SECONDS = (
    60.0  # a fact read from a file now: good for one monitor interval and more
)
ENGINE_STALE_SECONDS = 60.0
LIVE_STATES = frozenset({RunState.RUNNING, RunState.ABORTED})
CREDIT_WORDS = (
    "credit balance",
    "billing",
    "payment",
    "insufficient credit",
    "quota",
)  # Anthropic answers 400 "Your credit balance is too low..."
UNAVAILABLE_CODES = frozenset(
    {"upstream_error", "upstream_timeout", "too_large"}
)  # the gateway's codes for a provider that did not answer usably


@dataclass(frozen=True)
class Engine:
    """What the Docker engine answered: whether it is reachable, and the images if built."""

    reachable: bool
    detail: str
    images: tuple[str, ...] | None = None  # None: not built (or not known: unreachable)


def engine_facts(connect: Callable[[], Any]) -> Engine:
    """Ask the engine made by `connect` (a `DockerBackend`) for its version and our images."""
    from assure.sandbox.docker.images import Images

    try:
        backend = connect()
        version = backend.version()
        found = Images(backend).resolve()
    except Exception as exc:  # any failure to ask is an unreachable engine, never a crash
        return Engine(False, f"{type(exc).__name__}: {getattr(exc, 'message', exc)}"[:300])
    detail = f"engine {version.get('Version')} (API {version.get('ApiVersion')})"
    return Engine(
        True, detail, None if found is None else (found.agent, found.gateway, found.egress)
    )


def probe(
    runs_base: Path,
    run_id: str | None,
    engine: Engine,
    now: float,
    manifest: health.Manifest = health.Manifest(),
) -> dict[str, Any]:
    """The health document of the run `run_id` under `runs_base`, or of the whole runs base."""
    try:
        root = os.open(runs_base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        layers = _no_base(runs_base, None, engine, now)
    except OSError as exc:
        layers = _no_base(runs_base, exc.strerror or type(exc).__name__, engine, now)
    else:
        try:
            layers = _Pass(runs_base, Tree(root), manifest, now).layers(run_id, engine)
        # a probe that cannot judge says unknown for every layer: fail closed, never a crash
        except Exception as exc:
            layers = {
                layer: [
                    Check(
                        f"{layer}.probe",
                        UNKNOWN,
                        now,
                        0.0,
                        f"the probe failed: {type(exc).__name__}",
                        reason_code="probe_error",
                    )
                ]
                for layer in health_v1.LAYERS
            }
        finally:
            os.close(root)
    return health_v1.document(receipts.deployment_id(), now, layers)


def _no_base(
    runs_base: Path, problem: str | None, engine: Engine, now: float
) -> dict[str, list[Check]]:
    """No runs base (`problem` None: nothing has run here yet) or an unreadable one; the engine is
    still asked."""

    def fact(cid: str) -> Check:
        if problem is None:
            return Check(
                cid,
                PASS,
                now,
                FILE_FACTS_STALE_SECONDS,
                "no runs base yet: nothing has run here",
                evidence={"runs_base": str(runs_base)},
            )
        return Check(
            cid,
            UNKNOWN,
            now,
            FILE_FACTS_STALE_SECONDS,
            f"the runs base cannot be read: {problem}",
            reason_code="runs_base_unreadable",
            evidence={"runs_base": str(runs_base)},
        )

    return {
        "process": [fact("process.driver")],
        "scheduler": [fact("scheduler.runs")],
        "execution": _engine_checks(engine, now),
        "governance": [fact("governance.alerts")],
    }


def _engine_checks(engine: Engine, now: float) -> list[Check]:
    if not engine.reachable:
        return [
            Check(
                "execution.engine",
                FAIL,
                now,
                ENGINE_STALE_SECONDS,
                f"the Docker engine does not answer: {engine.detail}",
                reason_code="engine_unreachable",
            ),
            Check(
                "execution.images",
                UNKNOWN,
                now,
                ENGINE_STALE_SECONDS,
                "unknown: the engine does not answer",
                reason_code="engine_unreachable",
            ),
        ]
    images = (
        Check(
            "execution.images",
            PASS,
            now,
            ENGINE_STALE_SECONDS,
            "the images of this checkout are built",
            evidence={"images": list(engine.images)},
        )
        if engine.images
        else Check(
            "execution.images",
            FAIL,
            now,
            ENGINE_STALE_SECONDS,
            "the images of this checkout are not built: run `assure images build`",
            reason_code="images_missing",
        )
    )
    return [Check("execution.engine", PASS, now, ENGINE_STALE_SECONDS, engine.detail), images]


@dataclass(frozen=True)
class _Run:
    run_id: str
    state: dict[str, Any] | None  # None: state.json unreadable (why in `problem`)
    problem: str | None = None
    attempt: int | None = None  # the attempt in progress
    ready_at: float | None = None  # when its gateway became ready
    driven: bool | None = (
        None  # a running run: whether a process holds its lock (None: the lock cannot be probed)
    )

    @property
    def running(self) -> bool:
        return self.state is not None and self.state.get("state") == RunState.RUNNING

    @property
    def interrupted(self) -> bool:
        """`running` in state.json, and no process holds the run's lock: its driver is gone."""
        return self.running and self.driven is False


class _Pass:
    def __init__(self, base: Path, tree: Tree, manifest: health.Manifest, now: float):
        self.base, self.tree, self.manifest, self.now = base, tree, manifest, now

    def layers(self, run_id: str | None, engine: Engine) -> dict[str, list[Check]]:
        every = self._all_runs() if run_id is None else []
        runs = (
            [self._run(run_id)]
            if run_id is not None
            else [r for r in every if r.state is None or r.state.get("state") in LIVE_STATES]
        )
        layers: dict[str, list[Check]] = {
            "process": [self._driver(runs), self._monitor()],
            "scheduler": [] if run_id is not None else [self._runs_check(every)],
            "execution": _engine_checks(engine, self.now),
            "governance": [self._alerts(run_id)],
        }
        for run in runs:
            layers["process"].append(self._heartbeat(health.GATEWAY, run, run.attempt is not None))
            layers["scheduler"] += [self._run_state(run), self._tasks(run)]
            spec = self._spec(run)
            layers["execution"].append(self._provider(run, spec))
            layers["governance"] += [
                self._operator(run),
                self._verifier(run, spec),
                self._contract(run, spec),
            ]
        return layers

    # -- reading
    def _json(self, rel: str) -> tuple[Any, str | None]:
        """(data, problem): problem is "missing" or why the file could not be used."""
        try:
            found = self.tree.read(rel, MAX_JSON_BYTES)
            return (None, "missing") if found is None else (parse_json(found[0]), None)
        except Refused as exc:
            return None, str(exc)
        except OSError as exc:
            return None, exc.strerror or type(exc).__name__

    def _run_ids(self) -> list[str]:
        try:
            listing = self.tree.listdir("")
        except (Refused, OSError):
            return []
        return sorted(
            name
            for name, is_dir, is_link in (listing or ([], False))[0]
            if is_dir and not is_link and RUN_ID.match(name)
        )

    def _all_runs(self) -> list[_Run]:
        runs = [self._run(r) for r in self._run_ids()]
        return [
            r for r in runs if r.problem != "missing"
        ]  # a folder without state.json is not (yet) a run

    def _run(self, run_id: str) -> _Run:
        state, problem = self._json(f"{run_id}/{layout.STATE}")
        if not isinstance(state, dict):
            return _Run(run_id, None, problem or "not a JSON object")
        run = _Run(run_id, state)
        if not run.running:
            return run
        run = replace(run, driven=self._locked(run_id))
        numbers = self._attempt_numbers(run_id)
        if not numbers:
            return run
        rel = f"{run_id}/{layout.ATTEMPTS}/{numbers[-1]}"
        try:
            if self.tree.stat(f"{rel}/{layout.CONTAINER}") is not None:
                return run  # the latest attempt has finished
            ready = self.tree.stat(f"{rel}/gateway/ready")
        except (Refused, OSError):
            ready = None
        return replace(run, attempt=numbers[-1], ready_at=ready.st_mtime) if ready else run

    def _locked(self, run_id: str) -> bool | None:
        """Whether a process holds the run's lock (`store.lock_held`: the kernel drops it when
        the driver dies); None when the lock file is not a regular file that can be opened."""
        try:
            with self.tree.open(f"{run_id}/{layout.LOCK}") as fd:
                return False if fd is None else lock_held(fd)
        except (Refused, OSError):
            return None

    def _attempt_numbers(self, run_id: str) -> list[int]:
        try:
            listing = self.tree.listdir(f"{run_id}/{layout.ATTEMPTS}")
        except (Refused, OSError):
            return []
        return sorted(
            int(n)
            for n, is_dir, is_link in (listing or ([], False))[0]
            if is_dir and not is_link and n.isdigit() and len(n) <= 9
        )

    def _spec(self, run: _Run) -> spec_mod.Spec | str:
        """The run's recorded spec, or why it cannot be read."""
        data, problem = self._json(f"{run.run_id}/spec.json")
        if problem is not None:
            return f"spec.json: {problem}"
        try:
            return spec_mod.Spec.from_json(data)
        except Exception as exc:
            return f"spec.json: {type(exc).__name__}"

    # -- process
    def _driver(self, runs: list[_Run]) -> Check:
        """A running run whose lock nobody holds has lost its driver, whatever its heartbeat
        (one file for every driver of the runs base) says; otherwise the heartbeat decides."""
        gone = [r.run_id for r in runs if r.interrupted]
        if not gone:
            return self._heartbeat(health.DRIVER, None, any(r.running for r in runs))
        shown = gone[:MAX_EVIDENCE_ITEMS]
        return Check(
            "process.driver",
            FAIL,
            self.now,
            FILE_FACTS_STALE_SECONDS,
            f"driver: gone for {len(gone)} running run(s) ({', '.join(shown)}): no process holds"
            " their lock; "
            + "; ".join(f"`{resume_command(self.base, r)}`" for r in shown)
            + " continues them",
            reason_code="driver_gone",
            evidence={"runs": shown, "resume": [resume_command(self.base, r) for r in shown]},
        )

    def _component(self, name: str) -> health.Component:
        """The manifest's component `name`, or the default one when the manifest leaves it out."""
        return self.manifest.component(name) or next(
            c for c in health.DEFAULT_COMPONENTS if c.name == name
        )

    def _heartbeat(self, name: str, run: _Run | None, expected: bool) -> Check:
        component = self._component(name)
        cid = f"process.{name}" + (f"@{run.run_id}" if run else "")
        if component.per_run:
            rel = (
                f"{run.run_id}/{component.relative(run.attempt)}"
                if run and run.attempt is not None
                else None
            )
        else:
            rel = component.relative()
        data, problem = self._json(rel) if rel else (None, "missing")
        last, why = health.last_success(data, self.now) if problem is None else (None, problem)
        evidence = {"heartbeat": component.heartbeat_path, "last_success_at": last}
        stale = component.stale_after_seconds
        if not expected:
            return Check(
                cid,
                PASS,
                self.now,
                stale,
                (
                    f"{name}: no run is running here, none is expected to beat"
                    if run is None
                    else f"{name}: no attempt of {run.run_id} is in progress"
                ),
                evidence=evidence,
            )
        since = run.ready_at if run is not None else None
        age = staleness(last, since, stale, self.now)
        if age is None:
            observed = last if last is not None and (since is None or last >= since) else self.now
            if (
                last is None and since is None
            ):  # expected, never seen, with nothing saying since when
                return Check(
                    cid,
                    FAIL,
                    self.now,
                    stale,
                    f"{name}: no usable heartbeat ({why})",
                    reason_code="heartbeat_missing",
                    evidence=evidence,
                )
            summary = (
                f"{name}: last success {self.now - last:.0f} s ago"
                if last is not None
                # `since` is set: both unset returned above
                else (
                    f"{name}: no heartbeat yet, {self.now - (since or self.now):.0f} s after it was"
                    " expected"
                    f" (limit {stale:g} s)"
                )
            )
            return Check(cid, PASS, observed, stale, summary, evidence=evidence)
        code = "heartbeat_stale" if last is not None else "heartbeat_missing"
        return Check(
            cid,
            FAIL,
            self.now,
            stale,
            (
                f"{name}: no success for {age:.0f} s (limit {stale:g} s)"
                if last is not None
                else f"{name}: no usable heartbeat ({why}) {age:.0f} s after it was expected"
            ),
            reason_code=code,
            evidence=evidence,
        )

    def _monitor(self) -> Check:
        """The monitor is what notices everything else going stale: without it health degrades."""
        component = self._component(health.MONITOR)
        data, problem = self._json(component.relative())
        last, why = health.last_success(data, self.now) if problem is None else (None, problem)
        evidence = {"heartbeat": component.heartbeat_path, "last_success_at": last}
        stale = component.stale_after_seconds
        if last is not None and self.now - last <= stale:
            return Check(
                "process.monitor",
                PASS,
                last,
                stale,
                f"monitor: last pass {self.now - last:.0f} s ago",
                critical=False,
                evidence=evidence,
            )
        summary = (
            f"monitor: last pass {self.now - last:.0f} s ago (limit {stale:g} s): nobody watches"
            " for staleness"
            if last is not None
            else f"monitor: no usable heartbeat ({why}): is `assure monitor` running?"
        )
        return Check(
            "process.monitor",
            FAIL,
            self.now,
            stale,
            summary,
            critical=False,
            reason_code="heartbeat_stale" if last is not None else "heartbeat_missing",
            evidence=evidence,
        )

    # -- scheduler
    def _runs_check(self, runs: list[_Run]) -> Check:
        by_state: dict[str, int] = {}
        for r in runs:
            key = str(r.state.get("state"))[:32] if r.state is not None else "unreadable"
            by_state[key] = by_state.get(key, 0) + 1
        bad = [r.run_id for r in runs if r.state is None]
        evidence = {"runs": by_state, "unreadable": bad[:MAX_EVIDENCE_ITEMS]}
        if bad:
            return Check(
                "scheduler.runs",
                UNKNOWN,
                self.now,
                FILE_FACTS_STALE_SECONDS,
                f"{len(bad)} run(s) with an unreadable state.json",
                reason_code="state_unreadable",
                evidence=evidence,
            )
        return Check(
            "scheduler.runs",
            PASS,
            self.now,
            FILE_FACTS_STALE_SECONDS,
            f"{len(runs)} run(s): "
            + (", ".join(f"{n} {s}" for s, n in sorted(by_state.items())) or "none"),
            evidence=evidence,
        )

    def _run_state(self, run: _Run) -> Check:
        cid = f"scheduler.run_state@{run.run_id}"
        if run.state is None:
            return Check(
                cid,
                UNKNOWN,
                self.now,
                FILE_FACTS_STALE_SECONDS,
                f"state.json unreadable: {run.problem}",
                reason_code="state_unreadable",
            )
        state = run.state.get("state")
        evidence = {
            "state": str(state)[:32],
            "attempt_in_progress": run.attempt,
            "next_attempt": run.state.get("next_attempt"),
        }
        resume = resume_command(self.base, run.run_id)
        if run.interrupted:
            return Check(
                cid,
                FAIL,
                self.now,
                FILE_FACTS_STALE_SECONDS,
                f"run {INTERRUPTED}: state.json says running, but no process holds its lock "
                f"(its driver is gone); `{resume}` continues it",
                reason_code="run_interrupted",
                evidence={**evidence, "state": INTERRUPTED, "resume": resume},
            )
        if run.running and run.driven is None:
            return Check(
                cid,
                UNKNOWN,
                self.now,
                FILE_FACTS_STALE_SECONDS,
                "run running, but its lock cannot be probed: whether its driver lives is unknown",
                reason_code="lock_unreadable",
                evidence=evidence,
            )
        if state in (RunState.RUNNING, RunState.FINISHED):
            return Check(
                cid, PASS, self.now, FILE_FACTS_STALE_SECONDS, f"run {state}", evidence=evidence
            )
        if state == RunState.HALTED:
            return Check(
                cid,
                FAIL,
                self.now,
                FILE_FACTS_STALE_SECONDS,
                "run halted by the operator: no new attempt or commit",
                reason_code=health_v1.RUN_HALTED,
                evidence=evidence,
            )
        if state == RunState.ABORTED:
            return Check(
                cid,
                FAIL,
                self.now,
                FILE_FACTS_STALE_SECONDS,
                f"run aborted (the driver died or was stopped): `{resume}` continues it",
                reason_code="run_aborted",
                evidence={**evidence, "resume": resume},
            )
        return Check(
            cid,
            UNKNOWN,
            self.now,
            FILE_FACTS_STALE_SECONDS,
            "state.json names no known run state",
            reason_code="state_unreadable",
            evidence=evidence,
        )

    def _tasks(self, run: _Run) -> Check:
        cid = f"scheduler.tasks@{run.run_id}"
        tasks = run.state.get("tasks") if run.state is not None else None
        if not isinstance(tasks, dict):
            return Check(
                cid,
                UNKNOWN,
                self.now,
                FILE_FACTS_STALE_SECONDS,
                "no readable task states",
                reason_code="state_unreadable",
            )
        states = {
            str(t)[:64]: str(v.get("state") if isinstance(v, dict) else None)[:32]
            for t, v in tasks.items()
        }
        shown = dict(list(states.items())[:MAX_EVIDENCE_ITEMS])
        for bad, code in (
            (TaskState.QUARANTINED, "task_quarantined"),
            (TaskState.COMMIT_FAILED, "commit_failed"),
        ):
            hit = [t for t, s in states.items() if s == bad]
            if hit:
                return Check(
                    cid,
                    FAIL,
                    self.now,
                    FILE_FACTS_STALE_SECONDS,
                    f"{len(hit)} task(s) {bad} ({', '.join(hit[:MAX_EVIDENCE_ITEMS])}): surfaced,"
                    " never re-queued",
                    reason_code=code,
                    evidence={"tasks": shown},
                )
        return Check(
            cid,
            PASS,
            self.now,
            FILE_FACTS_STALE_SECONDS,
            f"{len(states)} task(s), none quarantined or failed to commit",
            evidence={"tasks": shown},
        )

    # -- execution
    def _provider(self, run: _Run, spec: spec_mod.Spec | str) -> Check:
        cid = f"execution.model_provider@{run.run_id}"
        if isinstance(spec, str):
            return Check(
                cid,
                UNKNOWN,
                self.now,
                FILE_FACTS_STALE_SECONDS,
                spec,
                reason_code="spec_unreadable",
            )
        if spec.model is None or spec.model.mode != "anthropic":
            mode = spec.model.mode if spec.model else "none"
            return Check(
                cid,
                PASS,
                self.now,
                FILE_FACTS_STALE_SECONDS,
                f"no model provider: model mode {mode}",
                evidence={"mode": mode},
            )
        numbers = self._attempt_numbers(run.run_id)
        call = self._last_model_call(run.run_id, numbers[-1]) if numbers else None
        evidence: dict[str, Any] = {
            "mode": "anthropic",
            "upstream": spec.model.upstream,
            "attempt": numbers[-1] if numbers else None,
        }
        if isinstance(call, str):
            return Check(
                cid,
                UNKNOWN,
                self.now,
                FILE_FACTS_STALE_SECONDS,
                call,
                reason_code="journal_unreadable",
                evidence=evidence,
            )
        if call is None:
            return Check(
                cid,
                PASS,
                self.now,
                FILE_FACTS_STALE_SECONDS,
                "no model call journaled yet: nothing says the provider fails",
                evidence=evidence,
            )
        status, served, error = call.get("status"), call.get("served"), call.get("error")
        evidence.update(
            status=_plain(status),
            served=_plain(served),
            error=_plain(error),
            at=_plain(call.get("ts")),
        )
        failure = self._provider_failure(run.run_id, numbers[-1], call)
        if failure is None:
            return Check(
                cid,
                PASS,
                self.now,
                FILE_FACTS_STALE_SECONDS,
                f"last model call: {_plain(status)} ({_plain(served)})",
                evidence=evidence,
            )
        code, message = failure
        return Check(
            cid,
            FAIL,
            self.now,
            FILE_FACTS_STALE_SECONDS,
            f"last model call failed at the provider ({_plain(status)}): {message}",
            critical=code != "provider_unavailable",
            reason_code=code,
            evidence=evidence,
        )

    def _last_model_call(self, run_id: str, attempt: int) -> dict[str, Any] | str | None:
        """The journal's last `model_call` record, None if there is none, or why it cannot be
        read."""
        try:
            found = self.tree.read_ends(
                f"{run_id}/{layout.ATTEMPTS}/{attempt}/{layout.JOURNAL}", MAX_JOURNAL_TAIL_BYTES, 0
            )
        except (Refused, OSError) as exc:
            return f"gateway journal: {exc}"
        if found is None:
            return None
        lines = found[1].split(b"\n")
        for line in reversed(lines[1:] if found[3] else lines):  # a truncated tail starts mid-line
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(record, dict) and record.get("event") == "model_call":
                return record
        return None

    def _provider_failure(
        self, run_id: str, attempt: int, call: dict[str, Any]
    ) -> tuple[str, str] | None:
        """(reason_code, message) when the call shows the provider failing, else None."""
        status, served = call.get("status"), call.get("served")
        if served == "gateway":
            return (
                ("provider_unavailable", str(call.get("error"))[:64])
                if call.get("error") in UNAVAILABLE_CODES
                else None
            )
        if (
            served != "upstream"
            or not isinstance(status, int)
            or isinstance(status, bool)
            or status < 400
        ):
            return None
        message = self._error_message(run_id, attempt, call.get("response_sha256"))
        if status == 402 or (
            status in (400, 403) and any(w in message.lower() for w in CREDIT_WORDS)
        ):
            return "provider_credit", message or "payment required"
        if status in (401, 403):
            return "provider_auth", message or "the provider refused the key"
        if status == 429 or status >= 500:
            return "provider_unavailable", message or f"HTTP {status}"
        return None  # another 4xx is the request's fault, not the provider's

    def _error_message(self, run_id: str, attempt: int, digest: Any) -> str:
        """The provider's error message, from the blob store (Anthropic's `{"error":
        {"message"}}`)."""
        if (
            not isinstance(digest, str)
            or len(digest) != 64
            or not all(c in "0123456789abcdef" for c in digest)
        ):
            return ""
        try:
            found = self.tree.read(
                f"{run_id}/{layout.ATTEMPTS}/{attempt}/gateway/blobs/{digest}", MAX_ERROR_BODY_BYTES
            )
            body = parse_json(found[0]) if found else None
        except (Refused, OSError):
            return ""
        error = body.get("error") if isinstance(body, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        return message[:300] if isinstance(message, str) else ""

    # -- governance
    def _operator(self, run: _Run) -> Check:
        cid = f"governance.operator@{run.run_id}"
        override = control.read(
            layout.RunPaths(self.base / run.run_id).control
        )  # an unreadable record halts, as the gate reads it
        evidence = {
            "halted": override.halted,
            "dial": override.dial,
            "request_id": override.request_id,
            "actor": override.actor,
        }
        if override.halted:
            return Check(
                cid,
                FAIL,
                self.now,
                FILE_FACTS_STALE_SECONDS,
                f"halted by {override.actor or 'an unreadable control record'}: every continuation"
                " is refused",
                reason_code=health_v1.OPERATOR_HALT,
                evidence=evidence,
            )
        if override.dial == control.LEVELS[0]:
            return Check(
                cid,
                FAIL,
                self.now,
                FILE_FACTS_STALE_SECONDS,
                f"dialled down to propose by {override.actor}: results are only proposed",
                reason_code=health_v1.OPERATOR_DIAL_PROPOSE,
                evidence=evidence,
            )
        return Check(
            cid,
            PASS,
            self.now,
            FILE_FACTS_STALE_SECONDS,
            f"no halt; dial {override.dial or 'as the spec says'}",
            evidence=evidence,
        )

    def _verifier(self, run: _Run, spec: spec_mod.Spec | str) -> Check:
        cid = f"governance.verifier@{run.run_id}"
        if isinstance(spec, str):
            return Check(
                cid,
                UNKNOWN,
                self.now,
                FILE_FACTS_STALE_SECONDS,
                spec,
                reason_code=health_v1.VERIFIER_MISSING,
            )
        untrusted = [
            t.id for t in spec.tasks if policy.verifier_trust(_task(spec, t)) == gate.PROPOSE
        ]
        if untrusted:
            return Check(
                cid,
                FAIL,
                self.now,
                FILE_FACTS_STALE_SECONDS,
                f"no verifier for task {', '.join(untrusted[:MAX_EVIDENCE_ITEMS])} (no assertion,"
                " or verifier_trust propose): trust 0, propose-only",
                reason_code=health_v1.VERIFIER_MISSING,
                evidence={"tasks": untrusted[:MAX_EVIDENCE_ITEMS]},
            )
        beat = self._heartbeat(health.VERIFIER, run, run.attempt is not None)
        if beat.status != PASS:
            return Check(
                cid,
                FAIL,
                self.now,
                beat.stale_after_seconds,
                f"verifier present, but {beat.summary}",
                reason_code=health_v1.VERIFIER_STALE,
                evidence=beat.evidence,
            )
        return Check(
            cid,
            PASS,
            beat.observed_at,
            beat.stale_after_seconds,
            "every task has a verifier" + (" and its heartbeat is fresh" if run.attempt else ""),
            evidence=beat.evidence,
        )

    def _contract(self, run: _Run, spec: spec_mod.Spec | str) -> Check:
        """Box 0 as the gate judges it: its own contract rule, on a mutation inside the contract's
        scope."""
        cid = f"governance.contract@{run.run_id}"
        if isinstance(spec, str):
            return Check(
                cid,
                UNKNOWN,
                self.now,
                FILE_FACTS_STALE_SECONDS,
                spec,
                reason_code="spec_unreadable",
            )
        problems: dict[str, tuple[str, str]] = {}
        for task in spec.tasks:
            decision = policy.contract_denial(spec, task, self.now)
            if decision is not None:
                problems[task.id] = (decision.rule.replace(".", "_"), decision.reason)
        if problems:
            shown = dict(list(problems.items())[:MAX_EVIDENCE_ITEMS])
            return Check(
                cid,
                FAIL,
                self.now,
                FILE_FACTS_STALE_SECONDS,
                "the gate denies every mutation: "
                + "; ".join(f"{t}: {why}" for t, (_, why) in shown.items()),
                reason_code=next(iter(problems.values()))[0],
                evidence={"tasks": {t: code for t, (code, _) in shown.items()}},
            )
        return Check(
            cid,
            PASS,
            self.now,
            FILE_FACTS_STALE_SECONDS,
            "every task's contract is valid and ratified by someone other than its proposer",
        )

    def _alerts(self, run_id: str | None) -> Check:
        pending, unreadable = [], 0
        for rid in [run_id] if run_id is not None else self._run_ids():
            try:
                listing = self.tree.listdir(layout.RelativeRun(rid).alerts)
            except (Refused, OSError):
                unreadable += 1
                continue
            for name, is_dir, is_link in (listing or ([], False))[0]:
                if not name.endswith(".json") or is_dir or is_link:
                    continue
                data, problem = self._json(layout.RelativeRun(rid).alert(name))
                if problem is not None or not isinstance(data, dict):
                    unreadable += 1
                elif data.get("state") != AlertState.ACKED:
                    pending.append(
                        {
                            "id": str(data.get("id"))[:64],
                            "run_id": rid,
                            "kind": str(data.get("kind"))[:32],
                        }
                    )
        evidence = {"pending": pending[:MAX_EVIDENCE_ITEMS], "unreadable": unreadable}
        if pending:
            return Check(
                "governance.alerts",
                FAIL,
                self.now,
                FILE_FACTS_STALE_SECONDS,
                f"{len(pending)} alert(s) pending acknowledgement (`assure alerts --pending`,"
                " `assure ack ID`)",
                reason_code="alerts_pending",
                evidence=evidence,
            )
        if unreadable:
            return Check(
                "governance.alerts",
                UNKNOWN,
                self.now,
                FILE_FACTS_STALE_SECONDS,
                f"{unreadable} alert file(s) or folder(s) unreadable",
                reason_code="alerts_unreadable",
                evidence=evidence,
            )
        return Check(
            "governance.alerts",
            PASS,
            self.now,
            FILE_FACTS_STALE_SECONDS,
            "no alert pending acknowledgement",
            evidence=evidence,
        )


def _task(spec: spec_mod.Spec, task: spec_mod.Task) -> spec_mod.Spec:
    """The spec one attempt of `task` runs, as far as the verifier is concerned."""
    return replace(spec, assertions=task.assertions)


def _plain(value: Any) -> Any:
    """A journal value fit for evidence: a number, a flag or null as it is, anything else as a short
    string."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value)[:64]
