"""A node that lies about its verdict, on a real local Ray cluster (a head and one worker whose
Ray workers import tests/integration/liar_node/sitecustomize.py: it runs the spec honestly, then
returns the opposite verdict). The caller judges the run directory again, so the lie is a
finding against the node and the spec's verdict is `error`, whatever the node said."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration import ray_cluster

SPEC = Path(__file__).resolve().parent / "specs" / "cluster" / "specs" / "quick-pass-1.yaml"
LIAR = Path(__file__).resolve().parent / "liar_node"


@pytest.fixture
def liar_cluster(tmp_path, images):  # `images`: built once here, so the node builds none mid-test
    (tmp_path / "ray").mkdir()
    c = ray_cluster.start(tmp_path / "ray", workers=1, worker_env={"PYTHONPATH": str(LIAR)})
    yield c
    c.stop()
    assert [p for n in c.nodes for p in n.pids()] == [], "Ray processes still alive"


def test_a_node_that_lies_about_its_verdict_gets_a_finding_and_the_spec_is_error(liar_cluster, tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"version: 1\nname: liar\nspecs: [{json.dumps(str(SPEC))}]\n")
    runs = tmp_path / "runs"
    out = subprocess.run(liar_cluster.in_ns(sys.executable, "-m", "assure.cli", "suite", str(suite), "--cluster", liar_cluster.address,
                                            "--runs-dir", str(runs), "--json"),
                         cwd=tmp_path, env=ray_cluster.ENV, capture_output=True, text=True, timeout=400)
    assert out.returncode != 0, out.stderr[-3000:]  # the spec expects pass; its verdict is error
    (state,) = (tmp_path / "suites").glob("*/state.json")
    (entry,) = json.loads(state.read_text())["runs"]
    assert (entry["verdict"], entry["node_verdict"], entry["node"]) == ("error", "fail", liar_cluster.nodes[1].node_id)
    assert "node's verdict (fail" in entry["node_finding"] and "(pass)" in entry["node_finding"]  # the lie, named
    run_dir = runs / entry["run_id"]
    assert json.loads((run_dir / "report.json").read_text())["verdict"] == "pass"  # what the evidence says, judged here
    (result,) = json.loads(out.stdout)["results"]  # the summary takes the caller's verdict, and says why
    assert result["verdict"] == "error" and result["reason"].startswith("node: the node's verdict (fail"), result
