"""Presets for stock agents: `agent: {preset: claude-code}` and the spec needs no command.

A preset supplies what a stock agent needs to run unmodified in the sandbox: its install (the
derived image, sandbox/install.py), its command (the task's description, $ASSURE_TASK, as its
prompt, through the TCP bridge), an environment that sends nothing but model calls and asks
nothing (no telemetry, no update checks, no first-run prompt, a writable HOME on /tmp,
placeholder keys: the gateway holds any real one, bytecode kept out of the workspace), and the
`model.allow` entries the agent sends on every call (README: "Running Claude Code, ..."). What
the spec sets beside the preset wins: its command, install, env entries; allow entries are
added to the preset's.
"""

from __future__ import annotations

from typing import Any

CLAUDE = "/usr/local/lib/python3.11/dist-packages/claude_agent_sdk/_bundled/claude"
BRIDGE = "exec python3 -m assure.agents.tcp_bridge -- "
QUIET = {  # what every preset's agent gets: a writable HOME, and no bytecode written into the workspace
    "HOME": "/tmp/home",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONPYCACHEPREFIX": "/tmp/pycache",
}
PRESETS: dict[str, dict[str, Any]] = {
    # The real Claude Code CLI, the static binary bundled in the claude-agent-sdk wheel (2.1.x).
    "claude-code": {
        "edits_files": True,  # its own file tools write the workspace: workspace.writable must cover the task's paths
        "install": {
            "pip": [
                "claude-agent-sdk==0.2.184 --hash=sha256:40509cadce72d62ded6c3ed831bbcffbff1a7fed8a19cfe1670b3a55418ed089"
            ],
            "pip_deps": False,  # only the bundled binary is used; the Python SDK around it is not imported
        },
        "command": [
            "sh",
            "-c",
            BRIDGE
            + CLAUDE
            + ' -p "$ASSURE_TASK" --output-format json --dangerously-skip-permissions',
        ],
        "env": {
            **QUIET,
            "ANTHROPIC_API_KEY": "assure-placeholder-key",  # -p needs a key to start; the gateway never forwards it
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # no telemetry, error reports, update checks or bug command
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",  # no side calls (titles, tips) that would shift a script
            "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
        },
        "allow": {  # each reviewed in README.md: none makes the provider fetch, run code or reach an MCP server
            "request_keys": ["context_management"],
            "betas": [
                "claude-code-20250219",
                "context-management-2025-06-27",
                "per-turn-control-2026-07-01",
                "mid-conversation-tool-changes-2026-07-01",
                "thinking-token-count-2026-05-13",
                "advanced-tool-use-2025-11-20",
                "effort-2025-11-24",
            ],
        },
    },
    # An agent on the stock `openai` SDK (/v1/models, /v1/chat/completions with tool calls); the
    # SDK is in the agent image, the agent's script in the spec's agent.files.
    "openai-sdk": {
        "edits_files": False,  # the example's agent writes through the gateway's fs.write
        "command": [
            "sh",
            "-c",
            'PROMPT="$ASSURE_TASK" ' + BRIDGE + "python3 /opt/agent/openai_agent.py",
        ],
        "env": {**QUIET, "OPENAI_AGENTS_DISABLE_TRACING": "1"},
        "allow": {},
    },
}


def expand(data: dict[str, Any]) -> dict[str, Any]:
    """The validated spec document with its agent's preset filled in (idempotent: a spec
    read back from a run's spec.json, already expanded, comes out the same)."""
    agent = data["agent"]
    name = agent.get("preset")
    if name is None:
        return data
    preset = PRESETS[name]
    out = {**data, "agent": {**agent, "env": {**preset["env"], **agent.get("env", {})}}}
    out["agent"].setdefault("command", list(preset["command"]))
    if "install" in preset:
        out["agent"].setdefault("install", preset["install"])
    if data.get("model") is not None and preset["allow"]:
        given = data["model"].get("allow", {})
        merged = {
            k: list(dict.fromkeys([*preset["allow"].get(k, []), *given.get(k, [])]))
            for k in {*preset["allow"], *given}
        }
        out["model"] = {**data["model"], "allow": merged}
    return out
