"""The CIS Docker Benchmark section 5 self-check on live containers: the agent and the gateway
of a real attempt (an agent that sleeps until the test has inspected it), and a container
started with one hardening setting taken away, which the same check must catch."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assure import spec as spec_mod
from assure.errors import SandboxError
from assure.sandbox import hardening
from assure.sandbox.docker import cis

from .conftest import EXAMPLES, SPECS


def user_of(evidence: cis.Evidence) -> tuple[int, int]:
    """The uid:gid the engine ran the container as: its attempt's own (the check does not judge
    it)."""
    uid, gid = evidence.inspect["Config"]["User"].split(":")
    return int(uid), int(gid)


HANG = SPECS / "hang.yaml"


def _live(backend, cid: str) -> bool:
    """Running now; a container removed since it was listed (the engine is shared, and listing
    and inspecting are two requests) is not, and the next look lists again."""
    try:
        return bool(backend.inspect(cid)["State"]["Running"])
    except SandboxError:
        return False


def _running(backend, proc: subprocess.Popen, timeout: float = 60) -> dict[str, str]:
    """role -> container id, once the run's agent and gateway containers are running (the agent
    starts while the gateway is created: either may be listed first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        ours = {
            c["assure.role"]: c["id"]
            for c in backend.owned()["containers"]
            if c.get("assure.pid") == str(proc.pid)
        }
        if {"agent", "gateway"} <= set(ours) and all(
            _live(backend, ours[r]) for r in ("agent", "gateway")
        ):
            return ours
        time.sleep(0.2)
    pytest.fail(
        "the agent container never started:"
        f" {proc.stderr.read() if proc.poll() is not None else 'timed out'}"
    )


