"""The node task's watchdog (assure/ops/watchdog.py), as its own process: the bound that holds
when the driver, the raylet or the caller is gone (issue 26 item 4). The engine it would clean
is unreachable here (DOCKER_HOST points nowhere): what is checked is whom it kills, and when."""

from __future__ import annotations

import os
import subprocess
import sys
import time

ENV = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}


def start(worker: subprocess.Popen[bytes], seconds: float) -> int:
    """The watchdog of `worker`, as run_on_node starts it; the write end of its pipe."""
    alive, held = os.pipe()
    subprocess.run(
        [sys.executable, "-m", "assure.ops.watchdog", str(alive), str(worker.pid), str(seconds)],
        pass_fds=(alive,),
        start_new_session=True,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
        timeout=30,
    )
    os.close(alive)
    return held


def test_a_worker_that_outlives_its_whole_budget_is_killed_by_its_watchdog():
    worker = subprocess.Popen(["sleep", "60"])
    held = start(worker, 0.5)
    try:
        started = time.monotonic()
        assert worker.wait(timeout=20) == -9  # SIGKILL, at the budget, with no driver involved
        assert time.monotonic() - started < 20
    finally:
        os.close(held)
        worker.kill()


def test_a_task_that_ended_as_it_should_leaves_its_watchdog_nothing_to_do():
    worker = subprocess.Popen(["sleep", "60"])
    held = start(worker, 1.5)
    os.write(held, b".")  # what run_on_node writes as its task ends
    os.close(held)
    try:
        time.sleep(2.5)  # past the budget: the watchdog is gone, the worker untouched
        assert worker.poll() is None
    finally:
        worker.kill()
        worker.wait(10)
