"""The README's spec and suite examples are valid as written (issue 13): every yaml block is
marked with what it is, the annotated reference is valid but for its `...`/`<...>`
placeholders, and the suite and own-agent files pass `assure validate`. Running the own-agent
example is tests/integration/test_readme.py."""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from assure import spec as spec_mod
from tests.contracts import ratify_in_place
from tests.readme import blocks

ROOT = Path(__file__).resolve().parents[2]


def _placeholder(value: Any) -> bool:
    if isinstance(value, str):
        return "..." in value or (value.startswith("<") and value.endswith(">"))
    if isinstance(value, dict):
        return bool(value) and all(_placeholder(k) for k in value)
    if isinstance(value, list):
        return bool(value) and all(_placeholder(v) for v in value)
    return False


def _not_placeholders(data: Any, schema: dict[str, Any]) -> list[str]:
    """Schema problems of `data` other than at a placeholder (for an unknown key: other than a
    placeholder key)."""
    out = []
    for error in jsonschema.Draft202012Validator(schema).iter_errors(data):
        at = ".".join(str(p) for p in error.absolute_path)
        if error.validator == "additionalProperties":
            extra = [
                k
                for k in error.instance
                if k not in error.schema.get("properties", {}) and not _placeholder(k)
            ]
            out += [f"{at}.{k}: unknown field" for k in extra]
        elif not _placeholder(error.instance):
            out.append(f"{at}: {error.message}")
    return out


def test_every_yaml_example_says_what_it_is():
    yaml_blocks = [b for b in blocks() if b.language == "yaml"]
    unmarked = [b.line for b in yaml_blocks if not (b.file or b.mark in ("reference", "suite"))]
    assert yaml_blocks and unmarked == [], (
        f"README.md lines {unmarked}: mark the block file=PATH, reference or suite"
    )
    for b in blocks():
        if b.mark:
            assert b.file or b.mark in ("reference", "suite", "run", "setup", "host"), (
                b.line,
                b.mark,
            )


def test_every_command_block_is_run_by_the_readme_test_or_marked_host():
    """`sh setup` and `sh run` are run by tests/integration/test_readme.py in a fresh shell;
    `sh host` sets up a machine (make, a Ray node, gVisor as root), which no test can do in a
    scratch clone. An unmarked block would be commands a reader types that nothing runs."""
    unmarked = [
        b.line
        for b in blocks()
        if b.language == "sh" and b.mark not in ("setup", "run", "host") and not b.file
    ]
    assert unmarked == [], f"README.md lines {unmarked}: mark the sh block setup, run or host"


def test_the_readme_says_what_a_ratification_proves_and_does_not():
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    start = text.index("assure contract ratify SPEC --as NAME")
    section = text[start : start + 3000]
    assert "What it proves:" in section and "What it does not prove:" in section


def test_the_spec_reference_is_valid_but_for_its_placeholders():
    (reference,) = [b for b in blocks() if b.mark == "reference"]
    data = yaml.safe_load(reference.text)
    assert _not_placeholders(data, spec_mod.schema()) == []
    contract = data["contract"]
    assert isinstance(contract["expires_at"], str) and isinstance(
        data["autonomy"]["human_gates"][0]["expires_at"], str
    )
    datetime.datetime.fromisoformat(contract["expires_at"])  # quoted, and still a timestamp


def test_the_placeholder_rule_catches_what_the_readme_got_wrong():
    """The check above fails on the trap it is for (an unquoted timestamp) and on a misspelt
    field."""
    (reference,) = [b for b in blocks() if b.mark == "reference"]
    wrong = reference.text.replace(
        'expires_at: "2027-01-31T00:00:00Z"', "expires_at: 2027-01-31T00:00:00Z"
    ).replace("  wall_seconds: 120", "  wall_secs: 120")
    assert wrong != reference.text
    got = _not_placeholders(yaml.safe_load(wrong), spec_mod.schema())
    assert any(p.startswith("contract.expires_at: datetime.datetime(2027, 1, 31") for p in got), got
    assert "limits.wall_secs: unknown field" in got


def _validate(*paths: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "assure.cli", "validate", *map(str, paths)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"},
    )


def test_the_suite_example_validates_where_it_would_sit(tmp_path):
    """Written beside suites/containment and ../specs, as the example's relative paths expect."""
    (suite,) = [b for b in blocks() if b.mark == "suite"]
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "containment").symlink_to(ROOT / "suites" / "containment")
    (tmp_path / "specs").symlink_to(ROOT / "specs")
    path = tmp_path / "suites" / "readme.yaml"
    path.write_text(suite.text)
    done = _validate(path, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def write_example(tmp_path: Path) -> list[Path]:
    """The own-agent example's files, in a folder laid out like a checkout (with the calc
    fixture)."""
    shutil.copytree(
        ROOT / "fixtures" / "workspaces" / "calc", tmp_path / "fixtures" / "workspaces" / "calc"
    )
    written = []
    for b in blocks():
        if b.file:
            target = tmp_path / b.file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(b.text)
            written.append(target)
    return written


def test_the_own_agent_spec_validates_as_written(tmp_path):
    written = write_example(tmp_path)
    specs = [p for p in written if p.suffix == ".yaml"]
    assert [p.name for p in specs] == ["my-agent.yaml"] and (
        tmp_path / "my-agent" / "run.sh"
    ) in written
    unhashed = _validate(*specs, cwd=tmp_path)
    assert (
        unhashed.returncode == 1 and "contract hash" in unhashed.stderr
    )  # what the README's first command fixes
    ratify_in_place(specs[0])
    done = _validate(*specs, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    loaded = spec_mod.load(specs[0])
    assert loaded.contract.expires_at == "2030-01-01T00:00:00Z"


def test_the_proposal_folder_the_readme_names_is_the_one_a_run_writes():
    from assure.records import layout

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"`{layout.task_slug('main')}/`" in text  # once it said proposals/<task>/
