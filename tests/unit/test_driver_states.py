"""The driver's state machine on the in-memory backend: whole runs (real gateway, real
workspace filesystem, real verifier) with no Docker engine.

Pass and promote, resume after kill -9 at each failpoint (a forked driver that really
SIGKILLs itself, resumed by a new driver), quarantine, budget halt, operator halt, receipts.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from assure import spec as spec_mod
from assure.client import Client, GatewayError
from assure.core import control
from assure.errors import AssureError, SandboxError
from assure.records import alerts, keys, layout, receipt_verify, store
from assure.records.receipt_format import ReceiptError
from assure.run import failpoints
from assure.run.driver import MAX_INTERRUPTED, Driver, RunResult, promote_proposed, resume_note
from assure.sandbox import workspace_fs
from assure.sandbox.backend import ContainerRequest, Role, labels
from assure.sandbox.docker.images import ImageSet
from assure.sandbox.fake import TERMINATED, Context, FakeBackend, Program
from tests.contracts import ratify_in_place

ROOT = Path(__file__).resolve().parents[2]
CALC = ROOT / "fixtures" / "workspaces" / "calc"
IMAGES = ImageSet("fake-base:1", "fake-agent:1", "fake-gateway:1", "fake-egress:1")
FIXED = "def add(a: int, b: int) -> int:\n    return a + b\n"


def ratified(scope: list[str], ceiling: str = "commit") -> dict[str, Any]:
    """A contract ratified by someone other than its proposer; `write_spec` fills in its digests."""
    return {
        "id": "c-test",
        "proposed_by": "alice",
        "ratified_by": "bob",
        "scope": scope,
        "autonomy_ceiling": ceiling,
    }


def gateway(ctx: Context) -> Client:
    return Client(str(ctx.path(ctx.env["ASSURE_GATEWAY_SOCKET"])))


def fix(ctx: Context) -> int:
    """Fixes add() through the gateway, reports, and lingers until stopped or 0.5 s."""
    with gateway(ctx) as client:
        client.call("fs.write", path="src/calc.py", content=FIXED)
        client.call("task.report", status="done", summary="fixed add()")
    ctx.stopping.wait(0.5)
    return 0


def notes(ctx: Context) -> int:
    """Writes notes directly in its writable scope; never what the assertion wants."""
    (ctx.path("/workspace") / "out" / "notes.txt").write_text("looked at add()\n")
    return 0


def tamper(ctx: Context) -> int:
    """Edits a protected test behind the gateway's back: a breach."""
    (ctx.path("/workspace") / "tests" / "test_calc.py").write_text(
        "print('acceptance tests passed')\n"
    )
    return 0


def spend(ctx: Context) -> int:
    """Calls until the gateway refuses, then waits to be stopped (a budget breach stops it)."""
    with gateway(ctx) as client:
        for _ in range(10):
            try:
                client.call("fs.read", path="src/calc.py")
            except GatewayError:
                break
    return TERMINATED if ctx.stopping.wait(20) else 0


@pytest.fixture
def short_tmp() -> Iterator[str]:
    """The fake's folder (the gateway's socket is in it): a short path."""
    path = tempfile.mkdtemp(prefix="drv", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """A git repository holding the fixture: where verified results are committed."""
    repo = tmp_path / "target"
    shutil.copytree(CALC, repo)
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "fixture"]):
        git(repo, *cmd)
    return repo


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env
    ).stdout


def write_spec(tmp_path: Path, command: str, **fields: Any) -> spec_mod.Spec:
    data = {
        "version": 1,
        "name": f"fake-{command}",
        "agent": {"command": [command]},
        "workspace": {"fixture": str(CALC), "writable": ["out/**"], "protected": ["tests/**"]},
        "limits": {"wall_seconds": 30},
        "assertions": [],
        "expect": "pass",
        **fields,
    }
    path = tmp_path / f"{command}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec_mod.load(ratify_in_place(path))


def new_run(tmp_path: Path, spec: spec_mod.Spec) -> store.RunDir:
    return store.RunDir.create(
        tmp_path / "runs", store.new_run_id(spec.name), spec.path, spec.to_json()
    )


def drive(
    spec: spec_mod.Spec,
    run: store.RunDir,
    tmp: str,
    programs: dict[str, Program],
    *,
    backend: FakeBackend | None = None,
    signing_key: Path | None = None,
) -> tuple[RunResult, FakeBackend]:
    backend = backend or fake(programs, tmp)
    try:
        return (
            Driver(spec, run, backend, IMAGES, lambda *_: None, signing_key=signing_key).drive(),
            backend,
        )
    finally:
        backend.close()


