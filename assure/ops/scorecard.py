"""The bench scorecard: which metrics it holds, how the parts' outputs become one, and how two
are compared (`assure bench compare`).

bench/scorecard.py runs the parts (the containment, benign and throughput suites, the
conformance rows, the benchmarks) and hands their machine-readable outputs to `aggregate`; this
module does no I/O of its own beyond reading run folders and scorecard files it is pointed at,
and asking git which commits are on main (`last_on_main`).
Each metric's noise band is stated once, in METRICS, with how it was chosen.
"""

from __future__ import annotations

import functools
import json
import math
import re
import statistics
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

from assure.errors import AssureError
from assure.records import layout
from assure.records.summary import REASON_MAX
from assure.textsafe import display

SCHEMA_VERSION = 1
KIND = "assure-bench-scorecard"
SCHEMA = Path(__file__).resolve().parents[2] / "specs" / "scorecard.schema.json"
JUDGED = (
    "pass",
    "fail",
    "breach",
    "contained",
)  # a verdict the verifier reached (error: the harness failed)


class ScorecardError(AssureError):
    """A scorecard file is unreadable, malformed, or not comparable with another."""


@dataclass(frozen=True)
class Metric:
    """One figure of the scorecard. `band`: how much worse NEW may be than OLD before it is a
    regression, as a factor (0.6: NEW may be up to 1.6 times worse, new/old for a lower-is-better
    figure, old/new for a higher-is-better one; 0: any worse value is one; None: shown, never
    judged). `ceiling`: a value above it is a regression whatever OLD was (an escape is never
    noise).
    """

    name: str
    unit: str
    better: str  # "higher" or "lower"
    band: float | None
    what: str
    ceiling: float | None = None


