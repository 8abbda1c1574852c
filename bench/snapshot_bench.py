"""Benchmark snapshot + diff + attribution against `sha256sum` of every file and `git diff
--no-index`.

Builds, under /tmp, a PRE tree of 10,000 files totalling 200 MB (mixed sizes) and a POST copy
with 1% of the files rewritten (same size, new content); a journal of gateway writes explains
half of the rewritten files. Then times, warm page cache, the median of several rounds of:
  ours      take(PRE) + take(POST) + diff + attribute, two separate trees, nothing reused
  ours, as a run does   take(tree), then the 1% change lands in that same tree (untimed),
            then take(tree, reuse=PRE) + diff + attribute: unchanged files (same inode, size,
            mtime and ctime, which no agent can set back) keep their PRE entry
  sha256sum find DIR -type f -print0 | xargs -0 sha256sum, once on PRE and once on POST
  git       git diff --no-index --stat PRE POST
The hash helper processes are started by the warm-up round, as a run's first snapshot starts
them for the rest of the run. Prints medians, ratios and peak RSS (ours and its helpers).
Usage: python bench/snapshot_bench.py [--rounds 5] [--json PATH] (--json also writes the
medians and samples there, for bench/scorecard.py)
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from assure.verify.attribution import attribute
from assure.verify.diff import Change, diff
from assure.verify.snapshot import take

FILES = 10_000
TOTAL_BYTES = 200 * 10**6
FILES_PER_DIR = 100
CHANGED_SHARE = 0.01
SEED = 20240601
TARGETS = {"ours, as a run does": 0.6, "ours": 1.0}  # x the faster baseline (issue 25, item 3)


def sizes(rng: random.Random) -> list[int]:
    """Log-normal sizes (many small files, a few of several MB) scaled to TOTAL_BYTES."""
    raw = [rng.lognormvariate(0, 2) for _ in range(FILES)]
    scale = TOTAL_BYTES / sum(raw)
    out = [max(1, int(r * scale)) for r in raw]
    out[0] += TOTAL_BYTES - sum(out)
    return out


def build(pre: Path, post: Path) -> list[Path]:
    rng = random.Random(SEED)
    paths = []
    for i, size in enumerate(sizes(rng)):
        path = pre / f"d{i // FILES_PER_DIR:03}" / f"f{i:05}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(size))
        paths.append(path)
    shutil.copytree(pre, post)
    changed = rng.sample(paths, int(FILES * CHANGED_SHARE))
    for path in changed:
        target = post / path.relative_to(pre)
        target.write_bytes(rng.randbytes(target.stat().st_size))
    return changed


def journal_for(changes: list[Change]) -> list[dict[str, object]]:
    """Allowed gateway writes that explain every other changed file (the rest stay unattributed)."""
    return [
        {
            "event": "tool_call",
            "decision": "allow",
            "action_id": f"a{n}",
            "effect": {
                "op": "write",
                "path": c.path,
                "sha256": c.after.sha256,
                "mode": c.after.mode,
            },
        }
        for n, c in enumerate(changes[::2])
        if c.after is not None
    ]


JOURNAL: list[dict[str, object]] = []  # filled in once the changed paths are known


def judged(changes: list[Change]) -> int:
    """Attribute the changes as a run does; the number of unattributed ones."""
    return sum(
        f.kind == "unattributed" for f in attribute(changes, JOURNAL, writable=(), protected=())
    )


def ours(pre: Path, post: Path) -> int:
    return judged(diff(take(pre), take(post)))


def ours_in_place(pre: Path, post: Path) -> tuple[float, int]:
    """The product's case: one workspace, snapshotted before and after the agent."""
    work = pre.parent / "work"
    shutil.rmtree(work, ignore_errors=True)
    subprocess.run(["cp", "-a", str(pre), str(work)], check=True)
    started = time.perf_counter()
    before = take(work)
    elapsed = time.perf_counter() - started
    for path in post.rglob("*"):
        target = work / path.relative_to(post)
        if path.is_file() and path.read_bytes() != target.read_bytes():
            target.write_bytes(path.read_bytes())
    started = time.perf_counter()
    found = judged(diff(before, take(work, reuse=before)))
    return elapsed + time.perf_counter() - started, found


