"""Black-box `cases`: the host-side comparison, the bounded reader of a check container's
stdio, the spec's rules, and what reaches the engine (never an expected output)."""

from __future__ import annotations

import base64
import contextlib
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from assure import spec
from assure.errors import SandboxError, SpecError
from assure.run import checks
from assure.sandbox.backend import Observed
from assure.spec import Case, Cases
from assure.verify.assertions import cases as compare

ROOT = Path(__file__).resolve().parents[2]
DIGEST = "d" * 64


def spec_cases(*each: Case) -> Cases:
    return Cases(("python3", "tests/add_cli.py"), "assure-agent", 60.0, {}, each)


def recorded(*runs: dict[str, Any], digest: str = DIGEST) -> dict[str, Any]:
    return {
        "index": 0,
        "run": ["python3", "tests/add_cli.py"],
        "post_digest": digest,
        "results": [
            {
                "case": i,
                "exit_code": 0,
                "timed_out": False,
                "seconds": 0.1,
                "stdout_over": False,
                "output_tail": "",
                **r,
            }
            for i, r in enumerate(runs)
        ],
    }


def out(text: bytes) -> dict[str, Any]:
    return {"stdout_b64": base64.b64encode(text).decode()}


ADD = (Case(("40", "2"), None, "42\n", 0), Case(("-7", "3"), None, "-4\n", 0))


def test_every_case_as_expected_passes():
    ok, why, _ = compare(spec_cases(*ADD), recorded(out(b"42\n"), out(b"-4\n")), DIGEST)
    assert ok and why == "2 of 2 cases: stdout and exit code as expected, each in a fresh container"


@pytest.mark.parametrize(
    ("run", "why"),
    [
        (out(b""), "stdout differs: expected '-4\n', got ''"),  # the exit-0 liar: printed nothing
        (
            out(b"-4"),
            "stdout differs: expected '-4\n', got '-4'",
        ),  # byte for byte: the newline counts
        (
            out(b"-7 3\n"),
            "stdout differs: expected '-4\n', got '-7 3\n'",
        ),  # its input printed back (raw: renderers escape once)
        (
            out(b"\xff\x1b"),
            "stdout differs: expected '-4\n', got '\ufffd\x1b'",
        ),  # an undecodable byte, a control: escaped when shown
        (
            {**out(b"-4\n"), "exit_code": 3},
            "exit code 3, expected 0",
        ),  # the right answer, then a failure status
        (
            {**out(b""), "exit_code": None, "timed_out": True, "seconds": 60.0},
            "timed out after 60.0 s",
        ),
        (
            {**out(b"-4\nx"), "exit_code": None, "stdout_over": True},
            "stdout is longer than expected",
        ),
        ({"stdout_b64": "not base64!"}, "the recorded stdout is not base64"),
    ],
)
def test_any_difference_in_one_case_fails_it_and_names_it(run, why):
    ok, got, _ = compare(spec_cases(*ADD), recorded(out(b"42\n"), run), DIGEST)
    assert not ok and got == f"case 2 of 2 (args -7 3): {why}"


def test_an_expected_nonzero_exit_code_must_match():
    case = Case(("x",), None, "", 2)
    assert compare(spec_cases(case), recorded({**out(b""), "exit_code": 2}), DIGEST)[0]
    assert not compare(spec_cases(case), recorded({**out(b""), "exit_code": 0}), DIGEST)[0]


def test_results_not_for_this_snapshot_or_these_cases_fail_closed():
    good = recorded(out(b"42\n"), out(b"-4\n"))
    assert compare(spec_cases(*ADD), None, DIGEST)[:2] == (False, "the cases were not run")
    assert compare(spec_cases(*ADD), recorded(out(b"42\n"), out(b"-4\n"), digest="e" * 64), DIGEST)[
        :2
    ] == (False, "the recorded results are for another workspace state")
    for broken in (
        {**good, "results": good["results"][:1]},
        {**good, "results": good["results"][::-1]},
        {**good, "results": "x"},
    ):
        assert compare(spec_cases(*ADD), broken, DIGEST)[:2] == (
            False,
            "the recorded results do not match the spec's 2 cases",
        )


