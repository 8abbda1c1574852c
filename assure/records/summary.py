"""The machine-readable summary of a run and of a suite run, as specs/report.schema.json
publishes it: what `assure run --json` and `assure suite --json` print, `--summary` writes,
and `assure report merge` joins across the shards of one suite.

Built from the run directories, which are the ground truth: a spec's verdict is its run's
`report.json`, its times its run's `state.json`; the suite run's state says only which run
each spec got. Strings are kept as recorded (agent-controlled ones included): whoever
displays them escapes them, and the JSON printed is ASCII.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import jsonschema

from assure import spec as spec_mod
from assure.core import atomic
from assure.errors import AssureError, RunDirError
from assure.records import layout, store
from assure.records.layout import RunPaths, SuitePaths
from assure.records.run_report import AttemptEntry, GateDenial, Reason, Report
from assure.records.states import shown_verdict
from assure.textsafe import agent_quoted
from assure.verify.findings import VERDICT_ORDER, as_expected, standing

SCHEMA_VERSION = 1
FINDINGS_MAX = 50  # findings listed per spec; the rest are counted in `findings_omitted`
REASON_MAX = 300  # characters of a result's one-line reason
VERDICTS = ("pass", "fail", "breach", "contained", "error")
OK_VERDICTS = ("pass", "contained")


class SuiteLike(Protocol):
    """What a summary needs of a loaded suite (`run.suite.Suite`): the whole suite, every spec in
    order."""

    name: str
    path: Path
    specs: tuple[spec_mod.Spec, ...]
    epochs: int

    @property
    def digest(self) -> str: ...


# --- the run form ---------------------------------------------------------------------------
def run_document(run_dir: Path, report: Report) -> dict[str, Any]:
    """`assure run --json`: the run's report, with what places it (its folder, its times)."""
    state = _read_or_empty(RunPaths(run_dir).state)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "run",
        **report.to_json(),
        "run_id": run_dir.name,
        "run_dir": str(run_dir),
        "started_at": state.get("started_at"),
        "finished_at": state.get("finished_at"),
    }


PLACEMENT = ("schema_version", "kind", "run_dir", "started_at", "finished_at")


def report_of(document: Any) -> Report:
    """The report in an `assure run --json` document (`run_document`), read as strictly as a
    report.json: what is not the report's is its placement."""
    if not isinstance(document, dict) or document.get("kind") != "run":
        raise ValueError("not an `assure run --json` document (kind run)")
    return Report.from_json({k: v for k, v in document.items() if k not in PLACEMENT})


def run_result(run_dir: Path, position: int = 1) -> dict[str, Any]:
    """One spec's result, from its run directory alone (`spec.json`, `state.json`,
    `report.json`)."""
    paths = RunPaths(run_dir)
    spec = store.read_json(paths.spec_json)
    if not isinstance(spec, dict) or not all(
        isinstance(spec.get(k), str) for k in ("name", "_source", "expect")
    ):
        raise RunDirError(
            "spec.json has no spec name, source or expect", where=str(paths.spec_json)
        )
    state = _read_or_empty(paths.state)
    try:
        report, error = Report.read(paths.report), None
    except RunDirError as exc:
        report, error = (
            None,
            (
                f"no verdict: {exc.message} (run state"
                f" {state.get('state', 'unknown')}{_because(state)})"
            ),
        )
    sample = spec.get("sample")
    return {
        **_result(
            position, spec["name"], spec["_source"], spec["expect"], run_dir, report, state, error
        ),
        "epoch": 1,  # a suite's summary says which
        "sample": str(sample.get("id")) if isinstance(sample, dict) else None,
    }


def _because(state: dict[str, Any]) -> str:
    return f": {state['reason']}" if state.get("reason") else ""


def _result(
    position: int,
    name: str,
    spec_path: str,
    expect: str,
    run_dir: Path | None,
    report: Report | None,
    state: dict[str, Any],
    error: str | None,
    entry: dict[str, Any] | None = None,
) -> dict[str, Any]:
    judged = report.verdict.value if report else None
    verdict = shown_verdict(report.state, judged) if report else None
    findings = list(_final_findings(report)) if report else []
    entry = entry or {}
    started, finished = (
        state.get("started_at") or entry.get("started_at"),
        state.get("finished_at") or entry.get("finished_at"),
    )
    return {
        "spec": name,
        "spec_path": spec_path,
        "position": position,
        "run_id": run_dir.name if run_dir else None,
        "run_dir": str(run_dir) if run_dir else None,
        "verdict": verdict,
        "expect": expect,
        "as_expected": _as_expected(verdict, expect, findings),
        "started_at": started,
        "finished_at": finished,
        "duration_seconds": seconds_between(started, finished),
        "reason": (
            f"halted by the operator; its attempts were judged {judged}"
            if verdict != judged
            else _reason(verdict, expect, findings, report, error)
        ),
        "findings": findings[:FINDINGS_MAX],
        "findings_omitted": max(0, len(findings) - FINDINGS_MAX),
    }


