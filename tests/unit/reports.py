"""Hand-made reports for the readers' tests: the fields a test names, the rest as a report with
nothing in them says them, read through the strict `Report.from_json` like any report."""

from __future__ import annotations

from typing import Any

from assure.records.run_report import Reason, Report
from assure.verify.findings import SEVERITY, Kind


def finding(**fields: Any) -> dict[str, Any]:
    kind = fields["kind"]
    return {
        "severity": SEVERITY[Kind(kind)].value,
        "attribution": None,
        "detail": {},
        **fields,
    }


def reason(summary: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"summary": summary, "gate_denial": None, "agent_output": [], **fields}


def attempt(**fields: Any) -> dict[str, Any]:
    return {
        "attempt": 1,
        "task": "main",
        "verdict": "pass",
        "exit_code": 0,
        "timed_out": False,
        "stopped": None,
        "timings": {},
        "claim": None,
        "journal_head": None,
        "reason": None,
        **fields,
        "findings": [finding(**f) for f in fields.get("findings", [])],
    }


def task(**fields: Any) -> dict[str, Any]:
    return {
        "id": "main",
        "state": "proposed",
        "reason": None,
        "attempts": [1],
        "verdict": None,
        "verdict_attempt": None,
        **fields,
    }


def report_of(**fields: Any) -> Report:
    return Report.from_json(
        {
            "run_id": "r1",
            "spec": "n",
            "hostile": False,
            "expect": "pass",
            "verdict": "pass",
            "state": "finished",
            **fields,
            "tasks": [task(**t) for t in fields.get("tasks", [])],
            "attempts": [attempt(**a) for a in fields.get("attempts", [])],
        }
    )


def reason_of(**fields: Any) -> Reason:
    return Reason.from_json(reason(**fields), "reason")
