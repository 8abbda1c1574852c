"""A free pair's waits (gateway `--wait`, the agent's claim gate): blocked on a FIFO the claim
writes a line to, never missing a wake-up, falling back to polling when the FIFO is gone."""

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from assure.errors import AssureError
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


def test_a_fifo_has_a_reader_only_while_something_holds_it_open_to_read(folder):
    fifo = folder / pool.WAKE
    assert not pool.has_reader(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert pool.has_reader(fifo)
        assert os.read(reader, 10) == b""  # looking wrote nothing: the waiter is not woken
    finally:
        os.close(reader)
    assert not pool.has_reader(fifo)
    assert not pool.has_reader(folder / "missing")


def test_a_regular_file_in_place_of_the_fifo_is_no_reader(tmp_path):
    (tmp_path / pool.WAKE).write_text("")  # opens for writing at once, yet nothing waits on it
    assert not pool.has_reader(tmp_path / pool.WAKE)


def test_a_pair_whose_waiters_never_open_their_fifos_is_not_ready(folder):
    with pytest.raises(AssureError, match="not ready"):
        pool._await_readers([folder / pool.WAKE], 0.1)
    reader = os.open(folder / pool.WAKE, os.O_RDONLY | os.O_NONBLOCK)
    try:
        pool._await_readers([folder / pool.WAKE], 5)
    finally:
        os.close(reader)


def test_a_waiting_gateway_binds_its_socket_and_opens_its_store_before_its_config(tmp_path):
    """What it opens before the claim is at the places given; the claim's config is read and
    served on them; no call is answered before the journal is open (the config came)."""
    os.mkfifo(tmp_path / pool.WAKE, 0o600)
    sock, db, config = tmp_path / "gw.sock", tmp_path / "idem.sqlite", tmp_path / "gateway.json"
    (tmp_path / "ws").mkdir()
    args = ["--config", str(config), "--wait", "30", "--listen", str(sock), "--store", str(db)]
    gateway = subprocess.Popen(
        [sys.executable, "-m", "assure.gateway", *args], stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while not pool.has_reader(tmp_path / pool.WAKE):
            assert time.monotonic() < deadline and gateway.poll() is None, gateway.stderr
            time.sleep(0.01)
        assert sock.is_socket() and db.is_file()  # both there while it waits
        agent = socket.socket(socket.AF_UNIX)
        agent.connect(str(sock))  # the agent's first call waits in the backlog
        agent.settimeout(0.3)
        agent.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        with pytest.raises(TimeoutError):
            agent.recv(100)  # nothing answers before the config (and the journal)
        assert not (tmp_path / "journal.jsonl").exists()
        config.write_text(json.dumps(_config(tmp_path, socket=str(sock), idempotency_db=str(db))))
        pool.wake(tmp_path)
        agent.settimeout(10)
        assert agent.recv(100).startswith(b"HTTP/1.1 200")
        agent.close()
        first = json.loads((tmp_path / "journal.jsonl").read_text().splitlines()[0])
        assert first["event"] == "gateway_started"
    finally:
        gateway.terminate()
        assert gateway.wait(10) == 0, gateway.stderr.read()


def _config(folder, **places):
    return {
        "run_id": "r1",
        "attempt": 1,
        "workspace": str(folder / "ws"),
        "journal": str(folder / "journal.jsonl"),
        "ready_file": str(folder / "ready"),
        "limits": {"tool_calls": 10, "wall_seconds": 60.0},
        **places,
    }


@pytest.mark.parametrize("named", ["socket", "idempotency_db"])
def test_a_waiting_gateway_refuses_a_config_naming_other_places_than_it_opened(tmp_path, named):
    sock, db, config = tmp_path / "gw.sock", tmp_path / "idem.sqlite", tmp_path / "gateway.json"
    (tmp_path / "ws").mkdir()
    places = {"socket": str(sock), "idempotency_db": str(db)}
    places[named] = str(tmp_path / "other")
    config.write_text(json.dumps(_config(tmp_path, **places)))
    args = ["--config", str(config), "--wait", "5", "--listen", str(sock), "--store", str(db)]
    assert gateway_main.main(args) == 1
    assert not (tmp_path / "journal.jsonl").exists() and not (tmp_path / "ready").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--config", "c", "--listen", "s"],  # only a waiting gateway opens anything first
        ["--config", "c", "--wait", "5", "--listen"],
        ["--config", "c", "--wait", "5", "--listen", ""],
        ["--config", "c", "--wait", "5", "--listen", "s", "--listen", "t"],
        ["--config", "c", "--wait", "5", "--journal", "j"],
    ],
)
def test_what_a_gateway_opens_before_its_config_is_a_usage_of_its_own(args):
    assert gateway_main._parse(args) is None


def test_the_usages_parse():
    assert gateway_main._parse(["--config", "c"]) == ("c", None, {})
    assert gateway_main._parse(["--config", "c", "--wait", "5"]) == ("c", 5.0, {})
    assert gateway_main._parse(
        ["--config", "c", "--wait", "5", "--store", "d", "--listen", "s"]
    ) == ("c", 5.0, {"--store": "d", "--listen": "s"})
