"""`assure-tool`: argument parsing and exit codes, against the real in-process gateway."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from assure import client
from assure.client import SOCKET_ENV, UsageError, main, parse_args

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def gateway(start_gateway, monkeypatch: pytest.MonkeyPatch):
    gateway = start_gateway()
    monkeypatch.setenv(SOCKET_ENV, gateway.config.socket)
    return gateway


def test_parse_args_value_kinds(tmp_path: Path) -> None:
    text = tmp_path / "body.txt"
    text.write_text("from a file\n", encoding="utf-8")
    tool, args = parse_args(
        [
            "fs.write",
            "path=a=b.txt",
            f"content=@{text}",
            "mode:=420",
            "reversible:=true",
            'rollback_ref:="@x"',
        ]
    )
    assert tool == "fs.write"
    assert args == {
        "path": "a=b.txt",
        "content": "from a file\n",
        "mode": 420,
        "reversible": True,
        "rollback_ref": "@x",
    }


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["path=a"],
        ["-v"],
        ["fs.read", "path"],
        ["fs.read", "=x"],
        ["fs.read", "mode:=08"],
        ["fs.read", "a=1", "a=2"],
        ["fs.read", "content=@/no/such/file"],
    ],
)
def test_usage_errors(argv: list[str]) -> None:
    with pytest.raises(UsageError):
        parse_args(argv)


@pytest.mark.parametrize("argv", [[], ["fs.read", "path"], ["fs.read", "mode:=nope"]])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and "usage: assure-tool" in err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "usage: assure-tool" in capsys.readouterr().out


def test_allowed_call_prints_the_answer_and_exits_0(
    gateway, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fs.write", "path=notes/a.txt", "content=hi", "mode:=384"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["decision"] == "allow" and answer["result"]["size"] == 2
    written = Path(gateway.config.workspace) / "notes/a.txt"
    assert written.read_text() == "hi" and written.stat().st_mode & 0o777 == 0o600
    assert main(["fs.read", "path=notes/a.txt"]) == 0
    assert json.loads(capsys.readouterr().out)["result"]["content"] == "hi"


@pytest.mark.usefixtures("gateway")
def test_denied_call_exits_1_with_the_answer_and_a_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["fs.write", "path=tests/test_x.py", "content=x"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["decision"] == "deny"
    assert "403 denied" in err and "protected" in err


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["fs.read", "path=missing.txt"], "404 not_found"),
        (["fs.read", "path=a", "extra=1"], "400 unknown_field"),
        (["no.such.tool"], "404 unknown_tool"),
    ],
)
@pytest.mark.usefixtures("gateway")
def test_failed_calls_exit_1(
    capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    assert main(argv) == 1
    assert fragment in capsys.readouterr().err


def test_module_entry_point(gateway) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "assure.client", "fs.list"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", SOCKET_ENV: gateway.config.socket},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"] == {"entries": [], "truncated": False}


JSON_VALUES = [
    {"action_id": "a1", "decision": "allow", "result": {"entries": [], "truncated": False}},
    {"é": 'ü\u2028\x00"\\', "n": [1, -0.0, 1.5e300, 2**70, None, True, {}, [[]]], "": {"a": {}}},
    [0.1, 1 / 3, "x", [], [{"k": [1, {"z": None}]}]],
    "text",
    3,
    None,
    float("inf"),
]


@pytest.mark.parametrize("value", JSON_VALUES)
def test_the_c_json_halves_are_json_dumps_and_loads(value) -> None:
    """The client encodes, decodes and prints with json's C halves only: the bytes and values
    are json.dumps's, json.loads's and json.dumps(indent=2)'s."""
    assert client.dumps(value) == json.dumps(value)
    assert client.pretty(value) == json.dumps(value, indent=2)
    assert client.loads(json.dumps(value, indent=2)) == json.loads(json.dumps(value, indent=2))
    assert client.loads(f" \n{json.dumps(value)}\t\r ") == value


@pytest.mark.parametrize(
    "text", ["", " ", "08", "1 2", '{"a":1}x', "[1,]", '"\x01"', "\ufeff1", "nul", "{'a':1}"]
)
def test_the_client_refuses_what_json_loads_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        client.loads(text)


def test_the_client_imports_no_pure_python_standard_module() -> None:
    """An assure-tool call is a fresh python3 -S: socket.py, json/, os.py (and the enum, re,
    functools, collections they import) were most of its start."""
    code = (
        "import sys; before = set(sys.modules); import assure.client;"
        " print(*set(sys.modules) - before)"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(REPO)},
    )
    assert set(done.stdout.split()) <= {"__future__", "_json", "_socket", "assure", "assure.client"}
