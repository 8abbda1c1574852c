"""The warm pool's host-side pieces, without Docker: which specs it takes, how a pair becomes an
attempt's folders, the claimed agent's gate (run by a real bash), the pooled gateway's wait, and
the verifier's expectations of a pooled attempt. tests/integration/test_pool.py runs it live."""

import dataclasses
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from assure import spec
from assure.errors import AssureError
from assure.gateway import __main__ as gateway_main
from assure.records import store
from assure.run import pool
from assure.sandbox import hardening, uids
from assure.sandbox.backend import ContainerRequest, Role
from assure.sandbox.docker.gate import GATE_EXIT, command
from assure.sandbox.docker.images import ImageSet
from assure.sandbox.docker.observe import observed
from assure.spec import Install
from assure.verify.container import containment as judged

EXAMPLES = Path(__file__).resolve().parents[2] / "specs" / "examples"


def containment(inspect, *args, **kwargs):
    """The verifier on what Docker's inspect says (as DockerBackend.observe reads it)."""
    return judged(observed(inspect), *args, **kwargs)


@pytest.fixture
def benign():
    return spec.load(EXAMPLES / "benign.yaml")


def test_settings_refuse_what_cannot_be_a_pool():
    assert pool.Settings(0).size == 0
    for size, idle in ((-1, 10), (pool.MAX_SIZE + 1, 10), (2, 0), (2, -5)):
        with pytest.raises(AssureError, match="pool of"):
            pool.Settings(size, idle)


def test_only_specs_whose_containers_never_vary_are_pooled(benign):
    assert pool.ineligible(benign) is None
    cases = {
        "runtime runsc": dataclasses.replace(
            benign, sandbox=dataclasses.replace(benign.sandbox, runtime="runsc")
        ),
        "agent image": dataclasses.replace(
            benign, agent=dataclasses.replace(benign.agent, image="debian:bookworm")
        ),
        "NUL": dataclasses.replace(
            benign, agent=dataclasses.replace(benign.agent, env={"A": "x\0y"})
        ),
    }
    for reason, changed in cases.items():
        assert reason in pool.ineligible(changed)


def test_specs_of_one_shape_share_pairs_and_a_limit_or_an_install_makes_another(benign, tmp_path):
    images = ImageSet("assure-base:b", "assure-agent:a", "assure-gateway:g", "assure-egress:e")
    other_agent = dataclasses.replace(
        benign,
        name="other",
        agent=dataclasses.replace(benign.agent, command=("sh", "-c", "exit 3")),
    )
    assert pool.Shape.of(other_agent, images) == pool.Shape.of(
        benign, images
    )  # the command arrives with the claim
    more_memory = dataclasses.replace(
        benign, limits=dataclasses.replace(benign.limits, memory="1g")
    )
    assert pool.Shape.of(more_memory, images) != pool.Shape.of(benign, images)
    (tmp_path / "tool").write_bytes(b"#!/bin/sh\n")
    installed = dataclasses.replace(
        benign,
        agent=dataclasses.replace(benign.agent, install=Install(binaries=(tmp_path / "tool",))),
    )
    shape = pool.Shape.of(installed, images)
    assert shape != pool.Shape.of(benign, images) and shape.image.startswith(
        "assure-agent-install:"
    )  # its pairs run the derived image


def _pair(tmp_path: Path) -> pool.Pair:
    root = tmp_path / "pool" / "pair-1"
    for name in (
        pool.CONTROL,
        pool.RUN_STATE,
        pool.AGENT_FILES,
        pool.CLAIM,
        "gateway",
        "gateway-config",
    ):
        (root / name).mkdir(parents=True)
    (root / "gateway" / "marker").write_text("the pair's")
    return pool.Pair(root, None, "gw", "ag", "vol", time.time(), "pool-x", uids.Lease(60600, 60600))


def _run(tmp_path: Path, benign) -> store.RunDir:
    return store.RunDir.new(tmp_path / "runs", "benign", benign.path, benign.to_json())


