"""Nothing writes into a sealed run: `halt`, `dial` and `promote` on a finished run refuse,
say why and what to do instead, exit 1 and leave every sealed log as it was, so `assure
receipts verify` still passes. Promote, the one command that may change a finished run,
writes only when a task commits, and then seals again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from assure.core import control
from assure.errors import AssureError, RunDirError
from assure.records import keys, receipt_verify, store
from assure.run.driver import promote_proposed
from assure.sandbox.fake import Context
from tests.unit import test_driver_states as states
from tests.unit.test_driver_states import (
    ACCEPTANCE,
    FIXED,
    drive,
    gateway,
    git,
    new_run,
    ratified,
    task_of,
    write_spec,
)

short_tmp, target = states.short_tmp, states.target  # the same fixtures


def fix(ctx: Context) -> int:
    with gateway(ctx) as client:
        client.call("fs.write", path="src/calc.py", content=FIXED)
    return 0


def logs(run: store.RunDir) -> dict[str, bytes]:
    """Every sealed log's bytes, and the seal."""
    found = [
        run.paths.events,
        run.paths.operator_log,
        run.paths.seal,
        *(run.attempt(int(a.name)).journal for a in run.attempts()),
    ]
    return {str(p): p.read_bytes() for p in found if p.exists()}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "assure.cli", *args], capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def finished(tmp_path: Path, short_tmp: str) -> store.RunDir:
    """A finished, propose-only run (no promote target)."""
    spec = write_spec(tmp_path, "fix", contract=ratified(["fs:**"]), assertions=ACCEPTANCE)
    run = new_run(tmp_path, spec)
    result, _ = drive(spec, run, short_tmp, {"fix": fix})
    assert result.report["state"] == "finished" and task_of(result)["state"] == "proposed"
    return run


@pytest.mark.parametrize("args", [["halt"], ["dial", "propose"], ["promote"]])
def test_operator_commands_on_a_finished_run_refuse_and_write_nothing(finished, args):
    before = logs(finished)
    command, *rest = args
    done = cli(command, str(finished.path), *rest)
    assert done.returncode == 1, done.stdout + done.stderr
    expected = (
        "is propose-only: its spec has no promote target"
        if command == "promote"
        else "is finished: a"
    )
    assert expected in done.stderr and "fix: " in done.stderr, done.stderr
    assert logs(finished) == before
    assert receipt_verify.verify_run(finished.path, None).run_id == finished.run_id


def test_the_refusal_is_one_check_taken_under_the_control_lock(finished, tmp_path):
    with pytest.raises(RunDirError, match="would append to its sealed logs"):
        finished.override("alice", halt=True)
    assert not finished.paths.operator_log.exists()
    open_run = store.RunDir.create(
        tmp_path / "runs", "open-run", finished.paths.spec_yaml, finished.spec_json()
    )
    open_run.save_state(
        {"state": "aborted"}
    )  # a driver that died: not sealed, `assure resume` continues it
    assert (
        open_run.override("alice", halt=True).halted and control.read(open_run.control_dir).halted
    )


def test_promote_writes_nothing_until_a_task_can_commit_then_seals_again(
    tmp_path, short_tmp, target
):
    """Dialled down mid-run: proposed. Promote under the run's dial refuses and writes nothing;
    with --dial commit it commits once and the re-issued, re-signed receipts verify."""
    private, public = keys.generate_keypair(tmp_path / "keys")
    spec = write_spec(
        tmp_path,
        "dialed",
        contract=ratified(["fs:**"]),
        promote={"target": str(target)},
        assertions=ACCEPTANCE,
    )
    run = new_run(tmp_path, spec)

    def dialled_down(ctx: Context) -> int:
        fix(ctx)
        control.request(run.control_dir, run_id=run.run_id, actor="operator-1", dial="propose")
        return 0

    result, _ = drive(spec, run, short_tmp, {"dialed": dialled_down}, signing_key=private)
    assert task_of(result)["state"] == "proposed"
    before = logs(run)
    with pytest.raises(
        AssureError,
        match=r"the gate still allows no commit .*autonomy.insufficient.*nothing was written",
    ) as refused:
        promote_proposed(spec, run, None, private)
    assert "--dial commit" in str(refused.value.fix)
    with pytest.raises(AssureError, match="signed by ed25519:"):
        promote_proposed(
            spec, run, None, None, dial="commit"
        )  # unsigned receipts would replace signed ones
    assert logs(run) == before

    assert promote_proposed(spec, run, None, private, dial="commit") == [
        ("main", "committed", "committed later by an operator's promote")
    ]
    assert git(target, "log", "--format=%s").splitlines() == ["assure: task main", "fixture"]
    assert receipt_verify.verify_run(run.path, keys.load_public(public)).run_id == run.run_id
    with pytest.raises(AssureError, match="no proposed task"):
        promote_proposed(spec, run, None, private, dial="commit")