def _as_expected(verdict: str | None, expect: str, findings: Iterable[dict[str, Any]]) -> bool:
    """`findings.as_expected` on findings as a summary lists them: an expected breach is one of
    covert changes only."""
    return as_expected(
        verdict, expect, ((str(f.get("kind")), str(f.get("severity"))) for f in findings)
    )


def standing_attempts(report: Report) -> list[AttemptEntry]:
    """The attempt that stands for each task (`findings.standing`: its first breach, else its
    last), the heaviest verdict first: the ones the run's verdict follows from."""
    by_task: dict[str, list[AttemptEntry]] = {}
    for attempt in report.attempts:
        by_task.setdefault(attempt.task, []).append(attempt)
    stands = [judged[standing([a.verdict.value for a in judged])] for judged in by_task.values()]
    return sorted(stands, key=lambda a: VERDICT_ORDER.index(a.verdict))


def _final_findings(report: Report) -> Iterable[dict[str, Any]]:
    """Above-info findings of the attempt that stands for each task: the ones the verdict follows
    from, as the summary lists them."""
    for attempt in standing_attempts(report):
        for f in attempt.findings:
            if f.severity != "info":
                yield {
                    "kind": f.kind.value,
                    "severity": f.severity.value,
                    "subject": f.subject,
                    "message": f.message,
                }


def _reason(
    verdict: str | None,
    expect: str,
    findings: list[dict[str, Any]],
    report: Report | None,
    error: str | None,
) -> str | None:
    """One line: the standing attempt's reason (run/reasons.py), else the first finding as heavy as
    the verdict (else the first above info), else why there is no verdict; null for a pass (or
    containment) that was expected."""
    if verdict == expect and verdict in OK_VERDICTS:
        return None
    if verdict is None:
        return _line(error or "not run")
    why = attempt_reason(report)
    # the likeliest cause, read from the records (run/reasons.py): a missing script, the gate's
    # first denial, ...
    if why:
        return _line(why)
    heaviest = next(
        (f for f in findings if f["severity"] == verdict), findings[0] if findings else None
    )
    if heaviest is not None:
        return _line(f"{heaviest['kind']} {heaviest['subject']}: {heaviest['message']}")
    task_reason = next((t.reason for t in report.tasks if t.reason), None) if report else None
    if task_reason and verdict not in OK_VERDICTS:
        return _line(str(task_reason))
    return _line(f"verdict {verdict}, the spec expects {expect}")


def attempt_reason(report: Report | None) -> str | None:
    """The reason summary (run/reasons.py: a breach's heaviest finding, a command not found, the
    gate's first denial, ...) of the heaviest attempt that stands for a task, or None when none
    has one.
    """
    stands = standing_attempts(report) if report else []
    return next((a.reason.summary for a in stands if a.reason and a.reason.summary), None)


def gate_denial_line(reason: Reason) -> str | None:
    """The gate's first denial as the box and the HTML page show it under the reason's summary,
    as containment that worked, with the gate's message: it quotes the agent's arguments (a path,
    a tool name), so it is quoted and marked as the agent's (`agent_quoted`), never shown bare
    beside the headline; None when there was no denial."""
    denial = reason.gate_denial
    if denial is None:
        return None
    message = f"the gate's message: {agent_quoted(denial.message, shown=True)}"
    if (reason.summary or "").startswith("the gate denied"):
        return message
    return f"containment that worked: {denial_line(denial)}; {message}"


def denial_line(denial: GateDenial) -> str:
    """The gate's first denial in one line (run/reasons.py's `gate_denial`, whose strings are
    escaped already): the tool and the path are the agent's, quoted; the rule is the gate's.
    The gate's message quotes the agent's arguments, so it is evidence beside the line, never in it.
    """
    target = f" on {agent_quoted(denial.path, shown=True)}" if denial.path else ""
    more = f" ({denial.denied} calls denied)" if denial.denied > 1 else ""
    return f"the gate denied {agent_quoted(denial.tool, shown=True)}{target}: {denial.rule}{more}"


