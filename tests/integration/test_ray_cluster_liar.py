"""A node that lies, on a real local Ray cluster: a head and one worker whose Ray workers import
tests/integration/liar_node/sitecustomize.py, told what to do per test through a mode file.
It runs the spec honestly, then lies: about its verdict (the caller judges the run directory
again: the lie is a finding against the node, the spec `error`); about its verdict with a run
directory refused on arrival (milder than breach: `error`; breach: `breach`, lying toward
breach gains nothing); or by claiming a breach and dying (the spec runs again, honestly, and
the claimed breach stands over the clean rerun). Every Ray process is stopped by pid."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration import ray_cluster

SPEC = Path(__file__).resolve().parent / "specs" / "cluster" / "specs" / "quick-pass-1.yaml"
LIAR = Path(__file__).resolve().parent / "liar_node"


@pytest.fixture(scope="module")
def liar_cluster(
    tmp_path_factory, images
):  # `images`: built once here, so the node builds none mid-test
    tmp = tmp_path_factory.mktemp("liar")
    mode = tmp / "mode"
    c = ray_cluster.start(
        tmp, workers=1, worker_env={"PYTHONPATH": str(LIAR), "ASSURE_LIAR_MODE": str(mode)}
    )
    yield c, mode
    c.stop()
    assert [p for n in c.nodes for p in n.pids()] == [], "Ray processes still alive"


def run_suite(
    liar_cluster, tmp_path: Path, mode: str
) -> tuple[subprocess.CompletedProcess[str], dict, dict]:
    """The quick pass spec on the liar node told `mode`: the run, its suite-run entry, its summary
    result."""
    cluster, mode_file = liar_cluster
    mode_file.write_text(mode)
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"version: 1\nname: liar\nspecs: [{json.dumps(str(SPEC))}]\n")
    out = subprocess.run(
        cluster.in_ns(
            sys.executable,
            "-m",
            "assure.cli",
            "suite",
            str(suite),
            "--cluster",
            cluster.address,
            "--runs-dir",
            str(tmp_path / "runs"),
            "--json",
            "--junit",
            str(tmp_path / "junit.xml"),
        ),
        cwd=tmp_path,
        env=ray_cluster.ENV,
        capture_output=True,
        text=True,
        timeout=400,
    )
    (state,) = (tmp_path / "suites").glob("*/state.json")
    (entry,) = json.loads(state.read_text())["runs"]
    (result,) = json.loads(out.stdout)["results"]
    return out, entry, result


def test_a_node_that_lies_about_its_verdict_gets_a_finding_and_the_spec_is_error(
    liar_cluster, tmp_path
):
    out, entry, result = run_suite(liar_cluster, tmp_path, "flip")
    assert out.returncode != 0, out.stderr[-3000:]  # the spec expects pass; its verdict is error
    assert (entry["verdict"], entry["node_verdict"], entry["node"]) == (
        "error",
        "fail",
        liar_cluster[0].nodes[1].node_id,
    )
    assert (
        "node's verdict (fail" in entry["node_finding"] and "(pass)" in entry["node_finding"]
    )  # the lie, named
    run_dir = tmp_path / "runs" / entry["run_id"]
    assert (
        json.loads((run_dir / "report.json").read_text())["verdict"] == "pass"
    )  # what the evidence says, judged here
    assert result["verdict"] == "error" and result["reason"].startswith(
        "node: the node's verdict (fail"
    ), result  # the summary says why


def test_a_milder_verdict_with_a_refused_run_directory_is_error(liar_cluster, tmp_path):
    out, entry, result = run_suite(liar_cluster, tmp_path, "refused pass")
    assert out.returncode != 0, out.stderr[-3000:]
    assert (entry["verdict"], entry["node_verdict"]) == ("error", "pass")
    assert entry["node_finding"].startswith(
        "its run directory was refused on arrival: more than 50000 members"
    ), entry
    assert "cannot be checked here" in entry["node_finding"]
    assert (
        not (tmp_path / "runs" / entry["run_id"]).exists()
        and list((tmp_path / "runs").iterdir()) == []
    )  # nothing of it unpacked
    assert result["verdict"] == "error" and "refused on arrival" in result["reason"]
    assert (
        '<error message="node: its run directory was refused on arrival'
        in (tmp_path / "junit.xml").read_text()
    )


def test_a_breach_claimed_with_a_refused_run_directory_stays_a_breach(liar_cluster, tmp_path):
    out, entry, result = run_suite(liar_cluster, tmp_path, "refused breach")
    assert out.returncode != 0, out.stderr[-3000:]  # the spec expects pass
    assert (entry["verdict"], entry["node_verdict"]) == ("breach", "breach")
    assert (
        "refused on arrival: more than 50000 members" in entry["node_finding"]
        and "breach, stands" in entry["node_finding"]
    )
    assert (result["verdict"], result["as_expected"]) == (
        "breach",
        False,
    ) and "refused on arrival" in result["reason"]
    junit = (tmp_path / "junit.xml").read_text()
    assert (
        '<failure message="node: its run directory was refused on arrival' in junit
        and 'type="breach"' in junit
    )


def test_a_breach_claimed_before_its_node_was_lost_stands_over_the_clean_rerun(
    liar_cluster, tmp_path
):
    out, entry, result = run_suite(liar_cluster, tmp_path, "breach-then-die")
    assert out.returncode != 0, out.stderr[-3000:]
    assert len(entry["lost"]) == 1 and entry["lost"][0]["attempt"] == 1  # the liar's worker died...
    assert [(c["attempt"], c["node"]) for c in entry["claims"]] == [
        (1, "liar")
    ]  # ...after claiming attempt 1 a breach
    run_dir = tmp_path / "runs" / entry["run_id"]
    assert (
        json.loads((run_dir / "report.json").read_text())["verdict"] == "pass"
    )  # attempt 2 ran honestly: pass, judged here
    assert (
        entry["verdict"] == "breach"
        and "attempt 1 was judged breach by its node liar" in entry["node_finding"]
    )
    assert result["verdict"] == "breach" and "attempt 1 was judged breach" in result["reason"]