def test_a_claim_makes_the_pair_the_fresh_runs_first_attempt(tmp_path, benign):
    run, pair = _run(tmp_path, benign), _pair(tmp_path)
    control_inode = os.stat(pair.root / pool.CONTROL).st_ino
    pool.take(pair, run, run.attempt(1).root)
    assert (
        os.stat(run.control_dir).st_ino == control_inode
    )  # the folder the gateway mounted is the run's now
    assert (run.attempt(1).gateway_state / "marker").read_text() == "the pair's"
    assert not pair.root.exists()


def test_a_run_whose_control_folder_is_in_use_refuses_the_pair(tmp_path, benign):
    run, pair = _run(tmp_path, benign), _pair(tmp_path)
    run.override("operator", dial="propose")  # an operator's request: control/ is no longer empty
    with pytest.raises(OSError):
        pool.take(pair, run, run.attempt(1).root)
    assert (
        run.control_dir / "operator.json"
    ).exists() and pair.root.exists()  # nothing of the run's was replaced


def test_an_attempt_folder_already_there_refuses_the_pair(tmp_path, benign):
    run, pair = _run(tmp_path, benign), _pair(tmp_path)
    run.attempt(1).root.mkdir(parents=True)
    with pytest.raises(FileExistsError):
        pool.take(pair, run, run.attempt(1).root)
    assert pair.root.exists() and not any(run.attempt(1).root.iterdir())


def _serve_socket(path: Path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    return server


def _gate(tmp_path: Path, seconds: int = 5) -> list[str]:
    request = ContainerRequest(
        role=Role.AGENT,
        image="x",
        gate=str(tmp_path / "gateway.sock"),
        gate_seconds=seconds,
        claim=str(tmp_path / "claim"),
    )
    return command(request)


def test_the_claimed_agent_runs_its_claim_with_nothing_of_the_gate_left(tmp_path):
    (tmp_path / "claim").mkdir()
    pool.write_claim(
        tmp_path / "claim",
        ["bash", "-c", 'env; ls /proc/$$/fd; echo "args:$1"', "zero", "one two"],
        {"ASSURE_RUN_ID": "r1", "SPACED": "a b=c"},
    )
    gate = _gate(tmp_path)
    proc = subprocess.Popen(
        gate,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": os.environ["PATH"]},
    )
    time.sleep(0.3)  # the gate waits: no socket yet
    assert proc.poll() is None
    server = _serve_socket(tmp_path / "gateway.sock")
    try:
        out, err = proc.communicate(timeout=10)
    finally:
        server.close()
    assert proc.returncode == 0, err
    env = dict(
        line.split("=", 1)
        for line in out.splitlines()
        if "=" in line and not line.startswith("args:")
    )
    assert env["ASSURE_RUN_ID"] == "r1" and env["SPACED"] == "a b=c"
    assert not {"n", "limit", "argv", "envs", "kv"} & set(
        env
    )  # the gate's own variables never reach the agent
    fds = [line for line in out.splitlines() if line.isdigit()]
    assert sorted(fds) == ["0", "1", "2", "255"] or sorted(fds) == [
        "0",
        "1",
        "2",
    ]  # 255: the listing bash's own script fd
    assert "args:one two" in out


def test_the_warm_up_runs_before_the_gate_waits_and_leaves_the_agent_nothing(tmp_path):
    """The warm-up runs first and alone: the FIFO has no reader until it is over (the pool counts
    the pair free only then); its output, arguments and exit status never reach the agent."""
    claim = tmp_path / "claim"
    claim.mkdir()
    os.mkfifo(claim / pool.WAKE, 0o600)
    release = tmp_path / "release"
    os.mkfifo(release)
    request = ContainerRequest(
        role=Role.AGENT,
        image="x",
        gate=str(tmp_path / "gateway.sock"),
        gate_seconds=5,
        claim=str(claim),
        warm_up=("bash", "-c", f'echo warm; echo warm >&2; read < "{release}"; exit 3'),
    )
    proc = subprocess.Popen(
        command(request),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": os.environ["PATH"]},
    )
    server = _serve_socket(tmp_path / "gateway.sock")
    try:
        time.sleep(0.3)
        assert proc.poll() is None and not pool.has_reader(claim / pool.WAKE)  # warming up
        with open(release, "w") as fh:
            fh.write("\n")
        deadline = time.monotonic() + 10
        while not pool.has_reader(claim / pool.WAKE):  # now it waits for its claim
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.01)
        pool.write_claim(claim, ["bash", "-c", 'echo "args:$#:$*"', "zero"], {"A": "1"})
        pool.wake(claim)
        out, err = proc.communicate(timeout=10)
    finally:
        server.close()
    assert proc.returncode == 0, err
    assert (out, err) == ("args:0:\n", "")


