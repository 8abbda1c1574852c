"""The operator control record: atomic, logged, fail-closed when unreadable."""

import json

import pytest

from assure.core import control
from assure.core.chain import verify_chain


def test_no_record_means_no_override(tmp_path):
    assert control.read(tmp_path) == control.Override()


def test_halt_and_dial_are_recorded_and_logged(tmp_path):
    first = control.request(tmp_path, run_id="r", actor="alice", dial="propose")
    second = control.request(tmp_path, run_id="r", actor="bob", halt=True)
    now = control.read(tmp_path)
    assert (now.halted, now.dial, now.actor, now.request_id) == (
        True,
        "propose",
        "bob",
        second.request_id,
    )
    log = verify_chain(tmp_path / control.OPERATOR_LOG)
    assert [(r["event"], r["actor"], r["request_id"]) for r in log] == [
        ("dial_changed", "alice", first.request_id),
        ("override_requested", "bob", second.request_id),
    ]
    assert log[0]["dial"] == "propose" and log[0]["previous"] is None
    assert log[1]["halted"] is True


def test_an_unreadable_record_halts(tmp_path):
    (tmp_path / control.OPERATOR_FILE).write_text("{not json")
    assert control.read(tmp_path).halted is True


def test_an_unknown_dial_is_refused(tmp_path):
    with pytest.raises(ValueError):
        control.request(tmp_path, run_id="r", actor="a", dial="yolo")
    assert not (tmp_path / control.OPERATOR_FILE).exists()


def test_a_bogus_dial_in_the_file_means_propose(tmp_path):
    (tmp_path / control.OPERATOR_FILE).write_text(
        json.dumps({"halted": False, "dial": "unlimited"})
    )
    assert control.read(tmp_path).dial == "propose"
