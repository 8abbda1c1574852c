"""The CIS section 5 self-check on canned engine data: a real `docker inspect`/`docker top` of
a live agent and gateway (tests/unit/cis_inspect.json, host-specific bits replaced) passes
every item that applies; each weakening fails exactly the items it should."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from assure import spec as spec_mod
from assure.sandbox import seccomp
from assure.sandbox.docker import cis

ROOT = Path(__file__).resolve().parents[2]
CANNED = json.loads((Path(__file__).parent / "cis_inspect.json").read_text())
SPEC = spec_mod.load(
    ROOT / "tests" / "integration" / "specs" / "hang.yaml"
)  # the spec the capture ran
USER = (10001, 10001)  # the capture's user (the check does not judge the uid: the verifier does)


def evidence(
    role: str, change: Callable[[dict[str, Any]], None] | None = None, **engine: Any
) -> cis.Evidence:
    data = copy.deepcopy(CANNED["containers"][role])
    inspect = data["inspect"]
    inspect["HostConfig"]["SecurityOpt"] = [
        seccomp.security_opt("runc") if o.startswith("seccomp=") else o
        for o in inspect["HostConfig"]["SecurityOpt"]
    ]
    if change:
        change(data)
    return cis.Evidence(
        inspect,
        data["processes"],
        engine.get("security", CANNED["engine_security"]),
        engine.get("swarm", CANNED["swarm"]),
    )


def results(role: str, e: cis.Evidence) -> dict[str, cis.Status]:
    want = cis.expected_request(SPEC, role, e.inspect["Config"]["Image"], user=USER)
    return {i.id: i.status for i in cis.check(e, want)}


def test_the_items_are_the_sections_32():
    assert [i for i, _, _ in cis.ITEMS] == [f"5.{n}" for n in range(1, 33)]


@pytest.mark.parametrize("role", ["agent", "gateway"])
def test_the_captured_containers_pass_and_say_what_does_not_apply(role):
    items = cis.check(
        evidence(role),
        cis.expected_request(
            SPEC, role, CANNED["containers"][role]["inspect"]["Config"]["Image"], user=USER
        ),
    )
    assert cis.failed(items) == []
    not_applicable = {i.id: i.detail for i in items if i.status is cis.Status.NOT_APPLICABLE}
    assert set(not_applicable) == {
        "5.2",
        "5.3",
        "5.27",
    }  # no AppArmor, no SELinux on the capture's host; no health check
    assert "no AppArmor" in not_applicable["5.2"] and "SELinux" in not_applicable["5.3"]
    assert ("one-shot" in not_applicable["5.27"]) is (role == "agent")
    assert all(i.detail for i in items)


def _host(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["inspect"]["HostConfig"].__setitem__(key, value)


def _top(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["inspect"].__setitem__(key, value)


def _mount(source: str, destination: str) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["inspect"]["Mounts"].append(
        {
            "Type": "bind",
            "Source": source,
            "Destination": destination,
            "Mode": "ro",
            "RW": False,
            "Propagation": "rprivate",
        }
    )


def _ports(d: dict[str, Any]) -> None:
    d["inspect"]["HostConfig"]["PortBindings"] = {"22/tcp": [{"HostIp": "", "HostPort": "22"}]}


def _propagation(d: dict[str, Any]) -> None:
    d["inspect"]["Mounts"][0]["Propagation"] = "rshared"


def _drop_option(option: str) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["inspect"]["HostConfig"].__setitem__(
        "SecurityOpt",
        [o for o in d["inspect"]["HostConfig"]["SecurityOpt"] if not o.startswith(option)],
    )


WEAKENED = {
    "cap_drop ALL dropped": (_host("CapDrop", None), {"5.4"}),
    "one capability dropped, not all": (_host("CapDrop", ["NET_RAW"]), {"5.4"}),
    "SYS_ADMIN added": (_host("CapAdd", ["SYS_ADMIN"]), {"5.4"}),
    "privileged": (_host("Privileged", True), {"5.5"}),
    "/etc mounted": (_mount("/etc", "/host-etc"), {"5.6"}),
    "a folder under /proc mounted": (_mount("/proc/1", "/p"), {"5.6"}),
    "sshd running": (lambda d: d["processes"].append("/usr/sbin/sshd -D"), {"5.7"}),
    "port 22 published on every interface": (_ports, {"5.8", "5.9", "5.14"}),
    "all ports published": (_host("PublishAllPorts", True), {"5.8", "5.9", "5.14"}),
    "host network": (_host("NetworkMode", "host"), {"5.10"}),
    "on the default bridge": (
        lambda d: (
            d["inspect"]["HostConfig"].__setitem__("NetworkMode", "bridge"),
            d["inspect"]["NetworkSettings"]["Networks"].__setitem__("bridge", {}),
        ),
        {"5.10", "5.30"},
    ),
    "no memory limit": (_host("Memory", 0), {"5.11"}),
    "swap allowed": (_host("MemorySwap", -1), {"5.11"}),
    "no CPU limit": (_host("NanoCpus", 0), {"5.12"}),
    "writable root": (_host("ReadonlyRootfs", False), {"5.13"}),
    "/tmp executable": (_host("Tmpfs", {"/tmp": "rw,size=67108864"}), {"5.13"}),
    "restart always": (
        _host("RestartPolicy", {"Name": "always", "MaximumRetryCount": 0}),
        {"5.15"},
    ),
    "host PID namespace": (_host("PidMode", "host"), {"5.16"}),
    "host IPC namespace": (_host("IpcMode", "host"), {"5.17"}),
    "shareable IPC": (_host("IpcMode", "shareable"), {"5.17"}),
    "a host device": (
        _host(
            "Devices",
            [{"PathOnHost": "/dev/kvm", "PathInContainer": "/dev/kvm", "CgroupPermissions": "rwm"}],
        ),
        {"5.18"},
    ),
    "a GPU request": (_host("DeviceRequests", [{"Driver": "nvidia", "Count": -1}]), {"5.18"}),
    "engine default ulimits": (_host("Ulimits", None), {"5.19"}),
    "nofile raised": (
        lambda d: d["inspect"]["HostConfig"]["Ulimits"][0].update(Soft=1048576, Hard=1048576),
        {"5.19"},
    ),
    "shared propagation": (_propagation, {"5.20"}),
    "host UTS namespace": (_host("UTSMode", "host"), {"5.21"}),
    "seccomp unconfined": (
        lambda d: d["inspect"]["HostConfig"].__setitem__(
            "SecurityOpt", ["no-new-privileges:true", "seccomp=unconfined"]
        ),
        {"5.22"},
    ),
    "the engine's default seccomp profile, not assure's": (_drop_option("seccomp="), {"5.22"}),
    "seccomp unconfined, written with a colon": (
        lambda d: d["inspect"]["HostConfig"].__setitem__(
            "SecurityOpt", ["no-new-privileges:true", "seccomp:unconfined"]
        ),
        {"5.22"},
    ),
    "an exec session": (_top("ExecIDs", ["0123abcd"]), {"5.23", "5.24"}),
    "a cgroup parent": (_host("CgroupParent", "/elsewhere"), {"5.25"}),
    "no-new-privileges dropped": (_drop_option("no-new-privileges"), {"5.26"}),
    "a latest image": (
        lambda d: d["inspect"]["Config"].__setitem__("Image", "assure-agent:latest"),
        {"5.28"},
    ),
    "no pids limit": (_host("PidsLimit", -1), {"5.29"}),
    "pids limit raised": (_host("PidsLimit", 4096), {"5.29"}),
    "host user namespace": (_host("UsernsMode", "host"), {"5.31"}),
    "the Docker socket": (_mount("/var/run/docker.sock", "/var/run/docker.sock"), {"5.6", "5.32"}),
    "read-only mounts made writable": (
        lambda d: [m.update(RW=True, Mode="rw") for m in d["inspect"]["Mounts"]],
        {"5.6"},
    ),
    "AppArmor unconfined": (
        lambda d: d["inspect"]["HostConfig"]["SecurityOpt"].append("apparmor=unconfined"),
        {"5.2"},
    ),
    "SELinux labels disabled": (
        lambda d: d["inspect"]["HostConfig"]["SecurityOpt"].append("label=disable"),
        {"5.3"},
    ),
    "unreadable data": (_host("Ulimits", [7]), {"5.19"}),
}


@pytest.mark.parametrize("name", WEAKENED)
def test_a_weakened_container_fails_exactly_its_items(name):
    change, failing = WEAKENED[name]
    for role in ("agent", "gateway"):
        got = results(role, evidence(role, change))
        assert {i for i, s in got.items() if s is cis.Status.FAIL} == failing, (role, got)


def test_the_engine_matters_where_the_item_is_about_the_engine():
    apparmor_host = ["name=apparmor", *CANNED["engine_security"]]
    assert (
        results("agent", evidence("agent", security=apparmor_host))["5.2"] is cis.Status.FAIL
    )  # AppArmor on the host, no profile
    assert (
        results(
            "agent",
            evidence("agent", _top("AppArmorProfile", "docker-default"), security=apparmor_host),
        )["5.2"]
        is cis.Status.PASS
    )
    assert (
        results("agent", evidence("agent", security=["name=selinux", *CANNED["engine_security"]]))[
            "5.3"
        ]
        is cis.Status.FAIL
    )
    assert (
        results("agent", evidence("agent", security=[]))["5.22"] is cis.Status.FAIL
    )  # no seccomp: the profile is not applied
    assert results("agent", evidence("agent", swarm="active"))["5.1"] is cis.Status.FAIL


def test_a_stopped_container_says_it_has_no_processes_and_a_request_mismatch_fails():
    e = evidence("agent", lambda d: d.__setitem__("processes", None))
    items = {
        i.id: i
        for i in cis.check(
            e, cis.expected_request(SPEC, "agent", e.inspect["Config"]["Image"], user=USER)
        )
    }
    assert items["5.7"].status is cis.Status.NOT_APPLICABLE and "not running" in items["5.7"].detail
    # the gateway's inspect judged as an agent: its memory, pids and mounts are not the agent's
    gateway = evidence("gateway")
    wrong = {
        i.id
        for i in cis.failed(
            cis.check(
                gateway,
                cis.expected_request(SPEC, "agent", gateway.inspect["Config"]["Image"], user=USER),
            )
        )
    }
    assert wrong == {"5.6", "5.11", "5.29"}


def test_an_egress_proxy_is_judged_only_against_its_network():
    with pytest.raises(ValueError, match="without its network"):
        cis.expected_request(SPEC, "egress", "assure-egress:x", user=USER)
    want = cis.expected_request(SPEC, "egress", "assure-egress:x", network="net-id", user=USER)
    assert want.network == "net-id" and {m.target for m in want.mounts} == {
        "/etc/egress",
        "/var/log/egress",
    }