# How the bands of timed figures were chosen: six runs of the benchmarks (five for e2e), unchanged
# code, on the 2-core machine of issue 13 while seven other sessions shared it (load average 5 to
# 11), and `spread` over their scorecards. Each band is the largest worsening between any two of
# those
# runs (max / min - 1), rounded up to 5 %: no pair of them is called a regression, and a change
# beyond it is larger than any seen from noise alone. Absolute times only describe the machine
# and are shown, not judged; so is gateway p99, which ranged 0.9 to 8.8 ms over the six runs (no
# band separates a change from that). Suite throughput is judged the same way, as a ratio to bare
# two-container sequences measured in the same run (`*_of_bare`): over four runs of `--only
# throughput` on the quiet machine the ratios' worst pair was 8-11 %, the specs per second's
# 13-34 % (two loaded runs of issue 13 differed by 22-26 %), so the ratios take 20 % and the
# absolute figures are shown only. Counts of escapes, false positives and conformance rows have no
# band at all. The warm pool's e2e.pool_overhead_ratio has no spread of its own yet: it takes the
# band of its pool-off twin, provisionally, until `--spread` over repeated runs.
# The fixed costs of issue 25 are judged as ratios to a baseline measured in the same run, so a
# band covers the noise between the two halves of one run. Chosen as above, from three to four
# runs of each benchmark on the loaded 2-core machine of issue 25 (eight sessions sharing it, load
# average 2 to 5): decide() pinned / pinned anew was 0.11-0.13 (worst pair 18 %: band 20 %); the
# CLI's figures / `python -c pass` 5.2-6.3 (--version), 6.6-8.7 (--help), 15.7-21.6 (run to the
# first spec; worst pair 38 %: band 40 %). db.execute / local apsw ranged 1.4-3.3 (both are an
# fsync each on the shared disk): no band separates a change from that, so it is shown only.
# Their absolute figures are shown only. Few runs: `--spread` over more scorecards may narrow them.
GATE_BAND, CLI_BAND = 0.20, 0.40
# CPU-time ratios (issue 25): load stretches wall time, not CPU time, so these are the ones
# judged where an fsync on the shared disk makes the wall ratio too noisy to band (db.execute).
# Chosen as above, on the same machine at load average 9 to 12: db.execute's CPU ratio was
# 3.6-4.3 over six runs (worst pair 19 %: band 20 %); the row diff's 1.10-1.12 (pk) and
# 0.86-0.89 (keyless) over three (worst pair 4 %: band 10 %, for so few runs).
DB_CPU_BAND, SQLITE_CPU_BAND = 0.20, 0.10
# The gateway's boot (bench/boot_cpu_bench.py): its CPU over `python3 -c pass` in the same
# container, as a ratio to that floor, so load and the machine's speed divide out. Chosen as
# above, from nine runs on the 2-core machine of issue 25 (load average 0.1 to 5): the ratio was
# 2.56-3.12 (worst pair 22 %: band 25 %).
BOOT_BAND = 0.25
# `assure ...` figures of bench/cli_start_bench.py, by the name its --json document gives them
CLI_FIGURES = {
    "version": "assure --version",
    "help": "assure --help",
    "run_start": "assure run (to the first spec)",
}
METRICS: tuple[Metric, ...] = (
    Metric("containment.specs", "specs", "higher", None, "hostile specs in the containment suite"),
    Metric(
        "containment.rate",
        "ratio",
        "higher",
        0.0,
        "share of hostile specs with the verdict they expect (not run counts as not contained)",
    ),
    Metric(
        "containment.escapes",
        "specs",
        "lower",
        0.0,
        "hostile specs judged other than they expect (pass, or breach where contained was expected,"
        " ...)",
        ceiling=0,
    ),
    Metric(
        "containment.errors",
        "specs",
        "lower",
        None,
        "hostile specs whose harness failed or that did not run (they lower the rate)",
    ),
    Metric("benign.specs", "specs", "higher", None, "benign specs in the benign suite"),
    Metric(
        "benign.rate",
        "ratio",
        "higher",
        0.0,
        "share of benign specs that passed with no finding above info",
    ),
    Metric(
        "benign.false_positives",
        "specs",
        "lower",
        0.0,
        "benign specs judged fail or breach, or passed with a finding above info",
        ceiling=0,
    ),
    Metric(
        "conformance.rows", "rows", "higher", None, "rows of the standard's live-evidence table"
    ),
    Metric("conformance.rows_passed", "rows", "higher", 0.0, "rows whose every check held (PASS)"),
    Metric(
        "e2e.overhead_ratio",
        "x",
        "lower",
        0.65,
        "one trivial attempt through assure / the same container work on bare Docker (medians)",
    ),
    Metric("e2e.assure_ms", "ms", "lower", None, "one trivial attempt through assure (median)"),
    Metric("e2e.baseline_ms", "ms", "lower", None, "the bare-Docker baseline (median)"),
    Metric(
        "e2e.first_call_p50_ms",
        "ms",
        "lower",
        None,
        "from an attempt's start to the agent's first gateway call (p50)",
    ),
    Metric(
        "e2e.pool_overhead_ratio",
        "x",
        "lower",
        0.65,
        "the same trivial attempt claiming a booted pair of the warm pool / bare Docker (medians)",
    ),
    Metric(
        "e2e.pool_assure_ms",
        "ms",
        "lower",
        None,
        "one trivial attempt through assure, warm pool on (median)",
    ),
    Metric(
        "e2e.pool_first_call_p50_ms",
        "ms",
        "lower",
        None,
        "from an attempt's start to the agent's first gateway call, warm pool on (p50)",
    ),
    Metric(
        "gateway.p50_ms",
        "ms",
        "lower",
        0.80,
        "fs.read of a 100-byte file through the gateway socket, p50",
    ),
    Metric("gateway.p99_ms", "ms", "lower", None, "the same, p99"),
    Metric(
        "gateway.cpu_ms",
        "ms",
        "lower",
        None,
        "the same, CPU time per call of the client and the in-process gateway",
    ),
    Metric(
        "snapshot.vs_git",
        "x",
        "lower",
        1.25,
        "snapshot + diff + attribution as a run does it / git diff --no-index (10,000 files,"
        " 200 MB)",
    ),
    Metric(
        "snapshot.cold_vs_git",
        "x",
        "lower",
        1.15,
        "the same on two cold trees / git diff --no-index",
    ),
    Metric(
        "sqlite.pk_vs_sqldiff",
        "x",
        "lower",
        0.70,
        "our row diff / sqldiff, table with an INTEGER PRIMARY KEY",
    ),
    Metric(
        "sqlite.keyless_vs_sqldiff",
        "x",
        "lower",
        0.50,
        "our row diff / sqldiff, table without a primary key",
    ),
    Metric(
        "sqlite.pk_cpu_vs_sqldiff",
        "x",
        "lower",
        SQLITE_CPU_BAND,
        "the same in CPU time (ours in process, sqldiff as a finished child), with a primary key",
    ),
    Metric(
        "sqlite.keyless_cpu_vs_sqldiff",
        "x",
        "lower",
        SQLITE_CPU_BAND,
        "the same in CPU time, without a primary key",
    ),
    Metric(
        "gateway.db_execute_vs_apsw",
        "x",
        "lower",
        None,
        "one INSERT by db.execute through the gateway / the same INSERT by local apsw (medians)",
    ),
    Metric(
        "gateway.db_execute_cpu_vs_apsw",
        "x",
        "lower",
        DB_CPU_BAND,
        "the same in CPU time (client and in-process gateway / apsw), alternated in blocks",
    ),
    Metric(
        "gateway.boot_over_floor",
        "x",
        "lower",
        BOOT_BAND,
        "the gateway's boot to its config check, CPU over `python3 -c pass`, / that floor (same"
        " container, interleaved medians)",
    ),
    Metric(
        "gateway.boot_cpu_ms",
        "ms",
        "lower",
        None,
        "the same boot's CPU over the floor, in ms (median)",
    ),
    Metric(
        "gateway.override_p99_ms",
        "ms",
        "lower",
        None,
        "from `assure halt`'s control record to the gateway's override_effective, p99",
    ),
    Metric(
        "gate.decide_vs_repinned",
        "x",
        "lower",
        GATE_BAND,
        "gate.decide() on the pinned config / the same decision pinned anew per call (the terms"
        " digested every time; medians)",
    ),
    Metric(
        "gate.decide_us", "µs", "lower", None, "one gate.decide() on the pinned config (median)"
    ),
    *(
        Metric(
            f"cli.{name}_vs_python",
            "x",
            "lower",
            CLI_BAND,
            f"{what} / `python -c pass` (medians of fresh processes)",
        )
        for name, what in CLI_FIGURES.items()
    ),
    *(
        Metric(f"cli.{name}_s", "s", "lower", None, f"{what} (median)")
        for name, what in CLI_FIGURES.items()
    ),
    *(
        Metric(
            f"throughput.j{n}",
            "specs/s",
            "higher",
            None,
            f"trivial specs finished per second by `assure suite -j {n}`",
        )
        for n in (1, 2, 4)
    ),
    Metric(
        "throughput.j2_pool",
        "specs/s",
        "higher",
        None,
        "the same at -j 2 with a warm pool (`--pool 4`)",
    ),
    Metric(
        "throughput.bare_j2",
        "pairs/s",
        "higher",
        None,
        "bare two-container sequences finished per second, 2 at once: the engine's own pace",
    ),
    *(
        Metric(
            f"throughput.{run}_of_bare",
            "x",
            "higher",
            0.20,
            f"throughput.{run} / throughput.bare_j2",
        )
        for run in ("j1", "j2", "j4", "j2_pool")
    ),
)
BY_NAME = {m.name: m for m in METRICS}
THROUGHPUT_JOBS = (1, 2, 4)
# Specs in the throughput suite: at 8, the CLI's own start (about 0.45 s before the first spec
# runs, on the quiet 2-core machine) was an eighth of the -j 2 figure; at 24, a 24th.
THROUGHPUT_SPECS = 24
# -j 2 --pool 4. Interleaved, four rounds on the shared 2-core machine: --pool 4 finished the 8
# specs in 3.66-5.44 s, --pool 2 in 3.78-6.99 s, no pool 4.36-10.66 s. The pool makes no pair
# beyond the claims to come, so a larger pool costs nothing at the end; it only lets the
# refill (3 pairs at once) run further ahead of the two attempts.
THROUGHPUT_POOL = (2, 4)


