"""gVisor for real: with `sandbox.runtime: runsc` the agent and the command checks run under
runsc, the gateway (and egress proxy) under runc with the socket in a private host folder, and
every example and hostile fixture is judged exactly as under runc.

runsc must be registered with the engine (`.ci/register-runsc`): without it these tests fail,
they never skip.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml

from assure.records.store import read_json
from assure.sandbox import runtimes

from .conftest import EXAMPLES, ROOT, SPECS, findings, ratified
from .test_gate_live import tool_calls, upstream  # noqa: F401  (a fixture)

JUDGED = [
    (EXAMPLES / "benign.yaml", "pass"),
    (EXAMPLES / "escape.yaml", "breach"),
    (EXAMPLES / "network.yaml", "contained"),
    (EXAMPLES / "claude-fix-bug-scripted.yaml", "pass"),
    (SPECS / "liar.yaml", "fail"),
    (SPECS / "container-write.yaml", "breach"),
]
GVISOR_VERSION = (  # the sentry's, whatever the host runs
    "Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016"
)
PATH_FIELDS = (("agent", "files"), ("workspace", "fixture"), ("model", "script"))


@pytest.fixture(scope="module", autouse=True)
def runsc_registered(backend):
    problem = runtimes.problem(runtimes.RUNSC, backend.runtimes())
    if problem:
        pytest.fail(f"{problem}; {runtimes.fix(runtimes.RUNSC)}", pytrace=False)


def copy_with_runtime(source: Path, runtime: str, folder: Path, **changes: object) -> Path:
    """The spec at `source` with `sandbox.runtime` set, its relative paths made absolute."""
    data = {**yaml.safe_load(source.read_text()), **changes}
    for section, key in PATH_FIELDS:
        if key in data.get(section, {}):
            data[section][key] = str((source.parent / data[section][key]).resolve())
    data.setdefault("sandbox", {})["runtime"] = runtime
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{runtime}-{source.name}"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def facts(result) -> dict:
    return read_json(result.run_dir / "attempts" / "1" / "container.json")


@pytest.mark.parametrize("source,verdict", JUDGED, ids=[p.stem for p, _ in JUDGED])
def test_each_example_and_hostile_fixture_is_judged_under_gvisor_as_under_runc(
    run, tmp_path, source, verdict
):
    under_runc = run(copy_with_runtime(source, "runc", tmp_path / "specs"))
    under_gvisor = run(copy_with_runtime(source, "runsc", tmp_path / "specs"))
    assert under_runc.verdict == verdict, under_runc.report
    assert under_gvisor.verdict == verdict, under_gvisor.report
    assert findings(under_gvisor) == findings(under_runc)
    # the engine's word for what ran the agent (and the containment check agrees: no finding)
    assert facts(under_runc)["observed"]["runtime"] == "runc"
    assert facts(under_gvisor)["observed"]["runtime"] == "runsc"
    assert "containment_failed" not in findings(under_gvisor)
    commands = under_gvisor.run_dir / "attempts" / "1" / "commands.json"
    if commands.exists():
        assert {c["runtime"] for c in read_json(commands)} == {
            "runsc"
        }  # the checks run the agent's code too
    # the gateway's socket folder is gone with the attempt, and no Docker volume held it
    assert not (under_gvisor.run_dir / "attempts" / "1" / "socket").exists()


def test_the_agent_runs_in_gvisors_kernel_with_the_same_hardening(run, tmp_path):
    """The probe, preceded by what the kernel says it is: gVisor's sentry answers with its own
    fixed version (not the host's), and the seccomp profile holds inside (`--oci-seccomp`):
    syslog is refused, as under runc, where gVisor alone would answer "Starting gVisor..."."""
    command = ["sh", "-c", "cat /proc/version; dmesg 2>&1 | head -3; python3 /opt/agent/probe.py"]
    spec = yaml.safe_load((SPECS / "probe.yaml").read_text())
    result = run(
        copy_with_runtime(
            SPECS / "probe.yaml", "runsc", tmp_path, agent={**spec["agent"], "command": command}
        )
    )
    assert result.verdict == "pass", result.report
    log = (result.run_dir / "attempts" / "1" / "agent.log").read_text()
    version, dmesg = log.splitlines()[:2]
    assert version == GVISOR_VERSION and os.uname().release not in version, log
    assert "Operation not permitted" in dmesg, (
        log
    )  # the profile's syslog denial, enforced by the sentry
    seen = json.loads(log.strip().splitlines()[-1])
    assert seen["interfaces"] == ["lo"]
    assert seen["cap_eff"] == seen["cap_bnd"] == "0000000000000000"
    assert seen["uid"] != 0 and seen["gid"] != 0
    assert seen["root_write"] in ("EROFS", "EACCES") and seen["socket_dir_write"] == "EROFS"
    assert seen["docker_sock"] is False and seen["socket_present"] is True
    # gVisor's own device files (fuse and net/tun are served by its sentry, not the host)
    assert set(seen["devices"]) <= {
        "fd",
        "full",
        "fuse",
        "net",
        "null",
        "ptmx",
        "pts",
        "random",
        "shm",
        "stderr",
        "stdin",
        "stdout",
        "tty",
        "urandom",
        "zero",
    }
    assert facts(result)["observed"]["runtime"] == "runsc"


def test_the_socket_folder_is_private_while_the_gateway_serves(run, make_spec, tmp_path):
    """Seen by the agent itself mid-run: the folder is the sandbox user's, mode 0700 on the host,
    and read-only inside (the agent can connect, never bind or plant)."""
    script = tmp_path / "agent" / "look.sh"
    script.parent.mkdir()
    script.write_text(
        'python3 -c \'import os; st = os.stat("/run/assure"); print(oct(st.st_mode & 0o777),'
        " st.st_uid)'\ntouch /run/assure/planted 2>&1 | tail -1\nassure-tool fs.list path=.\n"
    )
    spec = make_spec(
        "gvisor-socket", "look.sh", sandbox={"runtime": "runsc"}, assertions=[{"exit_code": 0}]
    )
    data = yaml.safe_load(spec.read_text())
    data["agent"]["files"] = str(script.parent)
    spec.write_text(yaml.safe_dump(data))
    result = run(spec)
    assert result.verdict == "pass", result.report
    lines = (result.run_dir / "attempts" / "1" / "agent.log").read_text().splitlines()
    user = json.loads((result.run_dir / "attempts" / "1" / "container.json").read_text())["user"]
    assert lines[0] == f"0o700 {user.split(':')[0]}", lines
    assert "Read-only file system" in lines[1], lines
    assert '"decision": "allow"' in "\n".join(lines[2:]), lines
    assert [r["tool"] for r in tool_calls(result)] == ["fs.list"]


def test_egress_through_the_runc_proxy_works_for_a_gvisor_agent(run, make_spec, upstream):
    spec = make_spec(
        "http-gvisor",
        "http.sh",
        sandbox={"runtime": "runsc"},
        contract=ratified(["http:*"], ceiling="irreversible"),
        autonomy={"dial": "irreversible", "verifier_trust": "irreversible"},
        egress={"allow": ["upstream:8080"], "upstream": upstream, "allow_private": True},
        assertions=[{"exit_code": 0}],
    )
    result = run(spec)
    calls = [(r["decision"], r["status"], r.get("error")) for r in tool_calls(result)]
    assert calls[:2] == [("allow", 200, None), ("allow", 200, None)], (
        result.run_dir / "attempts" / "1" / "agent.log"
    ).read_text()
    assert [c[2] for c in calls[2:]] == ["egress_denied"] * 4
    assert facts(result)["observed"]["runtime"] == "runsc"


def test_doctor_shows_runsc_registered_and_refuses_a_runtime_the_engine_lacks(tmp_path, make_spec):
    def doctor(spec: Path, code: int) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "assure.cli", "doctor", str(spec)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "COLUMNS": "400"},
        )
        assert done.returncode == code, done.stdout + done.stderr
        return " ".join(done.stdout.split())

    shown = doctor(make_spec("wants-gvisor", "notes-only.sh", sandbox={"runtime": "runsc"}), 0)
    assert (
        "runtime runsc (gVisor) │ ok │ registered: /usr/bin/runsc --host-uds=open --network=none"
        " --oci-seccomp" in shown
    ), shown
    shown = doctor(
        make_spec("wants-other", "notes-only.sh", sandbox={"runtime": "runsc-not-registered"}), 1
    )
    assert (
        "runtime runsc-not-registered │ missing │ the Docker engine has no runtime"
        " 'runsc-not-registered'" in shown
    ), shown


@pytest.mark.parametrize("runtime", ["runsc", "runc"])
def test_host_uds_open_reaches_no_host_socket_but_the_gateways(run, make_spec, runtime):
    """runsc may connect to host sockets (`--host-uds=open`): only ones its mounts expose. A
    world-connectable canary socket on the host, outside every mount, is never reached."""
    folder = Path(tempfile.mkdtemp(prefix="assure-canary-"))
    canary = folder / "c.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(canary))
    os.chmod(folder, 0o755)
    os.chmod(canary, 0o777)
    server.listen(8)
    server.settimeout(0.2)
    accepted: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    accepted.append(conn.recv(64) or b"(connected)")
                except OSError:
                    accepted.append(b"(connected)")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with socket.socket(
            socket.AF_UNIX, socket.SOCK_STREAM
        ) as control:  # the canary does hear a connection
            control.connect(str(canary))
            control.sendall(b"control\n")
        deadline = time.monotonic() + 5
        while not accepted and time.monotonic() < deadline:
            time.sleep(0.05)
        assert accepted == [b"control\n"]
        accepted.clear()
        spec = make_spec(
            f"host-sockets-{runtime}",
            "host_sockets.py",
            sandbox={"runtime": runtime},
            hostile=True,
            expect="contained",
            assertions=[{"exit_code": 0}],
        )
        data = yaml.safe_load(spec.read_text())
        data["agent"] = {
            "command": ["python3", "/opt/agent/host_sockets.py"],
            "files": str(ROOT / "fixtures" / "agents" / "gvisor"),
            "env": {"CANARY_SOCKET": str(canary)},
        }
        spec.write_text(yaml.safe_dump(data))
        result = run(spec)
    finally:
        stop.set()
        thread.join(5)
        server.close()
        shutil.rmtree(folder)
    log = (result.run_dir / "attempts" / "1" / "agent.log").read_text()
    outcomes = json.loads(log.strip().splitlines()[-1])
    assert accepted == [], (accepted, outcomes)
    assert outcomes.pop("the gateway (the one socket it may reach)") == "CONNECTED", outcomes
    assert len(outcomes) == 14 and all(v.startswith("refused: ") for v in outcomes.values()), (
        outcomes
    )
    assert result.verdict == "contained", result.report
    assert facts(result)["observed"]["runtime"] == runtime


@pytest.mark.parametrize("runtime", ["runsc", "runc"])
def test_an_agent_starts_a_thread(run, make_spec, runtime):
    """runsc answers every seccomp refusal with EPERM: with the base profile's clone3 refusal
    (ENOSYS under runc, so glibc falls back to clone) no thread could start under gVisor. Its
    profile lets clone3 through to the sentry, which answers ENOSYS itself (seccomp.py)."""
    spec = make_spec(
        f"thread-{runtime}",
        "thread.py",
        sandbox={"runtime": runtime},
        assertions=[{"exit_code": 0}],
    )
    data = yaml.safe_load(spec.read_text())
    data["agent"] = {
        "command": ["python3", "/opt/agent/thread.py"],
        "files": str(ROOT / "fixtures" / "agents" / "sockets"),
    }
    spec.write_text(yaml.safe_dump(data))
    result = run(spec)
    assert result.verdict == "pass", result.report
    log = (result.run_dir / "attempts" / "1" / "agent.log").read_text()
    assert log.splitlines() == ["thread started", "clone3 38"], log  # 38: ENOSYS