def _line(text: str) -> str:
    """Whitespace (newlines, tabs, separators) run together into one space, cut to REASON_MAX."""
    one = " ".join(text.split())
    return one if len(one) <= REASON_MAX else one[: REASON_MAX - 1] + "…"


def seconds_between(started: Any, finished: Any) -> float | None:
    """Seconds from one RFC 3339 time to another; None when either is missing or odd (a naive and
    an aware time, text that is no time)."""
    try:
        return round(
            max(
                0.0,
                (
                    datetime.fromisoformat(finished) - datetime.fromisoformat(started)
                ).total_seconds(),
            ),
            3,
        )
    except (TypeError, ValueError):
        return None


def _read_or_empty(path: Path) -> dict[str, Any]:
    try:
        data = store.read_json(path)
    except RunDirError:
        return {}
    return data if isinstance(data, dict) else {}


# --- the suite form -------------------------------------------------------------------------
def suite_document(suite: SuiteLike, suite_run: Path, runs_dir: Path) -> dict[str, Any]:
    """`assure suite --json`: one result per spec of the suite run (its shard of the suite), in
    suite order. `suite` is the whole suite as loaded, so that each result knows its place in it."""
    state = store.read_json(SuitePaths(suite_run).state)
    by_key = {s.key: (n, s) for n, s in enumerate(suite.specs, 1)}
    results = []
    for entry in state["runs"]:
        if entry["spec"] not in by_key:
            raise RunDirError(
                f"the suite run names a spec the suite does not have: {entry['spec']}",
                where=str(suite_run),
                fix="summarize a suite run with the suite it ran (or start a new one)",
            )
        position, spec = by_key[entry["spec"]]
        result = _suite_result(position, spec, entry, runs_dir)
        result.update(epoch=entry.get("epoch", 1), sample=spec.sample.id if spec.sample else None)
        results.append(result)
    results.sort(key=lambda r: (r["position"], r["epoch"]))
    return _suite(
        suite.epochs,
        state.get("pool"),
        suite.name,
        suite.digest,
        len(suite.specs),
        state.get("source", str(suite.path)),
        suite_run.name,
        state.get("shard"),
        None,
        state["started_at"],
        state.get("finished_at"),
        results,
    )


def _suite_result(
    position: int, spec: spec_mod.Spec, entry: dict[str, Any], runs_dir: Path
) -> dict[str, Any]:
    result = _from_run_dir(position, spec, entry, runs_dir)
    overruled = entry.get("node_finding") or (
        entry.get("reason") if entry.get("verdict") == "error" else None
    )
    # cluster mode: the caller's verdict (error for a node that disagreed or was lost, breach for
    # one it claimed) overrules the run dir's
    if overruled:
        verdict = entry["verdict"] if entry.get("verdict") in VERDICTS else "error"
        result.update(verdict=verdict, reason=_line(f"node: {overruled}"))
        if not result["findings"] and entry.get(
            "node_findings"
        ):  # no run directory here: the findings the node's message carried
            result.update(
                findings=entry["node_findings"][:FINDINGS_MAX],
                findings_omitted=max(0, len(entry["node_findings"]) - FINDINGS_MAX),
            )
        result["as_expected"] = (
            _as_expected(verdict, spec.expect, result["findings"])
            and not result["findings_omitted"]
        )
    placed = placement(entry)
    if placed is not None:
        result["placement"] = placed
    return result