def fake(programs: dict[str, Program], tmp: str) -> FakeBackend:
    return FakeBackend(programs, images={IMAGES.agent, IMAGES.gateway, IMAGES.egress}, tmp=tmp)


def events(run: store.RunDir) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run.path / "events.jsonl").read_text().splitlines()]


def names(run: store.RunDir) -> list[str]:
    return [e["event"] for e in events(run)]


def task_of(result: RunResult) -> dict[str, Any]:
    (task,) = result.report["tasks"]
    return task


def pending(tmp_path: Path, kind: str) -> list[alerts.Alert]:
    return [
        a for a in alerts.all_alerts(tmp_path / "runs") if a.kind == kind and a.state == "pending"
    ]


def mounted_under(root: Path) -> list[str]:
    prefix = str(root.resolve()) + "/"
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        return [p for p in (line.split(" ")[4] for line in fh) if p.startswith(prefix)]


ACCEPTANCE = [{"command": {"run": ["python3", "tests/test_calc.py"]}}, {"exit_code": 0}]


def test_a_verified_attempt_is_promoted_and_committed_once(tmp_path, short_tmp, target):
    spec = write_spec(
        tmp_path,
        "fix",
        contract=ratified(["fs:**"]),
        promote={"target": str(target)},
        assertions=ACCEPTANCE,
    )
    run = new_run(tmp_path, spec)
    result, backend = drive(spec, run, short_tmp, {"fix": fix})
    assert result.verdict == "pass" and result.report["state"] == "finished"
    assert (task_of(result)["state"], task_of(result)["attempts"]) == ("committed", [1])
    assert git(target, "log", "--format=%s").splitlines() == ["assure: task main", "fixture"]
    assert (target / "src" / "calc.py").read_text() == FIXED
    assert names(run) == [
        "run_started",
        "task_started",
        "contract_ratified",
        "attempt_started",
        "attempt_verified",
        "promote_started",
        "promote_committed",
        "task_resolved",
        "run_finished",
    ]
    roles = [r.role for r in backend.created]
    assert sorted(roles[:2]) == [
        Role.AGENT,
        Role.GATEWAY,
    ]  # created side by side: the agent's command is gated on the gateway
    assert roles[2:] == [
        Role.CHECK
    ]  # the acceptance test ran in a check container, not the agent's
    assert backend.owned(run.run_id) == {
        "containers": [],
        "volumes": [],
        "networks": [],
    }  # the attempt cleaned up
    assert mounted_under(tmp_path) == []
    again = Driver(
        spec, store.RunDir.open(run.path), fake({}, short_tmp), IMAGES, lambda *_: None
    ).drive()
    assert again.report == result.report  # a finished run is not run again


def test_without_a_target_the_verified_result_is_proposed_not_committed(tmp_path, short_tmp):
    spec = write_spec(tmp_path, "fix", contract=ratified(["fs:**"]), assertions=ACCEPTANCE)
    run = new_run(tmp_path, spec)
    result, _ = drive(spec, run, short_tmp, {"fix": fix})
    assert task_of(result)["state"] == "proposed"
    bundle = next((run.path / "proposals").iterdir())
    assert "return a + b" in (bundle / "patch.diff").read_text()


def killed_at(
    point: str, spec: spec_mod.Spec, run: store.RunDir, tmp: str, programs: dict[str, Program]
) -> int:
    """Drive `run` in a forked driver that SIGKILLs itself at `point`, as `kill -9` would; its
    pid."""
    pid = os.fork()
    if pid == 0:
        try:
            os.environ["ASSURE_FAILPOINT"] = point
            drive(spec, run, tmp, programs)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
        f"not killed at {point}: {status}"
    )
    return pid


