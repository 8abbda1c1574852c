"""`assure conformance` for real: every row of the live-evidence table runs on this machine's
engine, and the packet it writes verifies offline with its public key alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from assure.records import conformance_packet

ASSURE = [sys.executable, "-m", "assure.cli"]


def test_the_live_packet_passes_every_row_and_verifies_with_the_public_key(
    tmp_path, images, backend
):
    done = subprocess.run(
        ASSURE + ["conformance", "--out", str(tmp_path / "out")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        env=os.environ,
    )
    (folder,) = (tmp_path / "out").iterdir()
    packet = json.loads((folder / "packet.json").read_text())
    statuses = {oid: (ob["status"], ob["reason"]) for oid, ob in packet["obligations"].items()}
    assert done.returncode == 0, (statuses, done.stderr[-2000:])
    assert list(statuses) == list(conformance_packet.OBLIGATIONS)
    figures = packet["figures"]
    assert figures["kill_points_resumed"] == ["start", "run", "checks", "verify", "promote"]
    assert figures["effects_under_duplicate_key"] == 1
    assert 0 <= figures["override_latency_ms"] < 5000 and 0 <= figures["breach_to_halt_ms"] < 5000
    trace = packet["gate_trace"]
    assert trace["allow"]["decision"] == "allow" and trace["deny"]["decision"] in (
        "deny",
        "escalate",
    )
    for entry in trace.values():
        assert entry["min(dial, ceiling, trust)"] == min(
            entry["operator_dial"], entry["autonomy_ceiling"], entry["verifier_trust"]
        )
    assert (
        packet["receipt_chain"]["verified"] is True
        and packet["receipt_chain"]["tampered_copy"]["rejected"] is True
    )
    assert "| `chaos_kill_resume` | PASS |" in (folder / "packet.md").read_text()

    public = folder / "packet.pub.pem"
    ok = subprocess.run(
        ASSURE
        + ["conformance", "verify", str(folder / "packet.json"), "--public-key", str(public)],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0 and "12 PASS" in ok.stdout, ok.stdout + ok.stderr
    packet["figures"]["effects_under_duplicate_key"] = 2
    (tmp_path / "tampered.json").write_text(json.dumps(packet))
    bad = subprocess.run(
        ASSURE
        + ["conformance", "verify", str(tmp_path / "tampered.json"), "--public-key", str(public)],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and "does not match" in bad.stdout + bad.stderr
