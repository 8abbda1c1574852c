"""The conformance packet from recorded results: built, signed, verified offline; a tampered
packet, a foreign key and a reasonless NOT-RUN all fail; a missing row is NOT-RUN with a reason."""

from __future__ import annotations

import copy
import json

import pytest

from assure.records import conformance_packet as cp
from assure.records import keys
from assure.records.conformance_packet import Result


@pytest.fixture
def keypair(tmp_path):
    private, public = keys.generate_keypair(tmp_path / "k")
    return keys.load_private(private), keys.load_public(public)


def recorded() -> list[Result]:
    """Results as the scenarios record them; `chaos_signed_aar` is left out on purpose."""
    out = [
        Result.judged(oid, [("it held", True)], spec=f"{oid}.yaml", seconds=1.5)
        for oid in cp.OBLIGATIONS
        if oid != "chaos_signed_aar"
    ]
    out[1] = Result.judged(
        out[1].id, [("the commit was blocked", False), ("the verdict is fail", True)]
    )
    out[2] = Result.not_run(out[2].id, "the scenario could not run: RuntimeError: no engine")
    out[3].evidence = {"measured": {"effects_under_one_key": 1}}
    return out


TRACE = {
    "journal": "x/journal.jsonl",
    "seq": 3,
    "tool": "fs.write",
    "scope": "fs:src/calc.py",
    "decision": "allow",
    "rule": "autonomy",
    "reason": "effective autonomy 1 >= required 0",
    "operator_dial": 2,
    "autonomy_ceiling": 1,
    "verifier_trust": 1,
    "min(dial, ceiling, trust)": 1,
    "effective_autonomy": 1,
    "required_trust": 0,
    "halted": False,
}


def packet(results: list[Result]) -> dict:
    return cp.build(
        results,
        created_at="2026-12-01T11:40:00Z",
        machine={"hostname": "h"},
        figures={"effects_under_duplicate_key": 1},
        gate_trace={"allow": TRACE, "deny": {**TRACE, "decision": "deny", "rule": "operator_halt"}},
        receipt_chain={"verified": True},
    )


def test_a_signed_packet_verifies_and_keeps_every_status(keypair):
    private, public = keypair
    signed = cp.sign(packet(recorded()), private)
    cp.verify(json.loads(json.dumps(signed)), public)  # as read back from disk
    statuses = {oid: ob["status"] for oid, ob in signed["obligations"].items()}
    assert list(statuses) == list(cp.OBLIGATIONS)
    assert statuses["chaos_kill_resume"] == "PASS"
    assert statuses["chaos_lying_worker"] == "FAIL"
    assert signed["obligations"]["chaos_lying_worker"]["reason"] == "failed: the commit was blocked"
    assert statuses["chaos_override_bypass"] == "NOT-RUN"


def test_a_missing_row_is_not_run_with_a_reason(keypair):
    signed = cp.sign(packet(recorded()), keypair[0])
    row = signed["obligations"]["chaos_signed_aar"]
    assert row["status"] == "NOT-RUN" and "no scenario result" in row["reason"]
    text = cp.markdown(signed)
    assert "| `chaos_signed_aar` | NOT-RUN |" in text
    assert "min(dial 2, ceiling 1, trust 1) = 1" in text


def test_a_judged_result_without_checks_is_not_a_pass():
    assert Result.judged("chaos_dup_key", []).status == "FAIL"


@pytest.mark.parametrize(
    "tamper",
    [
        lambda p: p["obligations"]["chaos_lying_worker"].update(
            status="PASS", reason=""
        ),  # a FAIL turned into a PASS
        lambda p: p["figures"].update(effects_under_duplicate_key=2),
        lambda p: p["receipt_chain"].update(verified=False),
        lambda p: p.update(created_at="2026-12-02T00:00:00Z"),
    ],
)
def test_a_tampered_packet_fails_verification(keypair, tamper):
    private, public = keypair
    signed = cp.sign(packet(recorded()), private)
    bad = copy.deepcopy(signed)
    tamper(bad)
    with pytest.raises(cp.PacketError, match="does not match the content"):
        cp.verify(bad, public)


def test_another_key_does_not_verify(keypair, tmp_path):
    signed = cp.sign(packet(recorded()), keypair[0])
    _, other = keys.generate_keypair(tmp_path / "other")
    with pytest.raises(cp.PacketError, match="not by"):
        cp.verify(signed, keys.load_public(other))


@pytest.mark.parametrize(
    "breakage, message",
    [
        (
            lambda p: p["obligations"]["chaos_override_bypass"].update(reason=""),
            "reason",
        ),  # NOT-RUN with no reason
        (lambda p: p["obligations"]["chaos_dup_key"].update(status="SKIPPED"), "status"),
        (lambda p: p["obligations"].pop("chaos_dup_key"), "missing"),
        (lambda p: p.pop("gate_trace"), "gate_trace"),
    ],
)
def test_a_packet_of_the_wrong_shape_fails_even_when_signed(keypair, breakage, message):
    private, public = keypair
    doc = packet(recorded())
    breakage(doc)
    with pytest.raises(cp.PacketError, match=message):
        cp.verify(cp.sign(doc, private), public)


def test_an_unsigned_packet_fails(keypair):
    with pytest.raises(cp.PacketError, match="signature"):
        cp.verify(packet(recorded()), keypair[1])


@pytest.mark.parametrize("own_key", [False, True])
def test_conformance_with_its_default_relative_out_stages_paths_a_scenario_can_read(
    tmp_path, monkeypatch, own_key
):
    """`assure conformance` without --out (`.assure/conformance`, relative) once gave every row
    NOT-RUN: each scenario's `assure run` runs with its scratch folder as cwd, and was passed a
    spec path and a key relative to the caller's cwd instead."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from assure.ops import conformance
    from assure.records.conformance_packet import Result

    def reads_its_staged_spec(bench):
        staged = bench.stage("lying-worker")
        opened = subprocess.run(
            [sys.executable, "-c", "import sys; [open(p).close() for p in sys.argv[1:]]"]
            + [str(staged.spec), str(bench.key)],
            cwd=bench.root,  # as Bench.assure runs each command
            capture_output=True,
            text=True,
        )
        return Result.judged(
            "chaos_lying_worker",
            [("the staged spec and the key open from the scenario's cwd", opened.returncode == 0)],
            spec="lying-worker.yaml",
            evidence={"stderr": opened.stderr[-300:]},
        )

    monkeypatch.setitem(conformance.SCENARIOS, "chaos_lying_worker", reads_its_staged_spec)
    monkeypatch.setattr(conformance, "machine", lambda: {"hostname": "test"})
    monkeypatch.chdir(tmp_path)
    key = None
    if own_key:  # a relative --key, as a user types it
        from assure.records import keys

        keys.generate_keypair(tmp_path / "mine")
        key = Path("mine") / keys.PRIVATE_NAME
    json_path, _, _ = conformance.run(Path(".assure") / "conformance", key, ["chaos_lying_worker"])
    row = json.loads(json_path.read_text())["obligations"]["chaos_lying_worker"]
    assert row["status"] == "PASS", row
    assert json_path.is_absolute() and json_path.is_relative_to(tmp_path)