@pytest.mark.parametrize("point", failpoints.POINTS)
def test_a_driver_killed_at_each_failpoint_resumes_the_same_task_and_commits_once(
    point, tmp_path, short_tmp, target
):
    spec = write_spec(
        tmp_path,
        "fix",
        contract=ratified(["fs:**"]),
        promote={"target": str(target)},
        assertions=ACCEPTANCE,
        max_attempts=3,
    )
    run = new_run(tmp_path, spec)
    pid = killed_at(point, spec, run, short_tmp, {"fix": fix})
    assert store.read_json(run.path / "state.json")["state"] == "running"

    backend = fake(
        {"fix": fix}, short_tmp
    )  # the engine still holds a container of the dead driver's attempt
    leftover = backend.create_container(
        ContainerRequest(
            Role.AGENT, IMAGES.agent, "left-behind", labels(run.run_id, 1, pid, "h"), ("fix",)
        )
    )
    result, _ = drive(spec, store.RunDir.open(run.path), short_tmp, {}, backend=backend)
    task = task_of(result)
    assert task["state"] == "committed" and result.verdict == "pass"
    assert task["attempts"] == (
        [1] if point == "promote" else [1, 2]
    )  # the interrupted attempt is kept, the next one runs
    assert git(target, "log", "--format=%s").splitlines() == [
        "assure: task main",
        "fixture",
    ]  # one commit, never two
    resumed = next(e for e in events(run) if e["event"] == "run_resumed")
    assert resumed["reaped"] == 1 and leftover not in {
        c["id"] for c in backend.owned()["containers"]
    }
    if point in ("start", "run"):  # the dead attempt's workspace filesystem was still mounted
        assert resumed["released"]
    assert ("attempt_interrupted" in names(run)) is (point != "promote")
    assert mounted_under(tmp_path) == []


def test_an_interrupted_attempt_does_not_use_up_max_attempts(tmp_path, short_tmp, target):
    """max_attempts 1, the driver killed mid-attempt: the resumed run says so, records attempt 1
    as interrupted and runs attempt 2, which verifies and commits once."""
    spec = write_spec(
        tmp_path,
        "fix",
        contract=ratified(["fs:**"]),
        promote={"target": str(target)},
        assertions=ACCEPTANCE,
        max_attempts=1,
    )
    run = new_run(tmp_path, spec)
    killed_at("run", spec, run, short_tmp, {"fix": fix})
    note = resume_note(store.RunDir.open(run.path), spec)
    assert (
        note == f"resuming run {run.run_id}: attempt 1 was interrupted; running attempt 2 of max 1"
        " (interrupted attempts don't count)"
    )

    result, _ = drive(spec, store.RunDir.open(run.path), short_tmp, {"fix": fix})
    assert (task_of(result)["state"], task_of(result)["attempts"], result.verdict) == (
        "committed",
        [1, 2],
        "pass",
    )
    attempts = store.read_json(run.path / "state.json")["tasks"]["main"]["attempts"]
    assert attempts == [{"n": 1, "verdict": None, "interrupted": True}, {"n": 2, "verdict": "pass"}]
    assert [e["attempt"] for e in events(run) if e["event"] == "attempt_interrupted"] == [1]
    assert git(target, "log", "--format=%s").splitlines() == ["assure: task main", "fixture"]
    assert resume_note(store.RunDir.open(run.path), spec).endswith(
        "is over (finished): nothing to resume, its report follows"
    )


def test_a_task_whose_driver_is_killed_in_every_attempt_is_quarantined_not_retried_forever(
    tmp_path, short_tmp
):
    spec = write_spec(
        tmp_path, "fix", contract=ratified(["fs:**"]), assertions=ACCEPTANCE, max_attempts=1
    )
    run = new_run(tmp_path, spec)
    for _ in range(MAX_INTERRUPTED):
        killed_at("run", spec, run, short_tmp, {"fix": fix})
    result, backend = drive(spec, store.RunDir.open(run.path), short_tmp, {"fix": fix})
    assert (task_of(result)["state"], result.verdict) == ("quarantined", "error")
    assert (
        task_of(result)["reason"]
        == f"{MAX_INTERRUPTED} attempts interrupted (the driver was killed each time)"
    )
    assert [r.role for r in backend.created] == []  # no attempt ran again


class CutShort(FakeBackend):
    """The engine makes the first `what` (a role, or "volume"), then its call raises `raised`
    before the id comes back: Ctrl-C or SIGTERM while the create's HTTP call is in flight.
    Counts `owned()` calls: the engine round trips of a sweep."""

    def __init__(
        self, what: str, raised: type[BaseException], programs: dict[str, Program], tmp: str
    ):
        super().__init__(programs, images={IMAGES.agent, IMAGES.gateway, IMAGES.egress}, tmp=tmp)
        self.what, self.raised, self.listed = what, raised, 0

    def _cut(self, what: str) -> None:
        if what == self.what:
            self.what = ""
            raise self.raised("the create's reply never came")

    def create_volume(self, name: str, labels: dict[str, str], driver_opts: dict[str, str]) -> str:
        made = super().create_volume(name, labels, driver_opts)
        self._cut("volume")
        return made

    def create_container(self, request: ContainerRequest) -> str:
        cid = super().create_container(request)
        self._cut(request.role)
        return cid

    def owned(self, run_id: str | None = None) -> Any:
        self.listed += 1
        return super().owned(run_id)


