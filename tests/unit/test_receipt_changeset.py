"""A receipt vouches for the changeset its attempt left (aar 2): `receipts verify` re-hashes the
run directory's workspace copy, so a copy whose bytes were swapped after the run fails step 7,
naming the file. A version-1 receipt (no changeset) still verifies, its step 7 NOT-RUN."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from assure.core import confined, private
from assure.records import applied, keys, layout, receipt_verify, receipts
from assure.records.receipt_format import ReceiptError
from assure.records.receipt_verify import Outcome
from assure.records.seal import seal_run, write_seal
from assure.records.store import write_json
from assure.verify.diff import diff
from assure.verify.findings import Verdict
from assure.verify.judge import Judgement
from assure.verify.snapshot import take
from tests.unit.test_receipts import make_run, receipt_for


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return keys.load_private(keys.generate_keypair(tmp_path_factory.mktemp("keys"))[0])


def attempt_run(
    tmp_path: Path, key: Any, *, version: str = "2", left_out: str | None = None
) -> Path:
    """A run whose attempt 1 added a script and changed a file, judged, with its receipt."""
    run = make_run(tmp_path)
    mount, workspace = tmp_path / "mount", run / "attempts" / "1" / "workspace"
    (mount / "src").mkdir(parents=True)
    (mount / "src" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    pre = take(mount)
    (mount / "src" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (mount / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(mount / "run.sh", 0o4777)
    post = take(mount)
    confined.copy_tree(mount, workspace, max_bytes=2**20, modes=private.copy_mode)
    if (
        left_out
    ):  # as the copy-out's own limits leave a file out (two hard links that no longer fit)
        (workspace / left_out).unlink()
    changes = diff(pre, post)
    write_json(
        run / "attempts" / "1" / layout.VERDICT,
        Judgement(Verdict.PASS, (), tuple(changes), None, None).to_json(),
    )
    seal = seal_run(run)
    record = receipt_for(seal, "task-1", changeset=receipts.changeset_of(run, 1, changes))
    if version == "1":
        record = {
            **{k: v for k, v in record.items() if k not in ("changeset", "trust")},
            "aar": "1",
        }
    receipts.write_receipt(run, receipts.sign(record, key))
    write_seal(run, seal, key)
    return run


def test_a_receipt_vouches_for_the_workspace_copy_as_it_was(tmp_path: Path, key: Any) -> None:
    run = attempt_run(tmp_path, key)
    report = receipt_verify.verify_run(run, key.public_key())
    assert report.steps[-1].number == 7 and report.steps[-1].outcome is Outcome.PASSED
    assert report.steps[-1].detail == "1 changesets, 2 changed paths"


@pytest.mark.parametrize(
    "tamper, named",
    [
        (
            lambda ws: (ws / "src" / "calc.py").write_text("import os; os.system('id')\n"),
            "attempts/1/workspace/src/calc.py",
        ),
        (
            lambda ws: os.chmod(ws / "src" / "calc.py", 0o755),
            "attempts/1/workspace/src/calc.py",
        ),  # now executable
        (lambda ws: (ws / "run.sh").unlink(), "attempts/1/workspace/run.sh"),
        (
            lambda ws: ((ws / "run.sh").unlink(), (ws / "run.sh").symlink_to("/etc/passwd")),
            "attempts/1/workspace/run.sh",
        ),
    ],
)
def test_a_swapped_workspace_copy_fails_step_7_naming_the_file(
    tmp_path: Path, key: Any, tamper: Any, named: str
) -> None:
    run = attempt_run(tmp_path, key)
    tamper(run / "attempts" / "1" / "workspace")
    with pytest.raises(ReceiptError) as caught:
        receipt_verify.verify_run(run, key.public_key())
    assert (caught.value.step, caught.value.path) == (7, named)
    assert "the workspace copy was changed" in caught.value.detail


def test_rewritten_judged_changes_fail_step_7(tmp_path: Path, key: Any) -> None:
    """Rewriting verdict.json to match the swapped bytes does not help: the receipt binds them."""
    run = attempt_run(tmp_path, key)
    verdict_path = run / "attempts" / "1" / layout.VERDICT
    verdict = json.loads(verdict_path.read_text())
    (run / "attempts" / "1" / "workspace" / "src" / "calc.py").write_text("swapped\n")
    for change in verdict["changes"]:
        if change["path"] == "src/calc.py":
            change["after"]["sha256"] = applied.file_digest(
                run / "attempts" / "1" / "workspace", "src/calc.py"
            )
    verdict_path.write_text(json.dumps(verdict))
    with pytest.raises(ReceiptError, match="step 7 .*not the ones receipts/.* vouches for"):
        receipt_verify.verify_run(run, key.public_key())
    verdict_path.write_text("{")
    with pytest.raises(ReceiptError, match="step 7 .*unreadable JSON"):
        receipt_verify.verify_run(run, key.public_key())


def test_a_version_1_receipt_still_verifies_with_step_7_not_run(tmp_path: Path, key: Any) -> None:
    run = attempt_run(tmp_path, key, version="1")
    (run / "attempts" / "1" / "workspace" / "src" / "calc.py").write_text(
        "swapped\n"
    )  # aar 1 cannot see it
    report = receipt_verify.verify_run(run, key.public_key())
    assert [(s.number, s.outcome) for s in report.steps][-1] == (7, Outcome.NOT_RUN)


def test_a_version_2_receipt_without_its_changeset_field_is_malformed(
    tmp_path: Path, key: Any
) -> None:
    seal = seal_run(make_run(tmp_path))
    record = {k: v for k, v in receipt_for(seal, "t").items() if k != "changeset"}
    with pytest.raises(ReceiptError, match="step 1 .*receipt lacks changeset"):
        receipts.sign(record, key)
    with pytest.raises(ReceiptError, match="changeset.sha256 must be 64 lowercase hex"):
        receipt_for(seal, "t", changeset={"attempt": 1, "sha256": "x", "changes": 0})


def test_the_digest_is_the_same_from_post_and_from_a_faithful_copy(tmp_path: Path) -> None:
    """What the issuer computes from POST (no file hashed twice) is what the verifier finds in
    the copy; a FIFO the copy never carries is vouched for as not copied, on both sides."""
    mount = tmp_path / "mount"
    mount.mkdir()
    pre = take(mount)
    (mount / "f").write_text("x")
    os.mkfifo(mount / "pipe")
    post = take(mount)
    copy = tmp_path / "copy"
    confined.copy_tree(mount, copy, max_bytes=2**20, modes=private.copy_mode)
    changes = [c.to_json() for c in diff(pre, post)]
    assert applied.found(copy, changes) == applied.vouched(copy, changes)
    assert [i.kind for i in applied.vouched(copy, changes)] == ["file", applied.NOT_COPIED]
    before = applied.digest(applied.vouched(copy, changes))
    (copy / "f").unlink()
    assert applied.digest(applied.found(copy, changes)) != before


def test_what_the_copy_out_left_out_is_vouched_for_as_left_out(tmp_path: Path, key: Any) -> None:
    run = attempt_run(tmp_path, key, left_out="run.sh")
    assert receipt_verify.verify_run(run, key.public_key()).steps[-1].outcome is Outcome.PASSED
    (run / "attempts" / "1" / "workspace" / "run.sh").write_text(
        "#!/bin/sh\nid\n"
    )  # a file where the copy had none
    with pytest.raises(ReceiptError) as caught:
        receipt_verify.verify_run(run, key.public_key())
    assert (caught.value.step, caught.value.path) == (7, "attempts/1/workspace/run.sh")


def test_a_file_that_grows_after_its_size_was_checked_is_oversize_and_read_no_further(
    tmp_path, monkeypatch
):
    """`receipts verify` reads run directories nobody vouches for: a file that grew past the
    limit between the fstat and the read (a FIFO-like stream, a writer) is never read to its end."""
    (tmp_path / "big").write_bytes(b"small")
    opened, read = confined.open_file, []

    def open_then_grow(root: Path, rel: str) -> tuple[int, os.stat_result]:
        fd, st = opened(root, rel)
        with open(tmp_path / "big", "ab") as fh:
            fh.write(b"x" * 4096)
        return fd, st

    real_read = os.read
    monkeypatch.setattr(applied, "MAX_FILE_BYTES", 10)
    monkeypatch.setattr(confined, "open_file", open_then_grow)
    monkeypatch.setattr(os, "read", lambda fd, n: read.append(n) or real_read(fd, n))
    assert applied.file_digest(tmp_path, "big") == applied.OVERSIZE
    monkeypatch.undo()
    assert sum(read) <= 11
