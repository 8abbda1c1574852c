"""Spec loading: defaults from the schema, every problem as file:line: field: message."""

from pathlib import Path

import pytest

from assure import spec
from assure.errors import SpecError

EXAMPLES = Path(__file__).resolve().parents[2] / "specs" / "examples"


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "ws").mkdir(exist_ok=True)
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


MINIMAL = """\
version: 1
name: demo
agent:
  command: [sh, -c, "true"]
workspace:
  fixture: ws
assertions: []
expect: pass
"""


def problems(path: Path) -> list[str]:
    with pytest.raises(SpecError) as info:
        spec.load(path)
    return info.value.problems


def test_examples_load():
    for name in ("benign", "escape", "network"):
        loaded = spec.load(EXAMPLES / f"{name}.yaml")
        assert loaded.name == name
        assert loaded.workspace.fixture.is_dir()


def test_defaults_come_from_the_schema(tmp_path):
    loaded = spec.load(write(tmp_path, MINIMAL))
    assert loaded.limits == spec.Limits(wall_seconds=120.0, memory="512m", tmpfs="64m", disk="1g", inodes=100000, cpus=1.0, pids=128, nofile=1024, tool_calls=1000)
    assert loaded.sandbox == spec.Sandbox(user="auto", runtime="runc", read_only_root=True)
    assert loaded.agent.image == "assure-agent"
    assert loaded.hostile is False
    assert loaded.workspace.fixture == (tmp_path / "ws").resolve()
    assert loaded.to_json()["limits"]["pids"] == 128


def test_unknown_key_is_reported_at_its_line_with_allowed_fields(tmp_path):
    path = write(tmp_path, MINIMAL.replace("agent:\n", "agent:\n  imgae: x\n"))
    assert problems(path) == [f"{path}:4: agent.imgae: unknown field; allowed here: command, env, files, image"]


def test_every_problem_is_reported_at_once(tmp_path):
    text = MINIMAL.replace("name: demo", "name: 'bad name'").replace("assertions: []", "assertions:\n  - {}\nlimits: {pids: 2}")
    path = write(tmp_path, text)
    got = problems(path)
    assert f"{path}:2: name: 'bad name' is not allowed here (Short identifier, used in run ids.)" in got
    assert f"{path}:8: assertions[0]: an assertion has exactly one kind, e.g. `- file_exists: out/result.txt`" in got
    assert f"{path}:9: limits.pids: 2 is less than the minimum of 8" in got
    assert len(got) == 3


def test_duplicate_keys_are_errors(tmp_path):
    path = write(tmp_path, MINIMAL + "expect: fail\n")
    assert problems(path) == [f"{path}:9: expect: duplicate key"]


def test_paths_escaping_the_workspace_are_rejected(tmp_path):
    path = write(tmp_path, MINIMAL.replace("  fixture: ws", "  fixture: ws\n  writable: ['../x', '/etc/**']"))
    got = problems(path)
    assert [p.split(": ", 1)[1].split(":")[0] for p in got] == ["workspace.writable[0]", "workspace.writable[1]"]


def test_missing_fixture_names_the_field_and_path(tmp_path):
    path = write(tmp_path, MINIMAL.replace("fixture: ws", "fixture: nowhere"))
    assert problems(path) == [f"{path}:6: workspace.fixture: no such folder: {tmp_path.resolve() / 'nowhere'}"]


def test_reserved_env_names_and_root_user_are_rejected(tmp_path):
    text = MINIMAL.replace("agent:\n", "agent:\n  env: {ASSURE_GATEWAY_SOCKET: /evil}\n") + "sandbox: {user: '0:0'}\n"
    got = problems(write(tmp_path, text))
    assert any("agent.env" in p and "set by assure" in p for p in got)
    assert any("sandbox.user" in p for p in got)


def test_invalid_yaml_names_the_line(tmp_path):
    path = write(tmp_path, "version: 1\nname: [unclosed\n")
    (problem,) = problems(path)
    assert problem.startswith(f"{path}:3: (document): not valid YAML")


def test_parse_size():
    assert spec.parse_size("64m") == 64 * 2**20
    assert spec.parse_size("2g") == 2 * 2**30


def test_a_workspace_filesystem_too_small_or_all_inodes_is_refused_at_its_line(tmp_path):
    small = write(tmp_path, MINIMAL + "limits: {disk: 4m}\n")
    assert problems(small) == [f"{small}:9: limits.disk: 4m is below the smallest workspace filesystem, 8m"]
    crowded = write(tmp_path, MINIMAL + "limits:\n  disk: 16m\n  inodes: 40000\n")
    (problem,) = problems(crowded)
    assert problem.startswith(f"{crowded}:11: limits.inodes: 40000 inodes take 10240000 bytes, more than half of limits.disk")
    assert spec.load(write(tmp_path, MINIMAL + "limits: {disk: 16m, inodes: 20000}\n")).limits.inodes == 20000