# --- the reader of the attached stream ----------------------------------------------------------


def frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + struct.pack(">I", len(payload)) + payload


def read(
    wire: bytes, cap: int | None, *, chunk: int = 1, close: bool = True, timeout: float = 5.0
) -> checks.CheckRun:
    """Feed `wire` through a real socket pair, `chunk` bytes at a time, into the reader."""
    ours, theirs = socket.socketpair()

    def send() -> None:
        for i in range(0, len(wire), chunk):
            theirs.sendall(wire[i : i + chunk])
        if close:
            theirs.shutdown(socket.SHUT_WR)

    threading.Thread(target=send, daemon=True).start()
    run = checks.CheckRun()
    try:
        checks._read_frames(ours, time.monotonic() + timeout, cap, run)
    finally:
        ours.close()
        theirs.close()
    return run


def test_frames_split_anywhere_are_demultiplexed():
    run = read(frame(1, b"42") + frame(2, b"warning\n") + frame(1, b"\n"), cap=10, chunk=1)
    assert bytes(run.stdout) == b"42\n" and not run.stdout_over and not run.timed_out
    assert run.tail() == "42warning\n\n"


def test_stdout_past_the_cap_stops_the_read_and_keeps_only_the_cap():
    run = read(frame(2, b"e" * 100) + frame(1, b"y\n" * 1000), cap=3, chunk=4096, close=False)
    assert bytes(run.stdout) == b"y\ny" and run.stdout_over and not run.timed_out


def test_stderr_never_counts_as_stdout():
    run = read(frame(2, b"42\n"), cap=3)
    assert bytes(run.stdout) == b"" and not run.stdout_over


def test_a_huge_announced_frame_allocates_nothing_in_advance():
    run = read(bytes([1, 0, 0, 0]) + struct.pack(">I", 2**32 - 1) + b"abc", cap=None, chunk=4096)
    assert run.tail() == "abc" and bytes(run.stdout) == b""


def test_the_output_tail_is_bounded():
    run = read(frame(1, b"a" * (checks.OUTPUT_TAIL_BYTES + 500)), cap=None, chunk=65536)
    assert len(run.combined) == checks.OUTPUT_TAIL_BYTES


def test_a_silent_program_reaches_the_deadline():
    run = read(b"", cap=3, close=False, timeout=0.2)
    assert run.timed_out


def test_a_broken_stream_is_a_harness_error_never_a_partial_result():
    ours, theirs = socket.socketpair()
    theirs.close()
    ours.close()
    with pytest.raises(SandboxError, match="reading a check container's output"):
        checks._read_frames(ours, time.monotonic() + 5, 3, checks.CheckRun())


def test_the_cap_is_one_byte_past_the_expected_stdout():
    assert checks.stdout_cap(Case((), None, "42\n", 0)) == 4
    assert checks.stdout_cap(Case((), None, "é", 0)) == 3


# --- the spec -----------------------------------------------------------------------------------

SPEC = """\
version: 1
name: demo
agent:
  command: [sh, -c, "true"]
workspace:
  fixture: {fixture}
assertions:
  - cases:
      run: [python3, tests/add_cli.py]
      each:
{each}
expect: pass
"""