NOTHING = {"containers": [], "volumes": [], "networks": []}


@pytest.mark.parametrize("what", ["volume", Role.GATEWAY])
def test_an_interrupted_create_leaves_nothing_of_the_attempt_behind(what, tmp_path, short_tmp):
    """The gateway (or socket volume) exists in the engine but its id never came back: the
    cleanup finds it by the attempt's labels, and the socket volume it held goes too."""
    spec = write_spec(tmp_path, "fix", contract=ratified(["fs:**"]), assertions=ACCEPTANCE)
    run = new_run(tmp_path, spec)
    backend = CutShort(what, KeyboardInterrupt, {"fix": fix}, short_tmp)
    try:
        with pytest.raises(KeyboardInterrupt):
            Driver(spec, run, backend, IMAGES, lambda *_: None).drive()
        assert backend.owned(run.run_id) == NOTHING
    finally:
        backend.close()
    assert mounted_under(tmp_path) == []


@pytest.mark.parametrize("what", [Role.GATEWAY, Role.AGENT])
def test_a_create_that_raises_after_the_engine_made_it_leaves_nothing_behind(
    what, tmp_path, short_tmp
):
    """The same hole when the create fails mid-call (the agent's in the worker thread): a
    harness error, and nothing of the attempt left in the engine."""
    spec = write_spec(
        tmp_path, "fix", contract=ratified(["fs:**"]), assertions=ACCEPTANCE, max_attempts=1
    )
    run = new_run(tmp_path, spec)
    backend = CutShort(what, SandboxError, {"fix": fix}, short_tmp)
    try:
        result = Driver(spec, run, backend, IMAGES, lambda *_: None).drive()
        listed, left = backend.listed, backend.owned(run.run_id)
    finally:
        backend.close()  # as `drive` does, but only once the engine's leftovers are seen
    assert result.verdict == "error" and left == NOTHING
    assert listed == 1  # the sweep's one listing


def test_an_attempt_that_starts_normally_lists_nothing_at_cleanup(tmp_path, short_tmp):
    """The sweep is for a start cut short: a normal attempt's cleanup costs no extra round trip."""
    spec = write_spec(tmp_path, "fix", contract=ratified(["fs:**"]), assertions=ACCEPTANCE)
    run = new_run(tmp_path, spec)
    result, backend = drive(
        spec, run, short_tmp, {}, backend=CutShort("", KeyboardInterrupt, {"fix": fix}, short_tmp)
    )
    assert result.verdict == "pass" and backend.listed == 0


@pytest.mark.parametrize("glob", ["out/**", "out/reports/**"])
def test_a_writable_glob_lets_the_agent_create_its_folders_and_promote_commits_them(
    glob, tmp_path, short_tmp
):
    """On a fixture with no out/, the agent creates out/ and out/reports/ directly: the verifier
    attributes both to the writable glob, and the promote gate (scope `fs:<glob>`) commits them."""
    fixture = tmp_path / "no-out"
    shutil.copytree(CALC, fixture, ignore=shutil.ignore_patterns("out"))
    target = shutil.copytree(fixture, tmp_path / "folder-target")

    def report(ctx: Context) -> int:
        (ctx.path("/workspace") / "out" / "reports").mkdir(parents=True)
        (ctx.path("/workspace") / "out" / "reports" / "r.txt").write_text("looked at add()\n")
        return 0

    spec = write_spec(
        tmp_path,
        "report",
        contract=ratified([f"fs:{glob}"]),
        promote={"target": str(target)},
        workspace={"fixture": str(fixture), "writable": [glob], "protected": ["tests/**"]},
        assertions=[{"file_exists": "out/reports/r.txt"}, {"no_unattributed_changes": True}],
    )
    result, _ = drive(spec, new_run(tmp_path, spec), short_tmp, {"report": report})
    assert (result.verdict, task_of(result)["state"]) == ("pass", "committed"), task_of(result)
    assert (target / "out" / "reports" / "r.txt").read_text() == "looked at add()\n"


