"""Spec loading: defaults from the schema, every problem as file:line: field: message."""

import dataclasses
import json
from pathlib import Path

import pytest

from assure import presets, spec
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
    assert loaded.limits == spec.Limits(
        wall_seconds=120.0,
        memory="512m",
        tmpfs="64m",
        disk="1g",
        inodes=100000,
        cpus=1.0,
        pids=128,
        nofile=1024,
        tool_calls=1000,
        tokens=presets.DEFAULT_TOKENS,  # no preset: the general default budget (presets.py)
    )
    assert loaded.sandbox == spec.Sandbox(user="auto", runtime="runc", read_only_root=True)
    assert loaded.agent.image == "assure-agent"
    assert loaded.hostile is False
    assert loaded.workspace.fixture == (tmp_path / "ws").resolve()
    assert loaded.to_json()["limits"]["pids"] == 128


def test_sizes_are_parsed_once_at_load_and_never_written(tmp_path):
    loaded = spec.load(write(tmp_path, MINIMAL + "limits: {memory: 3g, tmpfs: 640k, disk: 49m}\n"))
    lim = loaded.limits
    assert (lim.memory_bytes, lim.tmpfs_bytes, lim.disk_bytes) == (
        3 * 2**30,
        640 * 2**10,
        49 * 2**20,
    )
    written = loaded.to_json()["limits"]
    assert (written["memory"], written["tmpfs"], written["disk"]) == ("3g", "640k", "49m")
    assert not {"memory_bytes", "tmpfs_bytes", "disk_bytes"} & set(written)
    smaller = dataclasses.replace(lim, memory="1024m")  # derived again, and never compared
    assert smaller.memory_bytes == 2**30 and smaller != lim
    assert dataclasses.replace(smaller, memory="3g") == lim
    for bad in ("64x", "0m", "1.5g", "m"):
        path = write(tmp_path, MINIMAL + f"limits: {{memory: {bad!r}}}\n")
        with pytest.raises(SpecError) as info:
            spec.load(path)
        assert info.value.problems == [
            f"{path}:9: limits.memory: {bad!r} is not allowed here (a size: a whole number then k,"
            " m or g (KiB, MiB, GiB), as 64m)"
        ]
        assert info.value.fix
        with pytest.raises(ValueError):
            spec.parse_size(bad)


def test_unknown_key_is_reported_at_its_line_with_allowed_fields(tmp_path):
    path = write(tmp_path, MINIMAL.replace("agent:\n", "agent:\n  imgae: x\n"))
    assert problems(path) == [
        f"{path}:4: agent.imgae: unknown field; allowed here: command, env, files, image, install,"
        " preset"
    ]


def test_every_problem_is_reported_at_once(tmp_path):
    text = MINIMAL.replace("name: demo", "name: 'bad name'").replace(
        "assertions: []", "assertions:\n  - {}\nlimits: {pids: 2}"
    )
    path = write(tmp_path, text)
    got = problems(path)
    assert (
        f"{path}:2: name: 'bad name' is not allowed here (Short identifier, used in run ids.)"
        in got
    )
    assert (
        f"{path}:8: assertions[0]: an assertion has exactly one kind, e.g. `- file_exists:"
        " out/result.txt`" in got
    )
    assert f"{path}:9: limits.pids: 2 is less than the minimum of 8" in got
    assert len(got) == 3


def test_duplicate_keys_are_errors(tmp_path):
    path = write(tmp_path, MINIMAL + "expect: fail\n")
    assert problems(path) == [f"{path}:9: expect: duplicate key"]


def test_paths_escaping_the_workspace_are_rejected(tmp_path):
    path = write(
        tmp_path, MINIMAL.replace("  fixture: ws", "  fixture: ws\n  writable: ['../x', '/etc/**']")
    )
    got = problems(path)
    assert [p.split(": ", 1)[1].split(":")[0] for p in got] == [
        "workspace.writable[0]",
        "workspace.writable[1]",
    ]


def test_missing_fixture_names_the_field_and_path(tmp_path):
    path = write(tmp_path, MINIMAL.replace("fixture: ws", "fixture: nowhere"))
    assert problems(path) == [
        f"{path}:6: workspace.fixture: no such folder: {tmp_path.resolve() / 'nowhere'}"
    ]