# ------------------------------------------------------------------------- suite summaries


@dataclass(frozen=True)
class SpecResult:
    """One spec's line of a suite summary, whichever shape the summary has."""

    spec: str
    verdict: str | None  # None: not run
    expect: str
    findings_above_info: int | None  # None: the summary does not say, and no run folder did
    reason: str | None = None  # the first finding above info (or the summary's reason), cut short

    @property
    def judged(self) -> bool:
        return self.verdict in JUDGED

    @property
    def clean(self) -> bool:
        """The verdict it expects, with no finding above info where that is known."""
        return self.verdict == self.expect and not self.findings_above_info


def suite_results(summary: Any, runs_dir: Path | None = None) -> list[SpecResult]:
    """The results of `assure suite --json`, in either shape: the published summary
    (schema_version 1, INTERFACES.md: findings above info per result) or the older one
    ({suite, suite_run_id, as_expected, results: [{spec, run_id, verdict, expect, as_expected}]}),
    whose findings are read from each run's verdict.json files when `runs_dir` is given."""
    if not isinstance(summary, dict) or not isinstance(summary.get("results"), list):
        raise ScorecardError(
            "a suite summary is a JSON object with a `results` list",
            fix="pass the output of `assure suite SUITE --json`",
        )
    if "schema_version" in summary and summary["schema_version"] != 1:
        raise ScorecardError(
            f"suite summary schema_version {summary['schema_version']!r} is not 1",
            fix="update assure/ops/scorecard.py to the new summary format",
        )
    out = []
    for n, r in enumerate(summary["results"]):
        if (
            not isinstance(r, dict)
            or not isinstance(r.get("expect"), str)
            or not (r.get("verdict") is None or isinstance(r["verdict"], str))
        ):
            raise ScorecardError(
                f"result {n} has no `expect` string or a `verdict` that is neither a string nor"
                " null"
            )
        count: int | None  # None: neither the summary nor a run folder says
        if isinstance(r.get("findings"), list):
            above = [
                f for f in r["findings"] if isinstance(f, dict) and f.get("severity") != "info"
            ]
            count, reason = (
                len(above),
                r.get("reason") or (str(above[0].get("message")) if above else None),
            )
        else:
            count, reason = _findings_above_info(runs_dir, r.get("run_id"))
        out.append(
            SpecResult(
                str(r.get("spec")),
                r.get("verdict"),
                r["expect"],
                count,
                None if reason is None else display(str(reason))[:REASON_MAX],
            )
        )
    return out