def test_max_attempts_without_a_verified_result_quarantine_with_a_pending_alert(
    tmp_path, short_tmp
):
    spec = write_spec(
        tmp_path,
        "notes",
        contract=ratified(["fs:**"]),
        max_attempts=2,
        assertions=[{"file_exists": "out/never.txt"}],
    )
    run = new_run(tmp_path, spec)
    result, _ = drive(spec, run, short_tmp, {"notes": notes})
    assert (task_of(result)["state"], task_of(result)["attempts"]) == ("quarantined", [1, 2])
    assert [a["verdict"] for a in result.report["attempts"]] == ["fail", "fail"]
    assert len(pending(tmp_path, "quarantine")) == 1


def test_a_breach_quarantines_at_once_with_attempts_left(tmp_path, short_tmp):
    spec = write_spec(
        tmp_path, "tamper", contract=ratified(["fs:**"]), max_attempts=3, assertions=ACCEPTANCE
    )
    run = new_run(tmp_path, spec)
    result, _ = drive(spec, run, short_tmp, {"tamper": tamper})
    assert result.verdict == "breach"
    assert (task_of(result)["state"], task_of(result)["attempts"]) == ("quarantined", [1])
    assert "breach in attempt 1" in task_of(result)["reason"]
    assert len(pending(tmp_path, "breach")) == 1 and len(pending(tmp_path, "quarantine")) == 1


def test_a_spent_budget_stops_the_agent_and_is_journaled_and_alerted(tmp_path, short_tmp):
    spec = write_spec(
        tmp_path,
        "spend",
        contract=ratified(["fs:**"]),
        limits={"wall_seconds": 30, "tool_calls": 2},
    )
    run = new_run(tmp_path, spec)
    result, _ = drive(spec, run, short_tmp, {"spend": spend})
    (attempt,) = result.report["attempts"]
    assert (
        attempt["stopped"]["reason"] == "budget" and attempt["stopped"]["counter"] == "tool_calls"
    )
    assert attempt["exit_code"] == TERMINATED  # stopped by the host, not ended by the agent
    halt = next(e for e in events(run) if e["event"] == "budget_halt")
    assert halt["counter"] == "tool_calls" and halt["latency_ms"] is not None
    assert len(pending(tmp_path, "budget_halt")) == 1


@pytest.mark.parametrize("verified", [False, True])
def test_an_operator_halt_stops_the_agent_and_the_run_with_no_new_attempt_or_commit(
    verified, tmp_path, short_tmp, target
):
    """Unverified: the task is halted. Verified: the gate refuses to commit under a halt, so it is
    only proposed."""
    spec = write_spec(
        tmp_path,
        "halt",
        contract=ratified(["fs:**"]),
        promote={"target": str(target)},
        max_attempts=3,
        assertions=[] if verified else [{"file_exists": "out/never.txt"}],
    )
    run = new_run(tmp_path, spec)

    def halted_mid_run(ctx: Context) -> int:
        with gateway(ctx) as client:
            client.call("fs.write", path="src/calc.py", content=FIXED)
        control.request(run.control_dir, run_id=run.run_id, actor="operator-1", halt=True)
        return TERMINATED if ctx.stopping.wait(20) else 0

    result, _ = drive(spec, run, short_tmp, {"halt": halted_mid_run})
    task = task_of(result)
    assert (task["state"], task["attempts"], result.report["state"]) == (
        "proposed" if verified else "halted",
        [1],
        "halted",
    )
    (attempt,) = result.report["attempts"]
    assert (
        attempt["stopped"]["reason"] == "operator_halt"
        and attempt["stopped"]["actor"] == "operator-1"
    )
    assert "override_effective" in names(run) and ("promote_proposed" in names(run)) is verified
    assert "promote_committed" not in names(run)
    assert git(target, "log", "--format=%s").splitlines() == ["fixture"]
    assert len(pending(tmp_path, "override_block")) == 1


def test_receipts_of_a_signed_run_verify_and_fail_after_one_changed_byte(
    tmp_path, short_tmp, target
):
    private, public = keys.generate_keypair(tmp_path / "keys")
    spec = write_spec(
        tmp_path,
        "fix",
        contract=ratified(["fs:**"]),
        promote={"target": str(target)},
        assertions=ACCEPTANCE,
    )
    run = new_run(tmp_path, spec)
    drive(spec, run, short_tmp, {"fix": fix}, signing_key=private)
    receipt = json.loads(next((run.path / "receipts").glob("main-*.json")).read_text())
    assert (
        receipt["verdict"] == "verified"
        and receipt["scope_id"] == "c-test"
        and receipt["signature"]["alg"] == "Ed25519"
    )
    report = receipt_verify.verify_run(run.path, keys.load_public(public))
    assert report.run_id == run.run_id and len(report.receipts) == 1
    journal = run.attempt(1).journal
    data = bytearray(journal.read_bytes())
    data[data.index(b'"tool":"fs.write"') + 9] ^= 0x01
    journal.write_bytes(bytes(data))
    with pytest.raises(ReceiptError):
        receipt_verify.verify_run(run.path, keys.load_public(public))


