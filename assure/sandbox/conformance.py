"""What every `SandboxBackend` must do, as one pytest suite (pytest is all it needs beyond
assure): subclass `BackendConformance` in a test module and give it a `harness` fixture. The
fake runs it in tests/unit/test_fake_backend.py, Docker in
tests/integration/test_backend_conformance.py; an out-of-tree backend runs it the same way.

A `Harness` builds a request for a named behaviour (the same behaviour, in each backend's
terms: a shell command for Docker, a registered program for the fake):
- `exit3`: prints `hello` and exits 3;
- `sleep`: runs until stopped (and exits on SIGTERM);
- `chatty`: prints 100 000 `x` and exits 0;
- `write`: creates /tmp/made/ with `file.txt` (5000 bytes of `a`) and `link` -> file.txt;
- `cat`: copies stdin to stdout.
"""

from __future__ import annotations

import os
import socket
import struct
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

import pytest

from assure.errors import AssureError, ImageError, SandboxError
from assure.sandbox.backend import (
    LABEL_OWNER,
    LABEL_PID,
    LABEL_ROLE,
    LABEL_RUN,
    OWNER,
    ChangeKind,
    ContainerRequest,
    FsChange,
    Mount,
    Observed,
    Role,
    SandboxBackend,
    Ulimit,
)

BEHAVIOURS = ("exit3", "sleep", "chatty", "write", "cat")
WRITTEN = b"a" * 5000
GATE_EXIT = 125  # a gated command whose socket never appeared


class Gate(TypedDict):
    """The `ContainerRequest` fields of a gated command."""

    mounts: tuple[Mount, ...]
    gate: str
    gate_seconds: float


def gated(folder: str, seconds: float) -> Gate:
    """A request's gate on `folder`/gate.sock (mounted at /run/gate, read-only)."""
    return {
        "mounts": (Mount(folder, "/run/gate", read_only=True),),
        "gate": "/run/gate/gate.sock",
        "gate_seconds": seconds,
    }


@dataclass
class Harness:
    backend: SandboxBackend
    image: str
    command: Callable[[str], list[str]]  # behaviour -> the command that does it
    absent_id: str  # an id no container has
    run_id: str = field(default_factory=lambda: f"conformance-{uuid.uuid4().hex[:12]}")
    made: list[tuple[str, str]] = field(default_factory=list)  # (kind, id) to remove after the test

    def labels(self, run_id: str | None = None) -> dict[str, str]:
        return {LABEL_OWNER: OWNER, LABEL_RUN: run_id or self.run_id, LABEL_PID: str(os.getpid())}

    def request(
        self, behaviour: str, *, run_id: str | None = None, **extra: Any
    ) -> ContainerRequest:
        return ContainerRequest(
            role=Role.AGENT,
            image=self.image,
            name=f"{self.run_id}-{behaviour}-{uuid.uuid4().hex[:6]}",
            command=tuple(self.command(behaviour)),
            labels=self.labels(run_id),
            init=True,
            **extra,
        )

    def started(self, behaviour: str, **extra: Any) -> str:
        cid = self.backend.start_container(self.request(behaviour, **extra))
        self.made.append(("container", cid))
        return cid

    def cleanup(self) -> None:
        remove = {
            "container": self.backend.remove_container,
            "volume": self.backend.remove_volume,
            "network": self.backend.remove_network,
        }
        for kind, rid in reversed(self.made):
            remove[kind](rid)


def frames(sock: socket.socket) -> dict[int, bytes]:
    """Read an attached stream to EOF: stream number -> bytes."""
    sock.settimeout(30)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    out: dict[int, bytes] = {}
    while data:
        stream, size = struct.unpack(">BxxxI", data[:8])
        out[stream] = out.get(stream, b"") + data[8 : 8 + size]
        data = data[8 + size :]
    return out


