"""Backends are chosen by name: the registry, the spec's `sandbox.backend` and its schema agree."""

from __future__ import annotations

import pytest

from assure import spec
from assure.errors import SandboxError
from assure.sandbox import registry
from assure.sandbox.fake import FakeBackend


def test_the_schema_names_exactly_the_registered_backends() -> None:
    field = spec.schema()["properties"]["sandbox"]["properties"]["backend"]
    assert set(field["enum"]) == set(registry.BACKENDS)
    assert field["default"] == registry.DEFAULT


def test_a_backend_is_made_by_its_name_and_an_unknown_name_is_refused_with_the_known_ones() -> None:
    assert isinstance(registry.create("fake"), FakeBackend)
    with pytest.raises(SandboxError) as info:
        registry.create("firecracker")
    assert "firecracker" in info.value.message and "docker, fake" in (info.value.fix or "")


def test_specs_naming_different_backends_are_refused_together() -> None:
    assert registry.chosen([]) == registry.DEFAULT
    assert registry.chosen(["fake", "fake"]) == "fake"
    with pytest.raises(SandboxError, match="different sandbox backends"):
        registry.chosen(["docker", "fake"])


def test_an_inspect_sample_talks_to_its_specs_backend_and_one_without_exec_is_refused() -> None:
    """The Inspect channel makes its engine client by the spec's backend name (never Docker by
    default); the fake runs no command in a running container, so the channel refuses it."""
    pytest.importorskip("inspect_ai")
    from assure.inspect import channel

    assert isinstance(channel.backend("fake"), FakeBackend)
    assert channel.backend("fake") is channel.backend("fake")  # one per thread and name
    with pytest.raises(SandboxError, match="'fake' runs no command in a running container"):
        channel.call("fake", "agent-id", {"op": "exec"}, b"", sizes=(), limit=1, timeout=1.0)
