"""What an agent leaves in its workspace never reaches past it through the host's post-run steps
(issue 10, findings 1, 3 and the sparse half of 2). Real runs of the hostile fixture agents."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from .conftest import ROOT, findings, ratified

HOSTILE = str(ROOT / "fixtures" / "agents" / "hostile")
TEST_COMMAND = {"command": {"run": ["python3", "tests/test_calc.py"]}}


def _agent(script: str, *args: str) -> dict:
    return {"command": ["sh", f"/opt/agent/{script}", *args], "files": HOSTILE}


def _receipts(run_dir: Path) -> list[Path]:
    return sorted(p for p in (run_dir / "receipts").glob("*.json") if p.name != "seal.json")


def test_a_symlinked_protected_dir_never_leads_the_host_outside(run, make_spec, tmp_path):
    """The agent swaps protected `tests/` for a link to a host directory: the check copy's
    restore of protected paths must not delete that directory or write into it."""
    host = tmp_path / "host-dir"
    host.mkdir()
    (host / "canary").write_text("host data")
    os.chmod(host, 0o755)
    before = host.stat().st_ino
    spec = make_spec(
        "h-symlink",
        "symlink-tests.sh",
        agent=_agent("symlink-tests.sh", str(host)),
        assertions=[TEST_COMMAND, {"file_contains": {"path": "canary-link", "text": "host"}}],
        expect="breach",
    )
    result = run(spec)
    assert host.stat().st_ino == before, "the host directory was replaced"
    assert sorted(os.listdir(host)) == ["canary"], "the host wrote into the agent's link target"
    assert (host / "canary").read_text() == "host data"
    assert result.verdict == "breach"
    got = findings(result)
    assert "harness_error" not in got
    assert (
        "file_contains: path=canary-link, text=host" in got["assertion_failed"]
    )  # the link is never read through
    assert (
        "command: python3 tests/test_calc.py" in got["assertion_failed"]
    )  # the restored tests fail the unfixed bug
    assert _receipts(result.run_dir)


def test_fifos_and_sockets_are_a_breach_not_an_aborted_run(run, make_spec, tmp_path):
    spec = make_spec(
        "h-special",
        "special-files.sh",
        agent=_agent("special-files.sh"),
        assertions=[TEST_COMMAND],
        expect="breach",
    )
    result = run(spec)
    assert result.verdict == "breach"
    got = findings(result)
    assert "harness_error" not in got
    assert {"fifo", "sock"} <= set(got["unattributed"])
    assert (
        result.run_dir / "attempts" / "1" / "commands.json"
    ).is_file()  # the checks ran, on a copy without them
    assert _receipts(result.run_dir)
    assert any(
        json.loads(p.read_text())["kind"] == "breach"
        for p in (result.run_dir / "alerts").glob("*.json")
    )


def _du_bytes(path: Path) -> int:
    return int(
        subprocess.run(
            ["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True, check=True
        ).stdout.split()[0]
    )


def test_a_huge_sparse_file_is_never_materialized(run, make_spec, tmp_path):
    """1000 MiB (10 TiB where no fsize limit stops it) of holes: the check copy keeps it sparse (the
    check itself measures its copy with du), the run
    directory stays small, and the verdict is breach (a file outside the writable scope)."""
    small = ["sh", "-c", "du -sk .; test $(du -sk . | cut -f1) -lt 65536"]
    spec = make_spec(
        "h-sparse",
        "sparse.sh",
        agent=_agent("sparse.sh"),
        assertions=[{"command": {"run": small}}],
        expect="breach",
    )
    result = run(spec)
    assert result.verdict in ("breach", "fail")
    assert result.verdict == "breach"
    got = findings(result)
    assert "harness_error" not in got
    assert "big" in got["unattributed"]
    assert _du_bytes(result.run_dir) < 64 * 2**20
    commands = json.loads((result.run_dir / "attempts" / "1" / "commands.json").read_text())
    assert commands[0]["exit_code"] == 0, commands[0]  # the check ran, on a copy du measured small
    assert (
        result.run_dir / "attempts" / "1" / "workspace" / "out" / "big"
    ).stat().st_size >= 1000 * 2**20
    assert _receipts(result.run_dir)


# --- every phase is total (issue 10, finding 3 / deliverable 3) -----------------------------


def test_a_crash_in_the_checks_keeps_the_breach_its_alert_and_its_receipt(
    run, make_spec, monkeypatch
):
    """Any exception (not only assure's own) in a phase is a harness error; the breach the
    snapshot found still decides the verdict."""
    from assure.run import checks

    def crash(*_a, **_k):
        raise RuntimeError("injected: the check phase crashed")

    monkeypatch.setitem(checks.RUNNERS, "command", crash)  # what the attempt calls per kind
    spec = make_spec(
        "h-crash",
        "special-files.sh",
        agent=_agent("special-files.sh"),
        assertions=[TEST_COMMAND],
        expect="breach",
    )
    result = run(spec)
    assert result.verdict == "breach"
    got = findings(result)
    assert got["harness_error"] == ["harness"]
    (error,) = [
        f["message"]
        for f in result.report["attempts"][0]["findings"]
        if f["kind"] == "harness_error"
    ]
    assert error == "checks: RuntimeError: injected: the check phase crashed"
    assert "command: python3 tests/test_calc.py" in got["assertion_failed"]  # not run: never a pass
    assert _receipts(result.run_dir)
    assert any(
        json.loads(p.read_text())["kind"] == "breach"
        for p in (result.run_dir / "alerts").glob("*.json")
    )


def test_a_crash_in_promote_is_commit_failed_with_a_harness_error_and_a_receipt(
    run, make_spec, tmp_path, monkeypatch
):
    from assure.run import promote

    def crash(*_a, **_k):
        raise OSError(28, "injected: no space left on device")

    monkeypatch.setattr(promote, "commit", crash)
    target = tmp_path / "target"
    target.mkdir()
    spec = make_spec(
        "h-promote-crash",
        "notes-only.sh",
        contract=ratified(["fs:**"]),
        promote={"target": str(target)},
        assertions=[{"file_exists": "out/notes.txt"}],
    )
    result = run(spec)
    (task,) = result.report["tasks"]
    assert task["state"] == "commit_failed" and "no space left" in task["reason"]
    assert result.verdict == "error"
    assert "promote" in findings(result)["harness_error"]
    assert _receipts(result.run_dir)
    assert any(
        json.loads(p.read_text())["kind"] == "commit_failed"
        for p in (result.run_dir / "alerts").glob("*.json")
    )


def test_ctrl_c_in_a_phase_still_stops_the_run_and_cleans_up(run, make_spec, monkeypatch):
    """KeyboardInterrupt is not swallowed by the total phases (no_leftovers checks the cleanup)."""
    from assure.run.attempt import Attempt

    def interrupted(self, facts):
        raise KeyboardInterrupt

    monkeypatch.setattr(Attempt, "_collect", interrupted)
    spec = make_spec("h-ctrl-c", "notes-only.sh")
    with pytest.raises(KeyboardInterrupt):
        run(spec)


def test_the_agents_code_in_a_check_writes_no_more_than_limits_disk_and_leaves_nothing(
    run, make_spec
):
    """The check container runs the agent's code on a copy of the workspace: that copy is as
    bounded as the workspace, at twice limits.disk (it wrote all 256 MiB to the host's /tmp
    against a 64m limit), and a 2000-level tree the code builds there is removed without a
    harness error (shutil.rmtree raised RecursionError and left the tree on the host)."""
    spec = make_spec(
        "h-check-fill",
        "check-fill.sh",
        agent=_agent("check-fill.sh"),
        assertions=[TEST_COMMAND],
        limits={"wall_seconds": 60, "disk": "64m", "inodes": 16384},
        expect="breach",
    )
    result = run(spec)
    got = findings(result)
    assert "harness_error" not in got, result.report["attempts"][0]["findings"]
    assert result.verdict == "breach"  # the agent wrote src/calc.py itself
    (command,) = json.loads((result.run_dir / "attempts" / "1" / "commands.json").read_text())
    tail = command["output_tail"]
    assert "DEPTH" in tail, tail  # the code ran in the check
    wrote = int(tail.split("WROTE ")[1].split()[0])
    assert "STOPPED 28" in tail and wrote <= 2 * 64 * 2**20, tail  # ENOSPC


def test_a_check_sees_the_post_tree_whatever_the_copy_out_left_behind(run, make_spec):
    """Two hard links to a 10 MiB file fit a 16m disk but not the copy-out's bound: the
    copy-out leaves out/b behind (not checked), and the check, which views the attempt's own
    filesystem, still sees out/b (on a copy, `test ! -e out/b` passed although POST has it)."""
    spec = make_spec(
        "h-hardlinks",
        "hardlinks.sh",
        agent=_agent("hardlinks.sh"),
        assertions=[
            {"file_exists": "out/b"},
            {"command": {"run": ["sh", "-c", "test ! -e out/b"]}},
        ],
        limits={"wall_seconds": 60, "disk": "16m", "inodes": 4096},
        expect="breach",
    )
    result = run(spec)
    got = findings(result)
    assert "harness_error" not in got
    assert "out/b" in got["not_checked"]  # the copy-out's refusal, as before
    assert "command: sh -c test ! -e out/b" in got["assertion_failed"], got
    (command,) = json.loads((result.run_dir / "attempts" / "1" / "commands.json").read_text())
    assert "not_run" not in command and command["exit_code"] == 1, command


def test_a_check_sees_every_hard_link_post_holds(run, make_spec):
    """9000 hard links to an empty file cost one inode on a 4096-inode workspace; copied apart
    they needed 9000, more than a check copy's 8192, and the check was not run. The check's
    view copies nothing: it runs, and sees them all."""
    spec = make_spec(
        "h-links",
        "hardlinks.sh",
        agent=_agent("hardlinks.sh", "many"),
        assertions=[{"command": {"run": ["sh", "-c", "test ! -e out/l8999"]}}],
        limits={"wall_seconds": 60, "disk": "16m", "inodes": 4096},
        expect="breach",
    )
    result = run(spec)
    got = findings(result)
    assert "harness_error" not in got
    (command,) = json.loads((result.run_dir / "attempts" / "1" / "commands.json").read_text())
    assert command["copy"]["skipped_count"] == 0 and "not_run" not in command, command
    assert command["exit_code"] == 1, command  # out/l8999 is there
    assert "command: sh -c test ! -e out/l8999" in got.get("assertion_failed", []), command


def test_overlay_metadata_the_agent_plants_never_shapes_a_checks_view(run, make_spec):
    """The agent leaves whiteouts (0/0 character devices) where the protected test and
    src/calc.py were, and `user.overlay.*` xattrs on tests/ and src/. The check's view of the
    workspace still holds the fixture's test (it runs and fails: calc.py is gone, as in POST)
    and src/ as POST has it (extra.py visible: no xattr made it opaque or redirected it;
    calc.py the device POST lists, never a file)."""
    spec = make_spec(
        "h-overlay-plant",
        "overlay-plant.sh",
        agent=_agent("overlay-plant.sh"),
        assertions=[
            {
                "command": {
                    "run": [
                        "sh",
                        "-c",
                        "ls src; test -f src/calc.py && echo calc-is-a-file;"
                        " test -f tests/test_calc.py && python3 tests/test_calc.py",
                    ]
                }
            }
        ],
        expect="breach",
    )
    result = run(spec)
    attempt = result.run_dir / "attempts" / "1"
    post = {e["path"]: e for e in json.loads((attempt / "post.json").read_text())["entries"]}
    planted = (attempt / "workspace" / "out" / "planted").read_text()
    assert "whiteout-test planted" in planted, planted  # else this test tests nothing
    assert post["tests/test_calc.py"]["kind"] == post["src/calc.py"]["kind"] == "chardev"
    got = findings(result)
    assert "harness_error" not in got, result.report["attempts"][0]["findings"]
    (command,) = json.loads((attempt / "commands.json").read_text())
    tail = command["output_tail"]
    assert "extra.py" in tail and "calc-is-a-file" not in tail, tail
    assert "No module named 'calc'" in tail and command["exit_code"] == 1, tail