class BackendConformance:
    """The protocol's promises (sandbox/backend.py), each observed on the backend."""

    def test_implements_the_protocol(self, harness: Harness) -> None:
        assert isinstance(harness.backend, SandboxBackend)

    def test_a_container_runs_exits_with_its_code_and_keeps_its_logs(
        self, harness: Harness
    ) -> None:
        cid = harness.started("exit3")
        assert harness.backend.wait(cid, 30) == 3
        seen = harness.backend.observe(cid)
        assert (seen.status, seen.running, seen.exit_code) == ("exited", False, 3)
        assert b"hello" in harness.backend.logs(cid, 2**20)

    def test_wait_returns_none_while_running_and_stop_ends_it(self, harness: Harness) -> None:
        cid = harness.started("sleep")
        assert harness.backend.wait(cid, 0.3) is None
        assert harness.backend.observe(cid).running is True
        harness.backend.stop(cid, 5)
        code = harness.backend.wait(cid, 10)
        assert code is not None and code != 0
        assert harness.backend.observe(cid).running is False

    def test_stop_of_an_exited_container_changes_nothing(self, harness: Harness) -> None:
        cid = harness.started("exit3")
        assert harness.backend.wait(cid, 30) == 3
        harness.backend.stop(cid, 1)
        assert harness.backend.wait(cid, 5) == 3
        assert harness.backend.observe(cid).exit_code == 3

    def test_remove_is_idempotent_and_kills_a_running_container(self, harness: Harness) -> None:
        cid = harness.started("sleep")
        harness.backend.remove_container(cid)
        harness.backend.remove_container(cid)
        harness.backend.remove_container(harness.absent_id)
        with pytest.raises(SandboxError):
            harness.backend.observe(cid)
        assert cid not in {c["id"] for c in harness.backend.owned(harness.run_id)["containers"]}

    def test_logs_are_bounded_to_their_last_bytes(self, harness: Harness) -> None:
        cid = harness.started("chatty")
        assert harness.backend.wait(cid, 30) == 0
        tail = harness.backend.logs(cid, 1000)
        assert tail == b"x" * 1000
        assert len(harness.backend.logs(cid, 2**20)) == 100_000

    def test_collect_reports_the_containers_own_writes_and_reads_them_bounded(
        self, harness: Harness
    ) -> None:
        cid = harness.started("write")
        assert harness.backend.wait(cid, 30) == 0
        changes = harness.backend.fs_changes(cid)
        assert all(isinstance(c, FsChange) for c in changes)
        assert {FsChange("/tmp/made/file.txt", ChangeKind.ADDED)} | {
            FsChange("/tmp/made/link", ChangeKind.ADDED)
        } <= set(changes)
        assert harness.backend.read_file(cid, "/tmp/made/file.txt", 2**20) == (
            "file",
            WRITTEN,
            None,
        )
        assert harness.backend.read_file(cid, "/tmp/made/file.txt", 100) == (
            "file",
            None,
            None,
        )  # over the bound: not read
        assert harness.backend.read_file(cid, "/tmp/made/link", 2**20) == (
            "symlink",
            None,
            "file.txt",
        )
        assert harness.backend.read_file(cid, "/tmp/made", 2**20) == ("dir", None, None)
        with pytest.raises(SandboxError):
            harness.backend.read_file(cid, "/tmp/made/absent", 2**20)
        layer = harness.backend.writable_layer(cid)
        assert layer is None or (layer / "tmp" / "made" / "file.txt").read_bytes() == WRITTEN

    def test_observe_reports_the_request(self, harness: Harness) -> None:
        cid = harness.started(
            "exit3",
            network="none",
            cap_drop=("ALL",),
            memory=64 * 2**20,
            memory_swap=64 * 2**20,
            pids_limit=32,
            user="65534:65534",
            read_only_root=True,
            tmpfs={"/tmp": "rw,nosuid,nodev,noexec,size=1048576"},
            ulimits=(Ulimit("nofile", 256, 256),),
            security_opt=("no-new-privileges:true",),
        )
        harness.backend.wait(cid, 30)
        seen = harness.backend.observe(cid)
        assert (seen.network, seen.cap_drop, seen.memory, seen.pids_limit) == (
            "none",
            ("ALL",),
            64 * 2**20,
            32,
        )
        assert (seen.user, seen.read_only_root, dict(seen.tmpfs), seen.ulimits) == (
            "65534:65534",
            True,
            {"/tmp": "rw,nosuid,nodev,noexec,size=1048576"},
            (Ulimit("nofile", 256, 256),),
        )
        assert "no-new-privileges:true" in seen.security_opt and seen.privileged is False
        assert not seen.cap_add and not seen.devices and seen.pid_namespace in ("", None)
        assert Observed.from_json(seen.to_json()) == seen  # as container.json keeps it
        assert {k: v for k, v in seen.labels.items() if k.startswith("assure.")} == {
            **harness.labels(),
            LABEL_ROLE: Role.AGENT,
        }

    def test_an_attached_stream_carries_stdin_in_and_stdout_out(self, harness: Harness) -> None:
        cid = harness.backend.create_container(harness.request("cat", stdin_open=True))
        harness.made.append(("container", cid))
        with harness.backend.attached(cid, stdin=True) as sock:
            harness.backend.start(cid)
            sock.sendall(b"ping\n")
            sock.shutdown(socket.SHUT_WR)
            out = frames(sock)
        assert out.get(1) == b"ping\n"
        assert harness.backend.wait(cid, 30) == 0

    def test_a_gated_command_runs_only_once_its_socket_exists(self, harness: Harness) -> None:
        folder = tempfile.mkdtemp(
            prefix="gate", dir="/tmp"
        )  # a socket's path is ~100 bytes at most
        os.chmod(folder, 0o755)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            cid = harness.started("exit3", **gated(folder, 30))
            assert (
                harness.backend.wait(cid, 1.0) is None
            )  # held at its gate: nothing of the command ran
            assert b"hello" not in harness.backend.logs(cid, 2**20)
            listener.bind(os.path.join(folder, "gate.sock"))
            assert harness.backend.wait(cid, 30) == 3
            assert b"hello" in harness.backend.logs(cid, 2**20)
        finally:
            listener.close()
            os.unlink(os.path.join(folder, "gate.sock")) if os.path.exists(
                os.path.join(folder, "gate.sock")
            ) else None
            os.rmdir(folder)

    def test_a_gated_command_never_runs_if_its_socket_never_appears(self, harness: Harness) -> None:
        folder = tempfile.mkdtemp(prefix="gate", dir="/tmp")
        os.chmod(folder, 0o755)
        try:
            with open(os.path.join(folder, "gate.sock"), "w") as fh:
                fh.write("a file where the socket should be")
            cid = harness.started("exit3", **gated(folder, 1))
            assert harness.backend.wait(cid, 30) == GATE_EXIT
            assert b"hello" not in harness.backend.logs(cid, 2**20)
        finally:
            os.unlink(os.path.join(folder, "gate.sock"))
            os.rmdir(folder)

    def test_owned_finds_everything_labelled_for_the_run_and_nothing_else(
        self, harness: Harness
    ) -> None:
        backend = harness.backend
        cid = backend.create_container(harness.request("exit3"))
        harness.made.append(("container", cid))
        volume = backend.create_volume(
            f"{harness.run_id}-vol",
            harness.labels(),
            {"type": "tmpfs", "device": "tmpfs", "o": "size=1m"},
        )
        harness.made.append(("volume", volume))
        network = backend.create_network(f"{harness.run_id}-net", harness.labels(), internal=True)
        harness.made.append(("network", network))
        other = backend.create_container(harness.request("exit3", run_id=f"{harness.run_id}-other"))
        harness.made.append(("container", other))
        owned = backend.owned(harness.run_id)
        assert [c["id"] for c in owned["containers"]] == [cid]
        assert [v["id"] for v in owned["volumes"]] == [volume] and [
            n["id"] for n in owned["networks"]
        ] == [network]
        assert owned["containers"][0][LABEL_RUN] == harness.run_id
        assert cid in {c["id"] for c in backend.owned()["containers"]} and other in {
            c["id"] for c in backend.owned()["containers"]
        }
        backend.remove_container(cid)
        backend.remove_volume(volume)
        backend.remove_network(network)
        backend.remove_volume(volume)
        backend.remove_network(network)
        assert backend.owned(harness.run_id) == {"containers": [], "volumes": [], "networks": []}

    def test_errors_are_the_protocols_own(self, harness: Harness) -> None:
        with pytest.raises(ImageError):
            harness.backend.create_container(
                replace(harness.request("exit3"), image="assure-absent-image:conformance")
            )
        for call in (
            lambda: harness.backend.observe(harness.absent_id),
            lambda: harness.backend.start(harness.absent_id),
            lambda: harness.backend.logs(harness.absent_id, 10),
        ):
            with pytest.raises(SandboxError) as info:
                call()
            assert isinstance(info.value, AssureError) and info.value.message
        request = harness.request("exit3")
        harness.made.append(("container", harness.backend.create_container(request)))
        with pytest.raises(SandboxError):
            harness.backend.create_container(request)  # the name is taken
