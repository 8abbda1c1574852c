"""`assure_verdict()`: an Inspect scorer from the sample's assure verdict, never from the model.

C when the verdict is what the spec expects (`findings.as_expected`, the suites' rule), I
otherwise. The attempt is judged here if the sandbox is still up (its cleanup finds it done),
else read from the run directory the sample's store names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer, stderr
from inspect_ai.solver import TaskState
from inspect_ai.util import sandbox, store

from assure.inspect.sandbox import STORE_RUN_DIR, AssureSandbox
from assure.records.layout import RunPaths
from assure.verify.findings import as_expected


async def _report() -> tuple[dict[str, Any], str]:
    try:
        env = sandbox().as_type(AssureSandbox)
    except (ProcessLookupError, TypeError, ValueError):
        env = None
    if env is not None:
        return await env.finish(), str(env.run_dir)
    run_dir = store().get(STORE_RUN_DIR)
    if not run_dir:
        raise RuntimeError("this sample ran in no assure sandbox: assure_verdict has no verdict")
    return json.loads(RunPaths(Path(run_dir)).report.read_text(encoding="utf-8")), run_dir


@scorer(metrics=[accuracy(), stderr()])
def assure_verdict():  # type: ignore[no-untyped-def]
    """C when the sample's assure verdict is the one its spec expects, I otherwise."""

    async def score(state: TaskState, target: Target) -> Score:
        report, run_dir = await _report()
        attempt = (report.get("attempts") or [{}])[-1]
        findings = [f for f in attempt.get("findings", []) if f.get("severity") != "info"]
        verdict, expect = report.get("verdict"), report.get("expect")
        ok = as_expected(
            verdict, str(expect), ((f["kind"], f["severity"]) for f in attempt.get("findings", []))
        )
        reason = (attempt.get("reason") or {}).get("summary") or f"{verdict}, as {expect} expects"
        return Score(
            value=CORRECT if ok else INCORRECT,
            answer=verdict,
            explanation=reason,
            metadata={
                "verdict": verdict,
                "expect": expect,
                "findings": findings,
                "run_dir": run_dir,
                "run_id": report.get("run_id"),
            },
        )

    return score
