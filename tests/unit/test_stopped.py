"""container.json `stopped`: one type for the three ways the harness stops an agent, the same
JSON on disk as the dicts it replaced, and a record that does not read as one is refused."""

import json

import pytest

from assure.verify.facts import ContainerFacts
from assure.verify.stopped import Stopped, StopReason

# What the attempt wrote before the type (run/attempt.py's three dicts, then halted_at and
# latency_ms), key for key and in order.
OLD = [
    {
        "reason": "deadline",
        "counter": "wall_seconds",
        "breach_at": 100.0,
        "halted_at": 100.5,
        "latency_ms": 500.0,
    },
    {
        "reason": "budget",
        "counter": "tool_calls",
        "breach_at": 100.0,
        "halted_at": 100.25,
        "latency_ms": 250.0,
    },
    {
        "reason": "operator_halt",
        "request_id": "r-1",
        "actor": "operator-1",
        "requested_at": 100.0,
        "halted_at": 101.0,
        "latency_ms": 1000.0,
    },
    {  # an unreadable control record halts with nobody's name and no time
        "reason": "operator_halt",
        "request_id": None,
        "actor": None,
        "requested_at": None,
        "halted_at": 101.0,
        "latency_ms": None,
    },
]


def test_each_stop_writes_the_json_it_always_did():
    built = [
        Stopped.deadline(100.0).halted(100.5),
        Stopped.budget("tool_calls", 100.0).halted(100.25),
        Stopped.operator_halt("r-1", "operator-1", 100.0).halted(101.0),
        Stopped.operator_halt(None, None, None).halted(101.0),
    ]
    assert [json.dumps(s.to_json()) for s in built] == [json.dumps(o) for o in OLD]


@pytest.mark.parametrize("old", OLD)
def test_an_old_record_reads_back_as_the_same_stop(old):
    stop = Stopped.from_json(old)
    assert stop.to_json() == old and stop.reason is StopReason(old["reason"])
    assert ContainerFacts({"stopped": old}).stopped == stop


@pytest.mark.parametrize(
    "bad",
    [
        "deadline",
        {"reason": "timeout", "counter": "wall_seconds"},
        {"reason": "budget"},  # a counter that ran out names it
        {"reason": "budget", "counter": "tool_calls", "breach_at": "soon"},
        {"reason": "budget", "counter": "tool_calls", "halted_at": True},
        {"reason": "deadline", "counter": "wall_seconds", "note": "extra"},
        {"reason": "operator_halt", "actor": 7},
    ],
)
def test_a_record_that_is_not_a_stop_makes_container_json_unreadable(bad):
    with pytest.raises(ValueError):
        Stopped.from_json(bad)
    with pytest.raises(ValueError):  # AttemptRecord.load keeps it as unreadable: never passes
        ContainerFacts({"stopped": bad})


def test_no_stop_is_none():
    assert ContainerFacts({"stopped": None}).stopped is None
    assert ContainerFacts({}).stopped is None
