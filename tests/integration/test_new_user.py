"""A new user's honest mistakes, on the real engine through the real CLI: a mistyped image or
a missing agent script is refused before any container or run directory exists (exit 1, the
file, field and fix named), for `run` and for a whole `suite`; an agent that starts and then
crashes is judged as before; a run whose driver was killed reads `interrupted` in `runs`,
`show` and `health`, and the command they name resumes it."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import docker
import yaml

from assure import spec as spec_mod
from assure.errors import AssureError
from assure.records import store
from assure.run.driver import Driver

from .conftest import EXAMPLES, ROOT

ASSURE = [sys.executable, "-m", "assure.cli"]


def variant(folder: Path, name: str, change: Any) -> Path:
    """The benign example under another name, its paths absolute, with `change(data)` applied."""
    data = yaml.safe_load((EXAMPLES / "benign.yaml").read_text())
    data["name"] = name
    data["workspace"]["fixture"] = str(ROOT / "fixtures" / "workspaces" / "calc")
    data["agent"]["files"] = str(ROOT / "fixtures" / "agents" / "benign")
    change(data)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def mistyped(d: dict[str, Any]) -> None:
    d["agent"]["image"] = "no-such-image:1"


def missing_script(d: dict[str, Any]) -> None:
    d["agent"]["command"] = ["sh", "/opt/agent/nope.sh"]


def command(*argv: str) -> Any:
    def change(d: dict[str, Any]) -> None:
        d["agent"]["command"] = list(argv)
        d["assertions"] = [{"exit_code": 0}]

    return change


def cli(
    argv: list[str], cwd: Path
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Run `assure ARGV`; with the engine's own record of every container that process created
    (by the `assure.pid` label every container of an attempt carries)."""
    since = int(time.time()) - 1
    proc = subprocess.Popen(
        ASSURE + argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = proc.communicate(timeout=300)
    client = docker.from_env()
    try:
        created = list(
            client.events(
                since=since,
                until=int(time.time()) + 1,
                decode=True,
                filters={"type": "container", "event": "create", "label": f"assure.pid={proc.pid}"},
            )
        )
    finally:
        client.close()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), created


def test_a_mistyped_image_or_a_missing_script_is_refused_before_any_container_or_run(
    tmp_path, images
):
    runs = tmp_path / "runs"
    for change, said in (
        (
            mistyped,
            (
                ": agent.image: image 'no-such-image:1' is not in the Docker engine: the agent"
                " could not start"
            ),
        ),
        (missing_script, ": agent.command[1]: /opt/agent/nope.sh is not among the agent files"),
    ):
        spec = variant(tmp_path, change.__name__.replace("_", "-"), change)
        done, created = cli(["run", "--runs-dir", str(runs), str(spec)], tmp_path)
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert f"{spec}:" in done.stderr and said in done.stderr and "  fix: " in done.stderr, (
            done.stderr
        )
        assert created == [] and not runs.exists()  # no container, no run directory, no alert
        valid = subprocess.run(
            ASSURE + ["validate", str(spec)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert valid.returncode == 1 and said in valid.stderr, (
            valid.stderr
        )  # validate says the same

    good = variant(tmp_path, "good", lambda d: None)
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "name": "s",
                "specs": [
                    str(good),
                    str(tmp_path / "mistyped.yaml"),
                    str(tmp_path / "missing-script.yaml"),
                ],
            }
        )
    )
    done, created = cli(["suite", "--runs-dir", str(runs), str(suite)], tmp_path)
    assert done.returncode == 1 and "no-such-image:1" in done.stderr and "nope.sh" in done.stderr, (
        done.stderr
    )  # every problem, at once
    assert created == [] and not runs.exists() and not (tmp_path / "suites").exists()


