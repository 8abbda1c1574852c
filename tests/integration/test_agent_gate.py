"""The agent's gate, on a real engine: the agent container starts while the gateway boots, and
its command runs only once the gateway's socket exists (bound after the journal is open)."""

import datetime
import json
import os
import socket
import time
from dataclasses import replace

import yaml

from assure import spec as spec_mod
from assure.records import store
from assure.run.driver import Driver
from assure.sandbox import hardening
from assure.sandbox.backend import Mount, Role

from .conftest import ROOT


def gated(images, folder, command, seconds):
    """A hardened container gated on `folder`/gateway.sock, with `folder` mounted at /run/assure
    and `/out` for its marks."""
    spec = spec_mod.load(ROOT / "specs" / "examples" / "benign.yaml")
    common = hardening.common_request(
        spec,
        Role.AGENT,
        images.agent,
        {"assure.owner": "assure", "assure.pid": str(os.getpid())},
        256 * 2**20,
        64,
        user=(0, 0),
    )
    return replace(
        common,
        name=f"gate-test-{os.getpid()}-{time.monotonic_ns()}",
        user="0:0",
        command=command,
        mounts=(
            Mount(str(folder / "sock"), hardening.SOCKET_DIR, read_only=True),
            Mount(str(folder / "out"), "/out"),
        ),
        gate=hardening.SOCKET_PATH,
        gate_seconds=seconds,
    )


def folders(tmp_path):
    for name in ("sock", "out"):
        (tmp_path / name).mkdir()
    return tmp_path


def test_a_gated_command_runs_only_once_the_socket_exists(backend, images, tmp_path):
    root = folders(tmp_path)
    cid = backend.start_container(
        gated(
            images,
            root,
            ("sh", "-c", "touch /out/ran; ls /proc | grep -c '^[0-9]' > /out/procs"),
            30,
        )
    )
    try:
        assert backend.wait(cid, 1.5) is None  # waiting: the socket is not there yet
        assert not (root / "out" / "ran").exists()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(root / "sock" / "gateway.sock"))
        try:
            assert backend.wait(cid, 30) == 0
        finally:
            listener.close()
        assert (root / "out" / "ran").exists()
        # the gate exec'd the command in its place: docker-init, the command's sh, its ls and grep
        assert int((root / "out" / "procs").read_text()) <= 4
    finally:
        backend.remove_container(cid)


def _wall(ts: str) -> float:
    return (
        datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ")
        .replace(tzinfo=datetime.UTC)
        .timestamp()
    )


def test_the_agent_acts_only_after_the_gateway_journals(backend, images, tmp_path):
    """The agent's first instruction finds the socket, and comes after `gateway_started` in the
    journal, though its container was started while the gateway booted."""
    first = "date +%s.%N > out/first; test -S /run/assure/gateway.sock"
    path = tmp_path / "gate.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "name": "gate",
                "agent": {"command": ["sh", "-c", first]},
                "workspace": {
                    "fixture": str(ROOT / "fixtures" / "workspaces" / "calc"),
                    "writable": ["out/**"],
                },
                "assertions": [{"exit_code": 0}],
                "expect": "pass",
            }
        )
    )
    spec = spec_mod.load(path)
    for _ in range(3):
        run = store.RunDir.create(
            tmp_path / "runs", store.new_run_id(spec.name), spec.path, spec.to_json()
        )
        result = Driver(spec, run, backend, images, lambda *_: None).drive()
        assert result.verdict == "pass", result.report["attempts"][0]["findings"]
        paths = run.attempt(1)
        timings = result.report["attempts"][0]["timings"]
        assert (
            "start.agent" in timings and "start.ready" in timings
        )  # the agent was started while the gateway came up
        journal = [json.loads(line) for line in paths.journal.read_text().splitlines()]
        started = next(r for r in journal if r["event"] == "gateway_started")
        assert float((paths.workspace / "out" / "first").read_text()) > _wall(started["ts"])
