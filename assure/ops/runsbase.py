"""Reading the runs base as hostile ground: every file opened below one directory fd
without following a symlink anywhere (`assure.core.confined`: openat2 with
RESOLVE_NO_SYMLINKS, or `O_NOFOLLOW` component by component; a FIFO is never opened), only
regular files read, every read bounded, every parse error caught (`Refused`)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from assure.core import confined
from assure.ops.anomalies import Call

MAX_ENTRIES = 10_000  # directory entries read per directory


class Refused(Exception):
    """A path the monitor will not read (symlink, not a regular file, oversized, ...)."""


class Tree:
    """Opens paths below one directory fd, refusing a symlink at every component."""

    def __init__(self, root_fd: int):
        self.root_fd = root_fd

    def _fd(self, rel: str, directory: bool) -> int | None:
        """An fd for `rel` (through `confined`), None if it does not exist; `Refused` if a
        component is a link or the target is not a directory / regular file."""
        parts = [p for p in rel.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise Refused("'..' in path")
        if not parts:
            if not directory:
                raise Refused("not a regular file")
            return os.dup(self.root_fd)
        try:
            return (
                confined.open_dir(self.root_fd, "/".join(parts))
                if directory
                else confined.open_file(self.root_fd, "/".join(parts))[0]
            )
        except FileNotFoundError:
            return None
        except OSError as exc:
            if isinstance(exc, confined.NotRegular) or exc.errno in (
                errno.ELOOP,
                errno.EMLINK,
                errno.ENOTDIR,
                errno.EXDEV,
            ):
                raise Refused(self._why(parts, directory)) from None
            raise Refused(f"cannot open: {exc.strerror}") from None

    def _why(self, parts: list[str], directory: bool) -> str:
        """Which component made an open fail, for the refusal message (nothing is followed)."""
        for i, part in enumerate(parts):
            st = confined.lstat(self.root_fd, "/".join(parts[: i + 1]))
            if st is None:
                return "unusable"
            if stat.S_ISLNK(st.st_mode):
                return f"{part!r} is a symlink"
            last = i == len(parts) - 1
            if (not last or directory) and not stat.S_ISDIR(st.st_mode):
                return f"{part!r} is not a directory" if not last else "not a directory"
        return "not a directory" if directory else "not a regular file"

    @contextlib.contextmanager
    def open(self, rel: str, *, directory: bool = False) -> Iterator[int | None]:
        fd = self._fd(rel, directory)
        try:
            yield fd
        finally:
            if fd is not None:
                os.close(fd)

    def stat(self, rel: str, *, directory: bool = False) -> os.stat_result | None:
        with self.open(rel, directory=directory) as fd:
            return None if fd is None else os.fstat(fd)

    def read(self, rel: str, limit: int) -> tuple[bytes, os.stat_result] | None:
        """The whole file; `Refused` if it is larger than `limit`."""
        with self.open(rel) as fd:
            if fd is None:
                return None
            st = os.fstat(fd)
            if st.st_size > limit:
                raise Refused(f"{st.st_size} bytes, over the {limit}-byte limit")
            data = _read_fd(fd, limit + 1)
            if len(data) > limit:
                raise Refused(f"over the {limit}-byte limit")
            return data, st

    def read_ends(
        self, rel: str, limit: int, head: int
    ) -> tuple[bytes, bytes, os.stat_result, bool] | None:
        """(first `head` bytes, last `limit` bytes, stat, truncated) of a possibly large file."""
        with self.open(rel) as fd:
            if fd is None:
                return None
            st = os.fstat(fd)
            if st.st_size <= limit:
                data = _read_fd(fd, limit)
                return b"", data, st, False
            first = _read_fd(fd, head)
            os.lseek(fd, st.st_size - limit, os.SEEK_SET)
            return first, _read_fd(fd, limit), st, True

    def listdir(self, rel: str) -> tuple[list[tuple[str, bool, bool]], bool] | None:
        """([(name, is_dir, is_symlink)], truncated) of a directory, None if missing."""
        with self.open(rel, directory=True) as fd:
            if fd is None:
                return None
            out: list[tuple[str, bool, bool]] = []  # name, is a folder, is a link
            truncated = False
            with os.scandir(fd) as entries:
                for entry in entries:
                    if len(out) >= MAX_ENTRIES:
                        truncated = True
                        break
                    out.append(
                        (entry.name, entry.is_dir(follow_symlinks=False), entry.is_symlink())
                    )
            return out, truncated


def _read_fd(fd: int, limit: int) -> bytes:
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def parse_json(data: bytes) -> Any:
    """JSON, or `Refused` (garbage, deeply nested, huge numbers...)."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise Refused(f"not JSON ({type(exc).__name__})") from None


def parse_time(value: Any) -> float | None:
    """Unix seconds of an ISO-8601 UTC time as `chain.utc_now` writes it (or any ISO time)."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        parsed = datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def parse_journal(head: bytes, body: bytes, truncated: bool) -> tuple[dict[str, Any], int]:
    """The fields the detectors use from a gateway journal, and how many lines were garbage.
    A truncated journal's tail starts mid-line: that first piece is dropped, and so is an
    unfinished last line."""
    lines = body.split(b"\n")
    if not body.endswith(b"\n"):
        lines = lines[:-1]  # a line the gateway is still writing
    if truncated:
        lines = head.split(b"\n")[:1] + lines[1:]
    calls: list[Call] = []
    facts: dict[str, Any] = {"limit": None, "used": None, "breach": None}
    garbage = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            garbage += 1
            continue
        if not isinstance(record, dict):
            garbage += 1
            continue
        event = record.get("event")
        if event == "tool_call":
            tool, digest = record.get("tool"), record.get("args_digest")
            if not isinstance(tool, str) or not isinstance(digest, str):
                garbage += 1
                continue
            rule = record.get("rule") if isinstance(record.get("rule"), str) else None
            calls.append(
                Call(
                    parse_time(record.get("ts")),
                    tool[:128],
                    digest[:128],
                    isinstance(record.get("effect"), dict),
                    rule,
                )
            )
        elif event == "gateway_started" and isinstance(record.get("limits"), dict):
            facts["limit"] = count(record["limits"].get("tool_calls"))
        elif event == "gateway_stopped" and isinstance(record.get("counters"), dict):
            facts["used"] = count(record["counters"].get("tool_calls"))
        elif event == "budget_breach":
            facts["breach"] = str(record.get("counter"))[:64]
    facts["calls"] = tuple(calls)
    return facts, garbage
