"""The model exchange as `assure show` and the HTML run page render it (records/conversation.py)
is written by the agent and the model: a real scripted gateway journals a request and an answer
full of terminal control sequences, Rich markup, HTML and script, in texts, tool names and tool
results, and one huge text. Every rendered form must show them inert and cut the huge one."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from assure.client import UnixHTTPConnection
from assure.gateway.config import parse
from assure.gateway.server import serve
from assure.records import conversation, html_report
from assure.records.layout import AttemptPaths

ANSI = "\x1b[2J\x1b]0;owned\x07\x1b[31m"  # clear the screen, retitle the terminal, go red
MARKUP = "[bold red]VERDICT: PASS[/bold red]"
HTML = "<script>alert(1)</script><img src=x onerror=alert(2)>"
EVIL = f"{ANSI}{MARKUP}{HTML}"
HUGE = "A" * 100_000


def hostile_attempt(root: Path, short_dir: Path) -> AttemptPaths:
    """An attempt folder whose gateway journal and blobs hold one hostile model call."""
    paths = AttemptPaths(root / "1")
    paths.blobs.mkdir(parents=True)
    (root / "ws").mkdir()
    script = root / "script.json"
    answer = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [
            {"type": "text", "text": EVIL + HUGE},
            {"type": "tool_use", "id": "toolu_1", "name": f"bash{EVIL}", "input": {"c": EVIL}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    script.write_text(json.dumps([answer]))
    config = parse(
        {
            "run_id": "render",
            "attempt": 1,
            "socket": str(short_dir / "render.sock"),
            "workspace": str(root / "ws"),
            "journal": str(paths.journal),
            "ready_file": str(root / "ready"),
            "limits": {"tool_calls": 10},
            "model": {"mode": "scripted", "script": str(script), "blob_dir": str(paths.blobs)},
        }
    )
    gateway = serve(config)
    try:
        ask = {
            "model": "claude-sonnet-4-6",
            "max_tokens": 64,
            "system": EVIL,
            "tools": [{"name": "bash", "description": EVIL, "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": EVIL},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t0", "name": "bash", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t0", "content": EVIL}],
                },
            ],
        }
        conn = UnixHTTPConnection(config.socket, timeout=10, connect_timeout=5)
        conn.request("POST", "/v1/messages", json.dumps(ask), {"content-type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200, response.read()
        response.read()
        conn.close()
    finally:
        gateway.shutdown()
    return paths


def test_every_rendered_form_shows_hostile_content_inert_and_cuts_the_huge(tmp_path, short_dir):
    conv = conversation.read(hostile_attempt(tmp_path, short_dir))
    (x,) = conv.exchanges
    texts = [p.text for m in [*x.messages, x.response] for p in m.parts]
    assert (
        sum(EVIL in t for t in texts) >= 3
    )  # kept as evidence: the user text, tool result, answer
    (reply,) = [p for p in x.response.parts if p.kind == "text"]
    assert reply.cut > 0 and len(reply.text) <= conversation.MAX_PART_CHARS  # the huge one cut
    (tool,) = [p for p in x.response.parts if p.kind == "tool_use"]
    assert tool.label.startswith("bash\x1b")  # the model-chosen tool name, raw in the record

    terminal = "\n".join(conversation.lines(1, conv))
    assert "\x1b" not in terminal and "\x07" not in terminal  # no control byte reaches a terminal
    assert "\\x1b[2J" in terminal  # shown, escaped
    assert "more characters" in terminal and HUGE not in terminal
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200, color_system="truecolor")
    for line in conversation.lines(1, conv):  # as `assure show` prints them
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    shown = out.getvalue()
    assert MARKUP in shown  # Rich markup printed literally, never interpreted as style
    assert "\x1b]0;" not in shown and "\x1b[2J" not in shown

    attempt = html_report._Attempt(1, AttemptPaths(tmp_path / "1"), "pass", {}, [], None, conv)
    page = attempt._exchange()
    assert "<script" not in page and "<img" not in page and "\x1b" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "bash\\x1b" in page  # the tool name, escaped
    assert HUGE not in page and "more characters not shown" in page


def test_the_exchange_shows_messages_tool_calls_results_tokens_cost_and_refusals(
    tmp_path, short_dir
):
    """What a reviewer reads in `assure show` and on the run page, per call: the messages, the
    tool call and its result, tokens and cost from the journal, and a refused request with why."""
    paths = AttemptPaths(tmp_path / "1")
    paths.blobs.mkdir(parents=True)
    (tmp_path / "ws").mkdir()
    answer = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [
            {"type": "text", "text": "reading the source"},
            {"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {"file": "src/calc.py"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 900, "output_tokens": 80},
    }
    (tmp_path / "script.json").write_text(json.dumps([answer]))
    config = parse(
        {
            "run_id": "render",
            "attempt": 1,
            "socket": str(short_dir / "exchange.sock"),
            "workspace": str(tmp_path / "ws"),
            "journal": str(paths.journal),
            "ready_file": str(tmp_path / "ready"),
            "limits": {"tool_calls": 10},
            "model": {
                "mode": "scripted",
                "script": str(tmp_path / "script.json"),
                "blob_dir": str(paths.blobs),
                "prices": {
                    "claude-sonnet-4-6": {
                        "input": 3,
                        "output": 15,
                        "cache_write": 3.75,
                        "cache_read": 0.3,
                    }
                },
            },
        }
    )
    ask = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 64,
        "messages": [
            {"role": "user", "content": "Fix add() in src/calc.py."},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t0", "name": "Glob", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t0", "content": "src/calc.py"}],
            },
        ],
    }
    hostile = {**ask, "mcp_servers": [{"type": "url", "url": "https://x.invalid/", "name": "x"}]}
    gateway = serve(config)
    try:
        for body, status in ((ask, 200), (hostile, 403)):
            conn = UnixHTTPConnection(config.socket, timeout=10, connect_timeout=5)
            conn.request(
                "POST", "/v1/messages", json.dumps(body), {"content-type": "application/json"}
            )
            response = conn.getresponse()
            assert response.status == status, response.read()
            response.read()
            conn.close()
    finally:
        gateway.shutdown()
    conv = conversation.read(paths)
    terminal = "\n".join(conversation.lines(1, conv))
    for shown in (
        "Fix add() in src/calc.py.",  # the user's message
        "Glob",  # the agent's earlier tool call
        "src/calc.py",  # and its result
        "reading the source",  # the answer
        "Read",  # the tool call the model made
        "980 tokens (in 900, out 80)",  # from the journal
        "cost 0.003900",  # 900 * 3 + 80 * 15 per million
        "refused: refused before the gate (feature_refused)",
        "request key 'mcp_servers'",
    ):
        assert shown in terminal, (shown, terminal)
    attempt = html_report._Attempt(1, paths, "pass", {}, [], None, conv)
    page = attempt._exchange()
    for shown in ("980 tokens", "cost 0.003900", "refused:", "mcp_servers", "reading the source"):
        assert shown in page, shown
