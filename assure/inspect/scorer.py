"""`assure_verdict()`: an Inspect scorer from the sample's assure verdict, never from the model.

C when the verdict is what the spec expects (`findings.as_expected`, the suites' rule), I
otherwise. The attempt is judged here if the sandbox is still up (its cleanup finds it done),
else read from the run directory the sample's store names.
"""

from __future__ import annotations

from pathlib import Path

from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer, stderr
from inspect_ai.solver import TaskState
from inspect_ai.util import sandbox, store

from assure.inspect.sandbox import STORE_RUN_DIR, AssureSandbox
from assure.records.layout import RunPaths
from assure.records.run_report import Report
from assure.verify.findings import as_expected


async def _report() -> tuple[Report, str]:
    try:
        env = sandbox().as_type(AssureSandbox)
    except (ProcessLookupError, TypeError, ValueError):
        env = None
    if env is not None:
        return await env.finish(), str(env.run_dir)
    run_dir = store().get(STORE_RUN_DIR)
    if not run_dir:
        raise RuntimeError("this sample ran in no assure sandbox: assure_verdict has no verdict")
    return Report.read(RunPaths(Path(run_dir)).report), run_dir


@scorer(metrics=[accuracy(), stderr()])
# Inspect's @scorer registers an untyped factory and types what it returns
def assure_verdict():  # type: ignore[no-untyped-def]
    """C when the sample's assure verdict is the one its spec expects, I otherwise."""

    async def score(state: TaskState, target: Target) -> Score:
        report, run_dir = await _report()
        last = report.attempts[-1] if report.attempts else None
        verdict, expect = report.verdict.value, report.expect
        judged = last.findings if last else ()
        findings = [f.to_json() for f in judged if f.severity != "info"]
        ok = as_expected(verdict, expect, ((f.kind.value, f.severity.value) for f in judged))
        why = last.reason.summary if last and last.reason else None
        reason = why or f"{verdict}, as {expect} expects"
        return Score(
            value=CORRECT if ok else INCORRECT,
            answer=verdict,
            explanation=reason,
            metadata={
                "verdict": verdict,
                "expect": expect,
                "findings": findings,
                "run_dir": run_dir,
                "run_id": report.run_id,
            },
        )

    return score
