"""Finding 4 of issue 10, run for real: an agent whose code exits 0 at import, with the fixed
line only in a comment, against the shipped examples' own assertions. Black-box `cases` run
its program and compare what it printed on the host, so it fails them; the honest agents
still pass."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from assure.store import read_json

from .conftest import EXAMPLES, ROOT, findings

LIAR = ROOT / "fixtures" / "agents" / "liar"


def with_liar(example: str, tmp_path: Path) -> Path:
    """The example spec as shipped (assertions, contract, workspace), run by the exit-0 liar.
    The model block is dropped: the liar needs no model, and `anthropic` mode needs a key."""
    data = yaml.safe_load((EXAMPLES / f"{example}.yaml").read_text())
    data["workspace"]["fixture"] = str((EXAMPLES / data["workspace"]["fixture"]).resolve())
    data["agent"] = {"command": ["python3", "/opt/agent/exit0.py"], "files": str(LIAR)}
    if data.get("model", {}).get("mode") == "anthropic":
        del data["model"]
    elif "model" in data:
        data["model"]["script"] = str((EXAMPLES / data["model"]["script"]).resolve())
    path = tmp_path / f"{example}-liar.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("example", ["benign", "claude-fix-bug", "claude-fix-bug-scripted"])
def test_the_exit0_liar_fails_the_shipped_examples(run, tmp_path, example):
    result = run(with_liar(example, tmp_path))
    got = findings(result)
    assert result.verdict == "fail", result.report
    # what the liar fakes still holds: its code exits 0 under the acceptance test, and its
    # changes are attributed; only the black-box cases see that add() is wrong
    assert "command: python3 tests/test_calc.py" in got["assertion_passed"]
    assert "no_unattributed_changes: True" in got["assertion_passed"]
    failed = [f for f in result.report["attempts"][0]["findings"] if f["kind"] == "assertion_failed" and f["subject"].startswith("cases: ")]
    assert len(failed) == 1, got
    assert "stdout differs" in failed[0]["message"], failed[0]
    cases = read_json(result.run_dir / "attempts" / "1" / "cases.json")
    assert cases and all(c["post_digest"] == cases[0]["post_digest"] for c in cases)
    assert all(r["exit_code"] == 0 and r["stdout_b64"] == "" for c in cases for r in c["results"])  # exit 0, printed nothing


@pytest.mark.parametrize("example", ["benign", "claude-fix-bug-scripted"])
def test_honest_agents_pass_the_same_cases(run, example):
    result = run(example)
    assert result.verdict == "pass", result.report
    passed = [s for s in findings(result)["assertion_passed"] if s.startswith("cases: ")]
    assert len(passed) == 1