def test_the_stock_agent_image_alone_warms_up_before_its_claim(benign, tmp_path):
    """Another image's code (an agent.install's) never runs before its claim: left running, it
    could change the workspace between its fill and PRE."""
    images = ImageSet("assure-base:b", "assure-agent:a", "assure-gateway:g", "assure-egress:e")
    assert pool.warm_up(pool.Shape.of(benign, images), images) == ("assure-tool", "--help")
    (tmp_path / "tool").write_bytes(b"#!/bin/sh\n")
    installed = dataclasses.replace(
        benign,
        agent=dataclasses.replace(benign.agent, install=Install(binaries=(tmp_path / "tool",))),
    )
    assert pool.warm_up(pool.Shape.of(installed, images), images) == ()


def test_a_claimed_agent_without_its_claim_never_runs(tmp_path):
    (tmp_path / "claim").mkdir()
    server = _serve_socket(tmp_path / "gateway.sock")
    try:
        done = subprocess.run(_gate(tmp_path), capture_output=True, text=True, timeout=10)
    finally:
        server.close()
    assert done.returncode == GATE_EXIT and "no claim" in done.stderr


def test_a_pooled_gateway_waits_for_its_config_and_leaves_quietly_if_never_claimed(tmp_path):
    config = tmp_path / "gateway.json"
    assert gateway_main._parse(["--config", str(config), "--wait", "0"]) is None
    assert gateway_main._parse(["--config", str(config), "--wait", "x"]) is None
    assert (
        gateway_main.main(["--config", str(config), "--wait", "0.2"]) == 0
    )  # never claimed: exits, nothing started
    threading.Timer(0.2, lambda: config.write_text("{}")).start()
    started = time.monotonic()
    assert (
        gateway_main.main(["--config", str(config), "--wait", "5"]) == 2
    )  # claimed: the config is read (and this one is bad)
    assert time.monotonic() - started < 4


def test_the_verifier_expects_a_pooled_attempts_own_mounts(benign, tmp_path):
    pair = tmp_path / "runs" / ".pool" / "pool-x" / "pair-3"
    pooled = {
        "workspace": str(pair / "workspace.fs" / "workspace"),
        "agent_files": str(pair / pool.AGENT_FILES),
    }
    inspect = {
        "Mounts": [
            {"Destination": hardening.WORKSPACE, "RW": True, "Source": pooled["workspace"]},
            {"Destination": hardening.SOCKET_DIR, "RW": False, "Source": "vol"},
            {"Destination": hardening.AGENT_FILES, "RW": False, "Source": pooled["agent_files"]},
            {"Destination": hardening.AGENT_CLAIM, "RW": False, "Source": str(pair / pool.CLAIM)},
        ]
    }

    def mount_findings(pooled_record):
        return [
            f
            for f in containment(inspect, benign, [], "attempts/1", pooled_record)
            if f.subject.startswith("Mounts")
        ]

    assert mount_findings(pooled) == []
    assert mount_findings(None)  # the same container on a cold attempt: not its workspace
    other = {
        **pooled,
        "workspace": str(tmp_path / "elsewhere" / "pair-9" / "workspace.fs" / "workspace"),
    }
    assert mount_findings(other)  # another pair's workspace
    writable = {
        **inspect,
        "Mounts": [
            dict(m, RW=True) if m["Destination"] == hardening.AGENT_CLAIM else m
            for m in inspect["Mounts"]
        ],
    }
    assert [
        f for f in containment(writable, benign, [], "attempts/1", pooled) if f.subject == "Mounts"
    ]
