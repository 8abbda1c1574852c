"""`assure init` without questions (its flags): the project it writes validates as written, with
the names and paths given; it refuses, writing nothing, a folder that has its files, a bad name
or a glob outside the workspace. (tests/integration/test_init.py runs it for real.)"""

from __future__ import annotations

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
    assert {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} == {
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
