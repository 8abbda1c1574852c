"""The seam's `Observed`: what container.json keeps of it reads back the same, and a record
made before it (Docker's inspect) is judged as one made after."""

from __future__ import annotations

from pathlib import Path

from assure import spec
from assure.sandbox.backend import Observed
from assure.sandbox.docker.observe import observed
from assure.verify.container import containment
from assure.verify.facts import ContainerFacts
from tests.unit.test_hardening import good_inspect

EXAMPLES = Path(__file__).resolve().parents[2] / "specs" / "examples"
ENGINE = ["name=seccomp,profile=default"]


def test_a_record_made_before_observed_is_judged_as_one_made_after():
    benign = spec.load(EXAMPLES / "benign.yaml")
    bad = good_inspect(benign, NetworkMode="bridge", Privileged=True)
    old = ContainerFacts({"inspect": bad})
    new = ContainerFacts({"observed": observed(bad).to_json()})
    assert old.has_observed and new.has_observed and old.observed == new.observed
    found = [f.subject for f in containment(new.observed, benign, ENGINE, "attempts/1")]
    assert found == ["HostConfig.NetworkMode", "HostConfig.Privileged"]
    assert [f.message for f in containment(old.observed, benign, ENGINE, "attempts/1")] == [
        f.message for f in containment(new.observed, benign, ENGINE, "attempts/1")
    ]


def test_no_record_of_the_container_is_none():
    assert ContainerFacts({}).observed is None and not ContainerFacts({}).has_observed


def test_unconfined_apparmor_asked_for_is_what_the_engine_applied():
    """Docker names its default profile even when the request turned it off."""
    inspect = {"HostConfig": {"SecurityOpt": ["apparmor:unconfined"]}, "AppArmorProfile": "x"}
    assert observed(inspect).apparmor == "unconfined"


def test_a_bind_the_engine_does_not_list_among_its_mounts_is_still_seen():
    inspect = {"HostConfig": {"Binds": ["/var/run/docker.sock:/s:ro"]}, "Mounts": []}
    [mount] = observed(inspect).mounts
    assert (mount.source, mount.target, mount.read_only) == ("/var/run/docker.sock", "/s", True)
    assert Observed.from_json(observed(inspect).to_json()) == observed(inspect)
