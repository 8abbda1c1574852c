"""Micro-benchmark: one `gate.decide()` for an allowed live, reversible effect under a contract
(target: 30 µs, issue 25 item 3).

The full path runs: every rule, the contract's terms checked, autonomy figures. "pinned": the
gateway's way, the context built on a snapshot whose term digests were computed once
(gate.Pinned); the baseline, in the same run and interleaved: the context pinned anew for
every call, which digests the nine terms each time as every decision did before the cache.
Median of 7 runs of 20,000 calls each. Run: .venv/bin/python bench/gate_bench.py [--json FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

from assure.core import gate

RUNS, CALLS, NOW = 7, 20_000, 1_700_000_000.0


def setup() -> tuple[gate.Action, gate.Context]:
    terms = gate.Contract(
        id="c-1",
        proposed_by="planner",
        ratified_by="alice",
        scope=("fs:src/**", "db:shop", "http:api.example.com:443"),
        autonomy_ceiling=gate.IRREVERSIBLE,
        expires_at=NOW + 3600,
    )
    contract = gate.ratify(terms, protected=("tests/**",))
    action = gate.Action(
        "db.execute",
        True,
        scope="db:shop",
        resource_mode="live",
        reversible=True,
        rollback_ref="rb-1",
    )
    ctx = gate.Context(
        known_tools=frozenset({"fs.read", "fs.write", "db.execute"}),
        now=NOW,
        budget=gate.Budget(
            tool_calls_used=3, tool_calls_limit=1000, tokens_used=10, tokens_limit=10**6
        ),
        protected=("tests/**",),
        contract=contract,
        operator_dial=gate.COMMIT,
        verifier_trust=gate.COMMIT,
        verifier_fresh=True,
        rollbacks={"rb-1": ("db:shop",)},
    )
    return action, ctx


def per_call(action: gate.Action, ctx: gate.Context, repin: bool) -> float:
    """Seconds per decision over CALLS calls; `repin`: a snapshot pinned anew for each."""
    parts = {"contract": ctx.contract, "protected": ctx.protected}
    start = time.perf_counter()
    if repin:
        for _ in range(CALLS):
            gate.decide(action, dataclasses.replace(ctx, pinned=None, **parts))
    else:
        for _ in range(CALLS):
            gate.decide(action, ctx)
    return (time.perf_counter() - start) / CALLS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the medians here")
    args = parser.parse_args()
    action, ctx = setup()
    unpinned = dataclasses.replace(ctx, pinned=None, contract=ctx.contract, protected=ctx.protected)
    assert unpinned.pinned is not ctx.pinned
    for c in (ctx, unpinned):
        decision = gate.decide(action, c)
        assert (decision.outcome, decision.rule) == ("allow", "autonomy"), decision
    pinned, repinned = [], []
    for _ in range(RUNS):  # interleaved: both see the same load
        pinned.append(per_call(action, ctx, repin=False))
        repinned.append(per_call(action, ctx, repin=True))
    med, base = statistics.median(pinned), statistics.median(repinned)
    print(
        "gate.decide (live reversible effect, contract, allow): median"
        f" {med * 1e6:.2f} µs per decision (min {min(pinned) * 1e6:.2f}, max"
        f" {max(pinned) * 1e6:.2f}; {RUNS} runs x {CALLS} calls)"
    )
    print(
        f"  pinned anew per call (the terms digested every time): median {base * 1e6:.2f} µs;"
        f" pinned / per call {med / base:.2f}x"
    )
    if args.json:
        doc = {"decide_us": round(med * 1e6, 3), "repinned_us": round(base * 1e6, 3)}
        args.json.write_text(json.dumps({**doc, "ratio": round(med / base, 4)}, indent=2) + "\n")


if __name__ == "__main__":
    main()
