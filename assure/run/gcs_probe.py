"""Whether a Ray GCS answers at host:port, asked the way Ray's own client first asks it: one
`NodeInfoGcsService/GetClusterId` call over plaintext HTTP/2, written by hand (Ray ships no
Python gRPC here). Ray itself retries a wrong address for minutes and prints its warnings
meanwhile; this answers in seconds, bounded in time and in bytes read.

Only a reply that carries a cluster id is a Ray GCS. With Ray's token authentication the call
carries the caller's token as Ray's client sends it (`authorization`), so a head that takes the
token answers with its cluster id, and one that does not answers with a status only
(`StatusOnly`): refused here too, as Ray would retry it for as long as a wrong address."""

from __future__ import annotations

import socket
import struct
import time

METHOD = b"/ray.rpc.NodeInfoGcsService/GetClusterId"  # ray.core.generated.gcs_service_pb2_grpc
MAX_READ = 64 << 10  # bytes read of the answer before it is judged not a GCS's
_MAX_FRAME = 16384  # HTTP/2's default SETTINGS_MAX_FRAME_SIZE, which this client never raises
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x7
_END_STREAM, _ACK, _PADDED = 0x1, 0x1, 0x8
_STREAM = 1


class NotGcs(Exception):
    """What answers is not a Ray GCS; the message says what was seen instead."""


class StatusOnly(NotGcs):
    """A gRPC answer without a reply: a GCS that refused the call's token (or its lack of one),
    or a gRPC server that is no GCS."""


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes((kind, flags))
        + struct.pack(">I", stream)
        + payload
    )


def _integer(value: int, bits: int, flags: int = 0) -> bytes:
    """An HPACK integer on a `bits`-bit prefix, `flags` in the first byte's other bits."""
    top = (1 << bits) - 1
    if value < top:
        return bytes((flags | value,))
    out, value = bytearray((flags | top,)), value - top
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out) + bytes((value,))


def _literal(index: int, value: bytes, never_indexed: bool = False) -> bytes:
    """An HPACK literal header field without indexing (or never indexed: a secret), its name
    from the static table and its value not Huffman-coded."""
    return _integer(index, 4, 0x10 if never_indexed else 0) + _integer(len(value), 7) + value


def request(authority: bytes, authorization: bytes | None = None) -> bytes:
    """The client's whole side: preface, empty SETTINGS, and the call (HEADERS, then one DATA of
    an empty, uncompressed gRPC message: GetClusterIdRequest has no fields)."""
    headers = (
        b"\x83\x86"  # :method POST, :scheme http (static table 3 and 6)
        + _literal(4, METHOD)  # :path
        + _literal(1, authority[:126])  # :authority
        + b"\x0f\x10\x10application/grpc"  # content-type (static table 31)
        + b"\x00\x02te\x08trailers"
        + (_literal(23, authorization, never_indexed=True) if authorization else b"")
    )
    return (
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
        + _frame(_SETTINGS, 0, 0)
        + _frame(_HEADERS, 0x4, _STREAM, headers)  # END_HEADERS
        + _frame(_DATA, _END_STREAM, _STREAM, bytes(5))
    )


def cluster_id(message: bytes) -> bytes:
    """The `cluster_id` (field 2, bytes) of a GetClusterIdReply's serialized protobuf, or b""."""
    at, found = 0, b""
    while at < len(message):
        key, at = _varint(message, at)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, at = _varint(message, at)
        elif wire == 2:
            size, at = _varint(message, at)
            if at + size > len(message):
                raise NotGcs("a reply that is not a GetClusterIdReply")
            if field == 2:
                found = message[at : at + size]
            at += size
        elif wire in (1, 5):
            at += 8 if wire == 1 else 4
        else:
            raise NotGcs("a reply that is not a GetClusterIdReply")
    return found


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while at < len(data) and shift < 64:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7
    raise NotGcs("a reply that is not a GetClusterIdReply")


class _Reader:
    """HTTP/2 frames from a socket, within one deadline and `MAX_READ` bytes in all."""

    def __init__(self, conn: socket.socket, deadline: float) -> None:
        self.conn, self.deadline, self.buffer, self.read = conn, deadline, b"", 0

    def exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no complete answer in time")
            if self.read >= MAX_READ:
                raise NotGcs(f"more than {MAX_READ} bytes without a GetClusterId reply")
            self.conn.settimeout(left)
            chunk = self.conn.recv(min(65536, MAX_READ - self.read))
            if not chunk:
                raise NotGcs("the connection closed before a GetClusterId reply")
            self.read += len(chunk)
            self.buffer += chunk
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def frame(self) -> tuple[int, int, int, bytes]:
        head = self.exactly(9)
        size = int.from_bytes(head[:3], "big")
        if size > _MAX_FRAME:
            raise NotGcs("not HTTP/2 (a frame larger than the client allows)")
        kind, flags = head[3], head[4]
        stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
        payload = self.exactly(size)
        if kind == _DATA and flags & _PADDED:
            if not payload or payload[0] >= len(payload):
                raise NotGcs("not HTTP/2 (a malformed DATA frame)")
            payload = payload[1 : len(payload) - payload[0]]
        return kind, flags, stream, payload


def check(host: str, port: int, timeout: float, authorization: str | None = None) -> None:
    """Return when a Ray GCS answers at `host`:`port` within `timeout` seconds in all, the call
    carrying `authorization` (Ray's token header) when given; raise `OSError` when nothing
    answers there (refused, unroutable, silent), `NotGcs` when something else does."""
    deadline = time.monotonic() + timeout
    authority = (f"[{host}]" if ":" in host else host).encode() + b":%d" % port
    with socket.create_connection((host, port), timeout=timeout) as conn:
        conn.sendall(request(authority, authorization.encode() if authorization else None))
        reader = _Reader(conn, deadline)
        kind, flags, stream, _ = reader.frame()
        if kind != _SETTINGS or flags & _ACK or stream:
            raise NotGcs("not an HTTP/2 server (its first frame is not SETTINGS)")
        conn.sendall(_frame(_SETTINGS, _ACK, 0))
        try:
            data = _answer(reader)
        except TimeoutError:
            raise NotGcs(
                f"an HTTP/2 server that did not answer GetClusterId in {timeout:g} s"
            ) from None
    if len(data) >= 5 and data[0] == 0 and int.from_bytes(data[1:5], "big") == len(data) - 5:
        if cluster_id(data[5:]):
            return
        raise NotGcs("a gRPC server whose reply carries no Ray cluster id")
    if not data:
        raise StatusOnly("a gRPC server that answered GetClusterId with a status only")
    raise NotGcs("an HTTP/2 server without a Ray GCS's GetClusterId")


def _answer(reader: _Reader) -> bytes:
    """The DATA of stream 1's answer (which begins with HEADERS, as any HTTP/2 answer does)."""
    data, answered = b"", False
    while True:
        kind, flags, stream, payload = reader.frame()
        if kind == _GOAWAY or (kind == _RST_STREAM and stream == _STREAM):
            raise NotGcs("an HTTP/2 server that refused the GetClusterId call")
        if stream != _STREAM or kind not in (_HEADERS, _DATA):
            continue
        if kind == _DATA and not answered:
            raise NotGcs("an HTTP/2 server that sent data without headers")
        if kind == _DATA:
            data += payload
        answered = True
        if flags & _END_STREAM:
            return data
