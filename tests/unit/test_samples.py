"""A spec's dataset (assure/samples.py): each row of a JSON Lines or CSV file fills the spec's
`{{field}}` placeholders to make one sample; every problem is file:line: field: message, said
once with the samples it is in, before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from assure import spec as spec_mod
from assure.errors import SpecError
from tests.unit.test_driver_states import CALC

TEMPLATE = f"""\
version: 1
name: calc
description: "add {{{{a}}}} and {{{{b}}}}"
dataset: {{file: DATA}}
agent:
  command: [sh, -c, "echo {{{{a}}}}"]
  env: {{WANT: "{{{{sum}}}}"}}
workspace: {{fixture: {CALC}, writable: ["out/**"], protected: ["tests/**"]}}
assertions:
  - file_contains: {{path: out/sum.txt, text: "{{{{sum}}}}"}}
expect: "{{{{expect}}}}"
"""


def template(tmp_path: Path, data: str, name: str = "rows.jsonl", text: str = TEMPLATE) -> Path:
    (tmp_path / name).write_text(data)
    path = tmp_path / "calc.yaml"
    path.write_text(text.replace("DATA", name))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(SpecError) as caught:
        spec_mod.load_samples(path)
    return [p.replace(f"{path.parent}/", "") for p in caught.value.problems]


def test_each_jsonl_row_fills_the_placeholders_of_one_sample(tmp_path: Path) -> None:
    path = template(
        tmp_path,
        '{"id": "small", "a": 1, "b": 2, "sum": 3, "expect": "pass"}\n\n'
        '{"a": "40", "b": "2", "sum": "42", "expect": "fail"}\n',
    )
    small, second = spec_mod.load_samples(path)
    assert (small.name, second.name) == (
        "calc.small",
        "calc.2",
    )  # its id, else its row number (not line)
    assert small.description == "add 1 and 2" and small.agent.command == ("sh", "-c", "echo 1")
    assert small.agent.env == {"WANT": "3"} and second.expect == "fail"
    assert small.assertions == ({"file_contains": {"path": "out/sum.txt", "text": "3"}},)
    assert small.sample == spec_mod.Sample(
        "small",
        tmp_path / "rows.jsonl",
        1,
        {"id": "small", "a": "1", "b": "2", "sum": "3", "expect": "pass"},
    )
    assert small.key == f"{path}#small" and spec_mod.Spec.from_json(small.to_json()) == small
    assert spec_mod.load(path, "2") == second


def test_a_csv_header_names_the_fields(tmp_path: Path) -> None:
    path = template(tmp_path, "id,a,b,sum,expect\nx,1,2,3,pass\ny,2,2,4,pass\n", "rows.csv")
    assert [(s.name, s.sample.line, s.agent.env["WANT"]) for s in spec_mod.load_samples(path)] == [
        ("calc.x", 2, "3"),
        ("calc.y", 3, "4"),
    ]


def test_a_spec_with_a_dataset_is_not_one_run(tmp_path: Path) -> None:
    path = template(tmp_path, '{"a": 1, "b": 2, "sum": 3, "expect": "pass"}\n')
    with pytest.raises(SpecError, match="this spec is 1 samples") as caught:
        spec_mod.load(path)
    assert "assure suite" in caught.value.fix
    with pytest.raises(SpecError, match="no sample 'nope'"):
        spec_mod.load(path, "nope")


def test_every_problem_of_the_dataset_names_its_file_line_and_field(tmp_path: Path) -> None:
    path = template(
        tmp_path,
        '{"id": "a", "a": 1, "b": 2, "sum": 3, "expect": "pass"}\n'
        "not json\n"
        '["a"]\n'
        '{"id": "a", "a": true, "b": 2, "sum": 3, "expect": "pass"}\n'
        '{"id": "-x", "a": 1, "b": [], "sum": 3, "expect": "pass", "bad key": 1}\n'
        '{"id": "z", "a": 1, "b": 2, "expect": "pass"}\n',
    )
    found = problems(path)
    assert found[:6] == [
        "rows.jsonl:2: (row): not JSON: Expecting value: line 1 column 1 (char 0)",
        "rows.jsonl:3: (row): a row is an object of fields",
        "rows.jsonl:4: a: expected text or a number",
        "rows.jsonl:5: b: expected text or a number",
        "rows.jsonl:5: 'bad key': not a field name ([A-Za-z_][A-Za-z0-9_]*)",
        "rows.jsonl:4: id: 'a' is the id of line 1 too",
    ]
    assert "rows.jsonl:5: id: '-x' is not a sample id" in found[6]
    # the spec's placeholders a row leaves unfilled, at the spec's line
    assert "calc.yaml:3: description: {{a}} is no field of rows.jsonl line 4" in found  # refused
    assert "calc.yaml:3: description: {{b}} is no field of rows.jsonl line 5" in found
    assert "calc.yaml:7: agent.env.WANT: {{sum}} is no field of rows.jsonl line 6" in found


def test_a_filled_spec_is_checked_per_sample_and_each_problem_said_once(tmp_path: Path) -> None:
    rows = "".join(
        f'{{"a": 1, "b": 2, "sum": 3, "expect": "{e}"}}\n' for e in ("pass", "passs", "maybe")
    )
    path = template(
        tmp_path, rows, text=TEMPLATE.replace("assertions:", "assertion:\n  - x\nassertions:")
    )
    found = problems(path)
    assert "calc.yaml:9: assertion: unknown field; allowed here: " in found[0] and found[
        0
    ].endswith("(every sample)")
    assert (
        "calc.yaml:13: expect: 'passs' is not one of: 'pass', 'fail', 'breach', 'contained',"
        " 'error' (sample 2)" in found
    )
    assert any(
        p.startswith("calc.yaml:13: expect: 'maybe'") and p.endswith("(sample 3)") for p in found
    )


def test_an_empty_or_headless_dataset_is_refused(tmp_path: Path) -> None:
    assert problems(template(tmp_path, "\n")) == [
        "rows.jsonl:1: (file): no rows: a dataset has one sample per row"
    ]
    assert problems(template(tmp_path, "", "rows.csv")) == [
        "rows.csv:1: (file): no header row of field names"
    ]
    assert (
        problems(template(tmp_path, "a,b\n1\n", "rows.csv"))[0]
        == "rows.csv:2: (row): 1 values for the header's 2 fields"
    )


def test_validate_checks_every_sample_and_says_a_shared_note_once(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from assure.cli import app

    path = template(tmp_path, "id,a,b,sum,expect\nx,1,2,3,pass\ny,2,2,4,pass\n", "rows.csv")
    done = CliRunner().invoke(app, ["validate", str(path)])
    assert done.exit_code == 0 and done.output.count("no contract") == 1, done.output
    refused = CliRunner().invoke(app, ["run", str(path)])
    assert refused.exit_code == 1 and "this spec is 2 samples" in refused.output