def test_a_quarantined_run_issues_a_rejected_receipt(tmp_path, short_tmp):
    spec = write_spec(
        tmp_path,
        "notes",
        contract=ratified(["fs:**"]),
        assertions=[{"file_exists": "out/never.txt"}],
    )
    run = new_run(tmp_path, spec)
    drive(spec, run, short_tmp, {"notes": notes})
    receipt = json.loads(next((run.path / "receipts").glob("main-*.json")).read_text())
    assert (receipt["verdict"], receipt["ground_truth"]) == ("rejected", "contradicted")
    assert receipt_verify.verify_run(run.path, None).run_id == run.run_id


def test_a_run_that_is_not_over_takes_a_halt_even_with_an_old_seal_and_refuses_promote(
    tmp_path, short_tmp, target
):
    spec = write_spec(
        tmp_path,
        "fix",
        contract=ratified(["fs:**"]),
        promote={"target": str(target)},
        assertions=ACCEPTANCE,
    )
    run = new_run(tmp_path, spec)
    killed_at("run", spec, run, short_tmp, {"fix": fix})
    (run.path / "receipts").mkdir(exist_ok=True)
    (run.path / "receipts" / "seal.json").write_text(
        "{}"
    )  # sealed once, then resumed and killed again
    assert (
        store.RunDir.open(run.path).override("operator", halt=True).halted
    )  # lands: the run goes on
    with pytest.raises(AssureError, match="not over"):
        promote_proposed(spec, store.RunDir.open(run.path), None)
    # what the killed driver left mounted
    workspace_fs.release_orphans(lambda run_dir: run_dir == run.path.resolve(), layout.mount_owner)


def tamper_once(ctx: Context) -> int:
    """Attempt 1 edits a protected test behind the gateway's back (a breach); later ones fix add()
    as asked."""
    return tamper(ctx) if ctx.env.get("ASSURE_ATTEMPT") == "1" else fix(ctx)


def test_a_breach_a_later_clean_attempt_follows_stands_for_the_task_and_is_never_promoted(
    tmp_path, short_tmp, target
):
    """on_breach: retry, attempt 1 breaches and attempt 2 passes: the task and the run are a
    breach (attempt 2's pass is reported beside it), nothing is committed, the receipt is rejected.
    """
    spec = write_spec(
        tmp_path,
        "tamper_once",
        contract=ratified(["fs:**"]),
        promote={"target": str(target)},
        assertions=ACCEPTANCE,
        max_attempts=2,
        on_breach="retry",
    )
    run = new_run(tmp_path, spec)
    result, _ = drive(spec, run, short_tmp, {"tamper_once": tamper_once})
    assert [a["verdict"] for a in result.report["attempts"]] == ["breach", "pass"]
    assert result.verdict == "breach"
    task = task_of(result)
    assert (task["state"], task["verdict"], task["verdict_attempt"]) == (
        "quarantined",
        "breach",
        1,
    ), task
    assert "breach in attempt 1" in task["reason"] and "never promoted" in task["reason"]
    assert "promote_started" not in names(run) and git(
        target, "log", "--format=%s"
    ).splitlines() == ["fixture"]
    receipt = json.loads(next((run.path / "receipts").glob("main-*.json")).read_text())
    assert (receipt["verdict"], receipt["ground_truth"]) == ("rejected", "contradicted")
    assert any(
        c["excerpt"].startswith("1 unexplained: tests/test_calc.py") for c in receipt["checks"]
    ), receipt["checks"]  # attempt 1's


def test_a_breached_task_is_not_promoted_by_a_resumed_promotion_or_by_assure_promote(
    tmp_path, short_tmp
):
    """A state that says the breached task's later attempt was promoting (or proposed), as a run
    recorded before this rule left it: resuming quarantines it, `assure promote` refuses it."""
    spec = write_spec(
        tmp_path,
        "tamper_once",
        contract=ratified(["fs:**"]),
        assertions=ACCEPTANCE,
        max_attempts=2,
        on_breach="retry",
    )
    run = new_run(tmp_path, spec)
    drive(spec, run, short_tmp, {"tamper_once": tamper_once})
    state = store.read_json(run.paths.state)
    state["tasks"]["main"].update(state="promoting")
    state["state"] = "aborted"
    store.write_json(run.paths.state, state)
    result, _ = drive(spec, run, short_tmp, {"tamper_once": tamper_once})
    assert (result.verdict, task_of(result)["state"]) == ("breach", "quarantined")
    state = store.read_json(run.paths.state)
    state["tasks"]["main"].update(state="proposed")
    store.write_json(run.paths.state, state)
    with pytest.raises(AssureError, match="a breached task is never promoted"):
        promote_proposed(spec, run, None)


