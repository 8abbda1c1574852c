"""Hardening observed from inside a real agent container, deadlines, and container changes."""

import hashlib
import json

from assure.records.store import read_json

from .conftest import findings


def agent_output(result):
    return json.loads(
        (result.run_dir / "attempts" / "1" / "agent.log").read_text().strip().splitlines()[-1]
    )


def test_hardening_seen_from_inside(run):
    result = run("probe")
    assert result.verdict == "pass", result.report
    seen = agent_output(result)
    assert seen["interfaces"] == ["lo"]
    assert seen["cap_eff"] == "0000000000000000" and seen["cap_bnd"] == "0000000000000000"
    assert seen["uid"] != 0 and seen["gid"] != 0
    assert seen["no_new_privs"] == "1"
    assert seen["root_write"] == "EROFS"
    assert seen["socket_dir_write"] == "EROFS"
    assert seen["tmp_write"] == "written"
    assert seen["mknod"] == "EPERM"
    assert seen["docker_sock"] is False
    assert seen["socket_present"] is True
    assert set(seen["devices"]) <= {
        "console",
        "core",
        "fd",
        "full",
        "mqueue",
        "null",
        "ptmx",
        "pts",
        "random",
        "shm",
        "stderr",
        "stdin",
        "stdout",
        "tty",
        "urandom",
        "zero",
    }
    observed = read_json(result.run_dir / "attempts" / "1" / "container.json")["observed"]
    assert observed["network"] == "none"


def test_deadline_kills_the_agent(run):
    result = run("sleeper")
    attempt = result.report["attempts"][0]
    assert attempt["timed_out"] is True
    assert attempt["exit_code"] != 0
    assert result.verdict == "fail"
    assert findings(result)["assertion_failed"] == ["exit_code: 0"]
    assert attempt["timings"]["run"] < 3 + 3 + 5  # deadline + SIGTERM grace + slack


def test_container_changes_outside_the_workspace_are_breaches(run):
    result = run("container-write")
    assert result.verdict == "breach"
    got = findings(result)
    assert got["container_changed"] == ["/home/agent/link", "/home/agent/planted"]
    facts = read_json(result.run_dir / "attempts" / "1" / "container.json")
    assert facts["fs_changes_source"] == "writable layer"
    changes = {c["path"]: c for c in facts["fs_changes"]}
    assert changes["/home/agent/planted"]["sha256"] == hashlib.sha256(b"planted\n").hexdigest()
    assert changes["/home/agent/link"]["target"] == "/etc/passwd"


def test_docker_diff_fallback_finds_the_same_changes(run, backend, monkeypatch):
    """Where the writable layer cannot be read (remote engine, not root), `docker diff` is used."""
    monkeypatch.setattr(backend, "writable_layer", lambda cid: None)
    result = run("container-write")
    facts = read_json(result.run_dir / "attempts" / "1" / "container.json")
    assert facts["fs_changes_source"] == "docker diff"
    assert findings(result)["container_changed"] == ["/home/agent/link", "/home/agent/planted"]
    changes = {c["path"]: c for c in facts["fs_changes"]}
    assert changes["/home/agent/planted"]["sha256"] == hashlib.sha256(b"planted\n").hexdigest()
    assert changes["/home/agent/link"]["target"] == "/etc/passwd"
