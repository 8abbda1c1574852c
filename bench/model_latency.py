"""Micro-benchmark: a scripted model call through the gateway vs. the scripted source alone.

In-process gateway on a unix socket, `model: {mode: scripted}`, one kept-alive HTTP client
sending POST /v1/messages (what an agent's SDK sends through the TCP bridge): the gateway
parses, gates, reserves and settles the budget, writes the request and response blobs and the
journal line. The baseline, in the same run, asks the same `Script` source for the same
request in-process. Both p50s and their ratio; the difference is the gateway's added latency
per model call. Run: .venv/bin/python bench/model_latency.py [--json PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import tempfile
import time
from pathlib import Path

from assure.client import UnixHTTPConnection
from assure.core.chain import canonical
from assure.gateway.config import parse
from assure.gateway.modelsources import Script
from assure.gateway.modelwire import Call
from assure.gateway.server import serve

WARMUP, CALLS = 50, 500
ASK = {
    "model": "claude-sonnet-4-6",
    "max_tokens": 1024,
    "messages": [{"role": "user", "content": "Fix add() in src/calc.py."}],
}
ANSWER = {
    "id": "msg_bench",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-6",
    "content": [{"type": "text", "text": "add() subtracts; fixing it."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 900, "output_tokens": 80},
}


def gateway_samples(path: str) -> list[float]:
    body = json.dumps(ASK).encode()
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    conn, samples = UnixHTTPConnection(path, timeout=10, connect_timeout=5), []
    for _ in range(WARMUP + CALLS):
        start = time.perf_counter()
        conn.request("POST", "/v1/messages", body, headers)
        response = conn.getresponse()
        response.read()
        samples.append(time.perf_counter() - start)
        assert response.status == 200, response.status
    conn.close()
    return samples[WARMUP:]


def direct_samples(script: Path) -> list[float]:
    source, body, samples = Script(str(script)), json.dumps(ASK).encode(), []
    for _ in range(WARMUP + CALLS):
        start = time.perf_counter()
        parsed = json.loads(body)  # the same request, parsed as the source needs it
        canon = canonical(parsed)
        call = Call(
            "messages",
            body,
            canon,
            hashlib.sha256(canon).hexdigest(),
            parsed,
            "",
            "2023-06-01",
            None,
        )
        assert source.respond(call).status == 200
        samples.append(time.perf_counter() - start)
    return samples[WARMUP:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, dest="json_path", help="also write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlbench", dir="/tmp") as tmp:
        root = Path(tmp)
        (root / "ws").mkdir()
        script = root / "script.json"
        script.write_text(json.dumps([ANSWER] * (WARMUP + CALLS)))
        config = parse(
            {
                "run_id": "bench",
                "attempt": 1,
                "socket": str(root / "gw.sock"),
                "workspace": str(root / "ws"),
                "journal": str(root / "journal.jsonl"),
                "ready_file": str(root / "ready"),
                "limits": {"tool_calls": 10, "requests": 2 * (WARMUP + CALLS)},
                "model": {"mode": "scripted", "script": str(script), "blob_dir": str(root / "b")},
            }
        )
        gateway = serve(config)
        try:
            via_gateway = gateway_samples(config.socket)
        finally:
            gateway.shutdown()
        journaled = sum(
            json.loads(line)["event"] == "model_call"
            for line in (root / "journal.jsonl").read_text().splitlines()
        )
        assert journaled == WARMUP + CALLS, journaled  # each call gated and journaled
        direct = direct_samples(script)
    ms = 1000
    gw, dr = statistics.median(via_gateway) * ms, statistics.median(direct) * ms
    figures = {
        "calls": CALLS,
        "gateway_p50_ms": round(gw, 4),
        "direct_p50_ms": round(dr, 4),
        "added_p50_ms": round(gw - dr, 4),
        "ratio_p50": round(gw / dr, 1),
    }
    print(f"scripted model call via gateway ({CALLS} calls, keep-alive): p50 {gw:.3f} ms")
    print(f"scripted source called directly ({CALLS} calls):           p50 {dr:.4f} ms")
    print(f"gateway's added latency per model call: p50 {gw - dr:.3f} ms ({gw / dr:.0f}x)")
    if args.json_path is not None:
        args.json_path.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
