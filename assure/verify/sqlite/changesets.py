"""Decode a journaled changeset (the session extension's format), text kept as its bytes."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from assure.verify.sqlite.changes import Value


@dataclass(frozen=True)
class Touch:
    table: str
    op: str
    pk: tuple[int, ...]  # per changeset column: 0, or its 1-based position in the key
    old: tuple[Value | None, ...] | None  # None inside: undefined (an update's unchanged column)
    new: tuple[Value | None, ...] | None


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for i in range(9):
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        if i == 8:
            return (value << 8) | byte, pos
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, pos
    raise AssertionError("unreachable")


def _record(data: bytes, pos: int, n: int) -> tuple[tuple[Value | None, ...], int]:
    out: list[Value | None] = []
    for _ in range(n):
        if pos >= len(data):
            raise ValueError("truncated record")
        kind = data[pos]
        pos += 1
        if kind == 0:
            out.append(None)
        elif kind == 5:
            out.append(("null", None))
        elif kind in (1, 2):
            if pos + 8 > len(data):
                raise ValueError("truncated number")
            out.append(
                ("integer", struct.unpack(">q", data[pos : pos + 8])[0])
                if kind == 1
                else ("real", struct.unpack(">d", data[pos : pos + 8])[0])
            )
            pos += 8
        elif kind in (3, 4):
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ValueError("truncated text/blob")
            out.append(("text" if kind == 3 else "blob", data[pos : pos + size]))
            pos += size
        else:
            raise ValueError(f"unknown value type {kind}")
    return tuple(out), pos


def parse_changeset(data: bytes) -> list[Touch]:
    """Decode a changeset (the session extension's format) without decoding any text.

    apsw's iterator decodes TEXT as UTF-8 and stops at the first invalid byte sequence,
    which a hostile agent can store; this keeps text as its bytes. ValueError if malformed.
    """
    out: list[Touch] = []
    pos, table, ncol = 0, "", 0
    pk: tuple[int, ...] = ()
    ops = {0x12: "insert", 0x17: "update", 0x09: "delete"}
    while pos < len(data):
        marker = data[pos]
        if marker == 0x54:  # 'T'
            ncol, pos = _varint(data, pos + 1)
            if ncol <= 0 or pos + ncol > len(data):
                raise ValueError("bad table header")
            pk = tuple(data[pos : pos + ncol])
            pos += ncol
            end = data.find(b"\x00", pos)
            if end < 0:
                raise ValueError("unterminated table name")
            table = data[pos:end].decode("utf-8", "surrogateescape")
            pos = end + 1
            continue
        if marker not in ops or not table:
            raise ValueError(f"unexpected byte 0x{marker:02x} at offset {pos}")
        op = ops[marker]
        pos += 2  # op, indirect flag
        old = new = None
        if op in ("delete", "update"):
            old, pos = _record(data, pos, ncol)
        if op in ("insert", "update"):
            new, pos = _record(data, pos, ncol)
        out.append(Touch(table, op, pk, old, new))
    return out
