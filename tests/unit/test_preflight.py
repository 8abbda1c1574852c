"""`assure validate` says why a spec that matches its schema cannot work, with the command that
fixes it, judged by the gate's own contract rule; and exits 1 for it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from assure import spec as spec_mod
from assure.run import policy, preflight

ROOT = Path(__file__).resolve().parents[2]
BENIGN = ROOT / "specs" / "examples" / "benign.yaml"


def variant(tmp_path: Path, change: Any) -> Path:
    """The benign example (ratified, valid) with `change(data)` applied, paths made absolute."""
    data = yaml.safe_load(BENIGN.read_text())
    data["workspace"]["fixture"] = str(ROOT / "fixtures" / "workspaces" / "calc")
    data["agent"]["files"] = str(ROOT / "fixtures" / "agents" / "benign")
    change(data)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "assure.cli", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_ratified_spec_with_its_agent_files_is_ok(tmp_path):
    done = validate(variant(tmp_path, lambda d: None))
    assert (done.returncode, done.stdout.split()[0], done.stderr) == (0, "ok", "")


def _unratified(d):
    del d["contract"]["ratified_by"]


def _self_ratified(d):
    d["contract"]["ratified_by"] = " Alice@Example.org"  # the proposer, as the gate compares names


def _widened(d):
    d["workspace"]["writable"] = ["**"]  # a term changed after ratification


def _missing_script(d):
    d["agent"]["command"] = ["sh", "/opt/agent/gone.sh"]


@pytest.mark.parametrize(
    ("change", "field", "said", "fix"),
    [
        (
            _unratified,
            "contract",
            "is not ratified (contract.unratified)",
            "put their name in `ratified_by`",
        ),
        (
            _self_ratified,
            "contract",
            "was ratified by its own proposer 'alice@example.org' (contract.self_ratified)",
            "put their name in `ratified_by`",
        ),
        (
            _widened,
            "contract",
            "terms changed since it was ratified: writable",
            "`assure contract hash {path} --write`",
        ),
        (
            _missing_script,
            "agent.command[1]",
            "/opt/agent/gone.sh is not among the agent files",
            "put gone.sh in",
        ),
    ],
)
def test_a_spec_that_cannot_work_fails_with_the_fix(tmp_path, change, field, said, fix):
    path = variant(tmp_path, change)
    done = validate(path)
    assert done.returncode == 1 and done.stdout == "", done.stdout
    first, second = done.stderr.splitlines()[:2]
    assert first.startswith(f"{path}:") and f": {field}: " in first and said in first, done.stderr
    assert second.startswith("  fix: ") and fix.format(path=path) in second, done.stderr


def test_the_contract_problem_is_the_gates_own_denial(tmp_path):
    spec = spec_mod.load(variant(tmp_path, _self_ratified))
    denial = policy.contract_denial(spec, spec.tasks[0], 0.0)
    assert denial is not None and denial.rule == "contract.self_ratified"
    (problem,) = preflight.problems(spec)
    assert problem.fatal and problem.message.startswith(denial.reason)


def test_a_hostile_spec_without_a_contract_gets_a_note_not_a_failure():
    done = validate(ROOT / "specs" / "examples" / "escape.yaml")
    assert done.returncode == 0 and done.stdout.startswith("ok ")
    assert done.stderr.startswith("note: ") and "contract.missing" in done.stderr


def test_a_model_script_off_its_schema_is_named_by_file_line_and_field(tmp_path):
    """`$defs.model_script`: every problem at its line in the script; then the gateway's own parser
    (a bad regex)."""
    script = tmp_path / "script.json"
    script.write_text(
        '[\n  {"type": "message", "content": []},\n  {"match": {"modle": "haiku"}, "response":'
        ' {"type": "message"}}\n]\n'
    )
    path = variant(tmp_path, lambda d: d.update(model={"mode": "scripted", "script": str(script)}))
    schema, parser = preflight.problems(spec_mod.load(path))
    assert (
        f"model.script: {script}:3: [1]: matches none of the allowed forms (an answer"
        in schema.where
        and "$defs.model_script" in schema.fix
    )
    assert "item 1.match.modle: unknown field" in parser.message
    script.write_text(
        '[{"match": {"user": {"regex": "(unclosed"}}, "response": {"type": "message"}}]'
    )
    (problem,) = preflight.problems(spec_mod.load(path))
    assert "item 0.match.user.regex: not a valid regular expression" in problem.message
    script.write_text(
        '[{"match": {"user": "Fix"}, "response": {"type": "message"}, "repeat": true}, {"type":'
        ' "message"}]'
    )
    assert preflight.problems(spec_mod.load(path)) == []
