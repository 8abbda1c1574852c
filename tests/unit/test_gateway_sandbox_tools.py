"""The Inspect sandbox's tools at the gateway (assure/inspect/): gated by what they touch,
journaled with their command bounded, and never an effect the verifier would attribute."""

from __future__ import annotations

import pytest

from assure.client import GatewayError
from assure.gateway import tools
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
    outcome = tools.run(tools.BY_NAME["sandbox.exec"], None, {"argv": argv, "env": {"K": "v"}})  # type: ignore[arg-type]
    shown = outcome.record["sandbox"]
    assert shown["argv"][1].startswith("sha256:")
    assert len(shown["argv"]) == tools.MAX_SHOWN_ITEMS + 1 and shown["argv"][-1] == "(2 more)"
    assert shown["env"] == ["K"]  # names only
    with pytest.raises(tools.ToolError):
        tools.run(tools.BY_NAME["sandbox.exec"], None, {"argv": []})  # type: ignore[arg-type]