_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


def _findings_above_info(runs_dir: Path | None, run_id: Any) -> tuple[int | None, str | None]:
    """How many findings above info a run's attempts' verdict.json files hold, and the first's
    message; (None, None) if it cannot be told."""
    if (
        runs_dir is None
        or not isinstance(run_id, str)
        or not _RUN_ID.match(run_id)
        or ".." in run_id
    ):
        return None, None
    verdicts = sorted(layout.RunPaths(runs_dir / run_id).attempts.glob(f"*/{layout.VERDICT}"))
    if not verdicts:
        return None, None
    above = []
    for path in verdicts:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            above += [str(f["message"]) for f in doc["findings"] if f["severity"] != "info"]
        except (OSError, ValueError, KeyError, TypeError):
            return None, None
    return len(above), (above[0] if above else None)


def containment_metrics(results: list[SpecResult], total: int | None = None) -> dict[str, float]:
    """Rate, escapes and errors of the hostile corpus. An escape is a spec that reached a
    verdict other than the one it expects; a harness error or a spec not run is not an escape
    but lowers the rate. `total`: the suite's spec count (specs not run count against the rate)."""
    total = len(results) if total is None else total
    return {
        "containment.specs": total,
        "containment.rate": _share(sum(r.verdict == r.expect for r in results), total),
        "containment.escapes": sum(r.judged and r.verdict != r.expect for r in results),
        "containment.errors": total - sum(r.judged for r in results),
    }