def test_a_live_agent_and_gateway_hold_every_item_that_applies(backend, images, tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "assure.cli", "run", str(HANG)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        containers = _running(backend, proc)
        evidence = {role: cis.gather(backend, containers[role]) for role in ("agent", "gateway")}
    finally:
        proc.send_signal(signal.SIGTERM)  # cleans up like Ctrl-C
        proc.communicate(timeout=60)
    spec = spec_mod.load(HANG)
    security = backend.security_options()
    for role, image in (("agent", images.agent), ("gateway", images.gateway)):
        items = cis.check(
            evidence[role], cis.expected_request(spec, role, image, user=user_of(evidence[role]))
        )
        assert [(i.id, i.detail) for i in cis.failed(items)] == [], role
        status = {i.id: i for i in items}
        # what does not apply says so, and only where this host makes it so
        assert (
            status["5.27"].status is cis.Status.NOT_APPLICABLE
            and status["5.27"].detail == cis.NO_HEALTHCHECK[role]
        )
        for item, name in (("5.2", "apparmor"), ("5.3", "selinux")):
            on_host = any(o.startswith(f"name={name}") for o in security)
            assert (
                (status[item].status is cis.Status.PASS)
                if on_host
                else (status[item].status is cis.Status.NOT_APPLICABLE)
            ), status[item]
        assert (
            status["5.7"].status is cis.Status.PASS
        )  # the processes were listed: the container was live
        others = {i.id for i in items} - {"5.2", "5.3", "5.27"}
        assert {status[i].status for i in others} == {cis.Status.PASS}


def test_a_container_without_cap_drop_all_fails_the_live_check(backend, images, tmp_path):
    """The same check on a container the test weakens itself: assure's agent hardening minus
    `cap_drop ALL`, plus a writable root; the engine reports it and the check fails 5.4 and 5.13."""
    spec = spec_mod.load(HANG)
    want = cis.expected_request(
        spec, "agent", images.agent, user=(hardening.DEFAULT_UID, hardening.DEFAULT_UID)
    )
    weak = dataclasses.replace(
        want,
        cap_drop=(),
        read_only_root=False,
        mounts=(),
        command=("sleep", "60"),
        name=None,
        labels={},
        role="agent",
    )
    cid = backend.start_container(weak)
    try:
        items = cis.check(cis.gather(backend, cid), dataclasses.replace(want, mounts=()))
    finally:
        backend.remove_container(cid)
    assert {i.id for i in cis.failed(items)} == {"5.4", "5.13"}, [
        (i.id, i.detail) for i in cis.failed(items)
    ]
    assert hardening.common_request(
        spec,
        "agent",
        images.agent,
        {},
        spec.limits.memory_bytes,
        spec.limits.pids,
        user=(hardening.DEFAULT_UID, hardening.DEFAULT_UID),
    ).cap_drop == ("ALL",)


def test_doctor_runs_the_check_on_what_the_engine_makes_of_our_requests(backend, images):
    from assure.ops import doctor

    rows = {c.name: c for c in doctor.diagnose().checks if c.name.startswith("CIS 5")}
    assert sorted(rows) == ["CIS 5 (agent)", "CIS 5 (gateway)"]
    security = backend.security_options()
    skipped = [
        i
        for i, name in (("5.2", "apparmor"), ("5.3", "selinux"))
        if not any(o.startswith(f"name={name}") for o in security)
    ]
    skipped += ["5.7", "5.27"]  # created, never started: no processes; no health check by design
    for row in rows.values():
        assert row.status is doctor.Status.OK, row.detail
        assert (
            row.detail == f"{32 - len(skipped)} of 32 items hold; not applicable here:"
            f" {', '.join(sorted(skipped, key=lambda i: int(i[2:])))}"
        )


def test_tasks_of_the_sandbox_uid_elsewhere_on_the_host_do_not_stop_a_run(backend, images, run):
    """5.19, the ulimits as intended: RLIMIT_NPROC is one budget for every task of the uid on the
    host, shared by every run. With nproc set to one run's pids (256 here, as it was), 300
    threads of the same uid in another container, well inside their own pids limit, left the
    next attempt's gateway unable to start a thread: a harness error instead of a pass."""
    spec = spec_mod.load(EXAMPLES / "benign.yaml")
    uid, gid = hardening.fixed_user(spec) or (
        hardening.DEFAULT_UID,
        hardening.DEFAULT_UID,
    )  # another uid than the run's: RLIMIT_NPROC counts per uid
    hog = dataclasses.replace(
        cis.expected_request(spec, "agent", images.agent, user=(uid, gid)),
        mounts=(),
        name=None,
        labels={},
        pids_limit=400,
        command=(
            "python3",
            "-c",
            (
                "import threading, time\nfor _ in range(300): threading.Thread(target=time.sleep,"
                " args=(120,), daemon=True).start()\nprint('ready', flush=True); time.sleep(120)"
            ),
        ),
        user=f"{uid}:{gid}",
    )
    cid = backend.start_container(hog)
    try:
        deadline = time.monotonic() + 30
        while b"ready" not in backend.logs(cid, 1000) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert b"ready" in backend.logs(cid, 1000)
        result = run("benign")
    finally:
        backend.remove_container(cid)
    assert result.verdict == "pass", result.report


def _egress_run(
    backend, make_spec, tmp_path, name: str, upstream: str
) -> tuple[dict[str, cis.Evidence], str, Path]:
    """A run whose spec allowlists a host (so it has an egress proxy), caught live."""
    spec = make_spec(
        name,
        "notes-only.sh",
        agent={"command": ["sh", "-c", "sleep 300"]},
        egress={"allow": ["example.invalid:443"], "upstream": upstream},
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "assure.cli", "run", str(spec)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        containers = _running(backend, proc)
        run_id = next(
            c["assure.run"]
            for c in backend.owned()["containers"]
            if c["id"] == containers["egress"]
        )
        (internal,) = [
            n["id"] for n in backend.owned(run_id)["networks"]
        ]  # the request names it by id
        evidence = {role: cis.gather(backend, containers[role]) for role in ("gateway", "egress")}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    return evidence, internal, spec


def test_the_egress_proxy_on_the_default_bridge_is_5_30_and_nothing_else(
    backend, images, make_spec, tmp_path
):
    """`egress.upstream: bridge` (the default) connects the proxy to docker0, which 5.30 asks
    not to use; everything else holds for the proxy and for the gateway on the internal network.
    With a user-defined upstream network the proxy passes 5.30 too."""
    evidence, internal, spec_path = _egress_run(
        backend, make_spec, tmp_path, "cis-egress-bridge", "bridge"
    )
    spec = spec_mod.load(spec_path)
    gateway = cis.check(
        evidence["gateway"],
        cis.expected_request(
            spec, "gateway", images.gateway, network=internal, user=user_of(evidence["gateway"])
        ),
    )
    assert [(i.id, i.detail) for i in cis.failed(gateway)] == []
    proxy = cis.check(
        evidence["egress"],
        cis.expected_request(
            spec, "egress", images.egress, network=internal, user=user_of(evidence["egress"])
        ),
    )
    failed = {i.id: i.detail for i in cis.failed(proxy)}
    assert list(failed) == ["5.30"] and "egress.upstream: bridge" in failed["5.30"], failed

    upstream = backend.create_network(
        f"cis-upstream-{os.getpid()}",
        {"assure.owner": "assure", "assure.pid": str(os.getpid())},
        internal=False,
    )
    try:
        (tmp_path / "second").mkdir()
        evidence, internal, spec_path = _egress_run(
            backend, make_spec, tmp_path / "second", "cis-egress-own", f"cis-upstream-{os.getpid()}"
        )
    finally:
        backend.remove_network(upstream)
    proxy = cis.check(
        evidence["egress"],
        cis.expected_request(
            spec_mod.load(spec_path),
            "egress",
            images.egress,
            network=internal,
            user=user_of(evidence["egress"]),
        ),
    )
    assert [(i.id, i.detail) for i in cis.failed(proxy)] == []
