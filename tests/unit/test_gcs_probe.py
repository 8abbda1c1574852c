"""The probe `--cluster` and `doctor --cluster` run before Ray is asked to join: only a server that
answers Ray's GetClusterId with a cluster id passes, and anything else at the address is refused
in seconds, reading a bounded number of bytes. The servers here speak bytes over loopback; the
real GCS, the raylet's gRPC port and an HTTP/2 server that sends garbage are in
tests/integration/test_ray_cluster.py."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from assure.errors import AssureError
from assure.run import cluster, gcs_probe

SETTINGS = bytes(3) + b"\x04" + bytes(5)
OK_HEADERS = b"\x00\x00\x01\x01\x04\x00\x00\x00\x01\x88"  # :status 200, END_HEADERS, stream 1
TRAILERS = b"\x00\x00\x01\x01\x05\x00\x00\x00\x01\x88"  # END_STREAM too
REPLY = b"\x12\x1c" + bytes(range(28))  # GetClusterIdReply{cluster_id: 28 bytes}


def data(payload: bytes, end: bool = False) -> bytes:
    message = b"\x00" + len(payload).to_bytes(4, "big") + payload
    return len(message).to_bytes(3, "big") + b"\x00" + bytes((end,)) + b"\x00\x00\x00\x01" + message


@pytest.fixture
def server() -> Iterator[Callable[[Callable[[socket.socket], None]], str]]:
    """A loopback server that runs `answer` on each connection it accepts; gives its address."""
    listeners: list[socket.socket] = []

    def start(answer: Callable[[socket.socket], None]) -> str:
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)

        def serve() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                with conn:
                    try:
                        conn.recv(65536)
                        answer(conn)
                    except OSError:
                        pass

        threading.Thread(target=serve, daemon=True).start()
        return f"127.0.0.1:{listener.getsockname()[1]}"

    yield start
    for listener in listeners:
        listener.close()


def sends(*chunks: bytes) -> Callable[[socket.socket], None]:
    return lambda conn: conn.sendall(b"".join(chunks))


def refused(address: str) -> str:
    with pytest.raises(AssureError) as caught:
        cluster.probe(address, timeout=1)
    said = caught.value.explain()
    assert address in said and "ray start --head" in said
    return said


def test_a_ray_gcs_reply_passes(server):
    cluster.probe(server(sends(SETTINGS, OK_HEADERS, data(REPLY), TRAILERS)), timeout=1)


@pytest.mark.parametrize(
    "answer",
    [
        sends(SETTINGS, b"\xffgarbage" * 100),  # HTTP/2's first frame, then anything
        sends(b"HTTP/1.0 400 Bad request\r\n\r\n"),  # an HTTP/1 server
        sends(SETTINGS, TRAILERS),  # gRPC's UNIMPLEMENTED: a status, no reply
        sends(SETTINGS, OK_HEADERS, data(b"\x0a\x00"), TRAILERS),  # a reply without a cluster id
        sends(SETTINGS, OK_HEADERS, b"\x00\x00\x04\x03\x00\x00\x00\x00\x01\x00\x00\x00\x0c"),
        sends(SETTINGS, data(REPLY, end=True)),  # data without headers
        sends(SETTINGS, b"\x00\x00\x08\x07" + bytes(13)),  # GOAWAY
    ],
)
def test_anything_but_a_gcs_reply_is_not_a_ray_gcs(server, answer):
    assert "is not a Ray GCS" in refused(server(answer))


def test_a_closed_port_is_nothing_answering():
    with socket.create_server(("127.0.0.1", 0)) as s:
        address = f"127.0.0.1:{s.getsockname()[1]}"
    assert "nothing answers at the Ray cluster address" in refused(address)


def test_a_server_that_stalls_or_floods_is_refused_within_the_bounds(server):
    def flood(conn: socket.socket) -> None:
        conn.sendall(SETTINGS)
        while True:  # WINDOW_UPDATEs on stream 0, without end
            conn.sendall(b"\x00\x00\x04\x08\x00\x00\x00\x00\x00\x00\x00\x00\x01" * 1000)

    def stall(conn: socket.socket) -> None:
        conn.sendall(SETTINGS + OK_HEADERS)
        time.sleep(5)

    started = time.monotonic()
    assert f"more than {gcs_probe.MAX_READ} bytes" in refused(server(flood))
    assert "did not answer GetClusterId in 1 s" in refused(server(stall))
    assert time.monotonic() - started < 3


@pytest.fixture
def ray_token(monkeypatch):
    """Set Ray's token authentication in the environment: `ray_token(token)` (None: unset), read
    again by Ray (which caches its mode and token per process); unset again at the end."""
    from ray._private.authentication_test_utils import reset_auth_token_state

    def use(token: str | None) -> None:
        for name, value in (("RAY_AUTH_MODE", "token"), ("RAY_AUTH_TOKEN", token)):
            if token is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        reset_auth_token_state()

    yield use
    use(None)


def test_a_status_alone_is_refused_and_says_whether_the_callers_token_was_sent(server, ray_token):
    """A head with token authentication answers a call without its token (or with another) with a
    status only; Ray would retry it for as long as a wrong address."""
    address = server(sends(SETTINGS, TRAILERS))
    assert "wants a Ray token" in refused(address)
    ray_token("x" * 200)
    assert "refused this caller's Ray token" in refused(address)


def test_the_call_carries_the_token_as_ray_sends_it(ray_token):
    """HPACK: `authorization` (static table 23), never indexed, its length on a 7-bit prefix
    (past 127 bytes: continued)."""
    ray_token("t" * 200)
    header = cluster.ray_authorization()
    assert header == "Bearer " + "t" * 200
    sent = gcs_probe.request(b"h:1", header.encode())
    assert b"\x1f\x08\x7f\x50" + header.encode() in sent  # index 15+8; length 127+80 = 207
    assert b"authorization" not in gcs_probe.request(b"h:1")
    ray_token(None)
    assert cluster.ray_authorization() is None
