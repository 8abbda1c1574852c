"""Inspect AI's own conformance suite for sandbox environments, run against `assure`.

One sample's attempt is shared by every check (as Inspect's own runner shares one per
module); each check gets it as `sandbox_env`. A check that assure refuses on purpose is an
xfail with its reason; anything else must pass. At the end the attempt is judged: the
self-check changed nothing outside its writable scope, so it passes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_asyncio
from inspect_ai.util._sandbox.self_check import *  # noqa: F403 -- Inspect's whole self-check suite

from assure.inspect.sandbox import AssureSandbox
from assure.inspect.session import Session

SPEC = Path(__file__).parent / "specs" / "inspect-selfcheck.yaml"

# Refused on purpose: every command runs as the attempt's own unprivileged user; the engine is
# never asked to exec as another (root would be uid 0 on the host's kernel).
REFUSED = {
    "test_exec_as_user": "exec as root is refused (SandboxUserUnsupportedError): "
    "commands run as the attempt's user only",
}

pytestmark = pytest.mark.asyncio


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = Session(SPEC, tmp_path_factory.mktemp("runs"), None)
    s.start()
    yield s
    result = s.finish()
    assert result.verdict == "pass", result.report


@pytest_asyncio.fixture
async def sandbox_env(session, request):
    reason = REFUSED.get(request.node.originalname)
    if reason:
        request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))
    return AssureSandbox(session)