def write(tmp_path: Path, each: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(SPEC.format(fixture=ROOT / "fixtures" / "workspaces" / "calc", each=each))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(SpecError) as info:
        spec.load(path)
    return info.value.problems


def test_defaults_come_from_the_schema(tmp_path):
    loaded = spec.load(
        write(
            tmp_path,
            '        - {stdout: "x\\n"}\n        - {args: ["1", "2"], stdin: "3", stdout: "6\\n",'
            " exit_code: 1}",
        )
    )
    assert loaded.cases() == (
        Cases(
            ("python3", "tests/add_cli.py"),
            "assure-agent",
            60.0,
            {},
            (Case((), None, "x\n", 0), Case(("1", "2"), "3", "6\n", 1)),
        ),
    )


def test_a_case_whose_answer_is_its_input_is_refused_with_field_and_fix(tmp_path):
    path = write(
        tmp_path,
        '        - {args: ["40", "2"], stdout: "42\\n"}\n        - {args: ["5", "0"], stdout:'
        ' "5\\n"}\n        - {stdin: "hi\\n", stdout: "hi\\n"}',
    )
    with pytest.raises(SpecError) as info:
        spec.load(path)
    msg = "the expected stdout is one of the case's inputs: a program that echoes its input passes"
    assert info.value.problems == [
        f"{path}:12: assertions[0].cases.each[1].stdout: {msg}",
        f"{path}:13: assertions[0].cases.each[2].stdout: {msg}",
    ]
    assert "add 40 2 -> 42" in info.value.fix


def test_a_case_without_stdout_or_with_an_unknown_field_names_it(tmp_path):
    path = write(tmp_path, '        - {args: ["1"]}\n        - {stdout: "1\\n", stdot: "x"}')
    got = problems(path)
    assert f"{path}:11: assertions[0].cases.each[0]: 'stdout' is required" in got
    assert (
        f"{path}:12: assertions[0].cases.each[1].stdot: unknown field; allowed here: args,"
        " exit_code, stdin, stdout" in got
    )


# --- what reaches the engine --------------------------------------------------------------------


class RecordingEngine:
    """Stands in for the engine and keeps every byte sent to it: create arguments and stdin.
    Each case answers with a fixed stdout, so the whole path (copy, run, record) runs."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self._peer: socket.socket | None = None
        self._stdin = False

    def create_container(self, kwargs: dict[str, Any]) -> str:
        self.sent.append(repr(kwargs).encode())
        return "cid"

    @contextlib.contextmanager
    def attached(self, cid: str, *, stdin: bool):
        ours, self._peer = socket.socketpair()
        self._stdin = stdin
        try:
            yield ours
        finally:
            ours.close()

    def start(self, cid: str) -> None:
        peer, stdin = self._peer, self._stdin

        def answer() -> None:
            peer.sendall(frame(1, b"17\n"))
            data = b""
            while stdin and (chunk := peer.recv(65536)):
                data += chunk
            self.sent.append(data)
            peer.shutdown(socket.SHUT_WR)  # the program ends: EOF on its stdout

        threading.Thread(target=answer).start()

    def wait(self, cid: str, timeout: float) -> int:
        return 0

    def stop(self, cid: str, grace: float) -> None:
        pass

    def observe(self, cid: str) -> Observed:
        return Observed(status="exited", runtime="runc")

    def remove_container(self, cid: str) -> None:
        pass


def test_no_expected_output_or_exit_code_is_ever_sent_to_the_engine(tmp_path):
    secret_out, secret_code = "SECRET-ANSWER-7f3a", 173
    path = write(
        tmp_path,
        f'        - {{args: ["a1"], stdin: "in-1", stdout: "{secret_out}\\n", exit_code:'
        f' {secret_code}}}\n        - {{args: ["a2"], stdout: "{secret_out}-2\\n"}}',
    )
    loaded = spec.load(path)
    engine = RecordingEngine()
    results = checks.run_cases(
        loaded,
        loaded.workspace.fixture,
        {"entries": {}},
        engine,
        "assure-agent:x",
        {},
        "t",
        user=(60600, 60600),
    )
    wire = b"".join(engine.sent)
    assert b"in-1" in wire and b"a1" in wire and b"a2" in wire  # the inputs do go in
    assert secret_out.encode() not in wire and b"exit_code" not in wire
    assert [base64.b64decode(r["stdout_b64"]) for r in results[0]["results"]] == [b"17\n", b"17\n"]