def test_an_agent_that_starts_then_crashes_is_judged_as_before(tmp_path, images):
    spec = variant(tmp_path, "crash", command("sh", "-c", "echo crashing >&2; kill -SEGV $$"))
    done, created = cli(
        ["run", "--json", "--runs-dir", str(tmp_path / "runs"), str(spec)], tmp_path
    )
    report = json.loads(done.stdout)
    (attempt,) = report["attempts"]
    assert (done.returncode, report["verdict"]) == (3, "fail"), done.stderr
    assert {f["kind"] for f in attempt["findings"] if f["severity"] != "info"} == {
        "assertion_failed"
    }
    assert {e["Actor"]["Attributes"]["assure.role"] for e in created} >= {
        "gateway",
        "agent",
    }  # the engine's record does see a CLI's containers


def test_an_attempt_whose_agent_the_engine_never_started_is_an_error_not_a_breach(
    tmp_path, backend, images
):
    """Past the preflight (the driver called as a library): the gateway started, the agent's
    image is not there. The gateway is removed with its journal unclosed; nothing was served."""
    spec = spec_mod.load(variant(tmp_path, "gone-image", mistyped))
    run = store.RunDir.create(
        tmp_path / "runs", store.new_run_id(spec.name), spec.path, spec.to_json()
    )
    result = Driver(spec, run, backend, images, lambda *_: None).drive()
    (attempt,) = result.report["attempts"]
    kinds = {f["kind"] for f in attempt["findings"]}
    assert (
        result.verdict == "error" and "journal_incomplete" not in kinds and "harness_error" in kinds
    )
    assert not [
        a
        for a in json.loads(
            subprocess.run(
                ASSURE + ["alerts", "--json", "--runs-dir", str(tmp_path / "runs")],
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout
        )
        if a["kind"] == "breach"
    ]


def test_a_killed_driver_reads_interrupted_and_the_command_named_resumes_it(
    tmp_path, backend, images
):
    runs = tmp_path / "runs"
    spec = variant(tmp_path, "sleeper", command("sh", "-c", "sleep 6"))
    proc = subprocess.Popen(
        ASSURE + ["run", "--runs-dir", str(runs), str(spec)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not any(
        c.get("assure.pid") == str(proc.pid) and c.get("assure.role") == "agent"
        for c in backend.owned()["containers"]
    ):
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    try:
        (row,) = json.loads(
            subprocess.run(
                ASSURE + ["runs", "--json", "--runs-dir", str(runs)],
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout
        )
        resume = f"assure resume {row['run_id']} --runs-dir {runs}"
        assert (row["state"], row["resume"]) == ("interrupted", resume)
        shown = json.loads(
            subprocess.run(
                ASSURE + ["show", "--json", "--runs-dir", str(runs), row["run_id"]],
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout
        )
        assert (shown["state"], shown["resume"]) == ("interrupted", resume)
        health = subprocess.run(
            ASSURE + ["health", "--runs-dir", str(runs), row["run_id"]],
            capture_output=True,
            text=True,
            timeout=120,
        )
        found = {
            c["id"]: c for layer in json.loads(health.stdout)["layers"].values() for c in layer
        }
        assert health.returncode == 1 and (
            found["process.driver"]["status"],
            found["process.driver"]["reason_code"],
        ) == ("fail", "driver_gone")
        state = found[f"scheduler.run_state@{row['run_id']}"]
        assert (state["status"], state["reason_code"]) == (
            "fail",
            "run_interrupted",
        ) and resume in state["summary"]

        resumed = subprocess.run(
            ASSURE + shlex.split(resume)[1:],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert resumed.returncode == 0, resumed.stderr
        (after,) = json.loads(
            subprocess.run(
                ASSURE + ["runs", "--json", "--runs-dir", str(runs)],
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout
        )
        assert (after["state"], after["resume"], after["verdict"]) == ("finished", None, "pass")
        assert not [
            c for c in backend.owned()["containers"] if c.get("assure.pid") == str(proc.pid)
        ]  # the resume reaped the dead driver's
    finally:
        for c in backend.owned()["containers"]:
            if c.get("assure.pid") == str(proc.pid):
                try:
                    backend.remove_container(c["id"])
                except AssureError:
                    pass
