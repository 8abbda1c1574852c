"""`assure init` without questions (its flags): the project it writes validates as written, with
the names and paths given; it refuses, writing nothing, a folder that has its files, a bad name
or a glob outside the workspace. (tests/integration/test_init.py runs it for real.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from assure import spec as spec_mod
from assure.errors import AssureError
from assure.ops import init
from assure.run import suite

NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock", "PATH": "/usr/bin:/bin"}


@pytest.fixture(autouse=True)
def own_config(tmp_path: Path, monkeypatch) -> None:
    """init makes the user's key and keyring: here, in a folder of the test's own."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    monkeypatch.delenv("ASSURE_RATIFIERS")  # never the checkout's own keyring


def assure(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "assure.cli", *args],
        cwd=cwd,
        env={**NO_ENGINE, "XDG_CONFIG_HOME": os.environ["XDG_CONFIG_HOME"]},
        capture_output=True,
        text=True,
        timeout=120,
    )


def files_in(folder: Path) -> set[str]:
    """Every file init wrote under `folder`, relative to it."""
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_init_with_flags_writes_a_project_that_validates(tmp_path: Path) -> None:
    made = assure(
        "init",
        "proj",
        "--name",
        "greeter",
        "--writable",
        "notes/**",
        "--protected",
        "src/**",
        "--protected",
        "README.md",
        "--proposed-by",
        "ann@example.org",
        "--ratified-by",
        "bo@example.org",
        cwd=tmp_path,
    )
    assert made.returncode == 0, made.stderr
    folder = tmp_path / "proj"
    assert files_in(folder) == {
        "spec.yaml",
        "suite.yaml",
        "README.md",
        "agent/run.sh",
        "workspace/src/greeting.txt",
        "workspace/notes/.keep",
    }
    text = (folder / "spec.yaml").read_text()
    assert (
        text.startswith("# greeter: written by `assure init`") and text.count("\n#") >= 5
    )  # commented
    loaded = spec_mod.load(folder / "spec.yaml")
    assert (loaded.name, loaded.workspace.writable, loaded.workspace.protected) == (
        "greeter",
        ("notes/**",),
        ("src/**", "README.md"),
    )
    assert (loaded.contract.proposed_by, loaded.contract.ratified_by, loaded.contract.scope) == (
        "ann@example.org",
        "bo@example.org",
        ("fs:notes/**",),
    )
    assert [s.name for s in suite.load(folder / "suite.yaml").specs] == ["greeter"]
    checked = assure("validate", "spec.yaml", "suite.yaml", cwd=folder)
    assert checked.returncode == 0 and checked.stdout.startswith("ok spec.yaml\n"), checked.stderr
    assert "\nok suite.yaml\n" in checked.stdout
    assert "'greeter': ratified by bo@example.org with key ed25519:" in " ".join(
        checked.stdout.split()
    )  # init signed the terms with the user's key, made and trusted for them


def test_init_overwrites_nothing_and_refuses_what_would_not_run(tmp_path: Path) -> None:
    init.create(tmp_path, init.Choices())
    before = (tmp_path / "spec.yaml").read_bytes()
    with pytest.raises(AssureError, match="already there: spec.yaml, suite.yaml, README.md"):
        init.create(tmp_path, init.Choices())
    assert (tmp_path / "spec.yaml").read_bytes() == before
    for choices, where in (
        (init.Choices(name="Not A Name"), "--name"),
        (init.Choices(writable=("../out/**",)), "--writable"),
        (init.Choices(protected=("/etc/**",)), "--protected"),
        (init.Choices(proposed_by="a b: c"), "--proposed-by"),
        (init.Choices(proposed_by="ann", ratified_by="ann"), "--ratified-by"),
        (init.Choices(database="No-Such"), "--database"),
    ):
        with pytest.raises(AssureError) as info:
            init.create(tmp_path / "fresh", choices)
        assert info.value.where == where and info.value.fix
    assert not (tmp_path / "fresh").exists()


def test_the_written_contract_is_ratified_as_the_spec_stands(tmp_path: Path) -> None:
    from assure.run import ratify

    init.create(tmp_path, init.Choices())
    found = ratify.compute(spec_mod.load(tmp_path / "spec.yaml"))
    assert found.changed() == [] and found.carried_hash == found.hash
    assert (
        yaml.safe_load((tmp_path / "spec.yaml").read_text())["contract"]["autonomy_ceiling"]
        == "propose"
    )


