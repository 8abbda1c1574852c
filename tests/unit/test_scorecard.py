"""The bench scorecard (assure/ops/scorecard.py, bench/scorecard.py): suite summaries of either
shape become containment and false-positive figures, each benchmark's --json document becomes
its metrics, the parts become one scorecard of the published shape, and `assure bench compare`
exits non-zero on a regression beyond a band, on any escape, and refuses what it cannot compare."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from assure.cli import app
from assure.ops import scorecard as sc
from assure.records import store
from assure.run import suite as suite_mod
from assure.verify.findings import Finding, Kind, Verdict
from assure.verify.judge import Judgement

ROOT = Path(__file__).resolve().parents[2]


def bench_module(name: str) -> Any:
    """A bench/ script as a module (they are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SPEC = (
    'version: 1\nname: {name}\nagent: {{command: ["true"]}}\nworkspace: {{fixture:'
    " ws}}\nassertions: []\nexpect: {expect}\n{hostile}"
)


def old_shape_summary(
    tmp: Path, rows: list[tuple[str, str, str | None, list[Kind]]], runs: Path
) -> dict[str, Any]:
    """Drive a real SuiteRun whose run_one writes a real Judgement's verdict.json with the given
    findings and returns the given verdict (None: the spec is left unrun), then shape the summary
    exactly as `assure suite --json` does today."""
    (tmp / "ws").mkdir(parents=True)
    for name, expect, _, _ in rows:
        (tmp / f"{name}.yaml").write_text(
            SPEC.format(
                name=name, expect=expect, hostile="hostile: true\n" if expect != "pass" else ""
            )
        )
    (tmp / "s.yaml").write_text(
        "version: 1\nname: s\nspecs: ["
        + ", ".join(f"{r[0]}.yaml" for r in rows if r[2] is not None)
        + "]\n"
    )
    loaded = suite_mod.load(tmp / "s.yaml")
    plan = {name: (verdict, kinds) for name, _, verdict, kinds in rows}

    def run_one(spec: Any, run: store.RunDir) -> str:
        verdict, kinds = plan[spec.name]
        judgement = Judgement(
            Verdict(verdict), tuple(Finding(k, "x", "m") for k in kinds), (), None, None, None
        )
        attempt = run.path / "attempts" / "1"
        attempt.mkdir(parents=True)
        (attempt / "verdict.json").write_text(json.dumps(judgement.to_json()))
        return verdict

    record = suite_mod.SuiteRun.create(runs.parent / "suites", loaded)
    outcomes = record.drive(runs, run_one, lambda n, spec: None)
    ok = len(outcomes) == len(loaded.specs) and all(o.as_expected for o in outcomes)
    return {
        "suite": loaded.name,
        "suite_run_id": record.suite_run_id,
        "as_expected": ok,
        "results": [{**dataclasses.asdict(o), "as_expected": o.as_expected} for o in outcomes],
    }


def new_shape_summary(
    rows: list[tuple[str, str, str | None, list[dict[str, str]]]],
) -> dict[str, Any]:
    """The published summary (INTERFACES.md, branch `out`): findings above info per result."""
    results = [
        {
            "spec": name,
            "spec_path": f"{name}.yaml",
            "run_id": None if verdict is None else f"{name}-1",
            "run_dir": None,
            "verdict": verdict,
            "expect": expect,
            "as_expected": verdict == expect,
            "started_at": None,
            "finished_at": None,
            "duration_seconds": None,
            "reason": None,
            "findings": findings,
        }
        for name, expect, verdict, findings in rows
    ]
    return {
        "schema_version": 1,
        "kind": "suite",
        "suite": "s",
        "suite_run_id": "s-1",
        "source": "s.yaml",
        "shard": None,
        "started_at": "2026-12-01T00:00:00Z",
        "finished_at": None,
        "as_expected": False,
        "counts": {"total": len(rows)},
        "results": results,
    }


# ------------------------------------------------------------------------- suites


def test_containment_counts_escapes_apart_from_harness_errors_and_unrun_specs(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    summary = old_shape_summary(
        tmp_path,
        [
            ("a", "contained", "contained", []),
            ("b", "breach", "breach", [Kind.UNATTRIBUTED]),
            ("c", "contained", "pass", []),  # the attack got through unseen: an escape
            (
                "d",
                "contained",
                "breach",
                [Kind.UNATTRIBUTED],
            ),  # it got out and was caught: not contained, an escape too
            (
                "e",
                "contained",
                "error",
                [Kind.HARNESS_ERROR],
            ),  # not an escape, but not contained either
            ("f", "fail", "fail", [Kind.ASSERTION_FAILED]),
            (
                "g",
                "contained",
                None,
                [],
            ),  # never ran (not in the suite file): counts against the rate
        ],
        runs,
    )
    results = sc.suite_results(summary, runs)
    assert [r.verdict for r in results] == [
        "contained",
        "breach",
        "pass",
        "breach",
        "error",
        "fail",
    ]
    assert sc.containment_metrics(results, total=7) == {
        "containment.specs": 7,
        "containment.rate": round(3 / 7, 4),
        "containment.escapes": 2,
        "containment.errors": 2,
    }


def test_a_benign_pass_with_a_finding_above_info_is_a_false_positive_read_from_its_run(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    summary = old_shape_summary(
        tmp_path,
        [
            ("clean", "pass", "pass", [Kind.ATTRIBUTED, Kind.ASSERTION_PASSED]),
            ("warned", "pass", "pass", [Kind.GATEWAY_LIMIT]),
            ("failed", "pass", "fail", [Kind.ASSERTION_FAILED]),
            ("broke", "pass", "error", [Kind.HARNESS_ERROR]),
        ],
        runs,
    )
    results = sc.suite_results(summary, runs)
    assert [r.findings_above_info for r in results] == [0, 1, 1, 1]
    assert [r.reason for r in results] == [
        None,
        "m",
        "m",
        "m",
    ]  # the first finding above info's message
    assert sc.benign_metrics(results) == {
        "benign.specs": 4,
        "benign.rate": 0.25,
        "benign.false_positives": 2,
    }
    # without the run folders the old summary cannot tell a warned pass from a clean one
    assert sc.benign_metrics(sc.suite_results(summary))["benign.false_positives"] == 1


def test_the_published_summary_carries_its_findings() -> None:
    warn = {"kind": "gateway_limit", "severity": "fail", "subject": "x", "message": "m"}
    summary = new_shape_summary(
        [("a", "pass", "pass", []), ("b", "pass", "pass", [warn]), ("c", "pass", None, [])]
    )
    results = sc.suite_results(summary, Path("/nonexistent"))
    assert [(r.verdict, r.findings_above_info) for r in results] == [
        ("pass", 0),
        ("pass", 1),
        (None, 0),
    ]
    assert sc.benign_metrics(results, total=3) == {
        "benign.specs": 3,
        "benign.rate": round(1 / 3, 4),
        "benign.false_positives": 1,
    }


@pytest.mark.parametrize(
    "summary, message",
    [
        ([], "a JSON object with a `results` list"),
        (
            {"results": [{"spec": "a", "verdict": 3, "expect": "pass"}]},
            "result 0 has no `expect` string",
        ),
        ({"schema_version": 2, "results": []}, "suite summary schema_version 2 is not 1"),
    ],
)
def test_a_malformed_suite_summary_is_refused(summary: Any, message: str) -> None:
    with pytest.raises(sc.ScorecardError, match=message.replace("`", ".")):
        sc.suite_results(summary)


def test_a_refused_option_of_assure_suite_is_told_apart_from_a_failed_suite(tmp_path: Path) -> None:
    """The real CLI refusing an option (as it refuses -j before `par` adds it) is not a suite
    that printed no summary; bench/scorecard.py names the missing -j instead of falling back."""
    scorecard = bench_module("scorecard")
    with pytest.raises(scorecard.OptionRefused) as refused:
        scorecard.suite_summary(
            ROOT / "suites" / "demo.yaml", tmp_path / "runs", extra=["--no-such-option-zz"]
        )
    assert refused.value.option == "--no-such-option-zz"
    assert "-j" in scorecard.NO_JOBS_FLAG and "not measured" in scorecard.NO_JOBS_FLAG


# ----------------------------------------------------------------------- benchmarks and aggregation


def canned_parts(tmp_path: Path) -> dict[str, sc.Part]:
    """Every part's output as its real producer shapes it, through the real extractors."""
    e2e, gateway, snapshot, sqlite = (
        bench_module(n) for n in ("e2e", "gateway_latency", "snapshot_bench", "sqlite_bench")
    )
    e2e_doc = e2e.summary(
        [0.60, 0.62, 0.58],
        [0.90, 0.93, 0.87],
        {"start": [0.6, 0.7, 0.65]},
        [0.30, 0.35, 0.32],
        pool_trivial_t=[0.50, 0.55, 0.45],
        pool_first_t=[0.10, 0.12, 0.11],
    )
    gw_doc = gateway.summary(
        [0.0004] * 98 + [0.0009, 0.002], 0.0003, [0.000005] * 100, [0.00002] * 100
    )
    snap_doc = snapshot.summary(
        {
            "ours": [2.0, 2.2],
            "ours, as a run does": [0.5, 0.7],
            "sha256sum x2": [1.5, 1.5],
            "git diff --no-index": [2.5, 2.5],
        },
        100,
    )
    sqlite_doc = {
        "scenarios": {
            "pk": sqlite.figures(1000, 10, 10, 3, 0.3, 0.2, 50.0, cpu=(0.18, 0.2)),
            "keyless": sqlite.figures(100, 1, 1, 3, 0.1, 0.4, 40.0),
        }
    }
    runs = tmp_path / "runs"
    hostile = old_shape_summary(
        tmp_path / "h", [("a", "contained", "contained", []), ("b", "contained", "pass", [])], runs
    )
    benign = new_shape_summary([("c", "pass", "pass", [])])
    packet = {
        "obligations": {
            "x.one": {"status": "PASS"},
            "x.two": {"status": "FAIL"},
            "x.three": {"status": "PASS"},
        }
    }
    gate_doc = {"decide_us": 12.5, "repinned_us": 125.0, "ratio": 0.1}
    live_doc = {
        "db_execute": {"gateway_ms": 3.0, "apsw_ms": 1.5, "ratio": 2.0, "cpu_ratio": 1.5},
        "override_ms": {"p50": 20.0, "p99": 60.0},
    }
    cli_doc = {
        "median_s": {
            "after": {
                "python -c pass": 0.02,
                "assure --version": 0.1,
                "assure --help": 0.2,
                "assure run (to the first spec)": 0.3,
            }
        }
    }
    boot_doc = {  # bench/boot_cpu_bench.py --json: medians in CPU-s
        "schema_version": 1,
        "median_cpu_s": {
            "gateway": {"floor": 0.02, "boot": 0.06, "over_floor": 0.04},
            "agent": {"floor": 0.02, "boot": 0.09, "over_floor": 0.07},
        },
    }
    return {
        "gate": sc.part_from(sc.gate_metrics, gate_doc),
        "gate_live": sc.part_from(sc.gate_live_metrics, live_doc),
        "cli": sc.part_from(sc.cli_metrics, cli_doc),
        "boot": sc.part_from(sc.boot_metrics, boot_doc),
        "e2e": sc.part_from(sc.e2e_metrics, e2e_doc, data=e2e_doc),
        "gateway": sc.part_from(sc.gateway_metrics, gw_doc),
        "snapshot": sc.part_from(sc.snapshot_metrics, snap_doc),
        "sqlite": sc.part_from(sc.sqlite_metrics, sqlite_doc),
        "containment": sc.part_from(sc.containment_metrics, sc.suite_results(hostile, runs), 2),
        "benign": sc.part_from(sc.benign_metrics, sc.suite_results(benign)),
        "conformance": sc.part_from(sc.conformance_metrics, packet),
        "throughput": sc.part_from(
            sc.throughput_metrics,
            {
                1: {"specs": 8, "seconds": 16.0},
                2: {"specs": 8, "seconds": 10.0},
                "2_pool": {"specs": 8, "seconds": 4.0},
                "bare": {"per_second": 2.5, "seconds": 3.2},
            },
        ),
    }


def scorecard_of(parts: dict[str, sc.Part]) -> dict[str, Any]:
    return sc.check(
        sc.aggregate(parts, created_at="2026-12-01T13:00:00Z", machine={"cpus": 2}), "here"
    )


def test_the_scorecard_holds_each_figure_its_part_gave(tmp_path: Path) -> None:
    card = scorecard_of(canned_parts(tmp_path))
    values = {name: m["value"] for name, m in card["metrics"].items()}
    assert values == {
        "containment.specs": 2,
        "containment.rate": 0.5,
        "containment.escapes": 1,
        "containment.errors": 0,
        "benign.specs": 1,
        "benign.rate": 1.0,
        "benign.false_positives": 0,
        "conformance.rows": 3,
        "conformance.rows_passed": 2,
        "e2e.overhead_ratio": round(0.90 / 0.60, 3),
        "e2e.assure_ms": 900.0,
        "e2e.baseline_ms": 600.0,
        "e2e.first_call_p50_ms": 320.0,
        "e2e.pool_overhead_ratio": round(0.50 / 0.60, 3),
        "e2e.pool_assure_ms": 500.0,
        "e2e.pool_first_call_p50_ms": 110.0,
        "gateway.p50_ms": 0.4,
        "gateway.p99_ms": 2.0,
        "gateway.cpu_ms": 0.3,
        "snapshot.vs_git": round(0.6 / 2.5, 4),
        "snapshot.cold_vs_git": round(2.1 / 2.5, 4),
        "sqlite.pk_vs_sqldiff": 1.5,
        "sqlite.keyless_vs_sqldiff": 0.25,
        "sqlite.pk_cpu_vs_sqldiff": 0.9,
        "sqlite.keyless_cpu_vs_sqldiff": None,
        "gateway.db_execute_vs_apsw": 2.0,
        "gateway.db_execute_cpu_vs_apsw": 1.5,
        "gateway.override_p99_ms": 60.0,
        "gate.decide_vs_repinned": 0.1,
        "gate.decide_us": 12.5,
        "gateway.boot_over_floor": 2.0,
        "gateway.boot_cpu_ms": 40.0,
        "cli.version_vs_python": 5.0,
        "cli.help_vs_python": 10.0,
        "cli.run_start_vs_python": 15.0,
        "cli.version_s": 0.1,
        "cli.help_s": 0.2,
        "cli.run_start_s": 0.3,
        "throughput.j1": 0.5,
        "throughput.j2": 0.8,
        "throughput.j4": None,
        "throughput.j2_pool": 2.0,
        "throughput.bare_j2": 2.5,
        "throughput.j1_of_bare": 0.2,
        "throughput.j2_of_bare": 0.32,
        "throughput.j4_of_bare": None,
        "throughput.j2_pool_of_bare": 0.8,
    }
    assert (
        card["schema_version"] == sc.SCHEMA_VERSION and card["parts"]["e2e"]["data"]["rounds"] == 3
    )


def test_a_part_whose_output_has_another_shape_fails_with_its_reason_and_leaves_its_metrics_null(
    tmp_path: Path,
) -> None:
    parts = canned_parts(tmp_path)
    parts["gateway"] = sc.part_from(sc.gateway_metrics, {"p50": 1})
    parts["conformance"] = sc.part_from(sc.conformance_metrics, ["not", "a", "packet"])
    card = scorecard_of(parts)
    assert (
        card["parts"]["gateway"]["status"] == "failed"
        and "KeyError" in card["parts"]["gateway"]["reason"]
    )
    assert card["parts"]["conformance"]["reason"].startswith(
        "a conformance packet is a JSON object"
    )
    assert (
        card["metrics"]["gateway.p50_ms"]["value"] is None
        and card["metrics"]["conformance.rows_passed"]["value"] is None
    )


def test_the_fixed_cost_figures_are_what_their_benchmarks_write(tmp_path: Path) -> None:
    """gate_bench's --json document, as the script writes it."""
    gate_bench = bench_module("gate_bench")
    out = tmp_path / "gate.json"
    action, ctx = gate_bench.setup()
    gate_bench.CALLS = 50  # a handful of calls: the shape is tested here, not the speed
    gate_bench.RUNS = 1
    import sys

    argv, sys.argv = sys.argv, ["gate_bench.py", "--json", str(out)]
    try:
        gate_bench.main()
    finally:
        sys.argv = argv
    figures = sc.gate_metrics(json.loads(out.read_text()))
    assert set(figures) == {"gate.decide_vs_repinned", "gate.decide_us"}
    assert 0 < figures["gate.decide_vs_repinned"] and figures["gate.decide_us"] > 0


def git(repo: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def test_the_last_scorecard_on_main_is_the_newest_clean_one_of_a_commit_on_main(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(
        repo,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "a",
    )
    on_main = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "topic")
    git(
        repo,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "b",
    )
    topic = git(repo, "rev-parse", "HEAD")
    base = with_value(
        scorecard_of(canned_parts(tmp_path)), containment__escapes=0, containment__rate=1.0
    )
    bench = tmp_path / "bench"
    bench.mkdir()

    def card(stamp: str, commit: str, dirty: bool = False) -> Path:
        doc = {**base, "machine": {"commit": commit, "dirty": dirty}}
        return write(bench / f"scorecard-{stamp}.json", doc)

    assert sc.last_on_main(bench, repo) is None
    good = card("20261201T100000Z", on_main)
    card("20261201T110000Z", on_main, dirty=True)  # measured with uncommitted changes
    card("20261201T120000Z", topic)  # a branch's
    card("20261201T130000Z", "not-a-commit; rm -rf /")
    (bench / "scorecard-20261201T140000Z.json").write_text("{not json")
    write(bench / "scorecard.json", {**base, "machine": {"commit": on_main}})  # the latest copy
    new = card("20261201T150000Z", topic)
    assert sc.last_on_main(bench, repo) == good
    assert sc.last_on_main(bench, repo, before=new) == good
    assert sc.last_on_main(bench, repo, before=good) is None  # nothing older
    later = card("20261201T160000Z", on_main)
    assert (
        sc.last_on_main(bench, repo) == later and sc.last_on_main(bench, repo, before=new) == good
    )
    scorecard = bench_module("scorecard")
    text = scorecard.against_main(bench, new, repo)
    assert f"compared with the last scorecard on main: {good}" in text
    assert text.rstrip().endswith("no regression beyond the noise bands")
    assert sc.last_on_main(bench, repo, before=bench / "scorecard.json") == later
    # `assure bench compare` with no arguments: the newest against the last on main before it
    monkeypatch.chdir(repo)
    result = CliRunner().invoke(app, ["bench", "compare", "--dir", str(bench)])
    assert result.exit_code == 0, result.output
    assert f"OLD {good}\nNEW {later}\n" in result.output
    worse = with_value(base, gateway__p50_ms=100.0)
    write(bench / "scorecard-20261201T170000Z.json", {**worse, "machine": {"commit": topic}})
    result = CliRunner().invoke(app, ["bench", "compare", "--dir", str(bench)])
    assert result.exit_code == 1 and "gateway.p50_ms" in result.output
    assert later.name in result.output
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(app, ["bench", "compare", "--dir", str(empty)])
    assert result.exit_code == 2 and "no scorecard to compare" in result.output


def test_a_figure_no_metric_names_is_refused() -> None:
    with pytest.raises(sc.ScorecardError, match="part x gave figures no metric names: x.bogus"):
        sc.aggregate(
            {"x": sc.Part("ok", None, 1.0, {"x.bogus": 1})},
            created_at="2026-12-01T13:00:00Z",
            machine={},
        )


def test_the_spread_of_repeated_scorecards_suggests_the_worst_pair_rounded_up(
    tmp_path: Path,
) -> None:
    base = scorecard_of(canned_parts(tmp_path))
    docs = []
    for p50 in (0.40, 0.44, 0.38):
        doc = json.loads(json.dumps(base))
        doc["metrics"]["gateway.p50_ms"]["value"] = p50
        docs.append(doc)
    by = {s.metric: s for s in sc.spread(docs)}
    assert by["gateway.p50_ms"].median == 0.40 and by["gateway.p50_ms"].worst_pair == round(
        0.44 / 0.38 - 1, 4
    )
    assert by["gateway.p50_ms"].band == pytest.approx(0.20)
    assert (
        by["gateway.p99_ms"].worst_pair == 0
        and by["gateway.p99_ms"].band == 0
        and "throughput.j4" not in by
    )


# ------------------------------------------------------------------------- compare


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc))
    return path


def compare(tmp_path: Path, old: dict[str, Any], new: dict[str, Any]) -> Any:
    return CliRunner().invoke(
        app,
        [
            "bench",
            "compare",
            str(write(tmp_path / "old.json", old)),
            str(write(tmp_path / "new.json", new)),
        ],
    )


def with_value(doc: dict[str, Any], **values: float | None) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    for name, value in values.items():
        doc["metrics"][name.replace("__", ".")]["value"] = value
    return doc


@pytest.fixture
def card(tmp_path: Path) -> dict[str, Any]:
    return with_value(
        scorecard_of(canned_parts(tmp_path)), containment__escapes=0, containment__rate=1.0
    )


def test_a_change_within_every_band_exits_zero(tmp_path: Path, card: dict[str, Any]) -> None:
    band = sc.BY_NAME["gateway.p50_ms"].band
    new = with_value(
        card,
        gateway__p50_ms=0.4 * (1 + band * 0.9),
        throughput__j1_of_bare=0.2 / (1 + sc.BY_NAME["throughput.j1_of_bare"].band * 0.9),
    )
    result = compare(tmp_path, card, new)
    assert result.exit_code == 0, result.output
    assert "no regression beyond the noise bands" in result.output


def test_a_slowdown_beyond_its_band_exits_non_zero_and_names_it(
    tmp_path: Path, card: dict[str, Any]
) -> None:
    band = sc.BY_NAME["gateway.p50_ms"].band
    result = compare(tmp_path, card, with_value(card, gateway__p50_ms=0.4 * (1 + band * 1.1)))
    assert result.exit_code == 1
    assert "1 regression(s): gateway.p50_ms" in result.output
    rows = {
        r.metric: r
        for r in sc.compare(card, with_value(card, gateway__p50_ms=0.4 * (1 + band * 1.1)))
    }
    assert (
        rows["gateway.p50_ms"].verdict == "regression"
        and rows["gateway.p50_ms"].change == f"{band * 1.1:+.1%}"
    )
    assert rows["sqlite.pk_vs_sqldiff"].verdict == "ok" and rows["e2e.assure_ms"].verdict == "info"


def test_higher_is_better_metrics_regress_downwards(card: dict[str, Any]) -> None:
    band = sc.BY_NAME["throughput.j2_of_bare"].band
    rows = {
        r.metric: r
        for r in sc.compare(
            card,
            with_value(
                card,
                throughput__j2_of_bare=0.32 / (1 + band * 1.1),
                throughput__j1_of_bare=0.2 / (1 + band * 0.9),
                conformance__rows_passed=1,
                sqlite__pk_vs_sqldiff=1.0,
                sqlite__keyless_vs_sqldiff=0.25
                / (1 + sc.BY_NAME["sqlite.keyless_vs_sqldiff"].band * 1.1),
            ),
        )
    }
    assert (
        rows["throughput.j2_of_bare"].verdict == "regression"
        and rows["throughput.j1_of_bare"].verdict == "ok"
    )
    assert rows["conformance.rows_passed"].verdict == "regression"  # zero band: one row fewer
    assert rows["sqlite.pk_vs_sqldiff"].verdict == "ok"  # 1.5 -> 1.0: better, but within the noise
    assert rows["sqlite.keyless_vs_sqldiff"].verdict == "better"  # better beyond it


@pytest.mark.parametrize("old, new", [(0, 1), (1, 1), (2, 1)])
def test_any_escape_in_new_is_a_regression_whatever_old_had(
    tmp_path: Path, card: dict[str, Any], old: int, new: int
) -> None:
    result = compare(
        tmp_path,
        with_value(card, containment__escapes=old),
        with_value(card, containment__escapes=new),
    )
    assert result.exit_code == 1 and "containment.escapes" in result.output


def test_a_new_false_positive_is_a_regression(card: dict[str, Any]) -> None:
    rows = {r.metric: r for r in sc.compare(card, with_value(card, benign__false_positives=1))}
    assert (
        rows["benign.false_positives"].verdict == "regression"
        and rows["benign.false_positives"].band == "max 0"
    )


def test_a_metric_judged_in_old_and_gone_from_new_is_a_regression(card: dict[str, Any]) -> None:
    rows = {r.metric: r for r in sc.compare(card, with_value(card, containment__rate=None))}
    assert rows["containment.rate"].verdict == "missing" and sc.regressions(rows.values()) == [
        rows["containment.rate"]
    ]
    assert rows["throughput.j4_of_bare"].verdict == "not measured"  # null in both


def test_scorecards_of_different_schema_versions_are_refused(
    tmp_path: Path, card: dict[str, Any]
) -> None:
    result = compare(tmp_path, card, {**card, "schema_version": 2})
    assert result.exit_code == 2
    assert "different schema versions (OLD 1, NEW 2)" in result.output


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "not JSON"),
        ('{"kind": "suite"}', "not a bench scorecard"),
        (None, "metrics/gateway.p50_ms/value: 'fast' is not of type"),
    ],
)
def test_a_malformed_scorecard_is_refused(
    tmp_path: Path, card: dict[str, Any], text: str | None, message: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(
        text if text is not None else json.dumps(with_value(card, gateway__p50_ms="fast"))
    )
    result = CliRunner().invoke(
        app, ["bench", "compare", str(write(tmp_path / "old.json", card)), str(bad)]
    )
    assert result.exit_code == 2 and message in result.output, result.output


def test_a_scorecard_with_a_nan_escape_count_is_refused_not_passed(
    tmp_path: Path, card: dict[str, Any]
) -> None:
    bad = tmp_path / "nan.json"
    bad.write_text(
        json.dumps(with_value(card, containment__escapes=float("nan")))
    )  # Python writes NaN; NaN > 0 is False
    result = CliRunner().invoke(
        app, ["bench", "compare", str(write(tmp_path / "old.json", card)), str(bad)]
    )
    assert result.exit_code == 2 and "NaN is not a measurement" in result.output, result.output


def test_the_e2e_figures_are_the_medians_the_script_prints() -> None:
    e2e = bench_module("e2e")
    doc = e2e.summary([0.5, 0.7, 0.6, 0.9], [0.8, 1.0, 0.9, 2.0], {"start": [0.4, 0.5, 0.45, 0.6]})
    assert doc["ratio_vs_bare"] == round(
        statistics.median([0.8, 1.0, 0.9, 2.0]) / statistics.median([0.5, 0.7, 0.6, 0.9]), 3
    )
    assert (
        doc["medians_ms"] == {"bare": 650.0, "trivial": 950.0, "phase.start": 475.0}
        and doc["rounds"] == 4
    )
    assert doc["first_call_p50_ms"] is None  # no first call measured
    assert doc["ratio_vs_bare_pool"] is None and sc.e2e_metrics(doc).keys() == {
        "e2e.overhead_ratio",
        "e2e.assure_ms",
        "e2e.baseline_ms",
    }  # no pool measured
    assert [(t["name"], t["met"]) for t in doc["targets"]] == [
        ("trivial attempt / bare, pool on", None),
        ("trivial attempt / bare, pool off", False),
        ("first call p50, pool on", None),
    ]


def test_the_e2e_pool_figures_are_medians_against_the_same_bare_sequence() -> None:
    e2e = bench_module("e2e")
    doc = e2e.summary(
        [0.5, 0.7, 0.6],
        [0.8, 1.0, 0.9],
        {"start": [0.4, 0.5, 0.45]},
        [0.3, 0.4, 0.5],
        pool_trivial_t=[0.15, 0.18, 0.21],
        pool_overlap_t=[0.9, 0.6, 0.7],
        pool_first_t=[0.01, 0.05, 0.03],
        pool_phases={"start": [0.1, 0.2, 0.3]},
    )
    assert (
        doc["ratio_vs_bare_pool"] == 0.3
        and doc["ratio_vs_bare_pool_overlap"] == round(0.7 / 0.6, 3)
        and doc["first_call_p50_ms_pool"] == 30.0
    )
    assert (
        doc["medians_ms"]["pool_phase.start"] == 200.0
        and doc["medians_ms"]["trivial_pool"] == 180.0
    )
    assert [t["met"] for t in doc["targets"]] == [True, False, True]
    assert sc.e2e_metrics(doc)["e2e.pool_overhead_ratio"] == 0.3


def test_the_readme_states_the_range_of_the_timed_bands_the_code_has() -> None:
    """The README says how wide the noise bands are; METRICS states them (once): the two agree."""
    import re

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    low, high = map(
        int, re.search(r"On that loaded machine they are wide \((\d+) % to (\d+) %", text).groups()
    )
    timed = [
        m.band for m in sc.METRICS if m.band
    ]  # zero bands (rates, rows) and unjudged figures aside
    assert (low, high) == (round(min(timed) * 100), round(max(timed) * 100))
