"""Run a spec: create the run directory, run the attempt, record events and the report.

This is the single-attempt core the durable driver builds on: every step is recorded in
the run's hash-chained `events.jsonl` and `state.json` before the next one starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import alerts, control, store
from .errors import RunDirError
from .attempt import Attempt, Progress
from .chain import ChainWriter, utc_now
from .sandbox.docker import DockerBackend
from .sandbox.images import ImageSet
from .spec import Spec
from .verify.judge import Judgement, judge


@dataclass(frozen=True)
class RunResult:
    run_dir: Path
    report: dict[str, Any]

    @property
    def verdict(self) -> str:
        return self.report["verdict"]


def build_report(run: store.RunDir, spec: dict[str, Any], attempts: list[tuple[int, Judgement, dict[str, Any]]]) -> dict[str, Any]:
    """The machine-readable report; its verdict is the last attempt's."""
    final = attempts[-1][1] if attempts else None
    return {
        "run_id": run.run_id,
        "spec": spec["name"],
        "hostile": spec["hostile"],
        "expect": spec["expect"],
        "verdict": final.verdict.value if final else "error",
        "attempts": [
            {
                "attempt": n,
                "verdict": j.verdict.value,
                "exit_code": facts.get("exit_code"),
                "timed_out": facts.get("timed_out"),
                "stopped": facts.get("stopped"),
                "timings": facts.get("timings", {}),
                "claim": j.claim,
                "journal_head": j.journal_head,
                "findings": [f.to_json() for f in j.findings],
            }
            for n, j, facts in attempts
        ],
    }


def run_spec(spec: Spec, *, runs_base: Path, run_id: str, backend: DockerBackend, images: ImageSet, progress: Progress) -> RunResult:
    run = store.RunDir.create(runs_base, run_id, spec.path, spec.to_json())
    events = run.events()
    state: dict[str, Any] = {"run_id": run.run_id, "spec": spec.name, "state": "running", "attempt": 1, "started_at": utc_now()}
    try:
        run.save_state(state)
        events.append("run_started", spec=spec.name, images={"agent": images.agent, "gateway": images.gateway})
        _contract_events(spec.data.get("contract"), events)
        if control.read(run.control_dir).halted:  # an operator halt refuses every continuation
            raise RunDirError("the run is halted by its operator; no new attempt starts", where=str(run.path))
        events.append("attempt_started", attempt=1)
        judgement = Attempt(spec, run, 1, backend, images, progress).execute()
        events.append("attempt_verified", attempt=1, verdict=judgement.verdict.value, journal_head=judgement.journal_head)
        facts = store.read_json(run.attempt_dir(1) / "container.json")
        _escalate(run, spec, facts, judgement, events, runs_base)
        report = build_report(run, spec.to_json(), [(1, judgement, facts)])
        store.write_json(run.path / "report.json", report)
        events.append("run_finished", verdict=report["verdict"])
        run.save_state({**state, "state": "finished", "verdict": report["verdict"], "finished_at": utc_now()})
        return RunResult(run.path, report)
    except BaseException as exc:
        events.append("run_aborted", reason=type(exc).__name__)
        run.save_state({**state, "state": "aborted", "reason": type(exc).__name__})
        raise
    finally:
        events.close()


def _contract_events(contract: dict[str, Any] | None, events: ChainWriter) -> None:
    if not contract:
        return
    fields = {k: contract.get(k) for k in ("id", "proposed_by", "ratified_by", "hash")}
    if contract.get("ratified_by"):
        events.append("contract_ratified", contract=fields)
    if contract.get("revoked"):
        events.append("contract_revoked", contract=fields)


def _escalate(run: store.RunDir, spec: Spec, facts: dict[str, Any], judgement: Judgement, events: ChainWriter, runs_base: Path) -> None:
    """Journal how the attempt was stopped and raise the alerts that need a person."""
    conf = spec.data.get("alerts", {})
    sinks = alerts.Sinks(jsonl=Path(conf["file"]) if conf.get("file") else runs_base.parent / "alerts.jsonl", webhook=conf.get("webhook"))
    stop = facts.get("stopped")
    if stop and stop["reason"] == "operator_halt":
        events.append("override_effective", request_id=stop.get("request_id"), latency_ms=stop.get("latency_ms"), effect="agent stopped; no new attempt or commit")
        alerts.raise_alert(run.path, "override_block", f"operator {stop.get('actor')} halted the run; the agent was stopped", sinks, stop)
    elif stop:
        events.append("budget_halt", counter=stop["counter"], breach_at=stop.get("breach_at"), halted_at=stop.get("halted_at"), latency_ms=stop.get("latency_ms"))
        alerts.raise_alert(run.path, "budget_halt", f"budget {stop['counter']} exhausted; attempt halted {stop.get('latency_ms')} ms after the breach", sinks, stop)
    if judgement.verdict.value == "breach":
        subjects = [f.subject for f in judgement.findings if f.severity == "breach"]
        alerts.raise_alert(run.path, "breach", f"{len(subjects)} breach findings: {', '.join(subjects[:5])}", sinks, {"subjects": subjects[:50]})


def reverify(run_dir: Path) -> RunResult:
    """Recompute every attempt's verdict from the run directory alone."""
    run = store.RunDir.open(run_dir)
    spec = run.spec_json()
    attempts = []
    for path in run.attempts():
        if (path / "container.json").is_file():
            attempts.append((int(path.name), judge(path, spec, recheck_workspace=True), store.read_json(path / "container.json")))
    return RunResult(run.path, build_report(run, spec, attempts))