def benign_metrics(results: list[SpecResult], total: int | None = None) -> dict[str, float]:
    """Rate and false positives of the benign corpus: a false positive is a spec judged other
    than it expects, or judged as expected with a finding above info."""
    total = len(results) if total is None else total
    return {
        "benign.specs": total,
        "benign.rate": _share(sum(r.clean for r in results), total),
        "benign.false_positives": sum(r.judged and not r.clean for r in results),
    }


def throughput_metrics(runs: dict[int | str, dict[str, Any]]) -> dict[str, float]:
    """Specs per second of each `-j N` run: {N: {"specs": n, "seconds": s, ...}}; the key of a
    run with the warm pool is "N_pool" (`throughput.jN_pool`). "bare" (bench/bare_throughput.py's
    document, at -j 2) is the baseline each figure is also given against (`..._of_bare`)."""
    suites = {k: run for k, run in runs.items() if k != "bare"}
    figures = {
        f"throughput.j{n}": round(run["specs"] / run["seconds"], 4)
        for n, run in suites.items()
        if run["seconds"] > 0
    }
    bare = runs.get("bare", {}).get("per_second")
    if bare:
        figures["throughput.bare_j2"] = bare
        figures.update(
            {
                f"{name}_of_bare": round(value / bare, 4)
                for name, value in list(figures.items())
                if name != "throughput.bare_j2"
            }
        )
    return figures


def conformance_metrics(packet: Any) -> dict[str, float]:
    """Rows of a conformance packet (packet.json) and how many are PASS."""
    if not isinstance(packet, dict) or not isinstance(packet.get("obligations"), dict):
        raise ScorecardError(
            "a conformance packet is a JSON object with an `obligations` object",
            fix="pass the packet.json `assure conformance` wrote",
        )
    statuses = [
        o.get("status") if isinstance(o, dict) else None for o in packet["obligations"].values()
    ]
    return {"conformance.rows": len(statuses), "conformance.rows_passed": statuses.count("PASS")}


def _share(n: int, total: int) -> float:
    return round(n / total, 4) if total else 0.0


# ------------------------------------------------------------------------- benchmark outputs
# Each benchmark's --json document (bench/*.py writes it) to the scorecard's figures.


def e2e_metrics(doc: dict[str, Any]) -> dict[str, float]:
    medians = doc["medians_ms"]
    first = (
        {"e2e.first_call_p50_ms": doc["first_call_p50_ms"]}
        if doc.get("first_call_p50_ms") is not None
        else {}
    )
    pool = {}  # bench/e2e.py --no-pool, or an e2e.py from before the pool: none of these
    if doc.get("ratio_vs_bare_pool") is not None:
        pool = {
            "e2e.pool_overhead_ratio": doc["ratio_vs_bare_pool"],
            "e2e.pool_assure_ms": medians["trivial_pool"],
        }
    if doc.get("first_call_p50_ms_pool") is not None:
        pool["e2e.pool_first_call_p50_ms"] = doc["first_call_p50_ms_pool"]
    return {
        "e2e.overhead_ratio": doc["ratio_vs_bare"],
        "e2e.assure_ms": medians["trivial"],
        "e2e.baseline_ms": medians["bare"],
        **first,
        **pool,
    }


def gateway_metrics(doc: dict[str, Any]) -> dict[str, float]:
    out = {"gateway.p50_ms": doc["gateway"]["p50_ms"], "gateway.p99_ms": doc["gateway"]["p99_ms"]}
    if "cpu_ms" in doc["gateway"]:  # documents before issue 25 have none
        out["gateway.cpu_ms"] = doc["gateway"]["cpu_ms"]
    return out


def gate_metrics(doc: dict[str, Any]) -> dict[str, float]:
    """bench/gate_bench.py's document."""
    return {"gate.decide_vs_repinned": doc["ratio"], "gate.decide_us": doc["decide_us"]}


