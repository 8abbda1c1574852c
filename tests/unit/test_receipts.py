"""Receipts (AAR): keys, signing over RFC 8785, the seal over a run's hash-chained logs, and
`verify_run` failing at the named step for each kind of tampering. Real chains, real keys."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from typer.testing import CliRunner

from assure.core.chain import ChainWriter
from assure.records import keys, layout, receipt_format, receipt_verify, receipts
from assure.records.keys import KeyFileError
from assure.records.receipt_format import ReceiptError
from assure.records.receipt_verify import Outcome
from assure.records.seal import merkle_root, seal_run, write_seal

JOURNAL = "attempts/1/gateway/journal.jsonl"


def make_run(base: Path, run_id: str = "demo-20260101T000000Z-abc123") -> Path:
    """A run directory with the three kinds of hash-chained log, as assure lays them out."""
    run = base / run_id
    (run / "control").mkdir(parents=True)
    (run / "attempts" / "1" / "gateway").mkdir(parents=True)
    (run / "spec.json").write_text("{}\n")
    writers = [
        (
            ChainWriter(run / "events.jsonl", base={"run_id": run_id, "actor": "driver"}),
            "attempt_started",
            3,
        ),
        (
            ChainWriter(
                run / "control" / "operator.jsonl", base={"run_id": run_id, "actor": "alice"}
            ),
            "dial",
            2,
        ),
        (
            ChainWriter(run / JOURNAL, base={"run_id": run_id, "attempt": 1, "actor": "gateway"}),
            "tool_call",
            5,
        ),
    ]
    for writer, event, count in writers:
        for n in range(count):
            writer.append(event, n=n, path=f"file-{n}.txt")
        writer.close()
    return run


def receipt_for(seal: dict[str, Any], task_id: str, **overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "run_id": seal["run_id"],
        "task_id": task_id,
        "claim": "tests in tests/ pass",
        "verdict": "verified",
        "ground_truth": "confirmed",
        "reason": "pytest exited 0 in a fresh container on the post-run workspace",
        "checks": [
            {
                "source": "command:pytest",
                "query": "pytest -q tests",
                "observed_at": "2026-01-01T00:01:00.000000Z",
                "response_sha256": hashlib.sha256(b"3 passed").hexdigest(),
                "excerpt": "3 passed",
            }
        ],
        "subject": "agent:claude-worker",
        "principal": "did:web:example.org:assure",
        "verifier": {
            "id": "assure:command-verifier",
            "independence": "separate container, fresh workspace copy",
        },
        "deployment_id": "dep-1",
        "scope_id": "fs:**",
        "seal": seal,
        "issued": "2026-01-01T00:02:00.000000Z",
    }
    fields.update(overrides)
    return receipts.build_receipt(**fields)


def issue(run: Path, key: Any, task_ids: list[str], **overrides: Any) -> list[Path]:
    """Seal, write one receipt per task (signed when `key`), then write the seal file."""
    seal = seal_run(run)
    paths = []
    for task_id in task_ids:
        record = receipt_for(seal, task_id, **overrides)
        paths.append(
            receipts.write_receipt(run, receipts.sign(record, key) if key is not None else record)
        )
    write_seal(run, seal, key)
    return paths


@pytest.fixture(scope="module")
def keypair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    private_path, public_path = keys.generate_keypair(tmp_path_factory.mktemp("keys"))
    return keys.load_private(private_path), keys.load_public(public_path)


@pytest.fixture()
def signed_run(tmp_path: Path, keypair: tuple[Any, Any]) -> Path:
    run = make_run(tmp_path)
    issue(run, keypair[0], ["task-1", "task-2"])
    return run


def fails(run: Path, public: Any) -> ReceiptError:
    with pytest.raises(ReceiptError) as caught:
        receipt_verify.verify_run(run, public)
    return caught.value


def rewrite_lines(path: Path, change: Any) -> None:
    lines = path.read_text().splitlines()
    path.write_text("".join(line + "\n" for line in change(lines)))


# Keys ------------------------------------------------------------------------------------


def test_generate_keypair_modes_and_refuses_to_overwrite(tmp_path: Path) -> None:
    private_path, public_path = keys.generate_keypair(tmp_path / "k")
    assert stat.S_IMODE(private_path.stat().st_mode) == 0o600
    assert private_path.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    assert public_path.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    before = private_path.read_bytes()
    with pytest.raises(KeyFileError, match="refusing to overwrite"):
        keys.generate_keypair(tmp_path / "k")
    assert private_path.read_bytes() == before
    private, public = keys.load_private(private_path), keys.load_public(public_path)
    assert keys.key_id(private.public_key()) == keys.key_id(public)


def test_key_id_is_sha256_of_the_raw_public_key(keypair: tuple[Any, Any]) -> None:
    from cryptography.hazmat.primitives import serialization

    raw = keypair[1].public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert keys.key_id(keypair[1]) == "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]


def test_load_private_refuses_a_key_others_can_read(tmp_path: Path) -> None:
    private_path, _ = keys.generate_keypair(tmp_path)
    os.chmod(private_path, 0o644)
    with pytest.raises(KeyFileError, match="readable by others"):
        keys.load_private(private_path)


def test_load_public_refuses_a_private_key_file(tmp_path: Path) -> None:
    private_path, _ = keys.generate_keypair(tmp_path)
    with pytest.raises(KeyFileError, match="not a PEM public key"):
        keys.load_public(private_path)


# Building --------------------------------------------------------------------------------


def test_receipt_has_every_field_machine_md_names(
    signed_run: Path, keypair: tuple[Any, Any]
) -> None:
    path = signed_run / "receipts" / layout.receipt_filename("task-1")
    record = json.loads(path.read_text())
    assert set(record) == {
        "aar",
        "run_id",
        "task",
        "subject",
        "principal",
        "verdict",
        "ground_truth",
        "reason",
        "checks",
        "verifier",
        "deployment_id",
        "scope_id",
        "seal",
        "issued",
        "signature",
        "changeset",
        "trust",
    }
    assert record["aar"] == "3" and record["changeset"] is None  # these tasks name no attempt
    assert record["task"] == {"id": "task-1", "claim": "tests in tests/ pass"}
    assert record["signature"]["alg"] == "Ed25519"
    assert record["signature"]["key_id"] == keys.key_id(keypair[1])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"verdict": "maybe"}, "verdict must be one of verified, rejected"),
        ({"ground_truth": "unknown"}, "ground_truth must be one of confirmed, contradicted"),
        ({"checks": []}, "checks must list at least one ground-truth check"),
        (
            {"verifier": {"id": "agent:claude-worker", "independence": "none"}},
            "verifier.id equals subject",
        ),
        ({"deployment_id": ""}, "deployment_id must be a non-empty string"),
        ({"task_id": ""}, "task.id must be a non-empty string"),
        ({"claim": {"n": float("nan")}}, "no RFC 8785 canonical form"),
        ({"claim": {"n": 2**60}}, "no RFC 8785 canonical form"),
    ],
)
def test_build_receipt_refuses_incomplete_records(
    tmp_path: Path, override: dict[str, Any], message: str
) -> None:
    seal = seal_run(make_run(tmp_path))
    with pytest.raises(ReceiptError, match="step 1 ") as caught:
        receipt_for(seal, override.pop("task_id", "t"), **override)
    assert message in caught.value.detail


def test_keyless_receipt_has_signature_null(tmp_path: Path) -> None:
    seal = seal_run(make_run(tmp_path))
    assert receipt_for(seal, "t")["signature"] is None


# Verifying a clean run -------------------------------------------------------------------


def test_clean_run_verifies(signed_run: Path, keypair: tuple[Any, Any]) -> None:
    report = receipt_verify.verify_run(signed_run, keypair[1])
    assert report.key_id == keys.key_id(keypair[1])
    assert report.signatures is Outcome.PASSED
    assert report.receipts == tuple(
        sorted(f"receipts/{layout.receipt_filename(t)}" for t in ("task-1", "task-2"))
    )
    assert report.logs == (
        "attempts/1/gateway/journal.jsonl",
        "control/operator.jsonl",
        "events.jsonl",
    )
    assert [(s.number, s.outcome) for s in report.steps] == [
        (n, Outcome.PASSED) for n in range(1, 7)
    ] + [(7, Outcome.NOT_RUN)]
    with pytest.raises(AttributeError):
        # frozen: the test is that the assignment fails
        report.key_id = "x"  # type: ignore[misc]


def test_keyless_run_verifies_with_signatures_not_run(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    issue(run, None, ["task-1", "task-2"])
    assert json.loads((run / "receipts" / "seal.json").read_text())["signature"] is None
    report = receipt_verify.verify_run(run, None)
    assert report.key_id is None
    assert report.signatures is Outcome.NOT_RUN
    assert [(s.number, s.outcome) for s in report.steps] == [
        (1, Outcome.PASSED),
        (2, Outcome.NOT_RUN),
        (3, Outcome.NOT_RUN),
        (4, Outcome.PASSED),
        (5, Outcome.PASSED),
        (6, Outcome.PASSED),
        (7, Outcome.NOT_RUN),
    ]
    assert report.to_json()["signatures"] == "NOT-RUN"


def test_keyless_run_still_fails_on_a_changed_log(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    issue(run, None, ["task-1"])
    rewrite_lines(run / "events.jsonl", lambda lines: lines[:-1])
    error = fails(run, None)
    assert (error.step, error.path, error.line) == (4, "events.jsonl", 3)


def test_unsigned_receipts_fail_when_a_key_is_given(
    tmp_path: Path, keypair: tuple[Any, Any]
) -> None:
    run = make_run(tmp_path)
    issue(run, None, ["task-1"])
    error = fails(run, keypair[1])
    assert error.step == 2
    assert "unsigned, but a public key" in str(error)


# Tampering with receipts -----------------------------------------------------------------


def test_one_byte_change_in_a_receipt_fails_at_step_2_naming_it(
    signed_run: Path, keypair: tuple[Any, Any]
) -> None:
    path = signed_run / "receipts" / layout.receipt_filename("task-2")
    data = path.read_bytes()
    assert data.count(b"pytest exited 0") == 1
    path.write_bytes(data.replace(b"pytest exited 0", b"pytest exited 1"))
    error = fails(signed_run, keypair[1])
    assert error.step == 2
    assert error.path == f"receipts/{path.name}"
    assert (
        str(error)
        == f"step 2 (receipt signatures verify with the key) failed: receipts/{path.name}: "
        f"signature by {keys.key_id(keypair[1])} does not match the content (changed after signing)"
    )


def test_receipt_signed_by_another_key_fails_naming_both_key_ids(
    tmp_path: Path, keypair: tuple[Any, Any]
) -> None:
    run = make_run(tmp_path)
    seal = seal_run(run)
    other_private, _ = keys.generate_keypair(tmp_path / "other")
    other = keys.load_private(other_private)
    receipts.write_receipt(run, receipts.sign(receipt_for(seal, "task-1"), keypair[0]))
    forged = receipts.write_receipt(run, receipts.sign(receipt_for(seal, "task-2"), other))
    write_seal(run, seal, keypair[0])
    error = fails(run, keypair[1])
    assert (error.step, error.path) == (2, f"receipts/{forged.name}")
    assert (
        error.detail
        == f"signed by key {keys.key_id(other.public_key())}, not by {keys.key_id(keypair[1])} (the"
        " public key given)"
    )


def test_whole_run_checked_with_the_wrong_public_key_fails_at_step_2(
    signed_run: Path, tmp_path: Path
) -> None:
    _, public_path = keys.generate_keypair(tmp_path / "stranger")
    error = fails(signed_run, keys.load_public(public_path))
    assert error.step == 2
    assert "not by" in error.detail


def test_changed_seal_file_fails_at_step_3(signed_run: Path, keypair: tuple[Any, Any]) -> None:
    path = signed_run / "receipts" / "seal.json"
    doc = json.loads(path.read_text())
    doc["receipts"][0]["task_id"] = "someone-else"
    path.write_text(json.dumps(doc))
    error = fails(signed_run, keypair[1])
    assert (error.step, error.path) == (3, "receipts/seal.json")


def test_removed_receipt_fails_at_step_6(signed_run: Path, keypair: tuple[Any, Any]) -> None:
    gone = signed_run / "receipts" / layout.receipt_filename("task-1")
    gone.unlink()
    error = fails(signed_run, keypair[1])
    assert (error.step, error.path) == (6, f"receipts/{gone.name}")
    assert "receipt removed" in error.detail


def test_receipt_added_after_sealing_fails_at_step_6(
    signed_run: Path, keypair: tuple[Any, Any]
) -> None:
    seal = json.loads((signed_run / "receipts" / "seal.json").read_text())["seal"]
    added = receipts.write_receipt(
        signed_run, receipts.sign(receipt_for(seal, "task-3"), keypair[0])
    )
    error = fails(signed_run, keypair[1])
    assert (error.step, error.path) == (6, f"receipts/{added.name}")


def test_receipt_under_another_seal_fails_at_step_6(
    signed_run: Path, keypair: tuple[Any, Any]
) -> None:
    later = seal_run(signed_run)  # same logs, another sealed_at
    path = receipts.write_receipt(
        signed_run, receipts.sign(receipt_for(later, "task-1"), keypair[0])
    )
    error = fails(signed_run, keypair[1])
    assert (error.step, error.path) == (6, f"receipts/{path.name}")
    assert "its seal differs" in error.detail


def test_write_seal_refuses_a_stale_receipt(signed_run: Path, keypair: tuple[Any, Any]) -> None:
    with pytest.raises(ReceiptError, match="carries another seal"):
        write_seal(signed_run, seal_run(signed_run), keypair[0])


def test_renamed_receipt_fails_at_step_1(signed_run: Path, keypair: tuple[Any, Any]) -> None:
    path = signed_run / "receipts" / layout.receipt_filename("task-1")
    path.rename(path.with_name(layout.receipt_filename("task-9")))
    error = fails(signed_run, keypair[1])
    assert error.step == 1
    assert "file name does not match task.id" in error.detail


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"aar": "1", "aar": "1"}', "duplicate key(s) 'aar'"),
        (b'{"aar": NaN}', "NaN is not JSON"),
        (b"\xff{}", "unreadable JSON"),
        (b"[]", "receipt is not a JSON object"),
    ],
)
def test_malformed_receipt_fails_at_step_1(
    signed_run: Path, keypair: tuple[Any, Any], raw: bytes, message: str
) -> None:
    path = signed_run / "receipts" / layout.receipt_filename("task-1")
    path.write_bytes(raw)
    error = fails(signed_run, keypair[1])
    assert (error.step, error.path) == (1, f"receipts/{path.name}")
    assert message in error.detail


def test_unexpected_file_in_receipts_fails_at_step_1(
    signed_run: Path, keypair: tuple[Any, Any]
) -> None:
    (signed_run / "receipts" / "notes.txt").write_text("hi")
    error = fails(signed_run, keypair[1])
    assert (error.step, error.path) == (1, "receipts/notes.txt")


# Tampering with the sealed logs ----------------------------------------------------------


def test_one_byte_change_in_a_journal_line_fails_at_step_4_naming_file_and_line(
    signed_run: Path, keypair: tuple[Any, Any]
) -> None:
    def change(lines: list[str]) -> list[str]:
        assert '"file-2.txt"' in lines[2]
        return [*lines[:2], lines[2].replace('"file-2.txt"', '"file-3.txt"'), *lines[3:]]

    rewrite_lines(signed_run / JOURNAL, change)
    error = fails(signed_run, keypair[1])
    assert (error.step, error.path, error.line) == (4, JOURNAL, 3)
    assert (
        str(error)
        == f"step 4 (sealed logs verify, same lines and head) failed: {JOURNAL}: line 3: "
        "hash does not match the content (line altered)"
    )


def test_dropped_line_fails_at_step_4(signed_run: Path, keypair: tuple[Any, Any]) -> None:
    rewrite_lines(signed_run / JOURNAL, lambda lines: [*lines[:1], *lines[2:]])
    error = fails(signed_run, keypair[1])
    assert (error.step, error.path, error.line) == (4, JOURNAL, 2)
    assert "line dropped, inserted or reordered" in error.detail


def test_dropped_last_line_fails_at_step_4(signed_run: Path, keypair: tuple[Any, Any]) -> None:
    rewrite_lines(signed_run / "control" / "operator.jsonl", lambda lines: lines[:-1])
    error = fails(signed_run, keypair[1])
    assert (error.step, error.path, error.line) == (4, "control/operator.jsonl", 2)
    assert error.detail == "missing (sealed 2 lines, found 1)"


def test_reordered_pair_fails_at_step_4(signed_run: Path, keypair: tuple[Any, Any]) -> None:
    rewrite_lines(signed_run / "events.jsonl", lambda lines: [lines[1], lines[0], *lines[2:]])
    error = fails(signed_run, keypair[1])
    assert (error.step, error.path, error.line) == (4, "events.jsonl", 1)


def test_line_appended_after_sealing_fails_at_step_4(
    signed_run: Path, keypair: tuple[Any, Any]
) -> None:
    writer = ChainWriter(signed_run / JOURNAL, base={"attempt": 1, "actor": "gateway"})
    writer.append("tool_call", path="late.txt")
    writer.close()
    error = fails(signed_run, keypair[1])
    assert (error.step, error.path, error.line) == (4, JOURNAL, 6)
    assert error.detail == "appended after sealing (sealed 5 lines, found 6)"


def test_log_rewritten_as_a_valid_chain_fails_at_step_4(
    signed_run: Path, keypair: tuple[Any, Any]
) -> None:
    (signed_run / "control" / "operator.jsonl").unlink()
    writer = ChainWriter(signed_run / "control" / "operator.jsonl", base={"actor": "mallory"})
    writer.append("dial", n=0)
    writer.append("dial", n=1)
    writer.close()
    error = fails(signed_run, keypair[1])
    assert (error.step, error.path, error.line) == (4, "control/operator.jsonl", 2)
    assert "head hash differs" in error.detail


def test_log_started_after_sealing_fails_at_step_4(
    signed_run: Path, keypair: tuple[Any, Any]
) -> None:
    (signed_run / "attempts" / "2" / "gateway").mkdir(parents=True)
    writer = ChainWriter(signed_run / "attempts" / "2" / "gateway" / "journal.jsonl")
    writer.append("tool_call")
    writer.close()
    error = fails(signed_run, keypair[1])
    assert (error.step, error.path) == (4, "attempts/2/gateway/journal.jsonl")
    assert "does not name" in error.detail


def test_deleted_log_fails_at_step_4(signed_run: Path, keypair: tuple[Any, Any]) -> None:
    (signed_run / "control" / "operator.jsonl").unlink()
    error = fails(signed_run, keypair[1])
    assert (error.step, error.path) == (4, "control/operator.jsonl")


def test_symlinked_log_fails_at_step_4(
    signed_run: Path, keypair: tuple[Any, Any], tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere.jsonl"
    (signed_run / "events.jsonl").rename(outside)
    (signed_run / "events.jsonl").symlink_to(outside)
    error = fails(signed_run, keypair[1])
    assert (error.step, error.path, error.detail) == (4, "events.jsonl", "is a symbolic link")


def test_seal_refuses_a_broken_chain(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    rewrite_lines(run / "events.jsonl", lambda lines: [lines[1], lines[0], *lines[2:]])
    with pytest.raises(ReceiptError) as caught:
        seal_run(run)
    assert (caught.value.step, caught.value.path, caught.value.line) == (4, "events.jsonl", 1)


def test_a_journal_its_judge_verified_is_sealed_with_that_head_and_a_later_change_fails(
    tmp_path: Path,
) -> None:
    """The driver hands the seal the head each attempt's judge verified, instead of a second
    pass: the same seal when the journal is unchanged; a journal changed after judging fails
    verification (the seal holds what was judged, not what is there now)."""
    run = make_run(tmp_path)
    streamed = seal_run(run)
    (journal,) = [log for log in streamed["logs"] if log["path"] == JOURNAL]
    judged = seal_run(run, {JOURNAL: (journal["lines"], journal["head_hash"])})
    assert judged["logs"] == streamed["logs"] and judged["merkle_root"] == streamed["merkle_root"]
    rewrite_lines(run / JOURNAL, lambda lines: lines[:-1])  # after judging, before sealing
    seal = seal_run(run, {JOURNAL: (journal["lines"], journal["head_hash"])})
    receipts.write_receipt(run, receipt_for(seal, "t"))
    write_seal(run, seal)
    error = fails(run, None)
    assert (error.step, error.path) == (4, JOURNAL)
    (run / JOURNAL).unlink()
    (run / JOURNAL).symlink_to(run / "events.jsonl")
    with pytest.raises(
        ReceiptError, match="symbolic link"
    ):  # a judged log is still checked in place
        seal_run(run, {JOURNAL: (journal["lines"], journal["head_hash"])})


def test_hostile_seal_path_is_refused_at_step_1(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    issue(run, None, [])
    path = run / "receipts" / "seal.json"
    doc = json.loads(path.read_text())
    doc["seal"]["logs"].insert(0, {"path": "../../etc/passwd", "lines": 0, "head_hash": "0" * 64})
    path.write_text(json.dumps(doc))
    error = fails(run, None)
    assert error.step == 1
    assert "'../../etc/passwd' is not a log name assure writes" in error.detail


# Merkle root -----------------------------------------------------------------------------


def test_merkle_root_is_rfc6962_over_sorted_leaves() -> None:
    def leaf(path: str, head: str) -> bytes:
        return hashlib.sha256(b"\x00" + rfc8785.dumps([path, head])).digest()

    def node(a: bytes, b: bytes) -> bytes:
        return hashlib.sha256(b"\x01" + a + b).digest()

    a, b, c = ("a", "1" * 64), ("b", "2" * 64), ("c", "3" * 64)
    assert merkle_root([]) == hashlib.sha256(b"").hexdigest()
    assert merkle_root([a]) == leaf(*a).hex()
    assert merkle_root([c, a, b]) == node(node(leaf(*a), leaf(*b)), leaf(*c)).hex()


def test_wrong_merkle_root_fails_at_step_5(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    issue(run, None, [])
    path = run / "receipts" / "seal.json"
    doc = json.loads(path.read_text())
    doc["seal"]["merkle_root"] = "f" * 64
    path.write_text(json.dumps(doc))
    error = fails(run, None)
    assert (error.step, error.path) == (5, "receipts/seal.json")


# Hostile task ids ------------------------------------------------------------------------

HOSTILE = [
    "../../etc/x",
    "a\nb",
    "x" * 5000,
    "/abs/path",
    "..",
    ".",
    "seal",
    "seal.json",
    "tâche-ü\u202e",
    "\x00nul",
]


def test_hostile_task_ids_stay_inside_receipts(tmp_path: Path, keypair: tuple[Any, Any]) -> None:
    run = make_run(tmp_path)
    paths = issue(run, keypair[0], HOSTILE)
    folder = (run / "receipts").resolve()
    assert len({p.name for p in paths}) == len(HOSTILE)
    for task_id, path in zip(HOSTILE, paths, strict=False):
        assert path.resolve().parent == folder
        assert path.name != "seal.json" and not path.name.startswith(".")
        assert len(path.name) <= layout.SLUG_MAX + 1 + 12 + 5
        assert json.loads(path.read_text())["task"]["id"] == task_id
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [*(p.name for p in paths), "seal.json"]
    )
    assert not (tmp_path / "etc").exists()
    assert len(receipt_verify.verify_run(run, keypair[1]).receipts) == len(HOSTILE)


def test_receipt_filename_is_a_readable_slug_and_a_digest() -> None:
    assert (
        layout.receipt_filename("../../etc/x")
        == "etc-x-" + hashlib.sha256(b"../../etc/x").hexdigest()[:12] + ".json"
    )
    assert (
        layout.receipt_filename("..") == "task-" + hashlib.sha256(b"..").hexdigest()[:12] + ".json"
    )
    assert layout.receipt_filename("Task-A") != layout.receipt_filename("task-a")


# RFC 8785 --------------------------------------------------------------------------------


def test_floats_and_unicode_sign_and_verify_over_rfc8785(
    tmp_path: Path, keypair: tuple[Any, Any]
) -> None:
    run = make_run(tmp_path)
    claim = {
        "metric": "latency",
        "value": 12.5,
        "tiny": 1e-7,
        "huge": 1.5e21,
        "neg_zero": -0.0,
        "unit": "µs",
        "emoji": "✓ 😀",
    }
    paths = issue(run, keypair[0], ["tâche-1"], claim=claim, reason="réponse confirmée — 100 %")
    record = json.loads(paths[0].read_text())
    body = {k: v for k, v in record.items() if k != "signature"}
    import base64

    keypair[1].verify(base64.b64decode(record["signature"]["value"]), rfc8785.dumps(body))
    assert b'"huge":1.5e+21' in rfc8785.dumps(body) and b'"neg_zero":0' in rfc8785.dumps(body)
    receipt_verify.verify_run(run, keypair[1])


def test_key_order_and_layout_in_the_file_do_not_matter(
    signed_run: Path, keypair: tuple[Any, Any]
) -> None:
    def reverse(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: reverse(obj[k]) for k in reversed(list(obj))}
        if isinstance(obj, list):
            return [reverse(v) for v in obj]
        return obj

    for path in (signed_run / "receipts").iterdir():
        doc = json.loads(path.read_text())
        path.write_text(json.dumps(reverse(doc), ensure_ascii=False, indent=None))
    receipt_verify.verify_run(signed_run, keypair[1])


# CLI -------------------------------------------------------------------------------------


def test_cli_keys_generate_and_receipts_verify(tmp_path: Path) -> None:
    from assure.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["keys", "generate", "--dir", str(tmp_path / "keys")])
    assert result.exit_code == 0, result.output
    private_path, public_path = (
        tmp_path / "keys" / keys.PRIVATE_NAME,
        tmp_path / "keys" / keys.PUBLIC_NAME,
    )
    public = keys.load_public(public_path)
    assert keys.key_id(public) in result.output

    again = runner.invoke(app, ["keys", "generate", "--dir", str(tmp_path / "keys")])
    assert again.exit_code == 1
    assert "refusing to overwrite" in again.output

    run = make_run(tmp_path)
    issue(run, keys.load_private(private_path), ["task-1", "task-2"])
    ok = runner.invoke(
        app, ["receipts", "verify", str(run), "--public-key", str(public_path), "--json"]
    )
    assert ok.exit_code == 0, ok.output
    report = json.loads(ok.stdout)
    assert (
        report["verified"] is True
        and report["key_id"] == keys.key_id(public)
        and report["signatures"] == "passed"
    )
    assert [s["outcome"] for s in report["steps"]] == ["passed"] * 6 + [
        "NOT-RUN"
    ]  # no changeset in these receipts

    table = runner.invoke(app, ["receipts", "verify", str(run), "--public-key", str(public_path)])
    assert table.exit_code == 0, table.output
    assert "verified" in table.output

    keyless = runner.invoke(app, ["receipts", "verify", str(run), "--json"])
    assert keyless.exit_code == 0, keyless.output
    assert json.loads(keyless.stdout)["signatures"] == "NOT-RUN"

    rewrite_lines(run / JOURNAL, lambda lines: lines[:-1])
    bad = runner.invoke(app, ["receipts", "verify", str(run), "--public-key", str(public_path)])
    assert bad.exit_code == 1
    assert "step 4 (sealed logs verify, same lines and head) failed" in bad.output
    assert JOURNAL in bad.output

    bad_json = runner.invoke(
        app, ["receipts", "verify", str(run), "--public-key", str(public_path), "--json"]
    )
    assert bad_json.exit_code == 1
    failure = json.loads(bad_json.stdout)
    assert failure == {
        "verified": False,
        "step": 4,
        "step_name": receipt_format.STEPS[4],
        "path": JOURNAL,
        "line": 5,
        "message": "missing (sealed 5 lines, found 4)",
    }