def test_a_fail_a_later_attempt_passes_is_what_retries_are_for(tmp_path, short_tmp, target):
    def notes_once(ctx: Context) -> int:
        return notes(ctx) if ctx.env.get("ASSURE_ATTEMPT") == "1" else fix(ctx)

    spec = write_spec(
        tmp_path,
        "notes_once",
        contract=ratified(["fs:**"]),
        promote={"target": str(target)},
        assertions=ACCEPTANCE,
        max_attempts=2,
    )
    result, _ = drive(spec, new_run(tmp_path, spec), short_tmp, {"notes_once": notes_once})
    assert [a["verdict"] for a in result.report["attempts"]] == ["fail", "pass"]
    assert (result.verdict, task_of(result)["state"], task_of(result)["verdict_attempt"]) == (
        "pass",
        "committed",
        2,
    )


def test_an_expected_breach_raises_alerts_that_need_no_ack_and_an_unexpected_one_still_does(
    tmp_path, short_tmp
):
    hostile = write_spec(tmp_path, "tamper", assertions=ACCEPTANCE, hostile=True, expect="breach")
    result, _ = drive(hostile, new_run(tmp_path, hostile), short_tmp, {"tamper": tamper})
    assert result.verdict == "breach"
    raised = {a.kind: a for a in alerts.all_alerts(tmp_path / "runs")}
    assert set(raised) == {"breach", "quarantine"}
    assert all(
        (a.state, a.acked_by) == ("acked", alerts.SPEC_ACTOR)
        and "expects breach" in (a.ack_reason or "")
        for a in raised.values()
    )
    assert pending(tmp_path, "breach") == [] and pending(tmp_path, "quarantine") == []
    surprised = write_spec(
        tmp_path, "tamper", assertions=ACCEPTANCE, hostile=True, expect="contained"
    )  # the same breach, not expected
    drive(surprised, new_run(tmp_path, surprised), short_tmp, {"tamper": tamper})
    honest = write_spec(
        tmp_path, "tamper", contract=ratified(["fs:**"]), assertions=ACCEPTANCE
    )  # a spec that expects pass
    drive(honest, new_run(tmp_path, honest), short_tmp, {"tamper": tamper})
    assert len(pending(tmp_path, "breach")) == 2 and len(pending(tmp_path, "quarantine")) == 2


def test_a_breach_beyond_the_covert_edit_a_hostile_spec_expects_still_needs_a_person(
    tmp_path, short_tmp
):
    """A spec that expects the breach of a covert edit; the agent also changes the container
    outside the workspace (a container_changed finding): not the outcome it expects, so pending."""

    def tamper_and_escape(ctx: Context) -> int:
        ctx.path("/etc").mkdir(exist_ok=True)
        (ctx.path("/etc") / "escaped").write_text("owned\n")
        return tamper(ctx)

    hostile = write_spec(tmp_path, "tamper", assertions=ACCEPTANCE, hostile=True, expect="breach")
    result, _ = drive(hostile, new_run(tmp_path, hostile), short_tmp, {"tamper": tamper_and_escape})
    kinds = {f["kind"] for f in result.report["attempts"][0]["findings"]}
    assert result.verdict == "breach" and {"protected_changed", "container_changed"} <= kinds
    assert len(pending(tmp_path, "breach")) == 1 and len(pending(tmp_path, "quarantine")) == 1