def sha256sum(pre: Path, post: Path) -> int:
    for tree in (pre, post):
        subprocess.run(
            f"find {tree} -type f -print0 | xargs -0 sha256sum > /dev/null", shell=True, check=True
        )
    return 0


def git(pre: Path, post: Path) -> int:
    done = subprocess.run(
        ["git", "diff", "--no-index", "--stat", str(pre), str(post)], capture_output=True
    )
    assert done.returncode == 1, done.stderr  # 1: differences found
    return done.stdout.count(b"\n") - 1  # minus the summary line


def timed(fn: Callable[[Path, Path], int], pre: Path, post: Path) -> tuple[float, int]:
    if fn is ours_in_place:
        return ours_in_place(pre, post)
    started = time.perf_counter()
    result = fn(pre, post)
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--json", type=Path, dest="json_path", help="also write the figures to this file as JSON"
    )
    args = parser.parse_args()
    rounds = args.rounds
    base = Path(tempfile.mkdtemp(prefix="assure-bench-", dir="/tmp"))
    try:
        pre, post = base / "pre", base / "post"
        changed = build(pre, post)
        JOURNAL.extend(journal_for(diff(take(pre), take(post))))
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        contenders = {
            "ours": ours,
            "ours, as a run does": ours_in_place,
            "sha256sum x2": sha256sum,
            "git diff --no-index": git,
        }
        for name, fn in contenders.items():  # warm-up: page cache and lazy imports for all
            seconds, found = timed(fn, pre, post)
            print(
                f"warm-up {name}: {seconds:.3f} s, {found}"
                f" {'unattributed' if name.startswith('ours') else 'changed'} paths reported"
            )
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(rounds):  # interleaved, so drift hits every contender alike
            for name, fn in contenders.items():
                times[name].append(timed(fn, pre, post)[0])
        report(times, changed, rss_before)
        if args.json_path is not None:
            args.json_path.write_text(json.dumps(summary(times, len(changed)), indent=2) + "\n")
    finally:
        shutil.rmtree(base)


def summary(times: dict[str, list[float]], changed: int) -> dict[str, object]:
    """Each contender's median and samples, in seconds (the --json document)."""
    return {
        "files": FILES,
        "bytes_per_tree": TOTAL_BYTES,
        "changed": changed,
        "rounds": len(times["ours"]),
        "medians_s": {name: round(statistics.median(values), 4) for name, values in times.items()},
        "samples_s": {name: [round(v, 4) for v in values] for name, values in times.items()},
    }


def report(times: dict[str, list[float]], changed: list[Path], rss_before: int) -> None:
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(
        f"\n{FILES} files, {TOTAL_BYTES / 1e6:.0f} MB per tree, {len(changed)} changed; median of"
        f" {len(times['ours'])}"
    )
    for name, median in medians.items():
        runs = ", ".join(f"{v:.3f}" for v in times[name])
        print(
            f"  {name:22} {median:7.3f} s   ({runs})   ours/this = {medians['ours'] / median:.2f}  "
            f" ours-as-a-run/this = {medians['ours, as a run does'] / median:.2f}"
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        f"  peak RSS of this process: {peak / 1024:.0f} MiB (was {rss_before / 1024:.0f} MiB before"
        " timing)"
    )
    for pid in helper_pids():
        print(f"  peak RSS of hash helper {pid}: {peak_rss_kib(pid) / 1024:.0f} MiB")
    faster = min(("sha256sum x2", "git diff --no-index"), key=medians.__getitem__)
    for name, target in TARGETS.items():
        ratio = medians[name] / medians[faster]
        print(
            f"  target, {name} <= {target}x {faster} (the faster baseline): {ratio:.2f}x,"
            f" {'met' if ratio <= target else 'missed'}"
        )


def helper_pids() -> list[int]:
    from assure.verify import hasher

    return [] if hasher._shared is None else [process.pid for process, _ in hasher._shared.helpers]


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


if __name__ == "__main__":
    main()
