"""Honest mistakes come out as what they are. Before anything starts, `run`/`suite` refuse what
`validate` refuses and every image or runtime the engine lacks (`preflight.refuse`); an attempt
whose agent the engine never started is `error`, never `breach`; a run whose driver is gone
(no process holds its flock) reads `interrupted`, with the command that resumes it."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from assure import spec as spec_mod
from assure.errors import SandboxError, SpecError
from assure.ops import health_probe, runs
from assure.records import layout, store
from assure.run import policy, preflight
from assure.sandbox.fake import Context
from assure.verify import completeness
from assure.verify.findings import Kind
from tests.unit.test_driver_states import (  # noqa: F401 -- short_tmp is a fixture
    ACCEPTANCE,
    drive,
    gateway,
    killed_at,
    new_run,
    ratified,
    short_tmp,
    write_spec,
)

ROOT = Path(__file__).resolve().parents[2]
BENIGN = ROOT / "specs" / "examples" / "benign.yaml"
RUNSC_OK = {
    "path": "/bin/sh",
    "runtimeArgs": ["--host-uds=open", "--oci-seccomp"],
}  # a program that is on every host


class Engine:
    """What `preflight.engine_problems` asks: the images and runtimes an engine has."""

    def __init__(
        self,
        images: set[str],
        runtimes: dict[str, Any] | None = None,
        broken: set[str] = frozenset(),
    ):
        self.images, self._runtimes, self.broken, self.asked = (
            images,
            runtimes or {"runc": {"path": "runc"}},
            broken,
            [],
        )

    def image_exists(self, tag: str) -> bool:
        self.asked.append(tag)
        if tag in self.broken:
            raise SandboxError(f"inspect image {tag}: 500 Server Error")
        return tag in self.images

    def runtimes(self) -> dict[str, Any]:
        return self._runtimes


def variant(tmp_path: Path, change: Any, name: str = "spec") -> spec_mod.Spec:
    """The benign example (ratified, valid) with `change(data)` applied, paths made absolute."""
    data = yaml.safe_load(BENIGN.read_text())
    data["name"] = name
    data["workspace"]["fixture"] = str(ROOT / "fixtures" / "workspaces" / "calc")
    data["agent"]["files"] = str(ROOT / "fixtures" / "agents" / "benign")
    change(data)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec_mod.load(path)


def images(d: dict[str, Any]) -> None:
    d["agent"]["image"] = "no-such-image:1"
    d["assertions"][0]["command"]["image"] = "python:3-typo"
    d["tasks"] = [
        {"id": "a"},
        {
            "id": "b",
            "assertions": [
                {
                    "cases": {
                        "run": ["x"],
                        "image": "no-such-image:1",
                        "each": [{"args": ["1"], "stdout": "2\n"}],
                    }
                }
            ],
        },
    ]


# --- preflight -------------------------------------------------------------------------------


def test_every_missing_image_is_named_by_its_field_and_line_asked_once_each(tmp_path):
    spec = variant(tmp_path, images)
    engine = Engine(set())
    found = preflight.engine_problems(spec, engine)
    fields = [p.where.split(": ")[-1] for p in found]
    assert fields == [
        "agent.image",
        "assertions[0].command.image",
        "tasks[1].assertions[0].cases.image",
    ]
    assert all(p.where.startswith(f"{spec.path}:") and p.fatal and p.stops_run for p in found)
    assert (
        "image 'no-such-image:1' is not in the Docker engine: the agent could not start"
        in found[0].message
    )
    assert "`docker pull no-such-image:1`" in found[0].fix
    assert sorted(engine.asked) == [
        "no-such-image:1",
        "python:3-typo",
    ]  # each image asked once; assure's own never
    assert preflight.engine_problems(spec, Engine({"no-such-image:1", "python:3-typo"})) == []


def test_assures_own_image_needs_no_engine_and_an_engine_that_fails_to_answer_is_a_problem(
    tmp_path,
):
    plain = variant(tmp_path, lambda d: None, "plain")
    assert (
        not preflight.needs_engine(plain) and preflight.engine_problems(plain, Engine(set())) == []
    )
    spec = variant(tmp_path, lambda d: d["agent"].update(image="broken:1"), "broken")
    assert preflight.needs_engine(spec)
    (problem,) = preflight.engine_problems(spec, Engine(set(), broken={"broken:1"}))
    assert "cannot be looked up (inspect image broken:1: 500 Server Error)" in problem.message


@pytest.mark.parametrize(
    ("runtimes", "said"),
    [
        ({"runc": {}}, "the Docker engine has no runtime 'runsc' (it has: runc)"),
        (
            {"runc": {}, "runsc": {**RUNSC_OK, "path": "/nonexistent/runsc"}},
            "registered as /nonexistent/runsc, which is not on this host",
        ),
        ({"runc": {}, "runsc": {**RUNSC_OK, "runtimeArgs": []}}, "without --host-uds=open"),
    ],
)
def test_a_runtime_the_engine_cannot_run_is_a_problem_of_sandbox_runtime(tmp_path, runtimes, said):
    spec = variant(tmp_path, lambda d: d.update(sandbox={"runtime": "runsc"}))
    (problem,) = preflight.engine_problems(spec, Engine(set(), runtimes))
    assert (
        problem.where.endswith(": sandbox.runtime")
        and said in problem.message
        and "runsc" in problem.fix
    )
    assert preflight.engine_problems(spec, Engine(set(), {"runc": {}, "runsc": RUNSC_OK})) == []


def test_refuse_lists_every_problem_of_every_spec_and_lets_a_denied_contract_run(tmp_path):
    script = variant(
        tmp_path, lambda d: d["agent"].update(command=["sh", "/opt/agent/nope.sh"]), "script"
    )
    image = variant(tmp_path, lambda d: d["agent"].update(image="no-such-image:1"), "image")
    unratified = variant(tmp_path, lambda d: d["contract"].pop("ratified_by"), "unratified")
    with pytest.raises(SpecError) as caught:
        preflight.refuse([script, image, unratified], Engine(set()))
    said = caught.value.message
    assert (
        f"{script.path}:7: agent.command[1]: /opt/agent/nope.sh is not among the agent files"
        in said
    )
    assert f"{image.path}:" in said and ": agent.image: image 'no-such-image:1'" in said
    assert (
        "unratified" not in said
    )  # validate fails it; a run goes ahead and shows the gate's denial
    assert said.count("\n  fix: ") == 2 and "assure validate" in caught.value.fix
    with pytest.raises(SpecError) as without:
        preflight.refuse([script, image], None)  # no engine: what needs none is still told
    assert "nope.sh" in without.value.message and "no-such-image" not in without.value.message
    preflight.refuse([unratified], Engine(set()))


# --- an agent that never started ---------------------------------------------------------------

JOURNAL_OPENED = [{"seq": 0, "hash": "h0", "event": "gateway_started"}]
A_CALL = [*JOURNAL_OPENED, {"seq": 1, "hash": "h1", "event": "request_rejected"}]


@pytest.mark.parametrize(
    ("journal", "agent_started", "kind"),
    [
        (
            JOURNAL_OPENED,
            False,
            Kind.HARNESS_ERROR,
        ),  # a mistyped image: no agent, no call, no effect
        (
            JOURNAL_OPENED,
            True,
            Kind.JOURNAL_INCOMPLETE,
        ),  # an agent that ran may have left an effect in flight
        (
            A_CALL,
            False,
            Kind.JOURNAL_INCOMPLETE,
        ),  # a call was served: whatever the facts say, breach-level
    ],
)
def test_an_unclosed_journal_is_a_harness_error_only_when_no_agent_started_and_no_call_was_served(
    journal, agent_started, kind
):
    _, findings = completeness.account(
        journal, {"exit_code": None, "oom_killed": False}, agent_started
    )
    assert [(f.kind, f.subject) for f in findings] == [(kind, "gateway")]


def crash(ctx: Context) -> int:
    """Starts, then dies."""
    return 3


def test_an_agent_image_the_engine_lacks_is_an_error_and_a_crash_after_start_is_judged_as_before(
    tmp_path, short_tmp
):
    missing = write_spec(
        tmp_path,
        "crash",
        agent={"command": ["crash"], "image": "no-such-image:1"},
        contract=ratified(["fs:**"]),
        assertions=ACCEPTANCE,
    )
    result, _ = drive(missing, new_run(tmp_path, missing), short_tmp, {"crash": crash})
    (attempt,) = result.report["attempts"]
    kinds = {f["kind"] for f in attempt["findings"]}
    assert (
        result.verdict == "error" and "journal_incomplete" not in kinds and "harness_error" in kinds
    )
    assert (
        store.read_json(Path(result.run_dir) / "attempts" / "1" / "container.json")["agent_started"]
        is False
    )

    (tmp_path / "again").mkdir()
    started = write_spec(
        tmp_path / "again", "crash", contract=ratified(["fs:**"]), assertions=ACCEPTANCE
    )
    result, _ = drive(started, new_run(tmp_path / "again", started), short_tmp, {"crash": crash})
    (attempt,) = result.report["attempts"]
    assert result.verdict == "fail" and "agent_started" not in store.read_json(
        Path(result.run_dir) / "attempts" / "1" / "container.json"
    )


# --- a driver that is gone ---------------------------------------------------------------------

HOLD = (
    "import fcntl, sys, time; f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX);"
    " print('held', flush=True); time.sleep(60)"
)


def test_the_lock_is_held_while_its_holder_lives_and_free_once_it_is_killed(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path / layout.LOCK)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "held\n"
        assert store.is_locked(tmp_path) is True
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert store.is_locked(tmp_path) is False
    (tmp_path / layout.LOCK).write_text(
        f"{os.getpid()}@{os.uname().nodename}\n"
    )  # a live pid in the file proves nothing
    assert store.is_locked(tmp_path) is False


def test_a_lock_that_is_a_link_is_not_followed(tmp_path):
    real = tmp_path / "elsewhere"
    real.write_text("")
    run = tmp_path / "run"
    run.mkdir()
    (run / layout.LOCK).symlink_to(real)
    with open(real, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        assert store.is_locked(run) is False


def test_resume_command_names_the_runs_base_unless_it_is_the_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert runs.resume_command(store.RUNS_DIR, "r-1") == "assure resume r-1"
    assert runs.resume_command((tmp_path / store.RUNS_DIR).resolve(), "r-1") == "assure resume r-1"
    assert (
        runs.resume_command(tmp_path / "my runs", "r-1")
        == f"assure resume r-1 --runs-dir '{tmp_path}/my runs'"
    )


def checks(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for layer in doc["layers"].values() for c in layer}


def test_a_killed_driver_reads_interrupted_in_runs_and_health_until_it_is_resumed(
    tmp_path, short_tmp
):
    spec = write_spec(tmp_path, "slow", contract=ratified(["fs:**"]), assertions=[{"exit_code": 0}])

    def slow(ctx: Context) -> int:
        with gateway(ctx) as client:
            client.call(
                "task.report", status="done", summary="nothing"
            )  # the failpoint `run` is hit once a call is journaled
        ctx.stopping.wait(1.0)
        return 0

    run = new_run(tmp_path, spec)
    killed_at("run", spec, run, short_tmp, {"slow": slow})
    base = run.path.parent
    assert store.read_json(run.paths.state)["state"] == "running"
    (row,) = runs.listing(base)
    assert (row.state, row.resume) == (
        "interrupted",
        f"assure resume {run.run_id} --runs-dir {base}",
    )
    engine = health_probe.Engine(True, "engine", ("a", "g", "e"))
    found = checks(health_probe.probe(base, run.run_id, engine, time.time()))
    assert (found["process.driver"]["status"], found["process.driver"]["reason_code"]) == (
        "fail",
        "driver_gone",
    )
    state = found[f"scheduler.run_state@{run.run_id}"]
    assert (state["status"], state["reason_code"], state["evidence"]["state"]) == (
        "fail",
        "run_interrupted",
        "interrupted",
    )
    assert row.resume in state["summary"] and row.resume in found["process.driver"]["summary"]
    assert (
        checks(health_probe.probe(base, None, engine, time.time()))["process.driver"]["reason_code"]
        == "driver_gone"
    )

    with store.exclusive(run.path, "run"):  # a live driver holds it: running, as recorded
        assert [r.state for r in runs.listing(base)] == ["running"]
        held = checks(health_probe.probe(base, run.run_id, engine, time.time()))
        assert (
            held[f"scheduler.run_state@{run.run_id}"]["status"] == "pass"
            and held["process.driver"].get("reason_code") != "driver_gone"
        )

    result, _ = drive(spec, store.RunDir.open(run.path), short_tmp, {"slow": slow})
    assert [(r.state, r.resume) for r in runs.listing(base)] == [
        ("finished", None)
    ] and result.verdict == "pass"


def test_a_ratifier_no_keyring_holds_is_refused_before_the_start_naming_the_published_key(
    tmp_path, monkeypatch
):
    """`assure suite suites/demo.yaml` without ASSURE_RATIFIERS: the examples' ratifier is in no
    keyring, so every mutation would be denied and a benign spec judged FAIL (and its task
    quarantined). It is the host's set-up, told before the start with the export that fixes it;
    a hostile spec's denial still runs."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("ASSURE_RATIFIERS", str(tmp_path / "none.yaml"))
    examples = ROOT / "specs" / "examples"
    benign, escape = (spec_mod.load(examples / f"{n}.yaml") for n in ("benign", "escape"))
    with pytest.raises(SpecError) as caught:
        preflight.refuse([benign, escape], None)
    said = caught.value.message
    assert f"{benign.path}:" in said and "(contract.signature)" in said
    assert f"export ASSURE_RATIFIERS={preflight.PUBLISHED_KEYRING}" in said
    assert str(escape.path) not in said
    preflight.refuse([escape], None)
    monkeypatch.setenv("ASSURE_RATIFIERS", str(preflight.PUBLISHED_KEYRING))
    preflight.refuse([benign, escape], None)


def test_a_known_ratifiers_bad_signature_still_runs_and_shows_the_denial(tmp_path):
    """A ratifier the keyring holds whose signature does not cover these terms (here: a renamed
    spec) is the spec's, not the host's: the run goes ahead and the gate's denial is the
    finding, as for an unratified contract."""
    renamed = variant(tmp_path, lambda d: None, "renamed")
    assert policy.contract_denial(renamed, renamed.tasks[0], 0.0).rule == "contract.signature"
    preflight.refuse([renamed], None)
