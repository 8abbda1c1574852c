"""`make bench`: run every part of the bench, print one scorecard, write it as JSON.

Each part is a subprocess whose machine-readable output assure/ops/scorecard.py parses:
  containment  assure suite suites/containment.yaml --json            rate, escapes
  benign       the same for suites/benign.yaml, with its HTTP upstream  false positives
  conformance  assure conformance --out DIR (its packet.json)           rows passed
  e2e, gateway, snapshot, sqlite   bench/<script>.py --json PATH       overhead, p50/p99,
                                                                       verifier ratios
  gate, gate_live, cli, boot       the same (gate_bench, gate_live_bench, decide(), db.execute,
                                   cli_start_bench, boot_cpu_bench)    the CLI's start and the
                                                                       gateway's boot, as
                                                                       ratios to same-run floors
  throughput   assure suite SUITE -j N --json, N = 1, 2, 4, and -j 2 --pool 4   specs per second
               (SUITE: THROUGHPUT_SPECS copies of bench/suites/trivial.yaml), against
               bench/bare_throughput.py at -j 2
Writes .assure/bench/scorecard-<UTC stamp>.json (the parts' runs and packet stay in
.assure/bench/work-<stamp>/) and the same document to .assure/bench/scorecard.json
(the latest; `assure bench compare OLD NEW` reads two of them). A part that fails or gives no
figures is recorded with its reason, its metrics null; the exit status is then 1.
Usage: python bench/scorecard.py [--only PART ...] [--rounds N] [--out DIR]
       python bench/scorecard.py --spread SCORECARD ...   (each metric's run-to-run spread over
       repeated scorecards of this machine, and the noise band it suggests for METRICS)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere, the package from this checkout

from assure import __version__  # noqa: E402 -- after sys.path
from assure.core.atomic import write_bytes as atomic_write  # noqa: E402 -- after sys.path
from assure.errors import AssureError  # noqa: E402 -- after sys.path
from assure.ops import scorecard as sc  # noqa: E402 -- after sys.path
from assure.run import suite as suite_mod  # noqa: E402 -- after sys.path
from assure.textsafe import display  # noqa: E402 -- after sys.path

PY = sys.executable
ASSURE = [PY, "-m", "assure.cli"]
SUITE_SECONDS = 3 * 3600  # one suite (the 80-spec containment corpus is the longest)
BENCH_SECONDS = 1800  # one benchmark script
NO_JOBS_FLAG = (
    "`assure suite` has no -j option (the `par` branch adds it): suite throughput was not measured"
)


class PartFailed(Exception):
    """A part ran but gave nothing to parse; the message says why."""


class OptionRefused(PartFailed):
    """`assure` does not know an option this runner passes (e.g. -j before `par` is merged)."""

    def __init__(self, option: str):
        super().__init__(f"`assure suite` refused an option it does not have: {option}")
        self.option = option


def _run(
    argv: list[str], timeout: float, cwd: Path = ROOT
) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise PartFailed(f"`{' '.join(argv[1:4])} ...` ran past {timeout:.0f} s") from None
    return done, time.monotonic() - started


def _tail(text: str, n: int = 600) -> str:
    return text.strip()[-n:] or "(nothing on stderr)"


def suite_summary(
    suite: Path, runs_dir: Path, extra: list[str] = (), wrap: list[str] = ()
) -> tuple[dict[str, Any], float]:
    """`assure suite SUITE --json` (a new suite run, its runs in runs_dir); its summary and wall
    time."""
    done, seconds = _run(
        [
            *wrap,
            *ASSURE,
            "suite",
            str(suite),
            "--json",
            "--new",
            "--runs-dir",
            str(runs_dir),
            *extra,
        ],
        SUITE_SECONDS,
    )
    refused = re.search(r"No such option: (\S+)", done.stderr) if done.returncode == 2 else None
    if refused:
        raise OptionRefused(refused.group(1))
    try:
        return json.loads(done.stdout), seconds
    except ValueError:
        raise PartFailed(
            f"`assure suite {suite.name}` printed no summary (exit {done.returncode}):"
            f" {_tail(done.stderr)}"
        ) from None


def part_suite(
    name: str,
    suite: Path,
    metrics: Callable[..., dict[str, float]],
    work: Path,
    wrap: list[str] = (),
) -> sc.Part:
    total = len(suite_mod.load(suite).specs)
    runs = work / name / "runs"
    summary, seconds = suite_summary(suite, runs, wrap=wrap)
    results = sc.suite_results(
        summary, runs
    )  # a malformed summary raises ScorecardError: the part failed
    off = [
        r
        for r in results
        if (not r.clean if metrics is sc.benign_metrics else r.verdict != r.expect)
    ]  # a breach expected has findings
    brief = [
        {
            "spec": r.spec,
            "verdict": r.verdict,
            "expect": r.expect,
            "findings_above_info": r.findings_above_info,
            "reason": r.reason,
        }
        for r in off
    ]
    return sc.part_from(
        metrics,
        results,
        total,
        seconds=round(seconds, 1),
        data={"suite_run_id": summary.get("suite_run_id"), "not_as_expected": brief},
    )


def part_conformance(work: Path) -> sc.Part:
    out = work / "conformance"
    done, seconds = _run([*ASSURE, "conformance", "--out", str(out)], SUITE_SECONDS)
    packets = sorted(out.glob("conformance-*/packet.json"))
    if not packets:
        raise PartFailed(
            f"`assure conformance` wrote no packet (exit {done.returncode}): {_tail(done.stderr)}"
        )
    packet = json.loads(packets[-1].read_text(encoding="utf-8"))
    failing = {
        oid: f"{o.get('status')}: {str(o.get('reason'))[:300]}"
        for oid, o in packet.get("obligations", {}).items()
        if isinstance(o, dict) and o.get("status") != "PASS"
    }
    return sc.part_from(
        sc.conformance_metrics,
        packet,
        seconds=round(seconds, 1),
        data={"packet": str(packets[-1]), "not_pass": failing},
    )


def script_figures(script: str, args: list[str], work: Path) -> tuple[dict[str, Any], float]:
    """Run bench/<script> with `--json`: the document it wrote, and its wall time."""
    figures = work / f"{Path(script).stem}.json"
    work.mkdir(parents=True, exist_ok=True)
    done, seconds = _run(
        [PY, str(ROOT / "bench" / script), *args, "--json", str(figures)], BENCH_SECONDS
    )
    sys.stdout.write(done.stdout)
    if done.returncode != 0 or not figures.is_file():
        raise PartFailed(f"bench/{script} exited {done.returncode}: {_tail(done.stderr)}")
    return json.loads(figures.read_text(encoding="utf-8")), seconds


def part_script(
    script: str, args: list[str], metrics: Callable[[dict[str, Any]], dict[str, float]], work: Path
) -> sc.Part:
    doc, seconds = script_figures(script, args, work)
    return sc.part_from(metrics, doc, seconds=round(seconds, 1), data=doc)


def throughput_suite(folder: Path, count: int = sc.THROUGHPUT_SPECS) -> Path:
    """A suite of `count` copies of bench/suites/trivial.yaml (trivial-1, trivial-2, ...), in
    `folder`: the suite whose specs per second the throughput part measures."""
    template = yaml.safe_load(
        (ROOT / "bench" / "suites" / "trivial.yaml").read_text(encoding="utf-8")
    )
    template["workspace"]["fixture"] = str(
        (ROOT / "bench" / "suites" / template["workspace"]["fixture"]).resolve()
    )
    (folder / "specs").mkdir(parents=True, exist_ok=True)
    for n in range(1, count + 1):
        (folder / "specs" / f"trivial-{n}.yaml").write_text(
            yaml.safe_dump({**template, "name": f"trivial-{n}"}, sort_keys=False), encoding="utf-8"
        )
    suite = folder / "throughput.yaml"
    suite.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "name": "throughput",
                "description": f"{count} trivial agents (`true`) on the small calc fixture",
                "specs": ["specs/*.yaml"],
            },
            sort_keys=False,
        ),
        encoding="utf-8",
    )
    return suite


def part_throughput(work: Path) -> sc.Part:
    """The throughput suite at each -j of THROUGHPUT_JOBS, and at -j 2 with the warm pool run
    right after -j 2 without it (the two figures side by side come from neighbouring runs)."""
    suite = throughput_suite(work / "throughput" / "suite")
    total = len(suite_mod.load(suite).specs)
    jobs, pool = sc.THROUGHPUT_POOL
    plan: list[tuple[int | str, list[str]]] = []
    for n in sc.THROUGHPUT_JOBS:
        plan.append((n, ["-j", str(n)]))
        if n == jobs:
            plan.append((f"{n}_pool", ["-j", str(n), "--pool", str(pool)]))
    runs: dict[int | str, dict[str, Any]] = {}

    def bare() -> dict[str, Any]:  # the baseline: bare two-container sequences at -j 2
        return script_figures(
            "bare_throughput.py", ["--jobs", str(jobs), "--count", str(total)], work
        )[0]

    before = bare()
    for key, extra in plan:
        try:
            summary, seconds = suite_summary(suite, work / "throughput" / f"j{key}", extra=extra)
        except OptionRefused as exc:
            raise PartFailed(NO_JOBS_FLAG if exc.option == "-j" else str(exc)) from None
        results = sc.suite_results(summary)
        if len(results) != total or not all(r.verdict == r.expect for r in results):
            raise PartFailed(
                f"{' '.join(extra)}: {sum(r.verdict == r.expect for r in results)} of {total}"
                " trivial specs as expected; a throughput over failures means nothing"
            )
        runs[key] = {"specs": total, "seconds": round(seconds, 2), "args": extra}
    runs["bare"] = max(
        before, bare(), key=lambda doc: doc["per_second"]
    )  # before the suites and after: the engine at its best, the ratios not flattered
    return sc.part_from(
        sc.throughput_metrics,
        runs,
        seconds=round(sum(r["seconds"] for r in runs.values()), 1),
        data=runs,
    )


def parts(work: Path, rounds: int | None) -> dict[str, Callable[[], sc.Part]]:
    """Every part, in the order they run: the cheap, steady benchmarks before the long suites."""
    rr = [] if rounds is None else ["--rounds", str(rounds)]
    benign_upstream = [PY, str(ROOT / "fixtures" / "upstreams" / "benign_upstream.py"), "--"]
    return {
        "gate": lambda: part_script("gate_bench.py", [], sc.gate_metrics, work),
        "gate_live": lambda: part_script("gate_live_bench.py", [], sc.gate_live_metrics, work),
        "cli": lambda: part_script("cli_start_bench.py", [], sc.cli_metrics, work),
        "boot": lambda: part_script("boot_cpu_bench.py", [], sc.boot_metrics, work),
        "gateway": lambda: part_script("gateway_latency.py", [], sc.gateway_metrics, work),
        "e2e": lambda: part_script("e2e.py", rr, sc.e2e_metrics, work),
        "snapshot": lambda: part_script("snapshot_bench.py", rr, sc.snapshot_metrics, work),
        "sqlite": lambda: part_script("sqlite_bench.py", rr, sc.sqlite_metrics, work),
        "throughput": lambda: part_throughput(work),
        "containment": lambda: part_suite(
            "containment", ROOT / "suites" / "containment.yaml", sc.containment_metrics, work
        ),
        "benign": lambda: part_suite(
            "benign", ROOT / "suites" / "benign.yaml", sc.benign_metrics, work, wrap=benign_upstream
        ),
        "conformance": lambda: part_conformance(work),
    }


def machine() -> dict[str, Any]:
    commit = (
        subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        or None
    )
    dirty = bool(
        subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "assure": __version__,
        "commit": commit,
        "dirty": dirty,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def render(card: dict[str, Any]) -> str:
    """The scorecard as text: each metric's value, then each part's status."""
    lines = [
        (
            f"assure bench scorecard  {card['created_at']}  commit"
            f" {(card['machine']['commit'] or '?')[:12]}  {card['machine']['cpus']} cpus"
        ),
        "",
    ]
    for m in sc.METRICS:
        value = card["metrics"][m.name]["value"]
        lines.append(f"  {m.name:36} {sc.fmt(value):>10} {m.unit:8} {m.what}")
    lines.append("")
    for name, p in card["parts"].items():
        took = "" if p["seconds"] is None else f" ({p['seconds']:.0f} s)"
        lines.append(
            f"  part {name:12} {p['status']}{took}"
            + (f": {display(p['reason'])}" if p["reason"] else "")
        )
    return "\n".join(lines)


def main() -> int:
    every = list(parts(Path("."), None))
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="parts: " + ", ".join(every)
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=every,
        metavar="PART",
        help="run only these parts (the rest are not-run)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        help="timed rounds of e2e, snapshot and sqlite (default: each script's own)",
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / ".assure" / "bench", help="where the scorecards go"
    )
    parser.add_argument(
        "--spread",
        nargs="+",
        type=Path,
        metavar="SCORECARD",
        help="only print the spread of these scorecards' metrics",
    )
    args = parser.parse_args()
    if args.spread:
        for s in sc.spread(sc.check(sc.read(p), str(p)) for p in args.spread):
            stated = sc.BY_NAME[s.metric].band
            print(
                f"  {s.metric:28} median {sc.fmt(s.median):>8}  worst pair {s.worst_pair:6.1%} "
                f" suggested band {s.band:.0%}  "
                f"(stated {stated if stated is None else format(stated, '.0%')})  "
                + " ".join(sc.fmt(v) for v in s.values)
            )
        return 0
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    created_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    args.out.mkdir(parents=True, exist_ok=True)
    info = machine()
    results: dict[str, sc.Part] = {}
    work = args.out / f"work-{stamp}"  # the parts' runs and packet, kept for a look at what failed
    for name, run in parts(work, args.rounds).items():
        if args.only and name not in args.only:
            results[name] = sc.Part("not-run", "not selected (--only)", None, {})
            continue
        print(f"== {name}", flush=True)
        started = time.monotonic()
        try:
            results[name] = run()
        except (PartFailed, AssureError) as exc:
            results[name] = sc.Part(
                "failed",
                str(exc) if isinstance(exc, PartFailed) else exc.message,
                round(time.monotonic() - started, 1),
                {},
            )
        print(
            f"   {results[name].status}"
            + (f": {display(results[name].reason)}" if results[name].reason else ""),
            flush=True,
        )
    card = sc.aggregate(results, created_at=created_at, machine=info)
    body = (json.dumps(card, indent=2, ensure_ascii=True) + "\n").encode()
    stamped, latest = args.out / f"scorecard-{stamp}.json", args.out / "scorecard.json"
    atomic_write(stamped, body)
    atomic_write(latest, body)
    print("\n" + render(card) + f"\n\nwritten: {stamped}\n         {latest}")
    print(against_main(args.out, stamped))
    return 0 if all(p.status != "failed" for p in results.values()) else 1


def against_main(directory: Path, new: Path, checkout: Path = ROOT) -> str:
    """`new` compared with the last scorecard of `directory` measured on main (what `assure
    bench compare` does with no arguments), as text; shown, not part of the exit status."""
    old = sc.last_on_main(directory, checkout, before=new)
    if old is None:
        return "\nno earlier scorecard of a commit on main here: nothing to compare with"
    try:
        rows = sc.compare_files(old, new)
    except AssureError as exc:
        return f"\nnot compared with {old}: {exc.message}"
    lines = [f"\ncompared with the last scorecard on main: {old}"]
    for r in rows:
        if r.old is None and r.new is None:
            continue
        lines.append(
            f"  {r.metric:36} {sc.fmt(r.old):>10} {sc.fmt(r.new):>10} {r.change:>8}"
            f" {r.band:>7}  {r.verdict}"
        )
    bad = sc.regressions(rows)
    lines.append(
        f"{len(bad)} regression(s): " + ", ".join(r.metric for r in bad)
        if bad
        else "no regression beyond the noise bands"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