def gate_live_metrics(doc: dict[str, Any]) -> dict[str, float]:
    """bench/gate_live_bench.py's document."""
    out = {
        "gateway.db_execute_vs_apsw": doc["db_execute"]["ratio"],
        "gateway.override_p99_ms": doc["override_ms"]["p99"],
    }
    if "cpu_ratio" in doc["db_execute"]:  # documents before issue 25 have none
        out["gateway.db_execute_cpu_vs_apsw"] = doc["db_execute"]["cpu_ratio"]
    return out


def boot_metrics(doc: dict[str, Any]) -> dict[str, float]:
    """bench/boot_cpu_bench.py's document: the gateway's boot over its floor."""
    gateway = doc["median_cpu_s"]["gateway"]
    return {
        "gateway.boot_over_floor": round(gateway["over_floor"] / gateway["floor"], 4),
        "gateway.boot_cpu_ms": round(gateway["over_floor"] * 1000, 3),
    }


def cli_metrics(doc: dict[str, Any]) -> dict[str, float]:
    """bench/cli_start_bench.py's document: each figure, and its ratio to `python -c pass`."""
    medians = doc["median_s"]["after"]
    floor = medians["python -c pass"]
    out: dict[str, float] = {}
    for name, what in CLI_FIGURES.items():
        out[f"cli.{name}_s"] = round(medians[what], 4)
        out[f"cli.{name}_vs_python"] = round(medians[what] / floor, 4)
    return out


def snapshot_metrics(doc: dict[str, Any]) -> dict[str, float]:
    medians = doc["medians_s"]
    git = medians["git diff --no-index"]
    return {
        "snapshot.vs_git": round(medians["ours, as a run does"] / git, 4),
        "snapshot.cold_vs_git": round(medians["ours"] / git, 4),
    }


def sqlite_metrics(doc: dict[str, Any]) -> dict[str, float]:
    scenarios = doc["scenarios"]
    out = {
        f"sqlite.{name}_vs_sqldiff": scenarios[name]["ratio"]
        for name in ("pk", "keyless")
        if name in scenarios
    }
    for name in ("pk", "keyless"):
        if "cpu_ratio" in scenarios.get(name, {}):  # documents before issue 25 have none
            out[f"sqlite.{name}_cpu_vs_sqldiff"] = scenarios[name]["cpu_ratio"]
    return out


# ------------------------------------------------------------------------- the scorecard


@dataclass(frozen=True)
class Part:
    """What one part of `make bench` gave: its figures, or why it has none."""

    status: str  # "ok", "failed" (it ran and gave no figures: the reason says why) or "not-run"
    reason: str | None
    seconds: float | None
    metrics: dict[str, float]
    data: Any = None


def part_from(
    extract: Callable[..., dict[str, float]],
    *args: Any,
    seconds: float | None = None,
    data: Any = None,
) -> Part:
    """Run one extractor on a part's output; a malformed output is that part's failure, named."""
    try:
        return Part("ok", None, seconds, extract(*args), data)
    except ScorecardError as exc:
        return Part("failed", exc.message, seconds, {}, data)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        return Part(
            "failed",
            f"its output is not the expected shape: {type(exc).__name__}: {exc}",
            seconds,
            {},
            data,
        )


def aggregate(
    parts: dict[str, Part], *, created_at: str, machine: dict[str, Any]
) -> dict[str, Any]:
    """The scorecard document: every metric of METRICS (null where its part gave none) and each
    part's status. A figure no metric names is a bug in an extractor: refused, not dropped."""
    values: dict[str, float] = {}
    for name, part in parts.items():
        unknown = set(part.metrics) - set(BY_NAME)
        if unknown:
            raise ScorecardError(
                f"part {name} gave figures no metric names: {', '.join(sorted(unknown))}"
            )
        values.update(part.metrics)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "created_at": created_at,
        "machine": machine,
        "metrics": {m.name: {"value": values.get(m.name), "unit": m.unit} for m in METRICS},
        "parts": {
            name: {"status": p.status, "reason": p.reason, "seconds": p.seconds, "data": p.data}
            for name, p in parts.items()
        },
    }


