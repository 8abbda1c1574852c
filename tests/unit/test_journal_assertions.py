"""journal_has / journal_lacks read what happened: an intent (a call allowed to start) is not
an outcome, so it never satisfies them unless the assertion asks for intents by name."""

from pathlib import Path

from assure.verify import assertions
from assure.verify.findings import Kind
from assure.verify.snapshot import Snapshot

EMPTY = Snapshot({}, False, ())
WRITE = {"tool": "fs.write", "decision": "allow", "path": "src/calc.py"}


def check(assertion, journal):
    return assertions.check(
        assertion, assertions.Evidence(EMPTY, Path("/nonexistent"), 0, journal, [])
    )


def test_an_intent_without_its_outcome_does_not_satisfy_journal_has():
    intent_only = [{"event": "intent", "action_id": "a1", **WRITE}]
    assert check({"journal_has": WRITE}, intent_only).kind is Kind.ASSERTION_FAILED
    assert check({"journal_lacks": WRITE}, intent_only).kind is Kind.ASSERTION_PASSED
    assert (
        check({"journal_has": {**WRITE, "event": "intent"}}, intent_only).kind
        is Kind.ASSERTION_PASSED
    )


def test_the_outcome_satisfies_it_once():
    both = [
        {"event": "intent", "action_id": "a1", **WRITE},
        {"event": "tool_call", "action_id": "a1", **WRITE},
    ]
    finding = check({"journal_has": WRITE}, both)
    assert finding.kind is Kind.ASSERTION_PASSED and finding.message == "1 matching journal entries"
