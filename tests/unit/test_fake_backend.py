"""The in-memory fake passes the backend conformance suite (Docker passes the same in
tests/integration/test_backend_conformance.py)."""

from __future__ import annotations

import inspect
import os

import pytest

from assure.sandbox.backend import ImageBuilder, SandboxBackend
from assure.sandbox.conformance import WRITTEN, BackendConformance, Harness
from assure.sandbox.docker.backend import DockerBackend
from assure.sandbox.fake import TERMINATED, Context, FakeBackend

IMAGE = "fake-agent:conformance"


def exit3(ctx: Context) -> int:
    ctx.print("hello\n")
    return 3


def sleep(ctx: Context) -> int:
    ctx.stopping.wait(60)
    return TERMINATED


def chatty(ctx: Context) -> int:
    for _ in range(100):
        ctx.print("x" * 1000)
    return 0


def write(ctx: Context) -> int:
    made = ctx.path("/tmp/made")
    made.mkdir(parents=True)
    (made / "file.txt").write_bytes(WRITTEN)
    os.symlink("file.txt", made / "link")
    return 0


def cat(ctx: Context) -> int:
    assert ctx.stdin is not None
    while chunk := ctx.stdin.recv(65536):
        ctx.output(1, chunk)
    return 0


class TestFakeBackend(BackendConformance):
    @pytest.fixture
    def harness(self):
        backend = FakeBackend(
            {"exit3": exit3, "sleep": sleep, "chatty": chatty, "write": write, "cat": cat},
            images={IMAGE},
        )
        harness = Harness(backend, IMAGE, lambda behaviour: [behaviour], absent_id="fake-absent")
        yield harness
        harness.cleanup()
        backend.close()


def protocol_methods(protocol: type) -> list[str]:
    return sorted(
        name
        for name, value in vars(protocol).items()
        if callable(value) and not name.startswith("_")
    )


@pytest.mark.parametrize("backend", [DockerBackend, FakeBackend])
def test_each_backend_has_every_method_of_the_protocol_with_its_parameters(backend):
    """`isinstance` on a runtime-checkable protocol sees only names: compare the signatures too
    (the class is enough: no engine is needed)."""
    methods = protocol_methods(SandboxBackend)
    assert {
        "create_container",
        "start",
        "wait",
        "stop",
        "remove_container",
        "observe",
        "logs",
        "fs_changes",
        "read_file",
        "owned",
    } <= set(methods)
    for name in methods:
        want = inspect.signature(getattr(SandboxBackend, name)).parameters
        got = inspect.signature(getattr(backend, name)).parameters
        assert [(p.name, p.kind, p.default) for p in got.values()] == [
            (p.name, p.kind, p.default) for p in want.values()
        ], name


def test_docker_alone_builds_images():
    for name in protocol_methods(ImageBuilder):
        want = inspect.signature(getattr(ImageBuilder, name)).parameters
        assert list(inspect.signature(getattr(DockerBackend, name)).parameters) == list(want), name
    assert issubclass(DockerBackend, ImageBuilder) and not issubclass(FakeBackend, ImageBuilder)