@functools.cache
def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA.read_text(encoding="utf-8"))
    return schema


def _not_a_number(token: str) -> Any:
    """NaN compares false with everything: a NaN escape count would pass every ceiling."""
    raise ValueError(f"{token} is not a measurement")


def read(path: Path) -> dict[str, Any]:
    """A scorecard file as JSON, of our kind; its version and shape are `check`ed apart, so that
    two files of different versions are refused as such."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"), parse_constant=_not_a_number)
    except (OSError, UnicodeDecodeError) as exc:
        raise ScorecardError(
            f"cannot read the scorecard: {getattr(exc, 'strerror', None) or exc}", where=str(path)
        ) from None
    except ValueError as exc:
        raise ScorecardError(
            f"not JSON: {exc}",
            where=str(path),
            fix="pass a scorecard written by `make bench` (.assure/bench/scorecard-*.json)",
        ) from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise ScorecardError(
            f"not a bench scorecard (its kind is not {KIND!r})",
            where=str(path),
            fix="pass a scorecard written by `make bench`",
        )
    return doc


def check(doc: dict[str, Any], where: str) -> dict[str, Any]:
    """The document, if it has this schema version and the published shape."""
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ScorecardError(
            f"schema_version {doc.get('schema_version')!r}; this assure reads schema_version"
            f" {SCHEMA_VERSION}",
            where=where,
            fix="compare scorecards written by the same version of bench/scorecard.py",
        )
    problems = [
        f"{'/'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}"
        for e in jsonschema.Draft202012Validator(_schema()).iter_errors(doc)
    ]
    if problems:
        raise ScorecardError(
            "malformed scorecard:\n" + "\n".join(problems[:20]),
            where=where,
            fix="pass a scorecard written by `make bench`",
        )
    return doc


def compare_files(old: Path, new: Path) -> list[Row]:
    """`assure bench compare OLD NEW`: both read, refused if their schema versions differ or
    either is malformed, then compared."""
    docs = read(old), read(new)
    versions = [d.get("schema_version") for d in docs]
    if versions[0] != versions[1]:
        raise ScorecardError(
            f"the scorecards have different schema versions (OLD {versions[0]!r}, NEW"
            f" {versions[1]!r}): their metrics are not comparable",
            where=f"{old}, {new}",
            fix=(
                "compare two scorecards written by the same version of bench/scorecard.py (re-run"
                " `make bench` on either checkout)"
            ),
        )
    return compare(check(docs[0], str(old)), check(docs[1], str(new)))


def stamped(directory: Path) -> list[Path]:
    """The scorecards bench/scorecard.py wrote in `directory`, oldest first (each name carries
    its UTC stamp, `scorecard-YYYYMMDDTHHMMSSZ.json`)."""
    return sorted(p for p in directory.glob("scorecard-*.json") if _STAMPED.match(p.name))


_STAMPED = re.compile(r"^scorecard-\d{8}T\d{6}Z\.json$")


def on_main(commit: Any, checkout: Path, branch: str = "main") -> bool:
    """Whether `commit` is on `branch` of the git checkout (it or an ancestor of its tip)."""
    if not isinstance(commit, str) or not re.fullmatch(r"[0-9a-f]{7,64}", commit):
        return False
    try:
        done = subprocess.run(
            ["git", "-C", str(checkout), "merge-base", "--is-ancestor", commit, branch],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def last_on_main(directory: Path, checkout: Path, before: Path | None = None) -> Path | None:
    """The newest scorecard in `directory` (older than `before`, when given: by its stamp, any
    other name counts as newer than all) measured on a clean checkout of a commit on main: the
    baseline a branch's scorecard is compared with. None if there is none."""
    for path in reversed(stamped(directory)):
        if before is not None and (path.name >= before.name or path.resolve() == before.resolve()):
            continue
        try:
            machine = read(path).get("machine") or {}
        except ScorecardError:
            continue
        if not machine.get("dirty") and on_main(machine.get("commit"), checkout):
            return path
    return None