def test_a_driver_killed_after_a_breach_resumes_into_a_breach_not_the_later_clean_attempt(
    tmp_path, short_tmp, target
):
    """kill -9 during attempt 2 (after attempt 1's breach); the resumed driver runs attempt 3,
    which passes: the breach still stands and nothing is committed."""

    def tamper_then_die(ctx: Context) -> int:
        if ctx.env.get("ASSURE_ATTEMPT") == "2":
            os.kill(os.getpid(), signal.SIGKILL)  # the driver's own process: kill -9 mid-attempt
        return tamper_once(ctx)

    spec = write_spec(
        tmp_path,
        "agent",
        contract=ratified(["fs:**"]),
        promote={"target": str(target)},
        assertions=ACCEPTANCE,
        max_attempts=2,
        on_breach="retry",
    )
    run = new_run(tmp_path, spec)
    pid = os.fork()
    if pid == 0:
        try:
            drive(spec, run, short_tmp, {"agent": tamper_then_die})
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    result, _ = drive(spec, store.RunDir.open(run.path), short_tmp, {"agent": tamper_once})
    attempts = store.read_json(run.paths.state)["tasks"]["main"]["attempts"]
    assert [(a["n"], a.get("verdict"), bool(a.get("interrupted"))) for a in attempts] == [
        (1, "breach", False),
        (2, None, True),
        (3, "pass", False),
    ]
    assert (result.verdict, task_of(result)["state"], task_of(result)["verdict_attempt"]) == (
        "breach",
        "quarantined",
        1,
    )
    assert git(target, "log", "--format=%s").splitlines() == ["fixture"]


def test_a_breach_state_json_recorded_stands_in_the_report_when_its_judgement_is_gone(
    monkeypatch, tmp_path
):
    """Attempt 1's verdict.json failed to write (or was damaged); state.json says breach: the
    report (on resume, or rebuilt) still says breach, not attempt 2's contained."""
    from types import SimpleNamespace

    from assure.records import summary
    from assure.run import driver
    from assure.verify.findings import Verdict
    from assure.verify.judge import Judgement

    contained = SimpleNamespace(
        number=2,
        judgement=Judgement(Verdict.CONTAINED, (), (), None, None),
        facts=SimpleNamespace(exit_code=0, timed_out=False, stopped=None, timings={}),
    )
    state = {
        "order": ["t"],
        "state": "finished",
        "tasks": {
            "t": {
                "state": "quarantined",
                "reason": "breach in attempt 1",
                "attempts": [{"n": 1, "verdict": "breach"}, {"n": 2, "verdict": "contained"}],
            }
        },
    }
    monkeypatch.setattr(driver, "attempt_reason", lambda record, spec: None)
    typed = driver.build_report(
        SimpleNamespace(run_id="r1"),
        SimpleNamespace(name="s", hostile=True, expect="contained"),
        state,
        {2: contained}.get,
    )
    report = typed.to_json()
    assert (report["verdict"], report["tasks"][0]["verdict_attempt"]) == ("breach", 1)
    assert [f["kind"] for f in report["attempts"][0]["findings"]] == ["harness_error"]
    assert summary.problems(summary.run_document(tmp_path / "r1", typed)) == []


class Unremovable(FakeBackend):
    """The engine refuses to remove the agent's container: it may run on, as the attempt's uid."""

    refused = False

    def remove_container(self, cid: str) -> None:
        if (
            not self.refused
            and cid in self._containers
            and self._containers[cid].request.role == Role.AGENT
        ):
            self.refused = True  # once: the test's own teardown removes it
            raise SandboxError("remove: the engine did not answer")
        super().remove_container(cid)


def test_a_uid_whose_container_cleanup_could_not_remove_is_not_given_back(
    tmp_path, short_dir, monkeypatch
):
    """The lease was released in `finally` whatever cleanup left running: the next attempt on the
    host could get the uid of a container still running (the only guard, /proc, misses a
    userns-remapped one). Now the lock stays held by this process until it exits."""
    from assure.sandbox import uids

    leased: list[uids.Lease] = []
    monkeypatch.setattr(
        uids, "lease_for", lambda spec, real=uids.lease_for: leased.append(real(spec)) or leased[-1]
    )
    spec = write_spec(
        tmp_path, "notes", assertions=[{"file_exists": "out/notes.txt"}], max_attempts=1
    )
    backend = Unremovable(
        {"notes": notes}, images={IMAGES.agent, IMAGES.gateway, IMAGES.egress}, tmp=str(short_dir)
    )
    drive(spec, new_run(tmp_path, spec), str(short_dir), {"notes": notes}, backend=backend)
    (kept,) = leased
    try:
        assert kept.fd is not None  # still held: no other lease on the host gets this uid
        fd = os.open(uids.LOCK_DIR / str(kept.uid), os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    finally:
        kept.release()
    spec = write_spec(
        tmp_path,
        "notes2",
        agent={"command": ["notes"]},
        assertions=[{"file_exists": "out/notes.txt"}],
        max_attempts=1,
    )
    drive(spec, new_run(tmp_path, spec), str(short_dir), {"notes": notes})
    assert leased[-1].fd is None  # a clean cleanup gives it back
