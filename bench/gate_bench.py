"""Micro-benchmark: one `gate.decide()` for an allowed live, reversible effect under a contract.

The full path runs: every rule, the contract hash recomputed and compared, autonomy figures.
Median of 7 runs of 100,000 calls each. Run: .venv/bin/python bench/gate_bench.py
"""

from __future__ import annotations

import statistics
import time

from assure.core import gate

RUNS, CALLS, NOW = 7, 100_000, 1_700_000_000.0


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


def main() -> None:
    action, ctx = setup()
    decision = gate.decide(action, ctx)
    assert (decision.outcome, decision.rule) == ("allow", "autonomy"), decision
    runs = []
    for _ in range(RUNS):
        start = time.perf_counter()
        for _ in range(CALLS):
            gate.decide(action, ctx)
        runs.append((time.perf_counter() - start) / CALLS)
    print(
        "gate.decide (live reversible effect, contract, allow): median"
        f" {statistics.median(runs) * 1e6:.2f} µs per decision (min {min(runs) * 1e6:.2f}, max"
        f" {max(runs) * 1e6:.2f}; {RUNS} runs x {CALLS} calls)"
    )


if __name__ == "__main__":
    main()
