"""The default token budgets, measured from what the stock agents really send (issue 22 item 5).

With no API key the answers are scripted, but the requests are the agents' own: Claude Code's
system prompt and tool definitions, mini-swe-agent's templates, the OpenAI SDK agent's tools.
This runs each preset's example on the real engine (or, with --recordings, reads the journals
committed beside them) and prints, per model call, what the gateway's own accounting saw: the
request's canonical bytes and the input tokens a reservation counts for them
(model.INPUT_BYTES_PER_TOKEN), the fixed part (system prompt and tools), and the growth per turn
as the conversation accumulates; the output tokens the gateway counted are the script's.

A realistic session, from the agents' shipped defaults: mini-swe-agent stops itself once a
task has cost `cost_limit` ($3 in the mini.yaml `mini` runs and in its SWE-bench configs, read
here from the installed package); Claude Code in print mode has no default --max-turns or
--max-budget-usd, so it gets the same $3 session. A session is simulated call by call from the
measured shape (call i sends P + i*g input tokens and writes o), priced at the examples'
claude-sonnet-4-6 list prices with the gateway's cache factors: an agent whose request marks
cache breakpoints (both do) reads the previous call's input from the cache and writes the new
part; one that does not pays full input price for all of it. The session ends on the call that
passes $3 (mini-swe-agent checks its limit before each call); its tokens (input, cache reads and
writes, output: what `limits.tokens` counts) are the preset's default budget, rounded up. The
general default is a $3 session with no cache: every input token at full price.

Run: .venv/bin/python bench/agent_budget.py [--recordings] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

from assure import presets
from assure import spec as spec_mod
from assure.gateway.config import Price
from assure.gateway.model import INPUT_BYTES_PER_TOKEN
from assure.gateway.modelusage import cost_of
from assure.records import layout
from assure.run import modelaccess

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "specs" / "examples"
AGENTS = {  # preset -> its example
    "claude-code": "claude-code",
    "mini-swe-agent": "mini-swe-agent",
    "openai-sdk": "openai-agent",
}
PRICED = "claude-sonnet-4-6"  # the examples' price table, and mini-swe-agent's preset model
MINI_LIMITS = (  # mini-swe-agent's own session limits, as its installed package ships them
    "import json, pathlib, yaml, minisweagent\n"
    "from minisweagent.agents.default import AgentConfig as C\n"
    "root = pathlib.Path(minisweagent.__file__).parent / 'config'\n"
    "out = {'AgentConfig': [C.model_fields['step_limit'].default,"
    " C.model_fields['cost_limit'].default]}\n"
    "for name in ('mini.yaml', 'benchmarks/swebench.yaml'):\n"
    "    a = yaml.safe_load((root / name).read_text())['agent']\n"
    "    out[name] = [a['step_limit'], a['cost_limit']]\n"
    "print(json.dumps(out))\n"
)


def run_example(name: str, runs: Path) -> Path:
    """The gateway folder of the example's first attempt, run on the real engine."""
    from assure.records import store
    from assure.run.driver import Driver
    from assure.sandbox.docker.backend import DockerBackend
    from assure.sandbox.docker.images import Images

    backend = DockerBackend()
    spec = spec_mod.load(EXAMPLES / f"{name}.yaml")
    run = store.RunDir.create(runs, store.new_run_id(spec.name), spec.path, spec.to_json())
    result = Driver(spec, run, backend, Images(backend).ensure(), lambda *_: None).drive()
    print(f"{name}: {result.verdict}", file=sys.stderr)
    return (result.run_dir / layout.ATTEMPTS / "1" / layout.JOURNAL).parent


def mini_limits() -> dict[str, list[float]]:
    """mini-swe-agent's step and cost limits, read inside its derived image."""
    from assure.sandbox import install
    from assure.sandbox.docker.backend import DockerBackend
    from assure.sandbox.docker.images import Images

    backend = DockerBackend()
    spec = spec_mod.load(EXAMPLES / "mini-swe-agent.yaml")
    tag = install.ensure(spec, backend, Images(backend).ensure())
    out = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", tag, "python3", "-c", MINI_LIMITS],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # after its start-up banner


