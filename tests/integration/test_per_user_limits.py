"""Two runs side by side on the real engine: a hostile agent that holds every per-user kernel
budget it can (suites/containment/resource--per-user-limits.yaml: inotify instances, pipe
buffer pages, message queue bytes, processes) and an honest one that uses a little of each,
in its agent and again in a check container. The kernel counts these per uid across the host;
each attempt runs as its own uid (sandbox/uids.py), so the honest run's verdict is the one it
gets alone: pass. On a shared uid it failed (issue 21, item 4). Under gVisor the budgets are
each sandbox's own kernel's (runsc's Sentry) whatever the uid; the leased users work there too."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path

import pytest
import yaml

from assure import spec as spec_mod
from assure.records import store
from assure.run.driver import Driver, RunResult
from assure.sandbox import uids, workspace_fs

from .conftest import ROOT

HOSTILE = ROOT / "suites" / "containment" / "resource--per-user-limits.yaml"
VICTIM_FILES = ROOT / "fixtures" / "agents" / "limits-victim"
USES = ("inotify ok", "pipe 65536 ok", "mqueue ok", "fork 8 ok")


def victim_spec(folder: Path) -> Path:
    data = {
        "version": 1,
        "name": "limits-victim",
        "agent": {"command": ["python3", "/opt/agent/victim.py"], "files": str(VICTIM_FILES)},
        "workspace": {
            "fixture": str(ROOT / "fixtures" / "workspaces" / "calc"),
            "writable": ["out/**"],
            "protected": ["tests/**"],
        },
        "limits": {"wall_seconds": 60},
        "max_attempts": 1,
        "assertions": [
            {"exit_code": 0},
            *({"file_contains": {"path": "out/limits.txt", "text": use}} for use in USES),
            {"command": {"run": ["python3", "out/victim.py", "--check"], "timeout_seconds": 60}},
        ],
        "expect": "pass",
    }
    path = folder / "limits-victim.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def start(
    path: Path, runs: Path, backend, images, into: dict[str, RunResult], runtime: str
) -> threading.Thread:
    spec = spec_mod.load(path)
    spec = dataclasses.replace(spec, sandbox=dataclasses.replace(spec.sandbox, runtime=runtime))
    # it holds everything while its victim runs; under gVisor it forks fewer (the agent's header
    # says why)
    if spec.hostile:
        env = {
            **spec.agent.env,
            "HOLD_SECONDS": "30",
            **({"FORKS": "40"} if runtime == "runsc" else {}),
        }
        spec = dataclasses.replace(spec, agent=dataclasses.replace(spec.agent, env=env))
    run = store.RunDir.create(runs, store.new_run_id(spec.name), spec.path, spec.to_json())
    thread = threading.Thread(
        target=lambda: into.update(
            {spec.name: Driver(spec, run, backend, images, lambda *_: None).drive()}
        )
    )
    thread.start()
    return thread


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_an_agent_holding_every_per_user_budget_leaves_a_concurrent_honest_run_its_pass(
    tmp_path, backend, images, runtime
):
    runs, done = tmp_path / "runs", {}
    hostile = start(HOSTILE, runs, backend, images, done, runtime)
    holding = None
    deadline = time.monotonic() + 120
    while holding is None and hostile.is_alive() and time.monotonic() < deadline:
        holding = next(
            runs.glob(
                f"*/attempts/1/{workspace_fs.MOUNT_POINT}/{workspace_fs.WORKSPACE}/out/holding"
            ),
            None,
        )
        time.sleep(0.2)
    assert holding is not None, "the hostile agent never held its budgets"
    victim = start(victim_spec(tmp_path), runs, backend, images, done, runtime)
    victim.join(timeout=300)
    hostile.join(timeout=300)

    result = done["limits-victim"]
    assert result.verdict == "pass", result.report
    assert done["resource-per-user-limits"].verdict == "contained", done[
        "resource-per-user-limits"
    ].report
    limits = (result.run_dir / "attempts" / "1" / "workspace" / "out" / "limits.txt").read_text()
    assert limits.split("\n")[:4] == list(USES), limits
    users = {
        name: json.loads((r.run_dir / "attempts" / "1" / "container.json").read_text())["user"]
        for name, r in done.items()
    }
    assert users["limits-victim"] != users["resource-per-user-limits"], users
    assert all(int(user.split(":")[0]) in uids.IDS for user in users.values()), users
