"""Scripts and replays that survive real agents: a script entry answers the requests its
matcher fits (model, tools offered, system prompt, last user message, last tool result), so a
side call does not shift the in-order entries; a replay matches requests without their
volatile parts (ids in `metadata`, the date line of a system prompt) and, on a mismatch,
names the JSON paths that differ, bounded whatever the request's size."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from assure.core.chain import ChainWriter, canonical
from assure.gateway import config as gwconfig
from assure.gateway.blobs import Blobs
from assure.gateway.config import ConfigError, Model
from assure.gateway.modelmatch import MAX_DIFFS, MAX_PATH_CHARS, differences
from assure.gateway.modelsources import Replay, Script
from assure.gateway.modelwire import Call, Failure, ModelError


def call(parsed: dict[str, Any], endpoint: str = "messages") -> Call:
    canon = canonical(parsed)
    return Call(
        endpoint, canon, canon, hashlib.sha256(canon).hexdigest(), parsed, "", "2023-06-01", None
    )


def message(text: str, model: str = "claude-sonnet-4-6") -> dict[str, Any]:
    return {
        "id": "msg",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def text_of(response: Any) -> str:
    return json.loads(response.body)["content"][0]["text"]


def script(tmp_path: Path, items: list[Any]) -> Script:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(items))
    return Script(str(path))


MAIN = {
    "model": "claude-sonnet-4-6",
    "max_tokens": 10,
    "tools": [{"name": "Read", "input_schema": {}}, {"name": "Edit", "input_schema": {}}],
    "system": "You are Claude Code.",
    "messages": [{"role": "user", "content": "Fix add() in src/calc.py"}],
}
TITLE = {
    "model": "claude-haiku-4-5",
    "max_tokens": 10,
    "system": "Write a 5-word title for this conversation.",
    "messages": [{"role": "user", "content": "Fix add() in src/calc.py"}],
}


def after_tool(result: str) -> dict[str, Any]:
    return {
        **MAIN,
        "messages": [
            *MAIN["messages"],
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": result}],
                    }
                ],
            },
        ],
    }


def test_a_side_call_takes_its_matched_entry_and_leaves_the_order_alone(tmp_path: Path) -> None:
    s = script(
        tmp_path,
        [
            message("read it"),
            {
                "match": {"model": "haiku", "tools": []},
                "response": message("Fix the calc bug", "claude-haiku-4-5"),
                "repeat": True,
            },
            message("edit it"),
            message("done"),
        ],
    )
    served = [
        s.respond(call(req))
        for req in (TITLE, MAIN, TITLE, after_tool("return a - b"), TITLE, after_tool("edited"))
    ]
    assert [text_of(r) for r in served] == [
        "Fix the calc bug",
        "read it",
        "Fix the calc bug",
        "edit it",
        "Fix the calc bug",
        "done",
    ]
    assert [(r.extra["script_index"], r.extra["script_by"]) for r in served[:2]] == [
        (1, "match"),
        (0, "order"),
    ]


def test_each_matcher_field_reads_its_part_of_the_request_on_every_api(tmp_path: Path) -> None:
    s = script(
        tmp_path,
        [
            {
                "match": {"tool_result": {"regex": r"return a - b$"}},
                "response": message("by tool result"),
            },
            {"match": {"user": "subagent:"}, "response": message("by user")},
            {"match": {"system": {"regex": "(?i)title"}}, "response": message("by system")},
            {
                "match": {"tools": ["Edit"], "endpoint": "chat_completions"},
                "response": message("by tools, on chat"),
            },
            message("in order"),
        ],
    )
    chat = {
        "model": "gpt-4o",
        "tools": [{"type": "function", "function": {"name": "Edit", "parameters": {}}}],
        "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}],
    }
    responses_tool = {
        "model": "gpt-4o",
        "input": [
            {
                "type": "function_call_output",
                "call_id": "c",
                "output": "def add(a, b):\n    return a - b",
            }
        ],
    }
    sub = {
        **MAIN,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "subagent: find tests"}]}
        ],
    }
    got = [
        s.respond(call(after_tool("x"))),
        s.respond(call(responses_tool, "responses")),
        s.respond(call(sub)),
        s.respond(call(TITLE)),
        s.respond(call(chat, "chat_completions")),
    ]
    assert [r.extra["script_index"] for r in got] == [
        4,
        0,
        1,
        2,
        3,
    ]  # the first (no match: a tool result "x") takes the in-order entry


def test_an_exhausted_script_with_matchers_says_none_fits(tmp_path: Path) -> None:
    s = script(tmp_path, [{"match": {"model": "haiku"}, "response": message("t")}])
    s.respond(call(TITLE))
    with pytest.raises(Failure) as info:
        s.respond(call(TITLE))
    assert (
        info.value.code == "script_exhausted"
        and "none of its 1 matched entries" in info.value.message
    )


@pytest.mark.parametrize(
    ("item", "named"),
    [
        (
            {"match": {"modle": "x"}, "response": {"type": "message"}},
            "item 0.match.modle: unknown field",
        ),
        (
            {"match": {"user": {"regex": "("}}, "response": {"type": "message"}},
            "item 0.match.user.regex: not a valid regular expression",
        ),
        (
            {"match": {"tools": "Edit"}, "response": {"type": "message"}},
            "item 0.match.tools: must be a list of tool names",
        ),
        ({"match": {"model": "x"}}, 'a matched entry is {"match": {...}, "response"'),
        (
            {"match": {}, "response": {"type": "message"}},
            "item 0.match: must be a non-empty object",
        ),
    ],
)
def test_a_bad_matcher_is_refused_naming_the_item_and_field(
    tmp_path: Path, item: dict[str, Any], named: str
) -> None:
    with pytest.raises(ModelError) as info:
        script(tmp_path, [item])
    assert named in str(info.value) and str(tmp_path / "script.json") in str(info.value)


# ---- replay ----


def record(tmp_path: Path, requests: list[dict[str, Any]], **volatile: Any) -> Replay:
    """A gateway journal (+ blobs) of `requests`, each answered, and a Replay of it."""
    blobs = Blobs(str(tmp_path / "blobs"), create=True)
    writer = ChainWriter(tmp_path / "journal.jsonl")
    for i, parsed in enumerate(requests):
        digest = blobs.put(canonical(parsed))
        answer = blobs.put(json.dumps(message(f"answer {i}")).encode())
        writer.append(
            "model_call",
            endpoint="messages",
            request_sha256=digest,
            served="upstream",
            status=200,
            response_headers={"content-type": "application/json"},
            response_sha256=answer,
        )
    fields = {"volatile": gwconfig._volatile(volatile)} if volatile else {}
    return Replay(
        Model(
            mode="replay",
            blob_dir=str(tmp_path / "new"),
            recording=(str(tmp_path / "journal.jsonl"),),
            recording_blob_dir=str(tmp_path / "blobs"),
            **fields,
        )
    )


def claude_code(device: str, date: str, ask: str = "Fix add()") -> dict[str, Any]:
    return {
        "model": "claude-opus-5-5",
        "max_tokens": 128000,
        "metadata": {
            "user_id": json.dumps(
                {"device_id": device, "account_uuid": "", "session_id": device[::-1]}
            )
        },
        "system": [{"type": "text", "text": "You are a Claude agent."}],
        "messages": [
            {"role": "user", "content": ask},
            {
                "role": "system",
                "content": [
                    {
                        "type": "text",
                        "text": f"# Environment\n - Platform: linux\n\nToday's date is {date}.",
                    }
                ],
            },
        ],
    }


def test_a_replay_ignores_the_metadata_ids_and_the_date_line_by_default(tmp_path: Path) -> None:
    replay = record(tmp_path, [claude_code("46b383d0", "2026-12-02")])
    response = replay.respond(call(claude_code("9f00aa11", "2027-01-15")))
    assert (response.served, text_of(response)) == ("replay", "answer 0")


def test_a_replay_mismatch_names_the_fields_that_differ(tmp_path: Path) -> None:
    replay = record(tmp_path, [claude_code("46b383d0", "2026-12-02")])
    changed = claude_code("9f00aa11", "2027-01-15", ask="Delete the tests")
    changed["temperature"] = 1
    with pytest.raises(Failure) as info:
        replay.respond(call(changed))
    assert info.value.code == "replay_mismatch"
    assert info.value.detail["differs"] == [
        "$.messages[0].content",
        "$.temperature (only in this request)",
    ]
    assert (
        "it differs at $.messages[0].content, $.temperature (only in this request)"
        in info.value.message
    )


def test_the_volatile_parts_are_configurable(tmp_path: Path) -> None:
    strict = record(
        tmp_path / "strict", [claude_code("46b383d0", "2026-12-02")], fields=[], text=[]
    )
    with pytest.raises(Failure) as info:
        strict.respond(call(claude_code("9f00aa11", "2027-01-15")))
    assert info.value.detail["differs"] == ["$.messages[1].content[0].text", "$.metadata.user_id"]
    loose = record(
        tmp_path / "loose",
        [claude_code("46b383d0", "2026-12-02")],
        fields=["metadata.user_id", "messages.*.content.*.cache_control"],
        text=[r"(?m)^ - Platform: .*$", r"(?m)^Today's date is .*$"],
    )
    other = claude_code("9f00aa11", "2027-01-15")
    other["messages"][1]["content"][0]["text"] = other["messages"][1]["content"][0]["text"].replace(
        "linux", "darwin"
    )
    assert loose.respond(call(other)).served == "replay"


def test_a_huge_hostile_request_gets_a_bounded_mismatch(tmp_path: Path) -> None:
    replay = record(
        tmp_path, [{"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}]
    )
    hostile = {
        "model": "m",
        "max_tokens": 1,
        "messages": [{"role": "user", "content": "x" * 10**6}] * 50,
        **{("\x1b[2J<b>" + "k" * 5000 + str(i)): "<script>" for i in range(1000)},
    }
    with pytest.raises(Failure) as info:
        replay.respond(call(hostile))
    differs = info.value.detail["differs"]
    assert len(differs) == MAX_DIFFS and all(len(p) <= MAX_PATH_CHARS for p in differs)
    assert len(info.value.message) <= 1024 and not any("\x1b" in p for p in differs)


def test_differences_walks_values_keys_and_lengths() -> None:
    assert differences({"a": [1, 2], "b": {"c": True}}, {"a": [1, 3, 4], "b": {"c": 1}}) == (
        ["$.a[1]", "$.a (2 items here, 3 in the recording)", "$.b.c"],
        False,
    )
    assert differences({"x y": 1}, {}) == (['$["x y"] (only in this request)'], False)


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"fields": "metadata"}, "model.volatile.fields"),
        ({"fields": ["a..b"]}, "model.volatile.fields[0]"),
        ({"text": ["("]}, "model.volatile.text[0]"),
        ({"other": []}, "model.volatile.other"),
    ],
)
def test_a_bad_volatile_config_names_its_field(value: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        gwconfig._volatile(value)
    assert field in str(info.value)


def test_a_volatile_text_is_blanked_in_a_user_message_too(tmp_path: Path) -> None:
    """mini-swe-agent states the host's kernel in its first user message, not its system prompt:
    its replay's `text` pattern must reach it there, or the recording matches only on the host
    (and kernel) it was made on."""

    def mini(kernel: str, task: str = "Fix add()") -> dict[str, Any]:
        info = f"<system_information>\nLinux {kernel} #1 SMP x86_64\n</system_information>"
        return {
            "model": "claude-sonnet-4-6",
            "max_tokens": 128000,
            "system": "You are a helpful assistant that can interact with a computer.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": f"{task}\n\n{info}"}]}
            ],
        }

    def replay(folder: str) -> Any:
        pattern = r"(?s)<system_information>.*?</system_information>"
        return record(tmp_path / folder, [mini("6.18.44-fc-v1045")], text=[pattern])

    assert replay("a").respond(call(mini("6.18.44-fc-v1098"))).served == "replay"
    with pytest.raises(Failure) as info:  # what the pattern does not cover still counts
        replay("b").respond(call(mini("6.18.44-fc-v1098", task="Delete the tests")))
    assert info.value.detail["differs"] == ["$.messages[0].content[0].text"]
