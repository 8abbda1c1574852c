"""A container's logs are read from the engine's endpoint and its frames parsed here
(sandbox/docker/backend.py `_frames_payload`), not through docker-py's inspect-first `logs`."""

from __future__ import annotations

from assure.sandbox.docker.backend import _frames_payload


def frame(stream: int, data: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(data).to_bytes(4, "big") + data


def test_stdout_and_stderr_come_back_in_the_order_written() -> None:
    data = frame(1, b"out one\n") + frame(2, b"err\n") + frame(1, b"out two\n")
    assert _frames_payload(data) == b"out one\nerr\nout two\n"


def test_a_frame_header_inside_the_payload_is_payload() -> None:
    tricky = frame(1, b"x") + b"\x01\x00\x00\x00"
    assert _frames_payload(frame(1, tricky) + frame(2, b"!")) == tricky + b"!"


def test_a_cut_last_frame_keeps_what_arrived_and_an_empty_answer_is_empty() -> None:
    assert _frames_payload(frame(1, b"whole") + frame(2, b"partial")[:-3]) == b"wholepart"
    assert _frames_payload(b"") == b""
    assert _frames_payload(b"\x01\x00\x00") == b""  # less than a header
