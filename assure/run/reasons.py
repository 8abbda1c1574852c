"""Why an attempt did not pass, in one line and its evidence, for the report (`reason`).

Computed on the host from what the attempt's folder holds: the findings (a breach's headline
is always its heaviest finding, from the snapshots and the journal), the gateway's verified
journal (the gate's first denial: its rule and message, which is containment that worked),
the exit code, the harness errors, how the harness stopped the agent, and the last lines of
`agent.log` (agent-controlled: bounded and escaped by `display`, shown as evidence, never
read as a claim). Never from `task.report`. The agent chose every path, tool name and byte it
left: in the one-line summary each such string is quoted, cut and marked (`agent_quoted`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from assure.core.chain import ChainError, iter_chain
from assure.records.attempt_record import AttemptRecord
from assure.records.run_report import GateDenial, Reason
from assure.records.summary import denial_line
from assure.run.preflight import missing_agent_script
from assure.sandbox.hardening import AGENT_FILES
from assure.spec import Spec
from assure.textsafe import agent_quoted, display
from assure.verify.findings import Finding, Kind, Severity, Verdict

OUTPUT_LINES = 5  # the agent's last output lines kept
OUTPUT_CHARS = 600  # ... and at most this many characters of them
OUTPUT_READ_BYTES = 4096  # read from the end of agent.log to find them
MESSAGE_CHARS = 300  # a denial's message, as quoted
NOT_FOUND = 127  # the shell's exit code for a command it could not find
DENIED = ("deny", "escalate")


def attempt_reason(record: AttemptRecord, spec: Spec) -> Reason | None:
    """The `Reason` (summary, gate denial, agent output) for an attempt that did not pass or was not
    contained; None for one that did. `summary` is one line, the likeliest cause first: an
    agent command naming a script the spec does not ship (`preflight`, the same check as
    `assure validate`), exit 127 with "not found" in its output, a harness error, the gate's
    first denial, a stop, a non-zero exit."""
    judgement = record.judgement
    if judgement is None or judgement.verdict.value in ("pass", "contained"):
        return None
    facts = record.facts
    denial = first_denial(record)
    output = agent_output(record) if facts.exit_code not in (0, None) else []
    summary = None
    missing = missing_agent_script(spec)
    if (
        judgement.verdict is Verdict.BREACH
    ):  # what the verifier found, whatever the agent did or said besides
        summary = breach_line(judgement.findings)
    elif missing is not None and facts.exit_code != 0:
        files = (
            f"the agent files ({display(str(spec.agent.files))})"
            if spec.agent.files
            else f"any agent files (the spec ships none to {AGENT_FILES})"
        )
        summary = (
            f"the agent's command was not found: {display(missing[1])} is not among {files} (exit"
            f" code {facts.exit_code})"
        )
    elif facts.exit_code == NOT_FOUND and any("not found" in line for line in output):
        summary = (
            "exit code 127: a command the agent ran was not found (its output below says which)"
        )
    elif facts.harness_errors:
        summary = f"harness error: {display(facts.harness_errors[0])[:MESSAGE_CHARS]}"
    elif denial is not None:
        summary = denial_line(denial)
    elif stop := facts.stopped:
        summary = f"the harness stopped the agent: {display(stop.reason)}" + (
            f" ({display(stop.counter)})" if stop.counter else ""
        )
    elif facts.exit_code not in (0, None):
        summary = f"the agent exited with code {facts.exit_code}"
    if summary is None and denial is None and not output:
        return None  # the findings say it all
    return Reason(summary, denial, tuple(output))


# What each kind of breach finding means, in the harness's words, heaviest first; and whether its
# subject is a name the agent chose (a path, a table row) rather than one the harness wrote.
BREACH_WORDS: dict[Kind, tuple[str, bool]] = {
    Kind.CONTAINMENT_FAILED: ("the engine reports a weaker containment than required", False),
    Kind.PROTECTED_CHANGED: ("a protected path changed", True),
    Kind.CONTAINER_CHANGED: ("the container's filesystem changed outside the workspace", True),
    Kind.UNATTRIBUTED: ("a change no allowed gateway call or writable scope explains", True),
    Kind.JOURNAL_INCOMPLETE: ("the journal is incomplete", False),
}


def breach_line(findings: Iterable[Finding]) -> str:
    """A breach's headline: its heaviest finding (by BREACH_WORDS), its subject quoted as the
    agent's where the agent named it, and how many more there are."""
    found = [f for f in findings if f.severity == Severity.BREACH]
    if not found:
        return "breach"
    order = list(BREACH_WORDS)
    first = min(found, key=lambda f: order.index(f.kind) if f.kind in order else len(order))
    words, agents = BREACH_WORDS.get(first.kind, (first.kind.value, True))
    subject = agent_quoted(first.subject) if agents else display(first.subject)
    more = (
        f" (and {len(found) - 1} more breach finding{'s' if len(found) > 2 else ''})"
        if len(found) > 1
        else ""
    )
    return f"breach: {first.kind.value} {subject}: {words}{more}"


def first_denial(record: AttemptRecord) -> GateDenial | None:
    """The gate's first denied (or escalated) call in the journal, and how many there were.
    The journal is verified as it streams; past a broken line nothing is read (judge reports it)."""
    path = record.paths.journal
    first: dict[str, Any] | None = None
    denied = 0
    if not path.is_file():
        return None
    try:
        for line in iter_chain(path):
            if (
                line.get("event") not in ("tool_call", "model_call")
                or line.get("decision") not in DENIED
            ):
                continue
            denied += 1
            if first is None:
                first = {
                    "tool": display(str(line.get("tool"))),
                    "path": display(str(line["path"])) if line.get("path") else None,
                    "rule": display(str(line.get("rule"))),
                    "message": display(str(line.get("reason")))[:MESSAGE_CHARS],
                }
    except (ChainError, OSError, UnicodeDecodeError, ValueError):
        pass
    return None if first is None else GateDenial(**first, denied=denied)


def agent_output(record: AttemptRecord) -> list[str]:
    """The last lines of `agent.log` (stdout and stderr as the engine kept them), each escaped,
    at most OUTPUT_LINES lines and OUTPUT_CHARS characters in all (the latest kept)."""
    try:
        with open(record.paths.agent_log, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(0, size - OUTPUT_READ_BYTES))
            data = fh.read(OUTPUT_READ_BYTES)
    except OSError:
        return []
    lines = [
        display(line)
        for line in data.decode("utf-8", "surrogateescape").splitlines()
        if line.strip()
    ]
    if size > OUTPUT_READ_BYTES and lines:
        lines = lines[1:]  # the first may be cut
    kept: list[str] = []
    for line in reversed(lines[-OUTPUT_LINES:]):
        room = OUTPUT_CHARS - sum(len(k) for k in kept)
        if room <= 1:
            break
        kept.insert(0, line if len(line) <= room else "…" + line[-(room - 1) :])
    return kept