# ------------------------------------------------------------------------- compare


@dataclass(frozen=True)
class Row:
    metric: str
    unit: str
    old: float | None
    new: float | None
    change: str
    band: str
    # "ok", "better", "regression", "missing" (judged, gone from NEW), "new", "info", "not measured"
    verdict: str

    @property
    def regression(self) -> bool:
        return self.verdict in ("regression", "missing")


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[Row]:
    """One row per metric of either (checked) scorecard, judged against METRICS' bands; the
    caller exits non-zero if any row is a regression."""
    names = list(dict.fromkeys([*old["metrics"], *new["metrics"]]))
    return [
        _row(
            name,
            old["metrics"].get(name, {}).get("value"),
            new["metrics"].get(name, {}).get("value"),
            (new["metrics"].get(name) or old["metrics"][name])["unit"],
        )
        for name in names
    ]


def _row(name: str, old: float | None, new: float | None, unit: str) -> Row:
    metric = BY_NAME.get(name)
    band = (
        "-"
        if metric is None or metric.band is None
        else ("0" if metric.band == 0 else f"{metric.band:.0%}")
    )
    if metric is not None and metric.ceiling is not None:
        band = f"max {metric.ceiling:g}"  # any value above it, whatever OLD was
    change = _change(old, new)
    if metric is None or metric.band is None:
        verdict = "info"
    elif new is None:
        verdict = "missing" if old is not None else "not measured"
    elif metric.ceiling is not None and new > metric.ceiling:
        verdict = "regression"
    elif old is None:
        verdict = "new"
    else:
        verdict = _judge(old, new, metric.better, metric.band)
    return Row(name, unit, old, new, change, band, verdict)


def _judge(old: float, new: float, better: str, band: float) -> str:
    """ "regression" or "better" only beyond the band (a zero band: any change); else "ok"."""
    high, low = (old, new) if better == "higher" else (new, old)  # high > low: NEW is worse
    if abs(high - low) < 1e-9:
        return "ok"
    verdict, high, low = ("regression", high, low) if high > low else ("better", low, high)
    if band == 0 or low <= 0:
        return verdict
    return verdict if high / low > 1 + band + 1e-9 else "ok"


def _change(old: float | None, new: float | None) -> str:
    if old is None or new is None:
        return "-"
    if old == 0:
        return f"{new - old:+g}"
    return f"{(new - old) / abs(old):+.1%}"


@dataclass(frozen=True)
class Spread:
    """How one metric varied over repeated scorecards of one machine: the evidence for its band."""

    metric: str
    values: tuple[float, ...]
    median: float
    worst_pair: float  # max / min - 1: the largest worsening between two of the runs
    band: float  # that, rounded up to 5 %: what METRICS should state


def spread(docs: Iterable[dict[str, Any]]) -> list[Spread]:
    """Each metric measured in two or more of `docs` (scorecards of repeated runs of the same
    code on the same machine), with its run-to-run spread and the band that spread suggests."""
    docs = list(docs)
    out = []
    for m in METRICS:
        values = tuple(
            float(d["metrics"][m.name]["value"])
            for d in docs
            if d["metrics"].get(m.name, {}).get("value") is not None
        )
        if len(values) < 2:
            continue
        low, high = min(values), max(values)
        worst = high / low - 1 if low > 0 else (0.0 if high == low else math.inf)
        band = math.ceil(round(worst / 0.05, 6)) * 0.05 if math.isfinite(worst) else math.inf
        out.append(Spread(m.name, values, statistics.median(values), round(worst, 4), band))
    return out


def regressions(rows: Iterable[Row]) -> list[Row]:
    return [r for r in rows if r.regression]


def fmt(value: float | None) -> str:
    """A value for the table: integers as such, others to four significant digits."""
    if value is None:
        return "-"
    if isinstance(value, int) or (
        isinstance(value, float) and value.is_integer() and abs(value) >= 1
    ):
        return str(int(value))
    return f"{value:.4g}" if math.isfinite(value) else str(value)
