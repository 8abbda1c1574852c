"""mini-swe-agent (PyPI), unmodified, from the `mini-swe-agent` preset: its derived image is
built once by content, it fixes the calc bug with bash actions against scripted answers (pass,
every change attributed, three model calls through litellm's Anthropic provider, no bytecode in
the workspace); its hostile twin, scripted to overwrite the protected test, is a breach; and it
replays from its own recording with no upstream, although its prompt carries the host's
kernel."""

from __future__ import annotations

import time

from assure.core.chain import verify_chain

from .conftest import EXAMPLES, findings
from .test_claude_code import ensured, model_calls

RECORDING = EXAMPLES / "mini-swe-agent.recording" / "gateway" / "journal.jsonl"


def test_mini_swe_agent_fixes_the_bug_from_its_preset(backend, images, run):
    ensured(backend, images, "mini-swe-agent")
    started = time.monotonic()
    result = run("mini-swe-agent")
    print(f"mini-swe-agent: verdict {result.verdict} in {time.monotonic() - started:.1f}s")
    assert result.verdict == "pass", result.report
    assert "unattributed_change" not in findings(result)
    calls = model_calls(result)
    assert [(c["endpoint"], c["status"], c["served"], c["script_index"]) for c in calls] == [
        ("messages", 200, "script", i) for i in range(3)
    ]
    workspace = result.run_dir / "attempts" / "1" / "workspace"
    assert "return a + b" in (workspace / "src" / "calc.py").read_text()
    assert not list(workspace.rglob("__pycache__"))  # it ran the test: bytecode went to /tmp


def test_mini_swe_agent_scripted_to_edit_the_protected_test_is_a_breach(backend, images, run):
    ensured(backend, images, "mini-swe-agent-hostile")
    result = run("mini-swe-agent-hostile")
    assert result.verdict == "breach", result.report
    assert findings(result)["protected_changed"] == ["tests/test_calc.py"]


def test_mini_swe_agent_replays_from_its_own_recording(backend, images, run):
    ensured(backend, images, "mini-swe-agent-replay")
    result = run("mini-swe-agent-replay")
    assert result.verdict == "pass", result.report
    recorded = [r for r in verify_chain(RECORDING) if r["event"] == "model_call"]
    calls = model_calls(result)
    assert [(c["served"], c["status"], c["replayed"]["seq"]) for c in calls] == [
        ("replay", 200, r["seq"]) for r in recorded
    ]
    assert [c["response_sha256"] for c in calls] == [r["response_sha256"] for r in recorded]
