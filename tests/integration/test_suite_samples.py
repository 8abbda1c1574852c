"""A 3-sample x 2-epoch suite on real containers (issue 24 item 4): a spec's dataset fills its
agent's words and its assertion, the suite runs each sample twice; the summary's per-sample
verdicts, pass rate and pass@k, and JUnit's testcase per sample x epoch, are read back."""

import json
import xml.etree.ElementTree as ET

from assure.records import summary

from .conftest import ROOT
from .test_cli import assure

SPEC = f"""\
version: 1
name: words
dataset: {{file: words.jsonl}}
agent:
  command: [sh, -c, "printf '%s' '{{{{said}}}}' > out/notes.txt"]
workspace:
  fixture: {ROOT / "fixtures" / "workspaces" / "calc"}
  writable: ["out/**"]
  protected: ["tests/**"]
limits: {{wall_seconds: 30}}
assertions:
  - file_contains: {{path: out/notes.txt, text: "{{{{wanted}}}}"}}
expect: pass
"""
ROWS = [
    {"id": "hello", "said": "hello", "wanted": "hello"},
    {"id": "digits", "said": "42", "wanted": "42"},
    {"id": "wrong", "said": "nope", "wanted": "yes"},  # fails, each epoch
]


def test_a_dataset_suite_with_epochs_scores_each_sample(tmp_path, images):
    (tmp_path / "words.yaml").write_text(SPEC)
    (tmp_path / "words.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (tmp_path / "suite.yaml").write_text(
        "version: 1\nname: words\nepochs: 2\nspecs: [words.yaml]\n"
    )

    done = assure(
        "suite",
        "--json",
        "-j",
        "2",
        "--junit",
        "junit.xml",
        "suite.yaml",
        cwd=tmp_path,
        check_code=6,
    )

    doc = json.loads(done.stdout)
    assert summary.problems(doc) == []
    assert [(s["spec"], s["verdicts"], s["as_expected"]) for s in doc["samples"]] == [
        ("words.hello", ["pass", "pass"], 2),
        ("words.digits", ["pass", "pass"], 2),
        ("words.wrong", ["fail", "fail"], 0),
    ]
    assert doc["metrics"] == {
        "samples": 3,
        "runs": 6,
        "pass_rate": 0.666667,
        "pass_rate_stderr": 0.333333,  # rates 1, 1, 0: sd 0.57735 over sqrt(3)
        "pass_at_k": {"1": 0.666667, "2": 0.666667},
    }
    assert (doc["counts"]["pass"], doc["counts"]["fail"], doc["epochs"]) == (4, 2, 2)
    assert len({r["run_id"] for r in doc["results"]}) == 6  # each epoch a run of its own
    [suite] = ET.parse(tmp_path / "junit.xml").getroot()
    found = [(c.get("name"), c.find("failure") is not None) for c in suite.iter("testcase")]
    assert found == [
        (f"words.{s} epoch {e}", s == "wrong") for s in ("hello", "digits", "wrong") for e in (1, 2)
    ]
    assert (suite.get("tests"), suite.get("failures")) == ("6", "2")
    wall = summary.seconds_between(doc["started_at"], doc["finished_at"])
    assert (
        float(suite.get("time"))
        == round(wall, 3)
        < sum(r["duration_seconds"] for r in doc["results"])
    )
