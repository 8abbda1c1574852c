"""Run the gateway-abuse fixture agents (fixtures/agents/abuse) and print, per attack, the
journal's size and events, how the attempt stopped, how the gateway exited and the verdict.

    .venv/bin/python bench/abuse_measure.py OUT_DIR flood flood-rejects flood-replays flood-paths \
        replay bomb rollback

It measures whatever `assure` is importable: to measure an older tree, put a checkout of it
first on PYTHONPATH (its fixtures must include fixtures/agents/abuse). The numbers in
issue 10's note (h4-journal) came from this script, before and after the fix."""

import json
import os
import sqlite3
import sys
import time
from pathlib import Path

import yaml

import assure
from assure import spec as spec_mod
from assure.records import store
from assure.run import ratify
from assure.run.driver import Driver
from assure.sandbox.docker.backend import DockerBackend
from assure.sandbox.docker.images import Images

ROOT = Path(assure.__file__).resolve().parents[1]
ABUSE = str(ROOT / "fixtures" / "agents" / "abuse")
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
which = sys.argv[2:]
backend = DockerBackend()
images = Images(backend).ensure()


def ratified(scope):  # make() fills in its digests for the spec it ends up in
    return {
        "id": "c-test",
        "proposed_by": "alice",
        "ratified_by": "bob",
        "scope": scope,
        "autonomy_ceiling": "commit",
    }


def make(name, cmd, **fields):
    data = {
        "version": 1,
        "name": name,
        "agent": {"command": cmd, "files": ABUSE},
        "workspace": {
            "fixture": str(ROOT / "fixtures" / "workspaces" / "calc"),
            "writable": ["out/**"],
            "protected": ["tests/**"],
        },
        "limits": {"wall_seconds": 60},
        "assertions": [],
        "expect": "pass",
        **fields,
    }
    p = out / f"{name}.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    if "contract" in data:
        ratify.write(spec_mod.load(p), ratify.compute(spec_mod.load(p)))
    return p


def go(path):
    spec = spec_mod.load(path)
    run = store.RunDir.create(out / "runs", store.new_run_id(spec.name), spec.path, spec.to_json())
    t = time.monotonic()
    r = Driver(spec, run, backend, images, lambda *_: None).drive()
    return r, time.monotonic() - t


def summary(name, r, secs):
    j = r.run_dir / "attempts" / "1" / "gateway" / "journal.jsonl"
    lines = j.read_bytes().splitlines() if j.exists() else []
    recs = [json.loads(line) for line in lines]
    calls = [
        (x.get("path"), x.get("decision"), x.get("status"), x.get("rule"))
        for x in recs
        if x["event"] == "tool_call"
    ]
    c = json.loads((r.run_dir / "attempts" / "1" / "container.json").read_text())
    print(
        json.dumps(
            {
                "attack": name,
                "seconds": round(secs, 1),
                "journal_bytes": j.stat().st_size if j.exists() else None,
                "journal_lines": len(lines),
                "last_event": recs[-1]["event"] if recs else None,
                "events": {
                    e: sum(1 for x in recs if x["event"] == e)
                    for e in sorted({x["event"] for x in recs})
                },
                "longest_string": max(
                    (len(v) for x in recs for v in x.values() if isinstance(v, str)), default=0
                ),
                "stopped": c.get("stopped"),
                "gateway": c.get("gateway"),
                "verdict": r.report["verdict"],
                "findings": sorted({f["kind"] for f in r.report["attempts"][0]["findings"]}),
                "calls": calls[:12],
            },
            default=str,
        ),
        flush=True,
    )


for mode in ("rejects", "replays", "paths"):
    if f"flood-{mode}" in which:
        r, s = go(
            make(
                f"flood-{mode}",
                ["python3", "/opt/agent/flood.py", mode],
                contract=ratified(["fs:**"]),
                limits={"wall_seconds": 120, "tool_calls": 100000 if mode == "paths" else 3},
                assertions=[
                    {
                        "journal_has": {
                            "tool": "fs.write",
                            "path": "tests/test_calc.py",
                            "decision": "allow",
                        }
                    }
                ],
            )
        )
        summary(f"flood-{mode}", r, s)
if "flood" in which:
    r, s = go(
        make(
            "flood",
            ["python3", "/opt/agent/flood.py"],
            contract=ratified(["fs:**"]),
            limits={"wall_seconds": 120, "tool_calls": 3},
            assertions=[
                {
                    "journal_has": {
                        "tool": "fs.write",
                        "path": "tests/test_calc.py",
                        "decision": "allow",
                    }
                }
            ],
        )
    )
    summary("flood", r, s)
if "replay" in which:
    r, s = go(
        make(
            "replay",
            ["sh", "/opt/agent/replay.sh"],
            contract=ratified(["fs:**"]),
            limits={"wall_seconds": 60, "tool_calls": 3},
            assertions=[
                {
                    "journal_has": {
                        "tool": "fs.write",
                        "path": "tests/test_calc.py",
                        "decision": "allow",
                    }
                }
            ],
        )
    )
    summary("replay", r, s)
if "bomb" in which:
    r, s = go(
        make(
            "bomb",
            ["python3", "/opt/agent/json_bomb.py"],
            contract=ratified(["fs:**"]),
            assertions=[{"file_exists": "out/w8"}],
        )
    )
    summary("bomb", r, s)
    print((r.run_dir / "attempts" / "1" / "agent.log").read_text()[-1500:])
if "rollback" in which:
    for n in ("ledger", "vault"):
        live = out / f"live-{n}"
        live.mkdir(exist_ok=True)
        os.chown(live, 10001, 10001)
        p = live / f"{n}.sqlite"
        if p.exists():
            p.unlink()
        db = sqlite3.connect(p)
        db.execute("CREATE TABLE entries (id INTEGER PRIMARY KEY, amount INTEGER)")
        db.commit()
        db.close()
        os.chown(p, 10001, 10001)
    (out / "ledger.restore").write_text("restore\n")
    r, s = go(
        make(
            "rollback",
            ["sh", "/opt/agent/rollback.sh"],
            contract=ratified(["db:*"]),
            assertions=[{"exit_code": 0}],
            databases=[
                {
                    "name": "ledger",
                    "fixture": str(out / "live-ledger" / "ledger.sqlite"),
                    "mode": "live",
                    "rollback": "ledger.restore",
                },
                {
                    "name": "vault",
                    "fixture": str(out / "live-vault" / "vault.sqlite"),
                    "mode": "live",
                },
            ],
        )
    )
    summary("rollback", r, s)
    print(
        "vault rows",
        sqlite3.connect(out / "live-vault" / "vault.sqlite")
        .execute("SELECT count(*) FROM entries")
        .fetchone(),
    )
