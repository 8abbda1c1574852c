"""The container itself, on a real engine: assure's seccomp profile refuses the syscalls kernel
exploits start from, and the post-run check of the container's settings reports what it covered."""

import json

import pytest
import yaml

from assure.records.store import read_json
from assure.sandbox import hardening, seccomp
from assure.sandbox.backend import ContainerRequest, Mount
from assure.spec import Spec

from .conftest import ROOT, findings

ATTEMPTS = {
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "userfaultfd",
    "unshare(CLONE_NEWUSER)",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "fsopen",
}


def fixture_report(workspace):
    return json.loads((workspace / "out" / "syscalls.json").read_text())


def test_exploit_syscalls_are_refused_and_the_run_is_contained(run):
    result = run("syscalls")
    assert result.verdict == "contained", result.report
    attempt = result.run_dir / "attempts" / "1"
    report = fixture_report(attempt / "workspace")
    assert set(report["calls"]) == ATTEMPTS
    not_refused = {
        name: r
        for name, r in report["calls"].items()
        if r["outcome"] != "denied" or r["errno"] not in ("EPERM", "ENOSYS")
    }
    assert not_refused == {}
    assert report["status"]["Seccomp"] == "2" and report["status"]["CapEff"] == "0000000000000000"
    limits = Spec.from_json(read_json(result.run_dir / "spec.json")).limits
    seen = {u.name: [u.soft, u.hard] for u in hardening.ulimits(limits.nofile, limits.disk_bytes)}
    assert {k: report["rlimits"][k] for k in seen} == seen and report["rlimits"]["core"] == [0, 0]
    assert "nproc" not in seen  # a budget every run on the host would share (hardening.ulimits)
    assert report["limits"] == {
        "sparse 1 TiB file": "denied: EFBIG",
        "raise core limit": "denied: EPERM",
    }
    assert set(findings(result)) == {"assertion_passed", "attributed"}
    containment = read_json(attempt / "verdict.json")["containment"]
    assert containment["failed"] == []
    assert {
        "HostConfig.SecurityOpt seccomp",
        "AppArmorProfile",
        "HostConfig.Runtime",
        "Mounts",
        "HostConfig.Tmpfs",
        "HostConfig.Ulimits",
    } <= set(containment["checked"])
    observed = read_json(attempt / "container.json")["observed"]
    assert f"seccomp={seccomp.profile_text('runc')}" in observed["security_opt"]


def test_the_same_calls_go_through_without_the_profile(backend, images, tmp_path):
    """The control: the fixture's calls are real. Under the same hardening minus seccomp,
    io_uring_setup (allowed by the engine's own default profile here) and the others the
    kernel lets an unprivileged user make succeed, so the test above cannot pass vacuously."""
    out = tmp_path / "ws"
    (out / "out").mkdir(parents=True)
    out.chmod(0o777)
    (out / "out").chmod(0o777)
    request = ContainerRequest(
        role="test-control",
        image=images.agent,
        command=("python3", "/opt/agent/run.py"),
        working_dir="/workspace",
        user="10001:10001",
        network="none",
        cap_drop=("ALL",),
        security_opt=("no-new-privileges:true", "seccomp=unconfined"),
        labels={"assure.owner": "assure"},
        mounts=(
            Mount(str(out), "/workspace"),
            Mount(str(ROOT / "fixtures" / "agents" / "syscalls"), "/opt/agent", read_only=True),
        ),
    )
    cid = backend.start_container(request)
    try:
        assert backend.wait(cid, 60) == 0
    finally:
        backend.remove_container(cid)
    allowed = {
        name for name, r in fixture_report(out)["calls"].items() if r["outcome"] == "ALLOWED"
    }
    assert {
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "keyctl",
        "add_key",
        "unshare(CLONE_NEWUSER)",
    } <= allowed, allowed
    assert fixture_report(out)["limits"] == {
        "sparse 1 TiB file": "ALLOWED",
        "raise core limit": "ALLOWED",
    }  # no ulimits here
    assert (out / "out" / "ESCAPED").read_text().splitlines() == sorted(allowed) + [
        "raise core limit",
        "sparse 1 TiB file",
    ]


def test_a_live_database_the_gateway_cannot_use_is_refused_before_any_run(make_spec, tmp_path):
    """On main the first was found at the agent's first write ('attempt to write a readonly
    database', and the run passed); the second had the whole folder mounted into the gateway."""
    import subprocess
    import sys

    from .conftest import live_ledger, ratified

    readonly = live_ledger(tmp_path)
    readonly.chmod(0o444)
    (tmp_path / "home").mkdir()
    beside = live_ledger(tmp_path / "home")
    (beside.parent / "notes.txt").write_text("not the gateway's")
    for db, expected in (
        (readonly, f"cannot write {readonly} (owned by "),
        (beside, "holds more than the database ('notes.txt')"),
    ):
        spec = make_spec(
            "live-refused",
            "fix-and-record.sh",
            contract=ratified(["fs:**", "db:*"], ceiling="irreversible"),
            autonomy={"dial": "irreversible", "verifier_trust": "irreversible"},
            databases=[{"name": "ledger", "fixture": str(db), "mode": "live"}],
        )
        done = subprocess.run(
            [sys.executable, "-m", "assure.cli", "run", str(spec)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1, done.stdout + done.stderr
        assert (
            "databases[0].fixture (ledger)" in done.stderr
            and expected in done.stderr
            and "fix: " in done.stderr
        )
        assert not (tmp_path / ".assure" / "runs").exists()  # no run was made


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_vsock_and_uevent_sockets_are_refused_and_ordinary_ones_made(run, make_spec, runtime):
    """AF_VSOCK (not isolated by network namespaces) and NETLINK_KOBJECT_UEVENT (the host's
    device events) are refused whatever the upper 32 bits say; unix, inet and NETLINK_ROUTE
    sockets are still made. Under runc the errno is the profile's, under gVisor EPERM."""
    spec = make_spec(
        f"sockets-{runtime}",
        "sockets.py",
        sandbox={"runtime": runtime},
        assertions=[{"exit_code": 0}],
    )
    data = yaml.safe_load(spec.read_text())
    data["agent"] = {
        "command": ["python3", "/opt/agent/sockets.py"],
        "files": str(ROOT / "fixtures" / "agents" / "sockets"),
    }
    spec.write_text(yaml.safe_dump(data))
    result = run(spec)
    assert result.verdict == "pass", result.report
    seen = json.loads(
        (result.run_dir / "attempts" / "1" / "agent.log").read_text().splitlines()[-1]
    )
    vsock, uevent = (
        ("EPERM", "EPERM") if runtime == "runsc" else ("EAFNOSUPPORT", "EPROTONOSUPPORT")
    )
    assert seen == {
        "vsock": vsock,
        "vsock high bits": vsock,
        "vsock socketpair": vsock,
        "uevent": uevent,
        "uevent high bits": uevent,
        "netlink route": "ok",
        "unix": "ok",
        "unix socketpair": "ok",
        "inet": "ok",
        "inet6": "ok",
    }, seen
