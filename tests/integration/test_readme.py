"""The README's own-agent example works as written: its files, saved as the README says, and
its commands, run as given (`assure contract hash --write`, `assure validate`, `assure run`),
give a passing run whose fix went through the gateway."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.readme import blocks
from tests.unit.test_readme import write_example

from .conftest import run_dirs

BARE = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
}  # a new shell: nothing the README did not set up


def test_the_own_agent_example_runs_as_written(images, tmp_path):
    """In a fresh shell with a bare PATH, in a folder laid out like the checkout (its virtualenv
    there, as `make` left it): the README's set-up block, then its commands, as written."""
    write_example(tmp_path)
    env = {**BARE, "HOME": str(tmp_path / "home")}  # a new user's: no key, no keyring yet
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parents[1])
    (setup,) = [b for b in blocks() if b.mark == "setup"]
    (commands,) = [b for b in blocks() if b.mark == "run"]
    without = subprocess.run(
        ["sh", "-eu", "-c", commands.text],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert without.returncode != 0 and "assure: not found" in without.stderr, (
        without.stderr
    )  # the shell is bare: the set-up is what makes it work
    done = subprocess.run(
        ["sh", "-eu", "-c", setup.text + commands.text],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS" in done.stdout and "as expected" in done.stdout, done.stdout
    (run_dir,) = run_dirs(tmp_path / ".assure" / "runs")
    report = json.loads((run_dir / "report.json").read_text())
    assert report["verdict"] == "pass"
    kinds = {f["kind"] for f in report["attempts"][0]["findings"]}
    assert kinds <= {"assertion_passed", "attributed", "info"} and "assertion_passed" in kinds, (
        kinds
    )
    assert (run_dir / "attempts" / "1" / "workspace" / "src" / "calc.py").read_text().count(
        "return a + b"
    ) == 1
    assert (
        run_dir / "attempts" / "1" / "workspace" / "out" / "notes.txt"
    ).read_text() == "add() returns a + b\n"