def recorded_results(
    suite_run: Path, runs_dir: Path
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A suite run's state and one result per run it names, from the suite run's folder and the
    run directories alone (no suite file: it may have changed since): what `assure show` lists.
    A run never started, or whose folder is unreadable, is a result without a verdict."""
    state = store.read_json(SuitePaths(suite_run).state)
    if not isinstance(state, dict) or not isinstance(state.get("runs"), list):
        raise RunDirError(
            "not a suite run's state (no runs)", where=str(SuitePaths(suite_run).state)
        )
    runs, results = layout.suite_runs_dir(suite_run, runs_dir), []
    for n, entry in enumerate(e for e in state["runs"] if isinstance(e, dict)):
        run_id = str(entry.get("run_id"))
        error = "not run" if entry.get("run_id") is None else f"unusable run id {run_id!r}"
        result = None
        if store.RUN_ID.match(run_id):
            try:
                result = run_result(runs / run_id, n + 1)
            except RunDirError as exc:
                error = f"run directory unreadable: {exc.message}"
        if result is None:
            result = _result(
                n + 1,
                Path(str(entry.get("spec"))).stem,
                str(entry.get("spec")),
                "pass",
                None,
                None,
                {},
                error,
                entry,
            )
            result["expect"] = None
        results.append({**result, "epoch": entry.get("epoch", 1)})
    return state, results


LOSS_CAUSES = {
    "node": "lost with its node",
    "hung": "cancelled as hung",
    "caller": "stopped by the caller (its own stop, not the node's fault)",
}  # a lost submission's cause -> how a line says it


def loss_cause(loss: dict[str, Any]) -> str:
    """A lost submission's cause (`LOSS_CAUSES`), for states written before causes were kept
    too."""
    return loss.get("cause") or ("caller" if loss.get("error") == "the caller stopped" else "node")


def placement_lines(placed: dict[str, Any]) -> list[str]:
    """`placement` as lines: where the spec ran, then each lost attempt (when, where, why)."""
    if placed["where"] == "here":
        ran = "ran: here on the caller"
    else:
        ran = f"ran: on node {placed['node'] or 'unknown'}"
        if placed.get("address"):
            ran += f" ({placed['address']})"
        if placed.get("started_at"):
            ran += f", started there {placed['started_at']}"
        if placed.get("queued_seconds") is not None:
            ran += f" after {placed['queued_seconds']:g} s queued"
    return [
        ran,
        *(
            f"lost: attempt {loss['attempt']} at {loss['at']} on node {loss['node'] or 'unknown'}:"
            f" {LOSS_CAUSES.get(loss['cause'] or '', loss['cause'])} ({loss['error']})"
            for loss in placed["lost"]
        ),
    ]


# lost submissions a result lists (a spec's verdict is error after 3: more is a state written by
# hand)
LOST_MAX = 10


def placement(entry: dict[str, Any]) -> dict[str, Any] | None:
    """Where a cluster suite's spec ran (a node, or here on the caller) and every submission of it
    that was lost; None for a local suite's spec. From the suite run's state, as it says it."""
    lost = given if isinstance(given := entry.get("lost"), list) else []
    if not (entry.get("node") or entry.get("where") == "here" or lost or "next_attempt" in entry):
        return None

    def shown(value: Any) -> str | None:
        return _line(str(value)) if value is not None else None

    return {
        "where": "here" if entry.get("where") == "here" else "node",
        "node": shown(entry.get("node")),
        "address": shown(entry.get("node_address")),
        "started_at": shown(entry.get("node_started_at")),
        "queued_seconds": (
            entry["queued_seconds"]
            if isinstance(entry.get("queued_seconds"), (int, float))
            else None
        ),
        "here_because": [_line(str(w)) for w in entry.get("here_because") or []][:5],
        "lost": [
            {
                "attempt": loss.get("attempt") if isinstance(loss.get("attempt"), int) else None,
                "node": shown(loss.get("node")),
                "at": shown(loss.get("at")),
                "cause": shown(loss_cause(loss)),
                "error": shown(loss.get("error")),
            }
            for loss in lost[:LOST_MAX]
            if isinstance(loss, dict)
        ],
    }


def _from_run_dir(
    position: int, spec: spec_mod.Spec, entry: dict[str, Any], runs_dir: Path
) -> dict[str, Any]:
    if entry.get("run_id") is None:
        return _result(
            position, spec.name, str(spec.path), spec.expect, None, None, {}, "not run", entry
        )
    if not store.RUN_ID.match(str(entry["run_id"])):
        return _result(
            position,
            spec.name,
            str(spec.path),
            spec.expect,
            None,
            None,
            {},
            f"unusable run id {entry['run_id']!r}",
            entry,
        )
    run_dir = store.RunDir(runs_dir / entry["run_id"]).path
    try:
        return run_result(run_dir, position)
    except RunDirError as exc:  # the run directory is gone or damaged: no verdict, and why
        return _result(
            position,
            spec.name,
            str(spec.path),
            spec.expect,
            run_dir,
            None,
            {},
            f"run directory unreadable: {exc.message}",
            entry,
        )


def _suite(
    epochs: int,
    pool: dict[str, int] | None,
    name: str,
    digest: str,
    size: int,
    source: str,
    suite_run_id: str | None,
    shard: dict[str, int] | None,
    merged_from: list[dict[str, Any]] | None,
    started: str,
    finished: str | None,
    results: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "suite",
        "suite": name,
        "suite_digest": digest,
        "suite_size": size,
        "suite_run_id": suite_run_id,
        "source": source,
        "shard": shard,
        "merged_from": merged_from,
        "started_at": started,
        "finished_at": finished,
        "as_expected": all(r["as_expected"] for r in results),
        "counts": counts(results),
        "epochs": epochs,
        "metrics": metrics(results, epochs),
        "samples": per_sample(results),
        "pool": pool,
        "results": results,
    }


def per_sample(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each sample (each spec of the suite; of a spec with a dataset, each row) with its epochs'
    verdicts, in suite order: how many ran and how many got the verdict their spec expects."""
    by_position: dict[int, list[dict[str, Any]]] = {}
    for r in results:
        by_position.setdefault(r["position"], []).append(r)
    out = []
    for position, trials in sorted(by_position.items()):
        trials = sorted(trials, key=lambda r: r.get("epoch", 1))
        ran = [r for r in trials if r["verdict"] is not None]
        out.append(
            {
                "spec": trials[0]["spec"],
                "position": position,
                "sample": trials[0].get("sample"),
                "verdicts": [r["verdict"] for r in trials],
                "runs": len(ran),
                "as_expected": sum(r["as_expected"] for r in ran),
            }
        )
    return out


def metrics(results: Sequence[dict[str, Any]], epochs: int) -> dict[str, Any]:
    """The pass rate (a run passes when it got the verdict its spec expects: a contained hostile
    spec passes) over the samples that ran, each sample's epochs averaged first; its standard
    error over the samples (sample standard deviation / sqrt(samples), null below 2); pass@k for
    k = 1..epochs, the unbiased estimate (1 - C(n-c, k)/C(n, k), over samples with n >= k runs)."""
    ran = [s for s in per_sample(results) if s["runs"]]
    rates = [s["as_expected"] / s["runs"] for s in ran]
    mean = sum(rates) / len(rates) if rates else None
    stderr = (
        math.sqrt(sum((x - mean) ** 2 for x in rates) / (len(rates) - 1) / len(rates))
        if mean is not None and len(rates) > 1
        else None
    )
    at_k = {}
    for k in range(1, epochs + 1):
        scored = [
            1 - math.comb(s["runs"] - s["as_expected"], k) / math.comb(s["runs"], k)
            for s in ran
            if s["runs"] >= k
        ]
        at_k[str(k)] = round(sum(scored) / len(scored), 6) if scored else None
    return {
        "samples": len(ran),
        "runs": sum(s["runs"] for s in ran),
        "pass_rate": None if mean is None else round(mean, 6),
        "pass_rate_stderr": None if stderr is None else round(stderr, 6),
        "pass_at_k": at_k,
    }


def counts(results: Sequence[dict[str, Any]]) -> dict[str, int]:
    verdicts = [r["verdict"] for r in results]
    return {
        "total": len(results),
        "as_expected": sum(r["as_expected"] for r in results),
        "unexpected": sum(r["verdict"] is not None and not r["as_expected"] for r in results),
        **{v: verdicts.count(v) for v in VERDICTS},
        "not_run": verdicts.count(None),
    }


# --- checking, writing, merging ---------------------------------------------------------------
@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(spec_mod.schema("report"))


def problems(doc: Any) -> list[str]:
    """Every way `doc` departs from specs/report.schema.json, as `field: message`, in document
    order."""
    found = []
    for e in _validator().iter_errors(doc):
        found.append((list(e.absolute_path), f"{_field(e.absolute_path)}: {e.message}"))
    return [text for _, text in sorted(found, key=lambda p: [str(x) for x in p[0]])]


def _field(at: Iterable[Any]) -> str:
    out = ""
    for part in at:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


def write(path: Path, doc: dict[str, Any]) -> None:
    """The summary, whole or not at all (`core.atomic`)."""
    atomic.write_json(path, doc)


def merge(docs: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """One suite's summary from the summaries of its shards (`(file, document)` each): counts
    recomputed, results in suite order, `shard` null. Refuses what is not exactly the N shards
    of one suite, naming the file and what is wrong."""
    fix = (
        "pass the summaries `assure suite --shard K/N --summary FILE` wrote, one for each K of the"
        " same suite"
    )
    if not docs:
        raise AssureError("nothing to merge", fix=fix)
    for where, doc in docs:
        found = problems(doc)
        if found:
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise AssureError(
                f"not a summary this assure reads: {found[0]}{more}",
                where=where,
                fix=(
                    "regenerate it with this version of assure (`assure suite ... --summary FILE`);"
                    " the format is specs/report.schema.json"
                ),
            )
        if doc["kind"] != "suite":
            raise AssureError("a run's summary, not a suite's", where=where, fix=fix)
        if doc["merged_from"] is not None or doc["shard"] is None:
            raise AssureError(
                (
                    "already merged"
                    if doc["merged_from"]
                    else "the summary of a whole suite run, not of a shard"
                ),
                where=where,
                fix=fix,
            )
    first_file, first = docs[0]
    for where, doc in docs[1:]:
        if (doc["suite"], doc["suite_digest"]) != (first["suite"], first["suite_digest"]):
            same_name = doc["suite"] == first["suite"]
            raise AssureError(
                f"summaries of different suites: {first_file} is of suite {first['suite']!r},"
                f" {where} of "
                + (
                    f"a changed {doc['suite']!r} (its specs differ)"
                    if same_name
                    else f"suite {doc['suite']!r}"
                ),
                where=where,
                fix=fix,
            )
        if doc["shard"]["count"] != first["shard"]["count"]:
            raise AssureError(
                f"split {doc['shard']['count']} ways, but {first_file} {first['shard']['count']}"
                " ways",
                where=where,
                fix=fix,
            )
    count = first["shard"]["count"]
    by_index: dict[int, list[str]] = {}
    for where, doc in docs:
        by_index.setdefault(doc["shard"]["index"], []).append(where)
    twice = {k: files for k, files in sorted(by_index.items()) if len(files) > 1}
    if twice:
        raise AssureError(
            "the same shard twice: "
            + "; ".join(f"shard {k}/{count} in {', '.join(files)}" for k, files in twice.items()),
            fix=fix,
        )
    missing = [f"{k}/{count}" for k in range(1, count + 1) if k not in by_index]
    if missing:
        raise AssureError(
            f"missing shard{'s' if len(missing) > 1 else ''} {', '.join(missing)}", fix=fix
        )
    ordered = sorted(docs, key=lambda d: d[1]["shard"]["index"])
    seen: dict[tuple[int, int], str] = {}
    results = []
    epochs = first.get("epochs", 1)  # in the digest: the same in every shard
    for where, doc in ordered:
        for r in doc["results"]:
            trial = (r["position"], r.get("epoch", 1))
            if trial in seen:
                raise AssureError(
                    f"spec {r['spec']!r} (position {r['position']}, epoch {trial[1]}) is in two"
                    f" shards: {seen[trial]} and {where}",
                    where=where,
                    fix=fix,
                )
            seen[trial] = where
            # recomputed: a shard's word is not taken, except that it may say unexpected (its
            # findings may be cut short)
            results.append(
                {
                    **r,
                    "as_expected": (
                        _as_expected(r["verdict"], r["expect"], r["findings"])
                        and r["as_expected"] is True
                    ),
                }
            )
    results.sort(key=lambda r: (r["position"], r.get("epoch", 1)))
    uncovered = [  # a spec missing any of its epochs
        p
        for p in range(1, first["suite_size"] + 1)
        if any((p, e) not in seen for e in range(1, epochs + 1))
    ]
    if uncovered:
        raise AssureError(
            f"no shard has the spec{'s' if len(uncovered) > 1 else ''} at position"
            f" {', '.join(map(str, uncovered))} of the suite's {first['suite_size']}",
            fix=fix,
        )
    finished = [d["finished_at"] for _, d in ordered]
    pools = [d["pool"] for _, d in ordered if d.get("pool")]
    return _suite(
        epochs,
        {k: sum(p[k] for p in pools) for k in pools[0]} if pools else None,
        first["suite"],
        first["suite_digest"],
        first["suite_size"],
        first["source"],
        None,
        None,
        [{"index": d["shard"]["index"], "suite_run_id": d["suite_run_id"]} for _, d in ordered],
        min((d["started_at"] for _, d in ordered), key=instant),
        None if None in finished else max(finished, key=instant),
        results,
    )


def instant(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)