def tokens_of(value: object) -> int:
    """Input tokens as a reservation counts them: canonical bytes / INPUT_BYTES_PER_TOKEN."""
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
    return -(-size // INPUT_BYTES_PER_TOKEN)


def calls(gateway: Path) -> list[dict[str, object]]:
    """Each spending model call of a journal: its input as the gateway counted it, split."""
    out = []
    for line in (gateway / "journal.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("event") != "model_call" or not record.get("request_bytes"):
            continue
        blob = (gateway / "blobs" / record["request_sha256"]).read_bytes()
        request = json.loads(blob)
        fixed = {k: request[k] for k in ("system", "tools") if k in request}
        out.append(
            {
                "endpoint": record["endpoint"],
                "bytes": len(blob),
                "input": -(-len(blob) // INPUT_BYTES_PER_TOKEN),
                "fixed": sum(tokens_of(v) for v in fixed.values()),
                "output": (record.get("usage") or {}).get("output_tokens", 0),
                "cap": request.get("max_tokens") or request.get("max_completion_tokens"),
                "cached": b'"cache_control"' in blob,
            }
        )
    return out


def shape(seen: list[dict[str, object]]) -> tuple[int, float, int, bool]:
    """(P, g, o, cached): first call's input, mean growth per turn, mean output, caching."""
    inputs = [int(c["input"]) for c in seen]
    growth = (inputs[-1] - inputs[0]) / (len(inputs) - 1) if len(inputs) > 1 else 0.0
    output = round(sum(int(c["output"]) for c in seen) / len(seen))
    return inputs[0], growth, output, all(c["cached"] for c in seen)


def session(
    first: int, growth: float, output: int, cached: bool, price: Price, dollars: float
) -> tuple[int, int, float]:
    """(calls, tokens, cost) of a session that ends on the call passing `dollars`."""
    turns, tokens, cost, before = 0, 0, 0.0, 0
    while cost <= dollars:
        now = round(first + turns * growth)
        usage = (
            {"cache_read_input_tokens": before, "cache_creation_input_tokens": now - before}
            if cached
            else {"input_tokens": now}
        )
        usage["output_tokens"] = output
        cost += cost_of(usage, price)
        tokens += sum(usage.values())
        turns, before = turns + 1, now
    return turns, tokens, cost


def round_up(tokens: int) -> int:
    """To two significant digits, upwards."""
    step = 10 ** max(0, len(str(tokens)) - 2)
    return math.ceil(tokens / step) * step


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--recordings", action="store_true", help="read the committed recordings; run nothing"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    spec = spec_mod.load(EXAMPLES / "mini-swe-agent.yaml")
    assert spec.model is not None
    price = Price(**modelaccess.prices(spec.model.prices)[PRICED])
    if args.recordings:
        limits = {"mini.yaml": [0, 3.0]}
        print("mini-swe-agent limits: not read (--recordings runs nothing): assuming $3")
    else:
        limits = mini_limits()
        print(f"mini-swe-agent's shipped [step_limit, cost_limit]: {limits}")
    dollars = float(limits["mini.yaml"][1])
    figures: dict[str, object] = {"dollars": dollars, "price": vars(price), "agents": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for preset, example in AGENTS.items():
            gateway = (
                EXAMPLES / f"{example}.recording" / "gateway"
                if args.recordings
                else run_example(example, Path(tmp) / "runs")
            )
            seen = calls(gateway)
            print(f"\n{preset} ({example}): {len(seen)} model calls")
            print(
                "  call endpoint          bytes   input  system+tools  growth  output  max_tokens"
            )
            for n, c in enumerate(seen):
                growth = "" if n == 0 else f"{int(c['input']) - int(seen[n - 1]['input']):+d}"
                print(
                    f"  {n:>4} {c['endpoint']:<16} {c['bytes']:>7} {c['input']:>7}"
                    f" {c['fixed']:>13} {growth:>7} {c['output']:>7} {c['cap']!s:>11}"
                )
            first, growth, output, cached = shape(seen)
            turns, tokens, cost = session(first, growth, output, cached, price, dollars)
            wordy = session(first, growth * 4, output * 4, cached, price, dollars)
            stated = presets.PRESETS[preset].get("limits", {}).get("tokens")
            print(
                f"  shape: P={first} input tokens, g={growth:.0f}/turn, o={output} (scripted),"
                f" cache breakpoints: {'yes' if cached else 'no'}"
            )
            print(
                f"  a ${dollars:g} session: {turns} calls, {tokens:,} tokens (${cost:.2f});"
                f" rounded up {round_up(tokens):,}; presets.py states"
                f" {'the general default' if stated is None else f'{stated:,}'}"
            )
            print(
                f"  the same with g and o 4x (a model that writes and reads more than the"
                f" script): {wordy[0]} calls, {wordy[1]:,} tokens"
            )
            # figures is built as a dict of dicts above; mypy sees object
            figures["agents"][preset] = {  # type: ignore[index]
                "calls": seen,
                "P": first,
                "g": growth,
                "o": output,
                "cached": cached,
                "session": {"calls": turns, "tokens": tokens, "cost": cost},
                "session_4x": {"calls": wordy[0], "tokens": wordy[1], "cost": wordy[2]},
                "stated": stated,
            }
    # an agent that marks no cache breakpoint: every input token at full price
    uncached = math.floor(dollars / price.input * 1_000_000)
    print(
        f"\ngeneral default: ${dollars:g} of uncached input at ${price.input:g}/M ="
        f" {uncached:,} tokens; presets.py states {presets.DEFAULT_TOKENS:,}"
    )
    figures["general"] = {"tokens": uncached, "stated": presets.DEFAULT_TOKENS}
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