def test_init_with_a_database_gives_the_gateway_its_fixture_and_the_contract_its_scope(
    tmp_path: Path,
) -> None:
    init.create(tmp_path, init.Choices(database="notes"))
    init.ratify_as_you(tmp_path / "spec.yaml", "reviewer@localhost")
    loaded = spec_mod.load(tmp_path / "spec.yaml")
    assert [(d.name, d.mode) for d in loaded.databases] == [
        ("notes", "sandbox")
    ] and "db:notes" in loaded.contract.scope
    assert "db.execute db=notes" in (tmp_path / "agent" / "run.sh").read_text()
    assert assure("validate", "spec.yaml", cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("kind", init.PRESET_KINDS)
def test_a_preset_project_runs_the_stock_agent_on_answers_scripted_for_its_task(
    tmp_path: Path, kind: str
) -> None:
    from assure import presets
    from assure.gateway.modelsources import Script

    made = assure("init", "proj", "--agent", kind, "--database", "notes", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    folder = tmp_path / "proj"
    assert files_in(folder) == {
        "spec.yaml",
        "suite.yaml",
        "README.md",
        "model/answers.json",
        "databases/notes.sql",
        "workspace/src/greeting.txt",
        "workspace/out/.keep",
    }  # no agent/run.sh: the preset is the agent
    loaded = spec_mod.load(folder / "spec.yaml")
    assert loaded.agent.preset == kind and kind in presets.PRESETS
    assert loaded.model is not None and loaded.model.mode == "scripted"
    assert "out/hello.txt" in loaded.description  # the task is the agent's prompt
    # the gateway reads the answers as it will serve them; each tool call writes only what the
    # spec allows (out/, and the notes row through the gateway)
    Script(str(folder / "model" / "answers.json"))
    calls = [
        block["input"]
        for message in json.loads((folder / "model" / "answers.json").read_text())
        for block in message["content"]
        if block["type"] == "tool_use"
    ]
    text = json.dumps(calls)
    assert "out/hello.txt" in text and "hello from the agent" in text and "db=notes" in text
    assert "src/" not in text
    readme = (folder / "README.md").read_text()
    assert "mode: anthropic" in readme and "ANTHROPIC_API_KEY" in readme  # how to go real
    checked = assure("validate", "spec.yaml", "suite.yaml", cwd=folder)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_every_kind_init_offers_is_a_preset_or_your_own_script() -> None:
    from assure import presets

    assert init.KINDS[0] == init.SCRIPT and set(init.PRESET_KINDS) <= set(presets.PRESETS)
    for kind in init.PRESET_KINDS:  # answers for each: a kind without them could not pass
        assert init.answers(kind, "out/hello.txt", None)


def test_an_unknown_agent_kind_is_refused_naming_the_kinds_before_anything_is_written(
    tmp_path: Path,
) -> None:
    made = assure("init", "proj", "--agent", "codex", cwd=tmp_path)
    assert made.returncode != 0 and not (tmp_path / "proj").exists()
    said = " ".join(made.stderr.split())
    assert "--agent" in said and "codex" in said
    assert "script, claude-code, mini-swe-agent" in said
    with pytest.raises(AssureError) as info:
        init.create(tmp_path / "fresh", init.Choices(agent="codex"))
    assert info.value.where == "--agent" and not (tmp_path / "fresh").exists()


def test_init_asks_for_what_no_flag_gave(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from assure.cli import app

    (tmp_path / "mine" / "lib").mkdir(parents=True)
    answered = CliRunner().invoke(
        app,
        ["init", str(tmp_path / "proj"), "--ask", "--protected", "lib/**"],
        input=f"pytorch\nmini-swe-agent\n{tmp_path / 'mine'}\nresults/**, logs/**\nnotes\n",
    )
    assert answered.exit_code == 0, answered.output
    assert (
        "no agent kind `pytorch`: one of script, claude-code, mini-swe-agent" in answered.output
    )  # a kind it lacks: asked again
    assert "Paths whose change is a breach" not in answered.output  # --protected gave it
    loaded = spec_mod.load(tmp_path / "proj" / "spec.yaml")
    assert loaded.agent.preset == "mini-swe-agent"
    assert (loaded.workspace.writable, loaded.workspace.protected) == (
        ("results/**", "logs/**"),
        ("lib/**",),
    )
    assert [d.name for d in loaded.databases] == ["notes"]
    assert loaded.workspace.fixture.resolve() == tmp_path / "mine"


def test_init_on_a_workspace_of_your_own_names_it_and_writes_none(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    (mine / "lib").mkdir(parents=True)
    (mine / "lib" / "code.py").write_text("x = 1\n")
    made = assure("init", "proj", "--workspace", "mine", "--protected", "lib/**", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    folder = tmp_path / "proj"
    assert not (folder / "workspace").exists()
    assert 'fixture: "../mine"' in (folder / "spec.yaml").read_text()  # relative: it moves
    assert spec_mod.load(folder / "spec.yaml").workspace.fixture.resolve() == mine
    assert "fs.read" not in (folder / "agent" / "run.sh").read_text()  # no greeting.txt there
    assert assure("validate", "spec.yaml", cwd=folder).returncode == 0
    refused = assure("init", "other", "--workspace", "mine/lib/code.py", cwd=tmp_path)
    assert refused.returncode != 0 and "--workspace" in refused.stderr
    assert not (tmp_path / "other").exists()
