"""The typed report (records/run_report.py): a report.json the driver wrote reads back and writes
again as the very same bytes, and one that departs from the format is refused by the field's
name, never guessed at (a report read from a run directory is untrusted input).

`report_fixtures/` holds the reports of the same five runs as written by the dict-building driver
before the typed report (main at 50e8b10): they read back and write as the same bytes too, and
today's driver writes reports of the very same shape."""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from assure.errors import RunDirError
from assure.records import store
from assure.records.run_report import Report
from tests.unit.test_driver_states import drive, fix, new_run, ratified, spend, tamper, write_spec
from tests.unit.test_reasons import FIXED_TEXT, deny_and_edit, fix_and_complain

# (program, its function, spec fields): a pass with a claim, a fail with a gate denial and the
# agent's last lines, a breach, a budget stop, a hostile breach with a headline, two tasks
RUNS: dict[str, tuple[Any, dict[str, Any]]] = {
    "fix": (fix, {"contract": ratified(["fs:**"]), "assertions": FIXED_TEXT}),
    "fix_and_complain": (fix_and_complain, {"assertions": FIXED_TEXT}),
    "tamper": (tamper, {"hostile": True, "expect": "breach"}),
    "spend": (
        spend,
        {"contract": ratified(["fs:**"]), "limits": {"wall_seconds": 30, "tool_calls": 2}},
    ),
    "deny_and_edit": (
        deny_and_edit,
        {"assertions": [{"no_unattributed_changes": True}], "hostile": True, "expect": "breach"},
    ),
}


def written(tmp_path: Path, program: str) -> bytes:
    function, fields = RUNS[program]
    spec = write_spec(tmp_path, program, **fields)
    run = new_run(tmp_path, spec)
    fake_dir = tempfile.mkdtemp(prefix="rr", dir="/tmp")  # the gateway's socket: a short path
    try:
        drive(spec, run, fake_dir, {program: function})
    finally:
        shutil.rmtree(fake_dir, ignore_errors=True)
    return run.paths.report.read_bytes()


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Each run's report.json as the driver wrote it (one run each, shared by the tests)."""
    return {p: written(tmp_path_factory.mktemp(p), p) for p in RUNS}


def rewritten(data: Any, tmp_path: Path) -> bytes:
    path = tmp_path / "again.json"
    store.write_json(path, Report.from_json(data).to_json())
    return path.read_bytes()


FIXTURES = Path(__file__).parent / "report_fixtures"


@pytest.mark.parametrize("program", list(RUNS))
def test_a_report_read_and_written_again_is_the_same_bytes(program, reports, tmp_path):
    raw = reports[program]
    assert rewritten(json.loads(raw), tmp_path) == raw
    before = (FIXTURES / f"{program}.json").read_bytes()
    assert rewritten(json.loads(before), tmp_path) == before


def shape(value: Any) -> Any:
    """The keys of every object in `value`, nested; lists by the union of their items' shapes."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items()) if k != "timings"}
    if isinstance(value, list):
        return [s for s in {json.dumps(shape(v), sort_keys=True) for v in value}]
    return type(value).__name__


@pytest.mark.parametrize("program", list(RUNS))
def test_todays_driver_writes_the_report_the_dict_builder_wrote(program, reports):
    """Same fields, nested, and the same verdicts, findings and reasons (the run's id, times,
    journal head and the gateway's call ids differ from run to run)."""
    now, before = (
        json.loads(reports[program]),
        json.loads((FIXTURES / f"{program}.json").read_bytes()),
    )
    assert shape(now) == shape(before)
    for doc in (now, before):
        for attempt in doc["attempts"]:
            attempt["journal_head"] = attempt["timings"] = attempt["stopped"] = None
            attempt["findings"] = [  # an attribution names the gateway's call, by a fresh id
                {**f, "attribution": str(f["attribution"]).split(":")[0]}
                for f in attempt["findings"]
            ]
        doc["run_id"] = None
    assert now == before


def test_the_runs_cover_what_a_report_can_hold(reports):
    """So that the byte test above reads every part of the format at least once."""
    docs = {p: json.loads(raw) for p, raw in reports.items()}
    attempts = [a for d in docs.values() for a in d["attempts"]]
    assert {d["verdict"] for d in docs.values()} >= {"pass", "fail", "breach"}
    assert any(a["stopped"] for a in attempts) and any(a["claim"] for a in attempts)
    assert any(a["reason"] and a["reason"]["gate_denial"] for a in attempts)
    assert any(a["reason"] and a["reason"]["agent_output"] for a in attempts)
    assert any(f["attribution"] for a in attempts for f in a["findings"])
    assert any(a["journal_head"] for a in attempts) and any(a["timings"] for a in attempts)


def _with(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """`doc` with the field at `path` set to `value` (deleted when `value` is DELETE)."""
    out = copy.deepcopy(doc)
    holder = out
    for key in path[:-1]:
        holder = holder[key]
    if value is DELETE:
        del holder[path[-1]]
    else:
        holder[path[-1]] = value
    return out


DELETE = object()
BROKEN = [
    (("surprise",), 1, "report has unknown fields: surprise"),
    (("verdict",), DELETE, "report lacks fields: verdict"),
    (("verdict",), "passed", "report.verdict is one of pass, fail, breach, contained, error"),
    (("hostile",), "no", "report.hostile is a bool"),
    (("tasks", 0, "attempts"), ["1"], "report.tasks[0].attempts is a list of attempt numbers"),
    (("tasks", 0, "state"), "done", "report.tasks[0].state is one of pending"),
    (("attempts", 0, "exit_code"), True, "report.attempts[0].exit_code is a int or null"),
    (("attempts", 0, "timings", "agent"), "1s", "report.attempts[0].timings.agent is a number"),
    (("attempts", 0, "stopped"), {"reason": "tired"}, "report.attempts[0].stopped: a stop record"),
    (("attempts", 0, "findings", 0, "kind"), "fine", "report.attempts[0].findings[0].kind is one"),
    (("attempts", 0, "findings", 0, "severity"), "info", "findings[0].severity is breach for a"),
    (("attempts", 0, "findings", 0, "note"), "x", "findings[0] has unknown fields: note"),
    (("attempts", 0, "reason", "agent_output"), [1], "reason.agent_output is a list of strings"),
    (("attempts", 0, "reason", "gate_denial"), {"tool": "x"}, "gate_denial lacks fields: path"),
    (("attempts",), {}, "report.attempts is a list"),
]


@pytest.mark.parametrize("path,value,says", BROKEN, ids=[b[2][:40] for b in BROKEN])
def test_a_report_departing_from_the_format_is_refused_by_the_fields_name(
    path, value, says, reports, tmp_path
):
    doc = json.loads(reports["deny_and_edit"])  # a breach: its first finding weighs breach
    assert doc["attempts"][0]["findings"][0]["severity"] == "breach"
    with pytest.raises(ValueError) as refused:
        Report.from_json(_with(doc, path, value))
    assert says in str(refused.value)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "report.json").write_text(json.dumps(_with(doc, path, value)))
    with pytest.raises(RunDirError, match="malformed report"):
        Report.read(run_dir / "report.json")
