"""The runtime monitor: an independent process that watches the runs base (`assure monitor`).

Each pass (`scan`, with an injected `now`):
1. stale heartbeats: a component of the manifest (`health.Manifest`) whose `last_success_at`
   is older than its `stale_after_seconds`, or that has published nothing (or garbage) since
   it was expected, raises a `stale_health` alert;
2. anomalies: the registered, finite `ANOMALIES` (rate of change, duplication ratio,
   resource saturation, silent component) are pure functions over plain data read from the
   runs base (`RunData`); each finding raises an alert of its class's own kind;
3. escalation: an alert still pending `ack_window_seconds` (T1) after it was raised dials
   its run down to `propose`, after `halt_after_seconds` (T2) halts it, through
   `control.request(actor="monitor")`, which logs the request in the run's operator log.
   Each step is done once per (alert, run): the monitor's own hash-chained ledger
   `.health/escalations.jsonl` remembers it. An alert about a shared component (driver,
   monitor) escalates on every running run; an acknowledged alert never escalates;
4. the monitor's own heartbeat.

Alerts are never duplicated: each carries a `detail.key` naming what it is about (component
and staleness episode, or anomaly class, run, attempt and subject); a pass raises nothing
for a key that already has an alert, pending or acknowledged.

The runs base is treated as hostile: every file is opened below the runs base without
following a symlink anywhere (`assure.core.confined`: openat2 with RESOLVE_NO_SYMLINKS, or
`O_NOFOLLOW` component by component; a FIFO is never opened), only regular files are read,
every read is bounded, and every parse error is caught. Garbage (unparsable JSON, a symlink, a FIFO,
an oversized file, a broken journal
line) is a *skipped, reported item* (`Pass.skipped`, printed by the CLI, counted in the
monitor's heartbeat), not an alert; the one exception is a heartbeat: garbage where an
expected heartbeat should be counts as no heartbeat, so it raises `stale_health`.

The detectors and the data they see are in anomalies.py, the hostile-ground reading in
runsbase.py; this module is the pass itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from assure.core import control
from assure.core.chain import ChainError, ChainWriter, iter_chain
from assure.errors import RunDirError
from assure.ops.anomalies import ANOMALIES, AttemptData, RunData, staleness
from assure.ops.runsbase import (
    MAX_ENTRIES,
    Refused,
    Tree,
    count,
    parse_journal,
    parse_json,
    parse_time,
)
from assure.records import alerts, health
from assure.records.alerts import Alert, AlertKind, AlertState, Sinks
from assure.records.health import HEALTH_DIR, MONITOR, RUN, Component, Manifest
from assure.records.layout import (
    BREACH,
    CONTAINER,
    EVENTS_LOG,
    JOURNAL,
    STATE,
    RelativeRun,
    alerts_sink,
)
from assure.records.store import RUN_ID, RunDir
from assure.textsafe import display
from assure.verify.stopped import Stopped

log = logging.getLogger("assure.ops.monitor")

ACTOR = "monitor"
LEDGER = "escalations.jsonl"
LOCK_FILE = "monitor.lock"
TERMINAL_STATES = frozenset(
    {"finished", "halted", "quarantined"}
)  # the driver never continues these: their alerts do not escalate
DIAL_DOWN, HALT = "dial_down", "halt"

MAX_JSON_BYTES = 1 << 20  # state.json, an alert, breach.json, operator.json
MAX_HEARTBEAT_BYTES = 64 << 10
MAX_CONTAINER_BYTES = 16 << 20  # container.json lists up to 1000 container changes
MAX_JOURNAL_BYTES = 8 << 20  # a larger gateway journal is read from its head and its last 8 MiB
MAX_LOG_BYTES = 16 << 20  # the ledger and an operator log (both are verified whole)
MAX_ATTEMPTS = 20  # the most recent attempts of a run that are examined
MAX_SKIPPED = 200  # skipped items kept per pass
MAX_NAME_CHARS = 64  # of a counter or an alert's kind, as the tree spells it
MAX_WHY_CHARS = 300  # of why a record of the tree was refused, as shown

READY = "gateway/ready"


# --- results -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str


@dataclass(frozen=True)
class Escalation:
    alert_id: str
    run_id: str
    step: str  # dial_down | halt
    effect: str  # requested | already_in_effect
    request_id: str | None


@dataclass
class Pass:
    alerts: list[Alert] = field(default_factory=list)
    escalations: list[Escalation] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    busy: bool = False  # another monitor holds the lock; this pass did nothing


def run_once(runs_base: Path, manifest: Manifest, now: float, sinks: Sinks) -> list[Alert]:
    """One pass; the alerts it raised."""
    return scan(runs_base, manifest, now, sinks).alerts


def scan(runs_base: Path, manifest: Manifest, now: float, sinks: Sinks) -> Pass:
    """One pass with everything it did and skipped. Never raises for anything found under
    the runs base."""
    return _Scan(Path(runs_base), manifest, now, sinks).run()


def read_runs(
    runs_base: Path, manifest: Manifest, now: float
) -> tuple[list[RunData], list[Skipped]]:
    """The plain data the detectors see, read (bounded, no links followed) without a pass's
    side effects: no alert, no escalation, no heartbeat."""
    scan = _Scan(Path(runs_base), manifest, now, Sinks())
    try:
        root = os.open(runs_base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        return [], [Skipped(display(str(runs_base)), display(f"cannot open: {exc.strerror}"))]
    scan.tree = Tree(root)
    try:
        return scan._runs(), scan.out.skipped
    finally:
        os.close(root)


def sinks_for(runs_base: Path, manifest: Manifest) -> Sinks:
    path = Path(manifest.alerts_file) if manifest.alerts_file else alerts_sink(Path(runs_base))
    return Sinks(jsonl=path, webhook=manifest.webhook)


def run_forever(
    runs_base: Path,
    manifest: Manifest,
    sinks: Sinks,
    interval: float | None = None,
    *,
    on_pass: Callable[[Pass], None] | None = None,
    stop: threading.Event | None = None,
) -> None:
    """A pass every `interval` seconds (default: the manifest's) until `stop` is set."""
    stop = stop or threading.Event()
    every = manifest.interval_seconds if interval is None else interval
    while not stop.is_set():
        started = time.monotonic()
        try:
            result = scan(runs_base, manifest, time.time(), sinks)
        except Exception:  # a bug, not the runs base: keep watching; the heartbeat shows the gap
            log.exception("monitor pass failed")
        else:
            if on_pass is not None:
                on_pass(result)
        stop.wait(max(0.0, every - (time.monotonic() - started)))


# --- one pass ---------------------------------------------------------------------------------
@dataclass
class _Known:
    """The alerts already in one alert directory."""

    keys: set[str] = field(default_factory=set)
    pending: list[dict[str, Any]] = field(default_factory=list)


class _Scan:
    def __init__(self, runs_base: Path, manifest: Manifest, now: float, sinks: Sinks):
        self.base, self.manifest, self.now, self.sinks = runs_base, manifest, now, sinks
        self.out = Pass()
        self._tree: Tree | None = None
        self._known: dict[str, _Known] = {}
        self._ledger: ChainWriter | None = None
        self._done: set[tuple[str, str, str]] | None = None

    @property
    def tree(self) -> Tree:
        """The runs base, opened (by `run`, or its caller) before anything is read from it."""
        if self._tree is None:
            raise RuntimeError("the runs base is not open")
        return self._tree

    @tree.setter
    def tree(self, tree: Tree) -> None:
        self._tree = tree

    # -- reporting
    def skip(self, path: str, reason: str) -> None:
        if len(self.out.skipped) < MAX_SKIPPED:
            self.out.skipped.append(Skipped(display(path), display(reason)))
        log.info("skipped %s: %s", display(path), display(reason))

    def run(self) -> Pass:
        try:
            self.base.mkdir(parents=True, exist_ok=True)
            (self.base / HEALTH_DIR).mkdir(exist_ok=True)
            root = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            self.skip(str(self.base), f"cannot use the runs base: {exc.strerror or exc}")
            return self.out
        self.tree = Tree(root)
        try:
            if self._health_dir_ok():
                self._locked_pass()
        finally:
            if self._ledger is not None:
                self._ledger.close()
            os.close(root)
        return self.out

    def _health_dir_ok(self) -> bool:
        try:
            if self.tree.stat(HEALTH_DIR, directory=True) is None:
                raise Refused("missing")
        except Refused as exc:
            self.skip(HEALTH_DIR, f"refused ({exc}); the monitor writes nothing this pass")
            return False
        return True

    def _locked_pass(self) -> None:
        try:
            lock = os.open(
                HEALTH_DIR + "/" + LOCK_FILE,
                os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                0o600,
                dir_fd=self.tree.root_fd,
            )
        except OSError as exc:
            self.skip(f"{HEALTH_DIR}/{LOCK_FILE}", f"refused: {exc.strerror}")
            return
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                self.out.busy = True
                return
            runs = self._runs()
            self._check_components(runs)
            self._check_anomalies(runs)
            self._escalate(runs)
            self._beat(runs)
        finally:
            os.close(lock)

    # -- reading runs
    def _runs(self) -> list[RunData]:
        try:
            listing = self.tree.listdir("")
        except Refused as exc:
            self.skip(".", str(exc))
            return []
        entries, truncated = listing or ([], False)
        if truncated:
            self.skip(".", f"more than {MAX_ENTRIES} entries; the rest is not examined")
        runs = []
        for name, is_dir, is_link in sorted(entries):
            if name == HEALTH_DIR or name.startswith("."):
                continue
            if is_link:
                self.skip(name, "a symlink in the runs base")
                continue
            if not is_dir or not RUN_ID.match(name):
                continue
            try:
                run = self._run(name)
            except Refused as exc:
                self.skip(name, str(exc))
                continue
            except Exception as exc:  # never let one run stop the pass
                self.skip(name, f"unexpected {type(exc).__name__}")
                continue
            if run is not None:
                runs.append(run)
        return runs

    def _json(
        self, rel: str, limit: int, *, report: bool = True
    ) -> tuple[Any, os.stat_result | None, str | None]:
        """(data, stat, problem); problem is "missing" or why the file was refused."""
        try:
            found = self.tree.read(rel, limit)
            if found is None:
                return None, None, "missing"
            return parse_json(found[0]), found[1], None
        except Refused as exc:
            if report:
                self.skip(rel, str(exc))
            return None, None, str(exc)

    def _mtime(self, rel: str) -> float | None:
        try:
            st = self.tree.stat(rel)
        except Refused as exc:
            self.skip(rel, str(exc))
            return None
        return st.st_mtime if st else None

    def _run(self, run_id: str) -> RunData | None:
        data, st, problem = self._json(f"{run_id}/{STATE}", MAX_JSON_BYTES)
        if problem == "missing":
            return None  # not (yet) a run
        if st is None or not isinstance(data, dict):
            if problem is None:
                self.skip(f"{run_id}/{STATE}", "not a JSON object")
            return RunData(run_id, None, None, None, self.now)
        state = data.get("state") if isinstance(data.get("state"), str) else None
        run = RunData(
            run_id,
            state,
            count(data.get("attempt")),
            parse_time(data.get("started_at")),
            st.st_mtime,
        )
        if not (run.running or self.now - st.st_mtime <= self.manifest.lookback_seconds):
            return run
        attempts = []
        for number in self._attempt_numbers(run_id):
            attempts.append(self._attempt(run_id, number))
        return RunData(
            run.run_id,
            run.state,
            run.attempt,
            run.started_at,
            run.state_mtime,
            self._mtime(f"{run_id}/{EVENTS_LOG}"),
            tuple(attempts),
            examined=True,
        )

    def _attempt_numbers(self, run_id: str) -> list[int]:
        where = RelativeRun(run_id)
        try:
            listing = self.tree.listdir(where.attempts)
        except Refused as exc:
            self.skip(where.attempts, str(exc))
            return []
        if listing is None:
            return []
        numbers = []
        for name, is_dir, is_link in listing[0]:
            if is_link:
                self.skip(where.attempt(name), "a symlink")
            elif is_dir and name.isdigit() and len(name) <= 9:
                numbers.append(int(name))
        return sorted(numbers)[-MAX_ATTEMPTS:]

    def _attempt(self, run_id: str, number: int) -> AttemptData:
        rel = RelativeRun(run_id).attempt(number)
        container, _, cproblem = self._json(f"{rel}/{CONTAINER}", MAX_CONTAINER_BYTES)
        container = container if isinstance(container, dict) else {}
        stopped, malformed = None, None
        if container.get("stopped") is not None:
            try:
                stopped = Stopped.from_json(container["stopped"])
            except ValueError as exc:  # shown as malformed (an anomaly), never taken as no stop
                malformed = str(exc)[:MAX_WHY_CHARS]
                self.skip(f"{rel}/{CONTAINER}", f"malformed stop record: {malformed}")
        if stopped is not None and stopped.counter:
            stopped = replace(stopped, counter=stopped.counter[:MAX_NAME_CHARS])
        breach, _, _ = self._json(f"{rel}/{BREACH}", MAX_JSON_BYTES)
        facts: dict[str, Any] = {"calls": (), "limit": None, "used": None, "breach": None}
        journal_mtime = None
        try:
            found = self.tree.read_ends(f"{rel}/{JOURNAL}", MAX_JOURNAL_BYTES, MAX_JSON_BYTES)
        except Refused as exc:
            self.skip(f"{rel}/{JOURNAL}", str(exc))
            found = None
        if found is not None:
            head, body, st, truncated = found
            journal_mtime = st.st_mtime
            facts, garbage = parse_journal(head, body, truncated)
            if truncated:
                self.skip(
                    f"{rel}/{JOURNAL}",
                    f"{st.st_size} bytes: only the first line and the last {MAX_JOURNAL_BYTES}"
                    " bytes were examined",
                )
            if garbage:
                self.skip(f"{rel}/{JOURNAL}", f"{garbage} unparsable journal lines ignored")
        return AttemptData(
            number=number,
            calls=facts["calls"],
            tool_calls_used=(
                facts["used"]
                if facts["used"] is not None
                else sum(1 for c in facts["calls"] if c.rule != "idempotency")
            ),
            tool_calls_limit=facts["limit"],
            budget_breach=facts["breach"]
            or (str(breach.get("counter"))[:MAX_NAME_CHARS] if isinstance(breach, dict) else None),
            finished=cproblem != "missing",
            oom_killed=container.get("oom_killed") is True,
            stopped=stopped,
            stop_malformed=malformed,
            ready_at=self._mtime(f"{rel}/{READY}"),
            journal_mtime=journal_mtime,
        )

    # -- alerts
    def _alerts_in(self, where: str) -> _Known:
        """The alerts of one run (or of `.health`), read once per pass."""
        if where in self._known:
            return self._known[where]
        known = _Known()
        self._known[where] = known
        run = RelativeRun(where)
        try:
            listing = self.tree.listdir(run.alerts)
        except Refused as exc:
            self.skip(run.alerts, str(exc))
            return known
        for name, _, _ in (listing or ([], False))[0]:
            if not name.endswith(".json") or name.startswith("."):
                continue
            data, _, problem = self._json(run.alert(name), MAX_JSON_BYTES)
            if problem is not None:
                continue
            if (
                not isinstance(data, dict)
                or not isinstance(data.get("id"), str)
                or not isinstance(data.get("kind"), str)
            ):
                self.skip(run.alert(name), "not an alert")
                continue
            detail = detail_read if isinstance(detail_read := data.get("detail"), dict) else {}
            if isinstance(detail.get("key"), str):
                known.keys.add(detail["key"])
            if data.get("state") == AlertState.PENDING:
                raised = parse_time(data.get("raised_at"))
                if raised is None:
                    self.skip(
                        run.alert(name),
                        "pending alert without a readable raised_at: not escalated",
                    )
                    continue
                component = (
                    detail.get("component")
                    if data["kind"] == AlertKind.STALE_HEALTH
                    and isinstance(detail.get("component"), str)
                    else None
                )
                known.pending.append(
                    {
                        "id": data["id"][:128],
                        "kind": data["kind"][:MAX_NAME_CHARS],
                        "raised_at": raised,
                        "component": component,
                    }
                )
        return known

    def _raise(self, where: str, kind: str, message: str, key: str, detail: dict[str, Any]) -> None:
        known, alerts_dir = self._alerts_in(where), RelativeRun(where).alerts
        if key in known.keys:
            return
        try:
            if self.tree.stat(where, directory=True) is None:
                raise Refused("missing")
            self.tree.stat(alerts_dir, directory=True)  # refuses a symlinked alerts dir
            alert = alerts.raise_alert(
                self.base / where,
                kind,
                message,
                self.sinks,
                {**detail, "key": key, "source": ACTOR},
            )
        except Refused as exc:
            self.skip(alerts_dir, f"cannot raise {kind}: {exc}")
            return
        except OSError as exc:
            self.skip(alerts_dir, f"cannot raise {kind}: {exc.strerror or exc}")
            return
        known.keys.add(key)
        self.out.alerts.append(alert)

    # -- 1. stale heartbeats
    def _heartbeat(self, rel: str) -> tuple[float | None, str]:
        data, _, problem = self._json(rel, MAX_HEARTBEAT_BYTES, report=False)
        if problem is not None:
            return None, problem
        last, why = health.last_success(data, self.now)
        return last, why or ""

    def _check_components(self, runs: list[RunData]) -> None:
        running = [r for r in runs if r.running]
        for component in self.manifest.components:
            try:
                if component.per_run:
                    for run in running:
                        self._check_run_component(component, run)
                else:
                    self._check_base_component(component, running)
            except Exception as exc:  # never let one component stop the pass
                self.skip(
                    component.heartbeat_path,
                    f"unexpected {type(exc).__name__} checking {component.name}",
                )

    def _check_base_component(self, component: Component, running: list[RunData]) -> None:
        own = (
            component.name == MONITOR
        )  # checked before this pass beats: a gap means the monitor was down
        if not own and not running:
            return  # nothing is expected to be alive
        since = None if own else min(r.started_at or r.state_mtime for r in running)
        rel = component.relative()
        last, problem = self._heartbeat(rel)
        if own and last is None:
            return  # never beaten: the first pass
        self._stale(HEALTH_DIR, component, rel, last, problem, since, None, None)

    def _check_run_component(self, component: Component, run: RunData) -> None:
        current = run.current
        if current is None or current.finished or current.ready_at is None:
            return  # no attempt in progress: nothing of the run is expected to beat
        rel = component.relative(current.number)
        last, problem = self._heartbeat(f"{run.run_id}/{rel}")
        self._stale(
            run.run_id,
            component,
            f"{RUN}/{rel}",
            last,
            problem,
            current.ready_at,
            run.run_id,
            current.number,
        )

    def _stale(
        self,
        where: str,
        component: Component,
        rel: str,
        last: float | None,
        problem: str,
        since: float | None,
        run_id: str | None,
        attempt: int | None,
    ) -> None:
        age = staleness(last, since, component.stale_after_seconds, self.now)
        if age is None:
            return
        seen = last is not None and (since is None or last >= since)
        episode = f"{last:.3f}" if seen else f"missing:{since:.0f}"
        what = f"{component.name}{f' of {run_id} attempt {attempt}' if run_id else ''}"
        if seen:
            message = (
                f"{what}: no success for {age:.0f} s (limit {component.stale_after_seconds:.0f} s)"
            )
        else:
            message = (
                f"{what}: no usable heartbeat at {display(rel)} ({display(problem)}) {age:.0f} s"
                f" after it was expected (limit {component.stale_after_seconds:.0f} s)"
            )
        self._raise(
            where,
            AlertKind.STALE_HEALTH,
            message,
            f"stale_health:{component.name}:{run_id or '-'}:{attempt or '-'}:{episode}",
            {
                "component": component.name,
                "heartbeat": rel,
                "last_success_at": last,
                "problem": problem or None,
                "age_seconds": round(age, 1),
                "stale_after_seconds": component.stale_after_seconds,
                "run_id": run_id,
                "attempt": attempt,
            },
        )

    # -- 2. anomalies
    def _check_anomalies(self, runs: list[RunData]) -> None:
        for run in runs:
            if not run.examined:
                continue
            for kind, detector in ANOMALIES:
                try:
                    findings = detector(run, self.manifest.anomalies, self.now)
                except Exception as exc:
                    self.skip(run.run_id, f"detector {kind} failed: {type(exc).__name__}")
                    continue
                for f in findings:
                    attempt = f.attempt if f.attempt is not None else "-"
                    key = f"{kind}:{run.run_id}:{attempt}:{f.subject}"
                    self._raise(
                        run.run_id,
                        kind,
                        f.message,
                        key,
                        {**f.detail, "run_id": run.run_id, "attempt": f.attempt, "anomaly": kind},
                    )

    # -- 3. escalation
    def _escalate(self, runs: list[RunData]) -> None:
        live = [
            r for r in runs if r.state not in TERMINAL_STATES
        ]  # garbage state: not known to be over
        running = [r for r in runs if r.running]
        for where, targets in [(HEALTH_DIR, running)] + [(r.run_id, [r]) for r in live]:
            for alert in self._alerts_in(where).pending:
                age = self.now - alert["raised_at"]
                t1 = self.manifest.ack_window(alert["component"])
                steps = [
                    step
                    for step, limit in ((DIAL_DOWN, t1), (HALT, self.manifest.halt_after_seconds))
                    if age >= limit
                ]
                for run in targets if steps else []:
                    for step in steps:
                        try:
                            self._apply(alert, run, step, age)
                        except Exception as exc:
                            self.skip(
                                RelativeRun(run.run_id).control,
                                f"escalation {step} of {alert['id']} failed: {type(exc).__name__}",
                            )

    def _ledger_done(self) -> set[tuple[str, str, str]]:
        """The (alert, run, step) escalations already done, from the monitor's ledger."""
        if self._done is not None:
            return self._done
        rel = f"{HEALTH_DIR}/{LEDGER}"
        path = self.base / rel
        self._done = set()
        try:
            found = self.tree.read(rel, MAX_LOG_BYTES)
            for r in iter_chain(found[0].decode("ascii").splitlines()) if found else ():
                self._done.add((str(r.get("alert_id")), str(r.get("run_id")), str(r.get("step"))))
        except (Refused, ChainError, UnicodeDecodeError) as exc:
            broken = path.with_name(f"{LEDGER}.broken-{int(self.now)}")
            self.skip(
                rel,
                f"unusable escalation ledger ({exc}); moved to {broken.name}: an escalation already"
                " in effect is not requested again",
            )
            with contextlib.suppress(OSError):
                path.unlink() if path.is_symlink() else os.replace(path, broken)
            self._done = set()  # nothing from a ledger that does not verify
        try:
            self._ledger = ChainWriter(path, base={"actor": ACTOR})
        except (OSError, ChainError, UnicodeDecodeError) as exc:
            self.skip(
                rel,
                f"cannot open the escalation ledger ({type(exc).__name__}); escalating without it",
            )
        return self._done

    def _apply(self, alert: dict[str, Any], run: RunData, step: str, age: float) -> None:
        done = self._ledger_done()
        if (alert["id"], run.run_id, step) in done:
            return
        control_rel = RelativeRun(run.run_id).control
        try:
            self.tree.stat(control_rel, directory=True)
            for name, limit in (
                (control.OPERATOR_FILE, MAX_JSON_BYTES),
                (control.OPERATOR_LOG, MAX_LOG_BYTES),
            ):
                st = self.tree.stat(f"{control_rel}/{name}")
                if st is not None and st.st_size > limit:
                    raise Refused(f"{name} is {st.st_size} bytes, over the {limit}-byte limit")
        except Refused as exc:
            self.skip(control_rel, f"cannot escalate {alert['id']} ({step}): {exc}")
            return
        control_dir = self.base / control_rel
        current = control.read(control_dir)
        already = current.halted or (step == DIAL_DOWN and current.dial == control.LEVELS[0])
        request_id = None
        if not already:
            over = RunDir(self.base / run.run_id)
            try:
                request_id = control.request(
                    control_dir,
                    run_id=run.run_id,
                    actor=ACTOR,
                    check=lambda: over.require_open(
                        f"escalating ({step})", "none: the run is over"
                    ),
                    **({"dial": control.LEVELS[0]} if step == DIAL_DOWN else {"halt": True}),
                ).request_id
            except (
                RunDirError
            ):  # it finished since it was read: nothing to escalate, its logs are sealed
                return
            except (OSError, ValueError, ChainError, UnicodeDecodeError) as exc:
                self.skip(
                    control_rel,
                    f"cannot escalate {alert['id']} ({step}): {type(exc).__name__}: {exc}",
                )
                return
        escalation = Escalation(
            alert["id"],
            run.run_id,
            step,
            "already_in_effect" if already else "requested",
            request_id,
        )
        if self._ledger is not None:
            self._ledger.append(
                "escalated",
                **asdict(escalation),
                alert_kind=alert["kind"],
                age_seconds=round(age, 1),
                at=self.now,
            )
        done.add((alert["id"], run.run_id, step))
        self.out.escalations.append(escalation)
        log.warning(
            "ESCALATED %s: %s on %s (%s, alert pending %.0f s)",
            display(str(alert["id"])),
            step,
            display(run.run_id),
            display(str(escalation.effect)),
            age,
        )

    # -- 4. own heartbeat
    def _beat(self, runs: list[RunData]) -> None:
        component = self.manifest.component(MONITOR) or next(
            c for c in health.DEFAULT_COMPONENTS if c.name == MONITOR
        )
        rel = component.relative()
        try:
            parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
            if parent and self.tree.stat(parent, directory=True) is None:
                (self.base / parent).mkdir(parents=True, exist_ok=True)
                self.tree.stat(parent, directory=True)
            if (self.base / rel).is_symlink():
                raise Refused("the heartbeat file is a symlink")
            health.beat(
                self.base / rel,
                MONITOR,
                now=self.now,
                runs=len(runs),
                alerts=len(self.out.alerts),
                escalations=len(self.out.escalations),
                skipped=len(self.out.skipped),
                skipped_items=[asdict(s) for s in self.out.skipped[:20]],
            )
        except (Refused, OSError) as exc:
            self.skip(rel, f"cannot publish the monitor heartbeat: {exc}")
