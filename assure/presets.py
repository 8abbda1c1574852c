"""Presets for stock agents: `agent: {preset: claude-code}` and the spec needs no command.

A preset supplies what a stock agent needs to run unmodified in the sandbox: its install (the
derived image, sandbox/install.py), its command (the task's description, $ASSURE_TASK, as its
prompt, through the TCP bridge), an environment that sends nothing but model calls and asks
nothing (no telemetry, no update checks, no first-run prompt, a writable HOME on /tmp,
placeholder keys: the gateway holds any real one, bytecode kept out of the workspace), and the
`model.allow` entries the agent sends on every call (README: "Running Claude Code, ..."), and
its default token budget (README: "Default budgets"). What the spec sets beside the preset
wins: its command, install, env entries, limits; allow entries are added to the preset's.
"""

from __future__ import annotations

from typing import Any

CLAUDE = "/usr/local/lib/python3.11/dist-packages/claude_agent_sdk/_bundled/claude"
BRIDGE = "exec python3 -m assure.agents.tcp_bridge -- "
# what every preset's agent gets: a writable HOME, and no bytecode written into the workspace
QUIET = {
    "HOME": "/tmp/home",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONPYCACHEPREFIX": "/tmp/pycache",
}
# mini-swe-agent 2.4.6 and the part of its dependency tree that `mini` imports, pinned with hashes
# (pip_deps false: its declared tree adds datasets, pandas, pyarrow, numpy, boto3 and tokenizers,
# about 330 MB that a local run never imports); what the agent image already has (openai,
# pydantic, anyio, httpx2, ...) is not repeated.
MINI_SWE_AGENT = [
    (
        "aiohappyeyeballs==2.7.1"
        " --hash=sha256:9243213661e29250eb41368e5daa826fc017156c3b8a11440826b2e3ed376472"
    ),
    (
        "aiohttp==3.14.5"
        " --hash=sha256:50a195903119008fe9cc68710535eb37f556ffffd6a7759afe70a2c145587045"
    ),
    (
        "aiosignal==1.4.0"
        " --hash=sha256:053243f8b92b990551949e63930a839ff0cf0b0ebbe0597b0f3fb19e1a0fe82e"
    ),
    (
        "annotated-doc==0.0.7"
        " --hash=sha256:6bc31bbbec6dfaaedc1676dbc11dbda96fe22a2b5c400e9ebad113fec44a9dc6"
    ),
    "attrs==26.1.0 --hash=sha256:c647aa4a12dfbad9333ca4e71fe62ddc36f4e63b2d260a37a8b83d2f043ac309",
    (
        "certifi==2026.10.19.post1"
        " --hash=sha256:1324c476b4811eff41a8bc2122cd0bbd4d9c7234c725446d99ab1612b3a7fdd2"
    ),
    (
        "charset-normalizer==3.5.3"
        " --hash=sha256:2a6f937e0b70133d1f826d0a253331b6fe1a4c874808cc12e16f2fb8177042f4"
    ),
    "click==8.5.1 --hash=sha256:8bb5376d2006950386f8c6427613334a2acadc5f559cb80e638d00b4df957e37",
    (
        "fastuuid==0.14.0"
        " --hash=sha256:bbb0c4b15d66b435d2538f3827f05e44e2baafcc003dd7d8472dc67807ab8fd8"
    ),
    (
        "frozenlist==1.8.0"
        " --hash=sha256:2552f44204b744fba866e573be4c1f9048d6a324dfe14475103fd51613eb1d1f"
    ),
    "h2==4.4.1 --hash=sha256:0e25f1462b23c9cb82d9eb02e28bc706dac2a68cb457c6a0d74d63c8a2a5d0e6",
    "hpack==4.2.0 --hash=sha256:858ac0b02280fa582b5080d68db0899c62a80375e0e5413a74970c5e518b6986",
    (
        "httpcore==1.0.9"
        " --hash=sha256:2d400746a40668fc9dec9810239072b40b4484b640a8c38fd654a024c7a1bf55"
    ),
    "httpx==0.29.0 --hash=sha256:6734dcf742ced6e8018e45d3f9f7728975b6b3e1085a24f3e2c056069d858bd1",
    (
        "hyperframe==6.1.0"
        " --hash=sha256:b03380493a519fce58ea5af42e4a42317bf9bd425596f7a0835ffce80f1a42e5"
    ),
    (
        "importlib-metadata==8.9.0"
        " --hash=sha256:e0f761b6ea91ced3b0844c14c9d955224d538105921f8e6754c00f6ca79fba7f"
    ),
    "jinja2==3.1.6 --hash=sha256:85ece4451f492d0c13c5dd7c13a64681a86afae63a5f347908daf103ce6d2f67",
    (
        "litellm==1.110.2"
        " --hash=sha256:9d94d1c7d524b6fd10c14f9c8c6c4f0ac31705f9964ac59dcfd8337c046d8917"
    ),
    (
        "markupsafe==3.0.4"
        " --hash=sha256:6da83a088f8ef93b2d483a8232a4dbf4d69d3d8496b568a03c56becac43e1808"
    ),
    (
        "mini-swe-agent==2.4.6"
        " --hash=sha256:a35463c553ac825c7773b03cfa69cd44958e3af20155dcc5711fdf9e4c67cd54"
    ),
    (
        "multidict==7.2.1"
        " --hash=sha256:3b7542fad2706595c1b1853b46f2c3c4ae5cc5a6252b7225f294d607a29e1bdf"
    ),
    (
        "packaging==26.4"
        " --hash=sha256:81383611a09c1bc0b08b76e0fd5829d7c6824c65b27a6aee339da133f4233ea2"
    ),
    (
        "platformdirs==4.14.9"
        " --hash=sha256:d0d3a23e7ff282cfa94b77f5a22b81030dcb68ba0430f90c74f4bd8d090782ea"
    ),
    (
        "prompt-toolkit==3.0.53"
        " --hash=sha256:01c0891d7f9237d5e339f7d3e42cdae80b7534abb1c7c0e3352efba6231492f2"
    ),
    (
        "propcache==0.5.4"
        " --hash=sha256:6e9368e87a3efc285e559131092c5db643eb8e56de4ee42064d5baec22ef2bb5"
    ),
    (
        "pydantic-settings==2.16.3"
        " --hash=sha256:d1db16a2d34006323a1b42c0640898da58adfbad7ec30baaa9e2b18aafc08999"
    ),
    (
        "pygments==2.21.0"
        " --hash=sha256:2363c69b61c4a97c838da3b130dcd6468f4848992b21a82f2a63ec34377137d9"
    ),
    (
        "python-dotenv==1.2.4"
        " --hash=sha256:42269a8a5b3fd54ffa6f3d84b18abed50064717576b4ecf03dc4a55d8aa04fdc"
    ),
    "pyyaml==6.0.4 --hash=sha256:622aa875fa6533f25fedcffe23079357d65a690d462200afed5d8e9d0e01ebee",
    (
        "requests==2.34.2"
        " --hash=sha256:2a0d60c172f83ac6ab31e4554906c0f3b3588d37b5cb939b1c061f4907e278e0"
    ),
    "rich==15.0.0 --hash=sha256:33bd4ef74232fb73fe9279a257718407f169c09b78a87ad3d296f548e27de0bb",
    (
        "shellingham==1.5.4"
        " --hash=sha256:7ecfff8f2fd72616f7481040475a65b2bf8af90a56c89140852d1120324e8686"
    ),
    (
        "tenacity==9.2.1"
        " --hash=sha256:9e56f17539296baab7beabb08b92f6ee3d7be92d8be72d763360677c2ad6580e"
    ),
    (
        "tiktoken==0.14.0"
        " --hash=sha256:f5e7665f6624e052e5e7f6a36919ab69279decdc976d7b16b4fa15e1897d0513"
    ),
    "typer==0.29.2 --hash=sha256:f30731f8ca758368b836b3714872e58e395cef8fcaff918c853b1969ed5274e7",
    "urllib3==2.8.0 --hash=sha256:0cf3cae568d36aa9576b28dfb35f11328f1cb974ca7647d9475ebb86c75ac6e3",
    "wcwidth==0.9.4 --hash=sha256:b185c8b927b23af2721be1783499d1cfa5c028b098b0858951b4ae224477f1c2",
    "yarl==1.25.1 --hash=sha256:d5add7b4ca7afeea91d52e4d4e4db3b1fe9885b71f07054560d8c4296b7441a2",
    "zipp==4.1.2 --hash=sha256:b30cb6cd253122169c47de245ca24a86bac2a5d3802ba15bf7ba6414eb9e144d",
]
PRESETS: dict[str, dict[str, Any]] = {
    # The real Claude Code CLI, the static binary bundled in the claude-agent-sdk wheel (2.1.x).
    "claude-code": {
        # a $3 session of its measured calls (~11.9k input tokens each, cached, +~110 a turn)
        "limits": {"tokens": 8_400_000},
        "edits_files": (
            True
        ),  # its own file tools write the workspace: workspace.writable must cover the task's paths
        "install": {
            "pip": [
                "claude-agent-sdk==0.2.184"
                " --hash=sha256:40509cadce72d62ded6c3ed831bbcffbff1a7fed8a19cfe1670b3a55418ed089"
            ],
            "pip_deps": (
                False
            ),  # only the bundled binary is used; the Python SDK around it is not imported
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
            "ANTHROPIC_API_KEY": (
                "assure-placeholder-key"
            ),  # -p needs a key to start; the gateway never forwards it
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": (
                "1"
            ),  # no telemetry, error reports, update checks or bug command
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_NON_ESSENTIAL_MODEL_CALLS": (
                "1"
            ),  # no side calls (titles, tips) that would shift a script
            "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
        },
        # each reviewed in README.md: none makes the provider fetch, run code or reach an MCP server
        "allow": {
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
    # mini-swe-agent (`mini`, its local environment: each bash action runs in the workspace),
    # through litellm's Anthropic provider (ANTHROPIC_BASE_URL, which the bridge sets); with
    # `-m openai/<model>` it uses the OpenAI-compatible endpoint instead (OPENAI_BASE_URL).
    "mini-swe-agent": {
        # its own cost_limit ($3) of its measured calls (~870 input tokens, cached, +~115 a turn)
        "limits": {"tokens": 8_100_000},
        "edits_files": True,  # its bash actions (sed -i, cat >) write the workspace
        "install": {"pip": MINI_SWE_AGENT, "pip_deps": False},
        "command": [
            "sh",
            "-c",
            BRIDGE
            + 'mini --yolo --exit-immediately --model "$MSWEA_MODEL_NAME" --task "$ASSURE_TASK"'
            + " --output /tmp/home/trajectory.json",
        ],
        "env": {
            **QUIET,
            "MSWEA_MODEL_NAME": (
                "anthropic/claude-sonnet-4-6"
            ),  # provider/model, as litellm names it
            "ANTHROPIC_API_KEY": (
                "assure-placeholder-key"
            ),  # litellm needs one; the gateway never forwards it
            "MSWEA_CONFIGURED": (
                "1"
            ),  # else its first run asks for a model and a key on the terminal
            "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_COST_TRACKING": (
                "ignore_errors"
            ),  # the gateway counts tokens and cost; a model litellm does not price is not an error
            "LITELLM_LOCAL_MODEL_COST_MAP": (
                "True"
            ),  # litellm's bundled price map: no fetch at import
            "LITELLM_TELEMETRY": "False",
            "MSWEA_GLOBAL_CONFIG_DIR": "/tmp/home/.config/mini-swe-agent",
        },
        "allow": {},
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


# The default `limits.tokens` (README: "Default budgets", measured by bench/agent_budget.py): a
# $3 session (mini-swe-agent's own cost_limit for a task) at claude-sonnet-4-6 list prices. An
# agent of no preset may not cache: $3 of input at full price. A preset's own is in its entry.
DEFAULT_TOKENS = 1_000_000


def expand(data: dict[str, Any]) -> dict[str, Any]:
    """The validated spec document with its agent's preset filled in, and the budgets it leaves
    out (the preset's, else DEFAULT_TOKENS); idempotent: a spec read back from a run's
    spec.json, already expanded, comes out the same."""
    agent = data["agent"]
    name = agent.get("preset")
    preset = PRESETS[name] if name is not None else {}
    budgets = {"tokens": DEFAULT_TOKENS, **preset.get("limits", {})}
    data = {**data, "limits": {**budgets, **data["limits"]}}
    if name is None:
        return data
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
