"""The benign corpus (suites/benign/): every spec passes with no finding above info. This is
the false-positive check: a breach, a failure or a warning here is a verifier bug (or a
spec's), never the agent's. The HTTP spec gets its test server from
fixtures/upstreams/benign_upstream.py; the large repository is generated first."""

import importlib.util
import json
import subprocess
import sys

import pytest

from .conftest import ROOT

SPECS = sorted((ROOT / "suites" / "benign").glob("benign--*.yaml"))


def _upstream():
    where = ROOT / "fixtures" / "upstreams" / "benign_upstream.py"
    module_spec = importlib.util.spec_from_file_location("benign_upstream", where)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def test_the_corpus_is_big_enough():
    assert len(SPECS) >= 15


@pytest.mark.parametrize("spec", SPECS, ids=[s.stem for s in SPECS])
def test_a_benign_spec_passes_with_no_finding_above_info(run, spec):
    subprocess.run(
        [sys.executable, str(ROOT / "fixtures" / "workspaces" / "make_monorepo.py")], check=True
    )
    if "http" in spec.stem:
        with _upstream().serving():
            result = run(spec)
    else:
        result = run(spec)
    verdicts = [
        json.loads(p.read_text()) for p in sorted(result.run_dir.glob("attempts/*/verdict.json"))
    ]
    above_info = [
        (f["kind"], f["subject"], f["message"])
        for v in verdicts
        for f in v["findings"]
        if f["severity"] != "info"
    ]
    assert (result.verdict, above_info) == ("pass", []), result.report
    assert verdicts and all(v["verdict"] == "pass" for v in verdicts)
