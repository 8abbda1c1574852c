"""The Inspect sandbox's tools at the gateway (assure/inspect/): gated by what they touch,
journaled with their command bounded, and never an effect the verifier would attribute."""

from __future__ import annotations

import dataclasses

import pytest

from assure.client import GatewayError
from assure.core import gate
from assure.gateway import tools
from assure.gateway.config import parse
from assure.gateway.server import serve
from tests.unit.test_gateway_server import client_for, journal


def test_workspace_files_are_fs_paths_to_the_gate_and_the_rest_needs_sandbox_exec(
    start_gateway,
) -> None:
    gateway = start_gateway()  # its contract's scope is fs:** only
    with client_for(gateway) as client:
        allowed = client.call("sandbox.write_file", path="src/a.py", size=1, sha256="ab")
        assert allowed["decision"] == "allow"
        for tool, args, rule in (
            ("sandbox.write_file", {"path": "tests/t.py", "size": 1}, "protected_path"),
            ("sandbox.write_file", {"file": "/tmp/x", "size": 1}, "contract.scope"),
            ("sandbox.exec", {"argv": ["sh", "-c", "true"]}, "contract.scope"),
        ):
            with pytest.raises(GatewayError) as info:
                client.call(tool, **args)
            assert (info.value.status, info.value.code) == (403, "denied")
            record = [r for r in journal(gateway) if r["event"] == "tool_call"][-1]
            assert (record["tool"], record["rule"]) == (tool, rule)
        assert client.call("sandbox.read_file", file="/etc/passwd")["decision"] == "allow"
    [written] = [
        r for r in journal(gateway) if r["event"] == "tool_call" and r["decision"] == "allow"
    ][:1]
    assert written.get("effect") is None  # judged as a direct edit, never attributed to the call
    assert written["sandbox"] == {"path": "src/a.py", "size": 1, "sha256": "ab"}


def test_a_command_is_journaled_bounded() -> None:
    long = "x" * (tools.MAX_SHOWN_CHARS + 1)
    argv = ["printf", long, *["y"] * tools.MAX_SHOWN_ITEMS]
    # a dict for the tool's typed arguments, as the gateway passes the JSON
    outcome = tools.run(tools.BY_NAME["sandbox.exec"], None, {"argv": argv, "env": {"K": "v"}})  # type: ignore[arg-type]
    shown = outcome.record["sandbox"]
    assert shown["argv"][1].startswith("sha256:")
    assert len(shown["argv"]) == tools.MAX_SHOWN_ITEMS + 1 and shown["argv"][-1] == "(2 more)"
    assert shown["env"] == ["K"]  # names only
    with pytest.raises(tools.ToolError):
        # a dict for the tool's typed arguments, as the gateway passes the JSON
        tools.run(tools.BY_NAME["sandbox.exec"], None, {"argv": []})  # type: ignore[arg-type]


def test_an_exec_outcome_is_journaled_once_for_an_allowed_exec_and_refused_otherwise(
    gateway_config,
) -> None:
    """The shim reports what came of a command (sandbox.exec_result): journaled under the
    exec's action_id, uncounted, so it is taken once per allowed exec and for no other id."""
    contract = gate.Contract(
        id="c1",
        proposed_by="alice",
        ratified_by="bob",
        scope=("fs:**", tools.EXEC_SCOPE),
        autonomy_ceiling=gate.COMMIT,
    )
    config = gateway_config()
    config["policy"]["contract"] = dataclasses.asdict(gate.ratify(contract, protected=["tests/**"]))
    gateway = serve(parse(config))
    try:
        _exec_outcome(gateway)
    finally:
        gateway.shutdown()


def _exec_outcome(gateway) -> None:
    outcome = {
        "returncode": 3,
        "timed_out": False,
        "stdout_sha256": "a" * 64,
        "stdout_bytes": 5,
        "stderr_sha256": "b" * 64,
        "stderr_bytes": 0,
        "duration_ms": 12,
    }
    with client_for(gateway) as client:
        action_id = client.call("sandbox.exec", argv=["sh", "-c", "exit 3"])["action_id"]
        client.call("sandbox.exec_result", action_id=action_id, **outcome)
        for bad in ({"action_id": action_id}, {"action_id": "0" * 32}):  # again; never allowed
            with pytest.raises(GatewayError) as info:
                client.call("sandbox.exec_result", **bad)
            assert (info.value.status, info.value.code) == (409, "unknown_action")
        read = client.call("sandbox.read_file", file="/etc/hostname")["action_id"]
        with pytest.raises(GatewayError):  # a read is no command: it has no outcome to report
            client.call("sandbox.exec_result", action_id=read)
        exec2 = client.call("sandbox.exec", argv=["true"])["action_id"]
        with pytest.raises(GatewayError) as info:
            client.call("sandbox.exec_result", action_id=exec2, stdout_sha256="not a digest")
        assert info.value.code == "bad_args"
    records = journal(gateway)
    [result] = [r for r in records if r["event"] == "sandbox_exec_result"]
    assert result["action_id"] == action_id and result["outcome"] == outcome
    calls = [r for r in records if r["event"] == "tool_call"]
    assert [r["tool"] for r in calls] == ["sandbox.exec", "sandbox.read_file", "sandbox.exec"]
