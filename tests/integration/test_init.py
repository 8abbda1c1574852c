"""`assure init` as a new user meets it, on the real engine, with flags and no questions: the
project it writes runs as written, and its first run passes, for an agent of your own (a real
agent container writing a file and a database row through the gateway) and for a stock agent's
preset on model answers init scripted for the task (Claude Code, the cheaper of the two presets
to run: about 3 s of agent against mini-swe-agent's 20-28 s, whose litellm import is slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ASSURE = [sys.executable, "-m", "assure.cli"]


@pytest.mark.parametrize("kind", ["script", "claude-code"])
def test_a_project_from_init_passes_its_first_run(tmp_path: Path, images, kind: str) -> None:
    env = {  # a new user's: init makes their key and trusts it in their own keyring
        **{k: v for k, v in os.environ.items() if k != "ASSURE_RATIFIERS"},
        "XDG_CONFIG_HOME": str(tmp_path / ".config"),
    }
    made = subprocess.run(
        ASSURE + ["init", "first", "--agent", kind, "--database", "notes", "--no-ask"],
        cwd=tmp_path,
        capture_output=True,
        env=env,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    folder = tmp_path / "first"
    checked = subprocess.run(
        ASSURE + ["validate", "spec.yaml", "suite.yaml"],
        cwd=folder,
        capture_output=True,
        env=env,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stderr
    ran = subprocess.run(
        ASSURE + ["run", "spec.yaml", "--json"],
        cwd=folder,
        capture_output=True,
        env=env,
        text=True,
        timeout=900,  # a preset's first run may build its derived image (cached by content)
    )
    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout)
    assert report["verdict"] == "pass", report
    passed = [
        f["subject"] for f in report["attempts"][0]["findings"] if f["kind"] == "assertion_passed"
    ]
    assert "journal_has: tool=db.execute, decision=allow" in passed, passed
    assert (
        "journal_has: tool=fs.write, decision=allow, path=out/hello.txt"
        if kind == "script"
        else "journal_has: event=model_call"
    ) in passed, passed
    assert (folder / "workspace" / "out").is_dir() and not (
        folder / "workspace" / "out" / "hello.txt"
    ).exists()  # the fixture is untouched
