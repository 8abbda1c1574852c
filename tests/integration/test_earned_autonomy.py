"""Earned autonomy for real (issue 28): one agent on the engine earns `commit` over verified,
receipted runs of one contract, loses it on a breach so that its next promotion is denied, and
a forged receipt earns nothing: the conformance row `earned_autonomy`, alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ASSURE = [sys.executable, "-m", "assure.cli"]


def test_an_agent_earns_commit_and_loses_it_on_a_breach(tmp_path, images, backend):
    done = subprocess.run(
        ASSURE + ["conformance", "--out", str(tmp_path / "out"), "--only", "earned_autonomy"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ,
    )
    (folder,) = (tmp_path / "out").iterdir()
    row = json.loads((folder / "packet.json").read_text())["obligations"]["earned_autonomy"]
    assert row["status"] == "PASS", (row, done.stderr[-2000:])  # --only: the other rows NOT-RUN
    evidence = row["evidence"]
    assert evidence["states"] == ["proposed", "proposed", "committed", "quarantined", "proposed"]
    assert [(e["from"], e["to"]) for e in evidence["events"]] == [(0, 1), (1, 0)]
    assert evidence["forged"]["outcome"] == "unverified"
