"""Cancelling an Inspect eval (Ctrl-C) while its sample waits on `sandbox().exec`, or on its
model with no call in flight.

A real eval runs in a child process: mockllm scripted with one bash call, `sleep 600`. Once the
gateway has journaled that exec as allowed (it is running in the agent container), the child
gets SIGINT. Within CANCEL_BOUND seconds it must exit, its run must be judged and sealed (a
report, a state that is not `running`), the cancelled sample must not pass, and none of the
run's containers, volumes or networks may remain. An impatient user who presses Ctrl-C twice
gets the same cleanup, and so does a sample cancelled while its model answers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assure.core.chain import iter_chain
from assure.records import layout, store
from assure.records.layout import RunPaths
from assure.run.driver import reap
from assure.sandbox import workspace_fs

from .conftest import ROOT

CANCEL_BOUND = 60.0  # seconds from the SIGINT to a finished, clean process
START_BOUND = 240.0  # seconds for the eval to start its sample and the exec to be journaled

CHILD = r"""
import sys

import anyio
from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import get_model
from inspect_ai.solver import basic_agent, solver
from inspect_ai.tool import bash
from inspect_ai.util import sandbox

from assure.inspect import AssureConfig, assure_verdict
from examples.inspect.task import SPEC, _call

runs, logs, where = sys.argv[1], sys.argv[2], sys.argv[3]
model = get_model("mockllm/model", custom_outputs=[
    _call("bash", command="sleep 600"),
    _call("submit", answer="done"),
])

@solver
def slow_model():  # a model that takes its time: one exec, then a wait with no call in flight
    async def solve(state, generate):
        await sandbox().exec(["sh", "-c", "echo 'sleep 600' > out/asked"])
        await anyio.sleep(600)
        return state
    return solve

task = Task(
    dataset=[Sample(input="wait", id="wait")],
    solver=(
        basic_agent(tools=[bash(timeout=900)], max_attempts=1) if where == "exec" else slow_model()
    ),
    scorer=assure_verdict(),
    sandbox=("assure", AssureConfig(spec=SPEC, runs_dir=runs)),
    model=model,
)
eval(task, log_dir=logs, display="none")
"""


def _sleeping(runs: Path) -> Path | None:
    """The run whose journal shows `sleep 600` allowed (then it runs), or None yet."""
    for run_dir in runs.glob("inspect-calc-*"):
        journal = RunPaths(run_dir).attempt(1).journal
        if not journal.is_file():
            continue
        try:
            for record in iter_chain(journal):
                if (
                    record.get("event") == "tool_call"
                    and record.get("tool") == "sandbox.exec"
                    and record.get("decision") == "allow"
                    and "sleep 600" in " ".join((record.get("sandbox") or {}).get("argv", []))
                ):
                    return run_dir
        except Exception:  # a line being written: read again at the next poll
            continue
    return None


def _cancel(tmp_path: Path, backend, signals: int, where: str = "exec") -> tuple[Path, float]:
    """Start the eval, SIGINT it `signals` times (one second apart) once the exec is in flight;
    its run directory and the seconds from the first SIGINT to the child's exit."""
    runs, logs = tmp_path / "runs", tmp_path / "logs"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(runs), str(logs), where],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + START_BOUND
        run_dir = None
        while run_dir is None and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.5)
            run_dir = _sleeping(runs)
        if run_dir is None:
            child.kill()
            pytest.fail(f"the exec never started: {child.communicate()[1].decode()[-3000:]}")
        time.sleep(1.0)  # the docker exec stream is open and blocking
        sent = time.monotonic()
        for n in range(signals):
            if n:
                time.sleep(1.0)
            child.send_signal(signal.SIGINT)
        try:
            _, err = child.communicate(timeout=CANCEL_BOUND)
        except subprocess.TimeoutExpired:
            child.kill()
            _, err = child.communicate()
            pytest.fail(
                f"still running {CANCEL_BOUND} s after SIGINT: {err.decode()[-3000:]}",
                pytrace=False,
            )
        took = time.monotonic() - sent
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.returncode == -signal.SIGKILL:  # what the killed child left, for the next tests
            _reap(backend, runs)
    print(f"cancel ({signals} SIGINT, {where}): {took:.1f} s")
    return run_dir, took


def _reap(backend, runs: Path) -> None:
    for run_dir in runs.glob("inspect-calc-*"):
        reap(backend, store.RunDir(run_dir))
        mine = run_dir.resolve()
        workspace_fs.release_orphans(lambda d, mine=mine: d == mine, layout.mount_owner)


def _assert_judged_and_clean(run_dir: Path, backend) -> dict:
    paths = RunPaths(run_dir)
    assert paths.report.is_file(), "the cancelled run was never judged"
    report = json.loads(paths.report.read_text())
    state = json.loads(paths.state.read_text())
    assert state["state"] != "running" and report["state"] != "running"
    assert paths.seal.is_file(), "the cancelled run was never sealed"
    assert report["verdict"] not in ("pass", "contained")  # a cancelled sample never passes
    [attempt] = report["attempts"]
    assert attempt["verdict"] == "error"
    errors = [f["message"] for f in attempt["findings"] if f["kind"] == "harness_error"]
    assert any("cancelled" in m for m in errors), attempt["findings"]
    left = backend.owned(report["run_id"])
    assert left == {"containers": [], "volumes": [], "networks": []}, left
    return report


def test_ctrl_c_during_an_exec_judges_seals_and_cleans_up(tmp_path, images, backend):
    run_dir, _ = _cancel(tmp_path, backend, signals=1)
    _assert_judged_and_clean(run_dir, backend)
    from inspect_ai.log import list_eval_logs, read_eval_log

    [info] = list_eval_logs(str(tmp_path / "logs"))
    log = read_eval_log(info)
    assert log.status in ("cancelled", "error")
    for sample in log.samples or []:
        assert all(score.value != "C" for score in (sample.scores or {}).values())


def test_ctrl_c_twice_still_cleans_up(tmp_path, images, backend):
    run_dir, _ = _cancel(tmp_path, backend, signals=2)
    _assert_judged_and_clean(run_dir, backend)


def test_ctrl_c_with_no_call_in_flight_is_never_a_pass(tmp_path, images, backend):
    """Inspect catches the cancel above the sandbox; the sandbox still learns of it."""
    run_dir, _ = _cancel(tmp_path, backend, signals=1, where="model")
    _assert_judged_and_clean(run_dir, backend)
