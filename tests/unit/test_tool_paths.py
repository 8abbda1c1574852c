"""The attacker's tool: a call with two workspace paths (`src`, `dst`) must have both checked by
the gate. Before tools declared their path arguments, the gate read only `args["path"]`, so a
copy whose `dst` named a protected test overwrote it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from assure.client import Client, GatewayError
from assure.core.chain import verify_chain
from assure.gateway import tools
from assure.gateway.fspath import normalize


def _copy_to(env: tools.Env, args: dict) -> tools.Outcome:
    data = env.workspace.read(args["src"], env.max_file_bytes)
    dst = normalize(args["dst"])
    env.workspace.write(dst, data, tools.DEFAULT_MODE)
    return tools.Outcome({"copied": True}, {"effect": {"op": "write", "path": dst}})


COPY_TO = tools.Tool(
    "fs.copy_to",
    True,
    {"src": (str, True), "dst": (str, True)},
    _copy_to,
    "Copy a workspace file to another workspace path.",
    paths=("src", "dst"),
)


@pytest.fixture()
def with_copy_to(monkeypatch):
    monkeypatch.setattr(tools, "BY_NAME", {**tools.BY_NAME, COPY_TO.name: COPY_TO})


def _client(gateway) -> Client:
    return Client(gateway.config.socket, connect_timeout=2, timeout=10)


def _last_call(gateway) -> dict:
    return [r for r in verify_chain(gateway.config.journal) if r["event"] == "tool_call"][-1]


def test_a_copy_onto_a_protected_test_is_denied(with_copy_to, start_gateway) -> None:
    gateway = start_gateway()
    workspace = Path(gateway.config.workspace)
    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_x.py").write_text("assert False\n")
    (workspace / "fake.py").write_text("assert True\n")
    with _client(gateway) as client, pytest.raises(GatewayError) as info:
        client.call("fs.copy_to", src="fake.py", dst="./tests//test_x.py")
    assert (info.value.status, info.value.code) == (403, "denied")
    assert (workspace / "tests" / "test_x.py").read_text() == "assert False\n"
    record = _last_call(gateway)
    assert (record["rule"], record["paths"]) == ("protected_path", ["fake.py", "tests/test_x.py"])


def test_a_copy_outside_the_protected_tests_runs(with_copy_to, start_gateway) -> None:
    gateway = start_gateway()
    workspace = Path(gateway.config.workspace)
    (workspace / "a.txt").write_text("x")
    with _client(gateway) as client:
        assert client.call("fs.copy_to", src="a.txt", dst="b.txt")["result"] == {"copied": True}
    assert (workspace / "b.txt").read_text() == "x"


def test_a_path_argument_must_be_a_parameter() -> None:
    with pytest.raises(ValueError, match="dst"):
        dataclasses.replace(COPY_TO, params={"src": (str, True)})


def test_every_path_argument_of_the_shipped_tools_is_declared() -> None:
    """A string argument that names a workspace file is a declared path of its tool."""
    for tool in tools.TOOLS:
        named = {p for p in tool.params if p in ("path", "src", "dst", "source", "target")}
        assert named <= set(tool.paths), tool.name
