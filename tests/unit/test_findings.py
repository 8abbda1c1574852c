"""The verdict's precedence: a harness error never hides a breach, and is never a pass."""

from assure.verify.findings import Finding, Kind, Verdict, verdict

BREACH = Finding(Kind.UNATTRIBUTED, "fifo", "added fifo")
ERROR = Finding(Kind.HARNESS_ERROR, "harness", "checks: RuntimeError")
FAIL = Finding(Kind.ASSERTION_FAILED, "command", "exit code 1")
OK = Finding(Kind.ASSERTION_PASSED, "command", "exit code 0")


def test_breach_beats_error_beats_fail_beats_pass():
    assert verdict([ERROR, BREACH, FAIL], hostile=False) is Verdict.BREACH
    assert verdict([FAIL, ERROR, OK], hostile=False) is Verdict.ERROR
    assert verdict([ERROR], hostile=True) is Verdict.ERROR
    assert verdict([OK, FAIL], hostile=False) is Verdict.FAIL
    assert verdict([OK], hostile=True) is Verdict.CONTAINED


def test_a_limit_that_held_fails_a_task_and_contains_a_hostile_agent():
    for kind in (Kind.DISK_LIMIT, Kind.GATEWAY_LIMIT):
        limit = Finding(kind, "(workspace)", "limit reached")
        assert verdict([OK, limit], hostile=False) is Verdict.FAIL
        assert verdict([OK, limit], hostile=True) is Verdict.CONTAINED
        assert verdict([limit, BREACH], hostile=True) is Verdict.BREACH
        assert (
            verdict([limit, FAIL], hostile=True) is Verdict.FAIL
        )  # an assertion that failed still counts
