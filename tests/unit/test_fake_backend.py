"""The in-memory fake passes the backend conformance suite (Docker passes the same in
tests/integration/test_backend_conformance.py)."""

from __future__ import annotations

import os

import pytest

from assure.sandbox.fake import TERMINATED, Context, FakeBackend
from tests.backend_conformance import WRITTEN, BackendConformance, Harness

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
        backend = FakeBackend({"exit3": exit3, "sleep": sleep, "chatty": chatty, "write": write, "cat": cat}, images={IMAGE})
        harness = Harness(backend, IMAGE, lambda behaviour: [behaviour], absent_id="fake-absent")
        yield harness
        harness.cleanup()
        backend.close()
