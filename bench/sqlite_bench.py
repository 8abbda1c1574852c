"""Benchmark `assure.verify.sqlite.diff` against `sqldiff` on the same two database files.

Builds, under a temporary directory, two scenarios (each a PRE file and a POST copy with 1% of
its rows changed: 40% updates, 30% deletes, 30% inserts):
  pk        one table of 1,000,000 rows with an INTEGER PRIMARY KEY (5 columns: text, int, real,
blob)
  keyless   one table of 100,000 rows without a PRIMARY KEY (compared as a multiset by us;
            sqldiff pairs such rows by rowid)
Both files go through `capture()` first (what the verifier compares); then, warm page cache,
the median of --rounds runs (alternating, after one warm-up run each) of:
  ours      diff(PRE, POST), in this process (all changes found; 10,000 listed)
  sqldiff   sqldiff PRE POST > /dev/null
Prints medians of wall and CPU time, both ratios (target, issue 25: ours <= 1.0x sqldiff;
CPU: ours in this process, sqldiff's as a finished child, since load inflates wall only) and our
peak RSS, measured in a child
process (VmHWM of a fresh interpreter that runs one diff; its peak after imports alone is shown
beside it; ru_maxrss would include this parent's size, see peak_rss_mib). Usage: python
bench/sqlite_bench.py [--rounds 5] [--keep DIR]
[--json PATH] (--json also writes each scenario's figures there, for bench/scorecard.py).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import apsw

from assure.verify.sqlite import capture, diff

SEED = 20240601
CHANGED_SHARE = 0.01
SQLDIFF = "/usr/bin/sqldiff"


def _series(n: int) -> str:
    return f"WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {n}) "


def build(directory: Path, scenario: str, rows: int) -> tuple[Path, Path, int]:
    """PRE and POST files of one scenario and the number of changed rows."""
    pre, post = directory / f"{scenario}-pre.db", directory / f"{scenario}-post.db"
    rng = random.Random(f"{SEED}-{scenario}")
    for path in directory.glob(f"{scenario}-*"):
        path.unlink()
    conn = apsw.Connection(str(pre))
    conn.execute("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF").fetchall()
    if scenario == "pk":
        conn.execute(
            "CREATE TABLE orders(id INTEGER PRIMARY KEY, customer TEXT NOT NULL, qty INTEGER, price"
            " REAL, token BLOB)"
        )
        conn.execute(
            _series(rows)
            + "INSERT INTO orders SELECT i, 'customer-' || (i % 5000), i % 97, i * 0.25,"
            " randomblob(8) FROM s"
        )
    else:
        conn.execute("CREATE TABLE events(kind TEXT, n INTEGER, amount REAL, payload BLOB)")
        # about 1 row in 20 has an exact duplicate, so the multiset has counts > 1
        conn.execute(
            _series(rows)
            + "INSERT INTO events SELECT 'kind-' || (i % 50), i - (i % 20 = 0), (i % 1000) * 0.5,"
            " zeroblob(i % 7) FROM s"
        )
    conn.close()
    shutil.copyfile(pre, post)
    changed = int(rows * CHANGED_SHARE)
    n_update, n_delete = changed * 4 // 10, changed * 3 // 10
    n_insert = changed - n_update - n_delete
    conn = apsw.Connection(str(post))
    conn.execute("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF").fetchall()
    targets = rng.sample(range(1, rows + 1), n_update + n_delete)
    ups, dels = json.dumps(targets[:n_update]), json.dumps(targets[n_update:])
    with conn:
        if scenario == "pk":
            conn.execute(
                "UPDATE orders SET qty = qty + 1 WHERE id IN (SELECT value FROM json_each(?))",
                (ups,),
            )
            conn.execute("DELETE FROM orders WHERE id IN (SELECT value FROM json_each(?))", (dels,))
            conn.execute(
                _series(n_insert)
                + f"INSERT INTO orders SELECT {rows} + i, 'new-' || i, 1, 1.5, randomblob(8) FROM s"
            )
        else:
            conn.execute(
                "UPDATE events SET amount = amount + 1 WHERE rowid IN (SELECT value FROM"
                " json_each(?))",
                (ups,),
            )
            conn.execute(
                "DELETE FROM events WHERE rowid IN (SELECT value FROM json_each(?))", (dels,)
            )
            conn.execute(_series(n_insert) + "INSERT INTO events SELECT 'new', i, 0.0, NULL FROM s")
    conn.close()
    return pre, post, changed


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_pair(
    ours: Callable[[], object], theirs: Callable[[], object], rounds: int
) -> tuple[dict[str, float], object]:
    """Medians of both, wall and CPU, run alternately (one warm-up each first) so load on the
    machine hits both alike. CPU: this process's for ours (in process), the finished children's
    for sqldiff (a subprocess): load inflates wall time only."""
    ours()
    theirs()
    samples: dict[str, list[float]] = {"ours": [], "ours_cpu": [], "sqldiff": [], "sqldiff_cpu": []}
    result = None
    for _ in range(rounds):
        start, cpu = time.perf_counter(), time.process_time()
        result = ours()
        samples["ours_cpu"].append(time.process_time() - cpu)
        samples["ours"].append(time.perf_counter() - start)
        start, cpu = time.perf_counter(), _children_cpu()
        theirs()
        samples["sqldiff_cpu"].append(_children_cpu() - cpu)
        samples["sqldiff"].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}, result


def peak_rss_mib(pre: Path, post: Path) -> tuple[float, float]:
    """(peak RSS after imports, peak RSS after one diff) of a fresh child interpreter, in MiB.

    Read from VmHWM in /proc/self/status: the high-water mark of the child's own memory.
    resource.getrusage(RUSAGE_SELF).ru_maxrss is not usable here: Linux carries it across
    fork and exec, so a child of this (large) process reports at least the parent's size.
    """
    code = (
        "import sys\nfrom pathlib import Path\ndef hwm():\n    return next(int(l.split()[1]) for l"
        " in open('/proc/self/status') if l.startswith('VmHWM:'))\nfrom assure.verify.sqlite import"
        " diff\nbase = hwm()\ndiff(Path(sys.argv[1]), Path(sys.argv[2]))\nprint(base, hwm())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(pre), str(post)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return int(out[0]) / 1024, int(out[1]) / 1024


def run(scenario: str, rows: int, work: Path, rounds: int) -> dict[str, object]:
    start = time.perf_counter()
    raw_pre, raw_post, changed = build(work, scenario, rows)
    built = time.perf_counter() - start
    start = time.perf_counter()
    pre = capture(raw_pre, work, f"{scenario}-pre-captured")
    post = capture(raw_post, work, f"{scenario}-post-captured")
    captured = (time.perf_counter() - start) / 2
    medians, changes = timed_pair(
        lambda: diff(pre, post),
        lambda: subprocess.run(
            [SQLDIFF, str(pre), str(post)], stdout=subprocess.DEVNULL, check=True
        ),
        rounds,
    )
    ours, theirs = medians["ours"], medians["sqldiff"]
    ours_cpu, theirs_cpu = medians["ours_cpu"], medians["sqldiff_cpu"]
    # every change here is a Change or an Omitted, both with `kind`
    found = sum(c.count if c.kind == "omitted" else 1 for c in changes)  # type: ignore[union-attr]
    base, peak = peak_rss_mib(pre, post)
    print(
        f"{scenario}: {rows:,} rows, {changed:,} changed ({pre.stat().st_size / 2**20:.0f} MiB per"
        f" file; built in {built:.1f} s, capture {captured:.2f} s per file)"
    )
    print(
        f"  ours     {ours:7.3f} s, CPU {ours_cpu:.3f} s  (median of {rounds}; {found:,} changes"
        " found)"
    )
    print(f"  sqldiff  {theirs:7.3f} s, CPU {theirs_cpu:.3f} s  (median of {rounds})")
    print(f"  ratio    {ours / theirs:7.2f}x, CPU {ours_cpu / theirs_cpu:.2f}x  (target <= 1.0x)")
    print(
        f"  peak RSS {peak:7.1f} MiB in a child process (VmHWM; {base:.1f} MiB after imports,"
        f" {peak - base:.1f} MiB for the diff)"
    )
    return figures(rows, changed, found, rounds, ours, theirs, peak, cpu=(ours_cpu, theirs_cpu))


def figures(
    rows: int,
    changed: int,
    found: int,
    rounds: int,
    ours: float,
    theirs: float,
    peak: float,
    cpu: tuple[float, float] | None = None,
) -> dict[str, object]:
    """One scenario's figures (the --json document holds one per scenario); `cpu`: (ours,
    sqldiff) CPU seconds."""
    doc: dict[str, object] = {
        "rows": rows,
        "changed": changed,
        "found": found,
        "rounds": rounds,
        "ours_s": round(ours, 4),
        "sqldiff_s": round(theirs, 4),
        "ratio": round(ours / theirs, 4),
        "peak_rss_mib": round(peak, 1),
    }
    if cpu is not None:
        doc.update(
            ours_cpu_s=round(cpu[0], 4),
            sqldiff_cpu_s=round(cpu[1], 4),
            cpu_ratio=round(cpu[0] / cpu[1], 4),
        )
    return doc


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pk-rows", type=int, default=1_000_000)
    parser.add_argument("--keyless-rows", type=int, default=100_000)
    parser.add_argument("--keep", type=Path, help="build in this directory and keep it")
    parser.add_argument(
        "--json", type=Path, dest="json_path", help="also write the figures to this file as JSON"
    )
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="assure-sqlite-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        scenarios = {
            "pk": run("pk", args.pk_rows, work, args.rounds),
            "keyless": run("keyless", args.keyless_rows, work, args.rounds),
        }
        if args.json_path is not None:
            args.json_path.write_text(json.dumps({"scenarios": scenarios}, indent=2) + "\n")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