def test_reserved_env_names_and_root_user_are_rejected(tmp_path):
    text = (
        MINIMAL.replace("agent:\n", "agent:\n  env: {ASSURE_GATEWAY_SOCKET: /evil}\n")
        + "sandbox: {user: '0:0'}\n"
    )
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
    assert problems(small) == [
        f"{small}:9: limits.disk: a workspace filesystem with limits.inodes 100000 needs"
        " limits.disk 49m or more, not 4m (at least 8m, and twice the inode tables: 100000 x 256"
        " bytes)"
    ]
    crowded = write(tmp_path, MINIMAL + "limits:\n  disk: 16m\n  inodes: 40000\n")
    (problem,) = problems(crowded)
    assert problem.startswith(
        f"{crowded}:10: limits.disk: a workspace filesystem with limits.inodes 40000 needs"
        " limits.disk 20m or more, not 16m"
    )
    few = write(tmp_path, MINIMAL + "limits: {disk: 4m, inodes: 1024}\n")
    assert problems(few) == [
        f"{few}:9: limits.disk: a workspace filesystem with limits.inodes 1024 needs limits.disk 8m"
        " or more, not 4m (at least 8m, and twice the inode tables: 1024 x 256 bytes)"
    ]
    assert (
        spec.load(write(tmp_path, MINIMAL + "limits: {disk: 49m}\n")).limits.disk == "49m"
    )  # the size the first message named passes
    assert (
        spec.load(write(tmp_path, MINIMAL + "limits: {disk: 16m, inodes: 20000}\n")).limits.inodes
        == 20000
    )


FULL = MINIMAL.replace(
    "assertions: []\n",
    """\
description: every block given
assertions:
  - exit_code: 0
  - command: {run: [python3, -m, pytest]}
databases:
  - {name: shop, fixture: shop.sql, mode: live, rollback: undo.sql}
limits: {tokens: 5000, cost: 2}
contract: {id: c, proposed_by: alice, ratified_by: bob, scope: ["fs:**"], autonomy_ceiling: commit, expires_at: "2030-01-01T00:00:00Z"}
autonomy:
  dial: propose
  human_gates: [{id: g, scope: "fs:**", approved_by: carol, expires_at: "2030-01-01T00:00:00Z"}]
egress: {allow: ["example.com:443"]}
alerts: {webhook: "https://hooks.example/x"}
promote: {target: out}
model: {mode: scripted, script: answers.json, prices: {claude: {input: 3, output: 15}}, allow: {betas: [b1]}}
max_attempts: 3
tasks:
  - {id: first, description: do one}
  - {id: second, assertions: [], contract: {id: c2, proposed_by: dan, scope: ["db:shop"], autonomy_ceiling: propose}, max_attempts: 1, on_breach: retry}
""",  # noqa: E501 -- YAML flow mappings, one a line
)


def full(tmp_path: Path) -> spec.Spec:
    path = write(tmp_path, FULL)
    (tmp_path / "shop.sql").write_text("CREATE TABLE t (x);\n")
    return spec.load(path)


def test_every_field_is_typed_and_no_raw_document_is_kept(tmp_path):
    loaded = full(tmp_path)
    assert not hasattr(loaded, "data")
    assert loaded.contract == spec.Contract(
        id="c",
        proposed_by="alice",
        scope=("fs:**",),
        autonomy_ceiling="commit",
        irreversible_min_trust="irreversible",
        revoked=False,
        ratified_by="bob",
        expires_at="2030-01-01T00:00:00Z",
    )
    assert loaded.autonomy == spec.Autonomy(
        "propose", "commit", (spec.HumanGate("g", "fs:**", "carol", "2030-01-01T00:00:00Z"),)
    )
    assert loaded.egress == spec.Egress(("example.com:443",), "bridge", False)
    assert loaded.alerts == spec.Alerts(webhook="https://hooks.example/x")
    assert loaded.promote == spec.Promote("out")
    assert loaded.model == spec.Model(
        mode="scripted",
        upstream="https://api.anthropic.com",
        allow_http=False,
        key_env="ANTHROPIC_API_KEY",
        script="answers.json",
        prices={"claude": {"input": 3, "output": 15}},
        allow={"betas": ("b1",)},
    )
    assert loaded.databases == (
        spec.Database("shop", (tmp_path / "shop.sql").resolve(), "live", "undo.sql"),
    )
    assert (loaded.limits.tokens, loaded.limits.cost) == (5000, 2.0)
    assert loaded.commands() == (
        spec.Command(("python3", "-m", "pytest"), "assure-agent", 120.0, {}),
    )
    # nothing typed holds a plain dict but the free-form maps (env, prices, allow) and assertions
    for name in (
        "agent",
        "workspace",
        "limits",
        "sandbox",
        "autonomy",
        "alerts",
        "contract",
        "egress",
        "promote",
        "model",
    ):
        assert not isinstance(getattr(loaded, name), dict), name


