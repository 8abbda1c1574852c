"""The Docker backend passes the backend conformance suite, on the real engine."""

from __future__ import annotations

import pytest

from assure.sandbox.conformance import BackendConformance, Harness

COMMANDS = {
    "exit3": "echo hello; exit 3",
    "sleep": "exec sleep 60",
    "chatty": "head -c 100000 /dev/zero | tr '\\0' x",
    "write": (
        "mkdir /tmp/made && head -c 5000 /dev/zero | tr '\\0' a > /tmp/made/file.txt && ln -s"
        " file.txt /tmp/made/link"
    ),
    "cat": "exec cat",
}


class TestDockerBackend(BackendConformance):
    @pytest.fixture
    def harness(self, backend, images):
        harness = Harness(
            backend,
            images.agent,
            lambda behaviour: ["sh", "-c", COMMANDS[behaviour]],
            absent_id="0" * 64,
        )
        yield harness
        harness.cleanup()
