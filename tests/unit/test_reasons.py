"""A failed attempt's report says why (`reason`), from the records: the gate's first denial,
a command not found among the agent files, the agent's last output lines (escaped, bounded);
and the box shows it. Whole runs on the in-memory backend."""

from __future__ import annotations

from pathlib import Path

from assure.records.report import console, render_report
from assure.run import reasons
from assure.sandbox.fake import Context
from tests.unit import test_driver_states as states
from tests.unit.test_driver_states import FIXED, drive, gateway, new_run, ratified, write_spec

short_tmp = states.short_tmp  # the same fixture
FIXED_TEXT = [{"file_contains": {"path": "src/calc.py", "text": "return a + b"}}]


def fix_and_complain(ctx: Context) -> int:
    """Tries to fix add() through the gateway; says so on stderr (with a hostile escape) and fails."""
    with gateway(ctx) as client:
        try:
            client.call("fs.write", path="src/calc.py", content=FIXED)
        except Exception as exc:
            for n in range(20):
                ctx.output(2, f"noise {n} {'x' * 200}\n".encode())
            ctx.output(2, f"agent: \x1b[31m{type(exc).__name__}\n".encode())
            ctx.output(2, b"agent: giving up\n")
            return 1
    return 0


def shell(ctx: Context) -> int:
    """`sh SCRIPT` as Debian's dash answers a script that is not there."""
    script = ctx.command[1]
    if not ctx.path(script).is_file():
        ctx.output(2, f"sh: 0: cannot open {script}: No such file\n".encode())
        return 2
    return 0


def box(report: dict, run_dir: Path) -> str:
    out = console()
    out.width = 400  # one line per row: what is asserted is the text, not the wrapping
    with out.capture() as captured:
        out.print(render_report(report, str(run_dir)))
    return captured.get()


def run_one(tmp_path: Path, short_tmp: str, command: str, programs: dict, **fields):
    spec = write_spec(tmp_path, command, assertions=FIXED_TEXT, **fields)
    run = new_run(tmp_path, spec)
    result, _ = drive(spec, run, short_tmp, programs)
    (attempt,) = result.report["attempts"]
    return attempt, box(result.report, run.path)


def test_no_contract_the_reason_is_the_gates_first_denial_with_the_agents_last_lines(tmp_path, short_tmp):
    attempt, shown = run_one(tmp_path, short_tmp, "fix_and_complain", {"fix_and_complain": fix_and_complain})
    reason = attempt["reason"]
    assert attempt["verdict"] == "fail"
    assert reason["summary"] == "the gate denied fs.write src/calc.py: contract.missing: no contract covers this move"
    assert reason["gate_denial"] == {"tool": "fs.write", "path": "src/calc.py", "rule": "contract.missing", "message": "no contract covers this move", "denied": 1}
    output = reason["agent_output"]
    assert output[-1] == "agent: giving up" and len(output) <= reasons.OUTPUT_LINES
    assert sum(len(line) for line in output) <= reasons.OUTPUT_CHARS
    assert "why: the gate denied fs.write src/calc.py: contract.missing" in shown and "│ agent: giving up" in shown
    assert "\x1b" not in shown


def test_a_self_ratified_contract_is_named_in_the_box(tmp_path, short_tmp):
    own = {**ratified(["fs:**"]), "ratified_by": "Alice"}
    attempt, shown = run_one(tmp_path, short_tmp, "fix_and_complain", {"fix_and_complain": fix_and_complain}, contract=own)
    assert attempt["reason"]["gate_denial"]["rule"] == "contract.self_ratified"
    assert "contract.self_ratified: contract 'c-test' was ratified by its own proposer 'alice'" in shown
    escaped = [line for line in attempt["reason"]["agent_output"] if "GatewayError" in line]
    assert escaped == ["agent: \\x1b[31mGatewayError"]  # agent bytes, escaped: never a terminal sequence


def test_a_script_the_spec_does_not_ship_is_said_to_be_not_found(tmp_path, short_tmp):
    files = tmp_path / "agent-files"
    files.mkdir()
    attempt, shown = run_one(tmp_path, short_tmp, "sh", {"sh": shell}, contract=ratified(["fs:**"]),
                             agent={"command": ["sh", "/opt/agent/run.sh"], "files": str(files)})
    summary = attempt["reason"]["summary"]
    assert summary == f"the agent's command was not found: /opt/agent/run.sh is not among the agent files ({files}) (exit code 2)"
    assert attempt["reason"]["agent_output"] == ["sh: 0: cannot open /opt/agent/run.sh: No such file"]
    assert "why: the agent's command was not found" in shown


def test_a_passing_attempt_has_no_reason(tmp_path, short_tmp):
    attempt, shown = run_one(tmp_path, short_tmp, "fix", {"fix": states.fix}, contract=ratified(["fs:**"]))
    assert (attempt["verdict"], attempt["reason"]) == ("pass", None) and "why:" not in shown
