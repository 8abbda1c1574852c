#!/bin/bash
# Compare commits with bench/e2e.py on a shared machine: whole benchmark processes alternated
# (A, B, A, B...), each with its own interleaved bare baseline, then the medians of their medians.
# Every side runs this checkout's bench/e2e.py, so all measure alike.
#   bench/ab.sh REV_A REV_B [PAIRS=3] [ROUNDS=3]      (e.g. bench/ab.sh main HEAD)
# A side whose gateway code differs builds its own gateway image first (a content tag).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$here/.venv/bin/python}
a=$1; b=$2; pairs=${3:-3}; rounds=${4:-3}
out=$(mktemp -d /tmp/assure-ab.XXXXXX)
for rev in "$a" "$b"; do
  dir=$out/src-$(git -C "$here" rev-parse --short "$rev")
  mkdir -p "$dir" && git -C "$here" archive "$rev" | tar -x -C "$dir"
  cp "$here/bench/e2e.py" "$dir/bench/e2e.py"
  (cd "$dir" && PYTHONPATH=$dir "$python" -c 'from assure.sandbox.docker import DockerBackend; from assure.sandbox.images import Images; Images(DockerBackend()).ensure()')
done
for i in $(seq "$pairs"); do
  for rev in "$a" "$b"; do
    short=$(git -C "$here" rev-parse --short "$rev"); dir=$out/src-$short
    (cd "$dir" && PYTHONPATH=$dir "$python" bench/e2e.py --rounds "$rounds" --json "$out/$short.$i.json" > "$out/$short.$i.txt" 2>&1) \
      || echo "$rev run $i failed: see $out/$short.$i.txt" >&2
  done
done
"$python" - "$out" "$(git -C "$here" rev-parse --short "$a")" "$(git -C "$here" rev-parse --short "$b")" <<'PY'
import glob, json, statistics, sys
out, *revs = sys.argv[1:]
for rev in revs:
    runs = [json.load(open(f)) for f in sorted(glob.glob(f"{out}/{rev}.*.json"))]
    if not runs:
        print(f"{rev}: no run finished"); continue
    med = lambda key: statistics.median(r["medians_ms"][key] for r in runs if key in r["medians_ms"])
    calls = [r["first_call_p50_ms"] for r in runs if r.get("first_call_p50_ms")]
    print(f"{rev}: ratio {statistics.median(r['ratio_vs_bare'] for r in runs):.3f} (each {[r['ratio_vs_bare'] for r in runs]}), "
          f"trivial {med('trivial'):.0f} ms, bare {med('bare'):.0f} ms, first call p50 {statistics.median(calls) if calls else 'n/a'}, "
          f"failed attempts {sum(r.get('failed_attempts', 0) for r in runs)}")
    keys = sorted({k for r in runs for k in r["medians_ms"] if k.startswith("phase.")})
    print("   " + ", ".join(f"{k[6:]} {med(k):.0f}" for k in keys))
print(f"(runs in {out})")
PY