def test_tasks_are_parsed_once_with_what_they_inherit(tmp_path):
    loaded = full(tmp_path)
    first, second = loaded.tasks
    assert first == spec.Task(
        "first", "do one", loaded.assertions, loaded.contract, 3, "quarantine"
    )
    assert (
        second.assertions == ()
        and second.contract.id == "c2"
        and second.contract.irreversible_min_trust == "irreversible"
    )
    assert (second.max_attempts, second.on_breach) == (1, "retry")
    [main] = spec.load(
        write(tmp_path, MINIMAL.replace("name: demo", "name: demo\ndescription: the goal"))
    ).tasks
    assert main == spec.Task("main", "the goal", (), None, 1, "quarantine")


@pytest.mark.parametrize("which", ["minimal", "full", "benign", "claude-fix-bug-scripted"])
def test_to_json_round_trips(tmp_path, which):
    loaded = {
        "minimal": lambda: spec.load(write(tmp_path, MINIMAL)),
        "full": lambda: full(tmp_path),
    }.get(which, lambda: spec.load(EXAMPLES / f"{which}.yaml"))()
    data = loaded.to_json()
    assert data["_source"] == str(loaded.path) and data["workspace"]["fixture"] == str(
        loaded.workspace.fixture
    )
    assert spec.Spec.from_json(data) == loaded
    assert (
        spec.Spec.from_json(json.loads(json.dumps(data))) == loaded
    )  # as written to and read from spec.json


def test_a_task_spec_round_trips(tmp_path):
    from assure.run.driver import task_spec

    loaded = full(tmp_path)
    for task in loaded.tasks:
        one = task_spec(loaded, task, tmp_path / "base")
        assert (one.assertions, one.contract, one.agent.env["ASSURE_TASK"]) == (
            task.assertions,
            task.contract,
            task.description,
        )
        assert spec.Spec.from_json(one.to_json()) == one
    no_top_contract = dataclasses.replace(
        loaded,
        contract=None,
        tasks=(dataclasses.replace(loaded.tasks[0], contract=None), loaded.tasks[1]),
    )
    assert (
        spec.Spec.from_json(
            task_spec(no_top_contract, no_top_contract.tasks[1], tmp_path).to_json()
        )
        .tasks[0]
        .contract
        is None
    )


def test_a_bad_field_in_a_typed_block_is_reported_at_its_line(tmp_path):
    path = write(
        tmp_path, MINIMAL + "autonomy: {dial: sometimes}\ntasks:\n  - {id: t, max_attempts: 0}\n"
    )
    got = problems(path)
    assert got == [
        f"{path}:9: autonomy.dial: 'sometimes' is not one of: 'propose', 'commit', 'irreversible'",
        f"{path}:11: tasks[0].max_attempts: 0 is less than the minimum of 1",
    ]


def test_an_unquoted_timestamp_says_to_quote_it(tmp_path):
    """YAML reads `expires_at: 2027-01-31T00:00:00Z` as a datetime, which the schema (a string)
    refused as "datetime.datetime(2027, 1, 31, 0, 0, tzinfo=...) is not of type 'string'"."""
    text = (
        MINIMAL + "contract: {id: c, proposed_by: alice, ratified_by: bob, scope: ['fs:**'],"
        " autonomy_ceiling: commit,\n           expires_at: 2027-01-31T00:00:00Z}\nautonomy:\n "
        " human_gates: [{id: g, scope: 'fs:**', approved_by: carol, expires_at: 2026-12-01}]\n"
    )
    path = write(tmp_path, text)
    assert problems(path) == [
        (
            f'{path}:10: contract.expires_at: quote the timestamp ("2027-01-31T00:00:00Z"): YAML'
            " read it as a date"
        ),
        (
            f'{path}:12: autonomy.human_gates[0].expires_at: quote the timestamp ("2026-12-01"):'
            " YAML read it as a date"
        ),
    ]
    quoted = write(
        tmp_path,
        text.replace("2027-01-31T00:00:00Z", '"2027-01-31T00:00:00Z"').replace(
            "2026-12-01}", '"2026-12-01T00:00:00Z"}'
        ),
    )
    assert spec.load(quoted).contract.expires_at == "2027-01-31T00:00:00Z"
