"""`agent.install` and presets: the derived image's tag follows every input (a changed file or
requirement is a new tag, an unchanged one the same), the build context holds the installed
software and never reaches a network, an unbuildable install is refused before the start with
its fix, and a preset expands the same way twice (a run's spec.json reads back unchanged)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
import yaml

from assure import presets
from assure import spec as spec_mod
from assure.run import preflight
from assure.sandbox import install
from assure.sandbox.docker.images import ImageSet
from assure.spec import Install

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "specs" / "examples" / "claude-code.yaml"
IMAGES = ImageSet("assure-base:b", "assure-agent:a", "assure-gateway:g", "assure-egress:e")


class Builder:
    """An engine that records builds (the unit tests need no Docker)."""

    def __init__(self):
        self.images: set[str] = set()
        self.builds: list[tuple[bytes, str, dict[str, str], bool]] = []

    def image_exists(self, tag):
        return tag in self.images

    def build(self, context, tag, buildargs, labels, *, network=False):
        self.builds.append((context, tag, buildargs, network))
        self.images.add(tag)


def variant(tmp_path: Path, change) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["workspace"]["fixture"] = str(ROOT / "fixtures" / "workspaces" / "calc")
    data["model"]["script"] = str(ROOT / "fixtures" / "models" / "claude-code-fix-calc.json")
    change(data)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_the_tag_follows_every_input_and_the_agent_image(tmp_path):
    tool = tmp_path / "tool"
    tool.write_bytes(b"one")
    first = install.tag(Install(binaries=(tool,)), "assure-agent:a")
    assert install.tag(Install(binaries=(tool,)), "assure-agent:a") == first
    assert (
        install.tag(Install(binaries=(tool,)), "assure-agent:b") != first
    )  # a new agent image: rebuilt on it
    tool.write_bytes(b"two")
    assert install.tag(Install(binaries=(tool,)), "assure-agent:a") != first


def test_ensure_builds_once_offline_with_the_binary_executable(tmp_path):
    tool = tmp_path / "tool"
    tool.write_bytes(b"#!/bin/sh\necho hi\n")
    spec = spec_mod.load(
        variant(tmp_path, lambda d: d["agent"].update(install={"binaries": [str(tool)]}))
    )
    engine = Builder()
    tag = install.ensure(spec, engine, IMAGES)
    assert install.ensure(spec, engine, IMAGES) == tag == install.agent_image(spec, IMAGES)
    ((context, built, args, network),) = engine.builds  # the second ensure built nothing
    assert (built, args, network) == (tag, {"AGENT": "assure-agent:a"}, False)
    with tarfile.open(fileobj=io.BytesIO(context)) as tar:
        member = tar.getmember("bin/tool")
        assert member.mode == 0o755 and tar.extractfile(member).read() == tool.read_bytes()
        assert (
            b"COPY --from=build" in tar.extractfile("Dockerfile").read()
        )  # the wheels never reach the final image


def test_a_spec_with_no_install_runs_the_agent_image(tmp_path):
    spec = spec_mod.load(ROOT / "specs" / "examples" / "benign.yaml")
    engine = Builder()
    assert (
        spec.agent.install is None
        and install.ensure(spec, engine, IMAGES) == "assure-agent:a"
        and not engine.builds
    )


def test_an_unbuildable_install_is_refused_before_the_start_with_its_fix(tmp_path):
    def change(data):
        data["agent"]["install"] = {
            "pip": ["requests", "idna==3.7 --hash=sha256:" + "0" * 64],
            "wheels": ["missing.whl"],
        }
        data["agent"]["image"] = "debian:bookworm"

    found = [p for p in preflight.problems(spec_mod.load(variant(tmp_path, change))) if p.fatal]
    text = "\n".join(line for p in found for line in p.lines())
    assert "'requests' is not pinned" in text and "pin it" in text
    assert "some requirements carry --hash and some do not" in text
    assert "hashed requirements with pip_deps: true" in text
    assert "missing.whl is not a regular file" in text
    assert "agent.image is 'debian:bookworm'" in text
    assert all(":" in p.where and "agent.install" in p.where for p in found)


def test_a_preset_expands_once_and_reads_back_the_same(tmp_path):
    spec = spec_mod.load(
        variant(
            tmp_path, lambda d: d["agent"].update(env={"HOME": "/tmp/mine"}, preset="claude-code")
        )
    )
    assert (
        spec.agent.command == tuple(presets.PRESETS["claude-code"]["command"])
        and "$ASSURE_TASK" in spec.agent.command[-1]
    )
    assert (
        spec.agent.env["HOME"] == "/tmp/mine" and spec.agent.env["PYTHONDONTWRITEBYTECODE"] == "1"
    )  # the spec's env wins
    assert (
        spec.agent.install.pip[0].startswith("claude-agent-sdk==0.2.184 --hash=sha256:")
        and not spec.agent.install.pip_deps
    )
    assert set(presets.PRESETS["claude-code"]["allow"]["betas"]) <= set(spec.model.allow["betas"])
    assert spec_mod.Spec.from_json(spec.to_json()) == spec


def test_validate_notes_a_writable_scope_the_contract_cannot_promote(tmp_path):
    spec = spec_mod.load(variant(tmp_path, lambda d: d["workspace"].update(writable=["out/**"])))
    notes = [p.message for p in preflight.problems(spec) if not p.fatal]
    assert any(
        "out/** is outside the contract's fs: scope" in n and "propose-only" in n for n in notes
    )
    assert any(
        "fs:src/** is not in workspace.writable" in n for n in notes
    )  # Claude Code edits src itself: unattributed
    assert not [
        p for p in preflight.problems(spec_mod.load(EXAMPLE)) if not p.fatal
    ]  # the example's scopes agree


def test_assure_validate_warns_when_writable_and_the_contracts_fs_scope_disagree(tmp_path):
    """The notes of preflight, as `assure validate` reports them."""
    import json

    from typer.testing import CliRunner

    from assure.cli import app

    path = variant(tmp_path, lambda d: d["workspace"].update(writable=["out/**"]))
    done = CliRunner().invoke(app, ["validate", "--json", str(path)])
    (result,) = json.loads(done.stdout)  # (not ok: writable is a term, so re-ratify too)
    notes = "\n".join(result["notes"])
    assert "out/** is outside the contract's fs: scope" in notes and "propose-only" in notes
    assert "fs:src/** is not in workspace.writable" in notes
    for name in ("claude-code", "mini-swe-agent"):  # the presets' examples: their scopes agree
        done = CliRunner().invoke(app, ["validate", "--json", str(EXAMPLE.with_stem(name))])
        assert not [n for n in json.loads(done.stdout)[0]["notes"] if "fs:" in n], name


def test_debian_packages_must_be_pinned(tmp_path):
    spec = spec_mod.load(
        variant(tmp_path, lambda d: d["agent"].update(install={"apt": ["ripgrep", "jq=1.6-2.1"]}))
    )
    found = [p for p in preflight.problems(spec) if p.fatal]
    assert [p.message for p in found] == ["'ripgrep' is not pinned as name=version"]
    assert "agent.install.apt[0]" in found[0].where


def test_every_preset_installs_only_pinned_hashed_requirements_and_asks_nothing():
    """Each preset's install passes the same checks as a spec's (pinned, every line hashed,
    no unpinned dependency tree), and its agent starts with no prompt and no telemetry."""
    for name in ("claude-code", "mini-swe-agent"):
        spec = spec_mod.load(ROOT / "specs" / "examples" / f"{name}.yaml")
        assert not [p for p in preflight.problems(spec) if p.fatal], name
        assert spec.agent.install.pip and not spec.agent.install.pip_deps
        assert all("--hash=sha256:" in line for line in spec.agent.install.pip)
        assert "$ASSURE_TASK" in spec.agent.command[-1] and spec.agent.env["HOME"] == "/tmp/home"
    env = spec_mod.load(ROOT / "specs" / "examples" / "mini-swe-agent.yaml").agent.env
    assert env["MSWEA_CONFIGURED"] == "1" and env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"


def test_local_wheels_and_fetched_debian_packages_go_into_the_build_and_its_tag(
    tmp_path, monkeypatch
):
    """The two install sources besides PyPI and binaries: a spec's local wheel and the .debs the
    host fetched for `apt` (here already in the host's cache, as `apt-get download` leaves
    them) are in the build context, and the tag follows their bytes. Before anything is fetched
    the tag cannot be known without fetching: `doctor` (fetch=False) says not built instead."""
    import hashlib
    import json

    from assure.core.chain import canonical

    monkeypatch.setattr(install, "APT_CACHE", tmp_path / "debs")
    wheel = tmp_path / "tool-1.0-py3-none-any.whl"
    wheel.write_bytes(b"wheel one")
    spec = spec_mod.load(
        variant(
            tmp_path,
            lambda d: d["agent"].update(
                install={"wheels": [str(wheel)], "apt": ["ripgrep=13.0.0-4+b2"]}
            ),
        )
    )
    ins = spec.agent.install
    with pytest.raises(install.NotFetched):
        install.tag(ins, IMAGES.agent, fetch=False)
    key = hashlib.sha256(
        canonical(
            {
                "apt": list(ins.apt),
                "suite": install.images_mod.BOOTSTRAP_RECIPE["suite"],
                "mirror": install.images_mod.mirror(),
                "machine": install.platform.machine(),
            }
        )
    ).hexdigest()[:16]
    fetched = tmp_path / "debs" / key
    fetched.mkdir(parents=True)
    deb = fetched / "ripgrep_13.0.0-4+b2_amd64.deb"
    deb.write_bytes(b"deb one")
    (fetched / install.MANIFEST).write_text(json.dumps({deb.name: "x"}))
    engine = Builder()
    tag = install.ensure(spec, engine, IMAGES)
    assert tag == install.tag(ins, IMAGES.agent, fetch=False)  # what doctor and run compute
    ((context, _, _, network),) = engine.builds
    assert not network
    with tarfile.open(fileobj=io.BytesIO(context)) as tar:
        assert tar.extractfile(f"wheels/{wheel.name}").read() == b"wheel one"
        assert tar.extractfile(f"debs/{deb.name}").read() == b"deb one"
    wheel.write_bytes(b"wheel two, longer")  # another size: the digest cache keys on it
    assert install.tag(ins, IMAGES.agent) != tag  # a changed wheel: a new image
    wheel.write_bytes(b"wheel one")
    deb.write_bytes(b"deb two, longer")
    assert install.tag(ins, IMAGES.agent) != tag  # a changed package: a new image
