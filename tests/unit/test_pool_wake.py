"""A free pair's waits (gateway `--wait`, the agent's claim gate): blocked on a FIFO the claim
writes a line to, never missing a wake-up, falling back to polling when the FIFO is gone."""

import os
import threading

import pytest

from assure.gateway import __main__ as gateway_main
from assure.run import pool


@pytest.fixture
def folder(tmp_path):
    os.mkfifo(tmp_path / pool.WAKE, 0o600)
    return tmp_path


def test_the_gateway_waits_on_the_fifo_and_the_claim_wakes_it(folder, monkeypatch):
    monkeypatch.setattr(
        gateway_main.time, "sleep", lambda _: pytest.fail("polled instead of waiting on the FIFO")
    )
    config = folder / "gateway.json"

    def claim():
        config.write_text("{}")
        pool.wake(folder)

    threading.Timer(0.2, claim).start()  # not time.sleep: patched above
    assert gateway_main._wait_for(str(config), 30)
    assert not (folder / pool.WAKE).exists()  # the record keeps regular files only


def test_a_config_written_before_the_gateway_waits_is_found_at_once(folder):
    (folder / "gateway.json").write_text("{}")
    pool.wake(folder)  # nobody reads the FIFO yet: no error, and it is gone
    assert not (folder / pool.WAKE).exists()
    assert gateway_main._wait_for(str(folder / "gateway.json"), 30)


def test_without_the_fifo_the_gateway_polls(tmp_path):
    config = tmp_path / "gateway.json"
    threading.Timer(0.2, lambda: config.write_text("{}")).start()
    assert gateway_main._wait_for(str(config), 30)


def test_a_gateway_never_claimed_gives_up_when_its_wait_ends(folder):
    assert gateway_main._wait_for(str(folder / "gateway.json"), 0.2) is False


def test_remove_wakes_leaves_no_fifo_in_an_attempt(tmp_path):
    for sub in ("gateway-config", pool.CLAIM):
        (tmp_path / sub).mkdir()
        os.mkfifo(tmp_path / sub / pool.WAKE)
    pool.remove_wakes(tmp_path)
    assert [p for p in tmp_path.rglob("*") if not p.is_dir()] == []
