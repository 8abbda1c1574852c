"""A self-check of one container against section 5 ("Container Runtime") of the CIS Docker
Benchmark v1.6.0, item by item, judged against what `sandbox.hardening` asked for.

The item ids and titles are the benchmark's (as docker-bench-security's
`tests/5_container_runtime.sh` numbers them). Where the benchmark accepts a range, assure's
own default is the bar: capabilities must be dropped to none, not merely "restricted"; the
memory, CPU, pids and ulimits must be exactly the request's. An item that does not apply to
this container or host says why (`not_applicable`); nothing passes by being skipped.

Input is what the engine reports: `docker inspect`, `docker top` (the live processes, None
for a container that is not running) and `docker info`, gathered by `gather`; the check
itself is a pure function of them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assure.errors import describe
from assure.sandbox import hardening, seccomp
from assure.sandbox.backend import ContainerRequest, Role
from assure.sandbox.docker.backend import DockerBackend
from assure.spec import Spec

SENSITIVE_DIRS = ("/", "/boot", "/dev", "/etc", "/lib", "/proc", "/sys", "/usr")
# Why a container of each role has no engine health check (5.27).
NO_HEALTHCHECK: dict[str, str] = {  # by role (a Role is its str)
    Role.AGENT: (
        "a one-shot agent: the driver waits for its exit and the deadline stops it; nothing would"
        " act on a health status"
    ),
    Role.CHECK: "a one-shot check: its exit code is the result, within the check's timeout",
    Role.GATEWAY: (
        "the driver waits for the gateway's ready file before the agent starts, and its heartbeat"
        " (last_success_at) is watched by `assure monitor`"
    ),
    Role.EGRESS: "the gateway reports a proxy that does not answer as a failed call, journaled",
}


class Status(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    NOT_APPLICABLE = "not_applicable"


@dataclass(frozen=True)
class Evidence:
    """What the engine says about one container and itself."""

    inspect: dict[str, Any]
    processes: list[str] | None  # command lines (`docker top`'s CMD); None: not running
    engine_security: list[str]  # `docker info` SecurityOptions, e.g. name=seccomp,profile=default
    swarm: str  # `docker info` Swarm.LocalNodeState

    def host(self, key: str) -> Any:
        return (self.inspect.get("HostConfig") or {}).get(key)

    def engine_has(self, name: str) -> bool:
        return any(o.startswith(f"name={name}") for o in self.engine_security)


@dataclass(frozen=True)
class Item:
    id: str
    title: str
    status: Status
    detail: str


Result = tuple[Status, str]


def _ok(good: bool, detail: str) -> Result:
    return (Status.PASS if good else Status.FAIL), detail


def _swarm(e: Evidence, _: ContainerRequest) -> Result:
    return _ok(e.swarm == "inactive", f"the engine's swarm mode: {e.swarm or 'not reported'}")


def _apparmor(e: Evidence, _: ContainerRequest) -> Result:
    profile = e.inspect.get("AppArmorProfile") or ""
    unconfined = profile == "unconfined" or any(
        o.replace(":", "=", 1) == "apparmor=unconfined" for o in e.host("SecurityOpt") or []
    )
    if not e.engine_has("apparmor") and not unconfined:
        return (
            Status.NOT_APPLICABLE,
            (
                "the engine has no AppArmor; seccomp, dropped capabilities and no-new-privileges"
                " confine instead"
            ),
        )
    return _ok(bool(profile) and not unconfined, f"AppArmorProfile {profile!r}")


def _selinux(e: Evidence, _: ContainerRequest) -> Result:
    disabled = any(o.replace(":", "=", 1) == "label=disable" for o in e.host("SecurityOpt") or [])
    if not e.engine_has("selinux") and not disabled:
        return (
            Status.NOT_APPLICABLE,
            "the engine does not run with SELinux (no name=selinux in docker info)",
        )
    label = e.inspect.get("ProcessLabel") or ""
    return _ok(bool(label) and not disabled, f"ProcessLabel {label!r}")


def _capabilities(e: Evidence, want: ContainerRequest) -> Result:
    drop, add = list(e.host("CapDrop") or []), list(e.host("CapAdd") or [])
    return _ok(
        sorted(drop) == sorted(want.cap_drop) and "ALL" in drop and not add,
        f"CapDrop {drop}, CapAdd {add}",
    )


def _privileged(e: Evidence, _: ContainerRequest) -> Result:
    return _ok(e.host("Privileged") is False, f"Privileged {e.host('Privileged')!r}")


def _sensitive_mounts(e: Evidence, want: ContainerRequest) -> Result:
    """No host system folder (or anything beneath one but `/`) and exactly the request's mount
    points, each with the request's mode."""
    mounts = e.inspect.get("Mounts") or []
    sensitive = [
        m.get("Source")
        for m in mounts
        if any(_under(str(m.get("Source")), d) for d in SENSITIVE_DIRS)
    ]
    reported = {m.get("Destination"): "ro" if not m.get("RW") else "rw" for m in mounts}
    expected = {m.target: "ro" if m.read_only else "rw" for m in want.mounts}
    problems = [f"host system folder mounted: {s}" for s in sensitive]
    if reported != expected:
        problems.append(f"mounts {reported} where the request has {expected}")
    return _ok(
        not problems,
        "; ".join(problems)
        or f"{len(mounts)} mounts, as requested, none of {', '.join(SENSITIVE_DIRS)}",
    )


def _under(path: str, folder: str) -> bool:
    return path.rstrip("/") == folder.rstrip("/") or (
        folder != "/" and path.startswith(folder + "/")
    )


def _sshd(e: Evidence, _: ContainerRequest) -> Result:
    if e.processes is None:
        return Status.NOT_APPLICABLE, "the container is not running: no processes to list"
    found = [p for p in e.processes if "sshd" in p]
    return _ok(
        not found, f"sshd running: {found}" if found else f"{len(e.processes)} processes, no sshd"
    )


def _published(e: Evidence) -> list[str]:
    """Every published port binding, as host_ip:host_port->container_port."""
    out = []
    for source in (
        (e.host("PortBindings") or {}),
        ((e.inspect.get("NetworkSettings") or {}).get("Ports") or {}),
    ):
        for port, bindings in source.items():
            out += [
                f"{b.get('HostIp') or '0.0.0.0'}:{b.get('HostPort')}->{port}"
                for b in bindings or []
            ]
    if e.host("PublishAllPorts"):
        out.append("PublishAllPorts")
    return sorted(set(out))


def _no_ports(e: Evidence, _: ContainerRequest) -> Result:
    ports = _published(e)
    return _ok(
        not ports,
        (
            f"published: {ports}"
            if ports
            else "no port published (assure's containers serve only a unix socket)"
        ),
    )


def _host_network(e: Evidence, want: ContainerRequest) -> Result:
    mode = e.host("NetworkMode")
    return _ok(
        mode != "host" and mode == (want.network or "default"),
        f"NetworkMode {mode!r}, requested {want.network!r}",
    )


def _memory(e: Evidence, want: ContainerRequest) -> Result:
    memory, swap = e.host("Memory"), e.host("MemorySwap")
    return _ok(
        bool(memory) and memory == want.memory and swap == want.memory_swap,
        f"Memory {memory}, MemorySwap {swap} (requested {want.memory}, {want.memory_swap})",
    )


def _cpu(e: Evidence, want: ContainerRequest) -> Result:
    cpus = e.host("NanoCpus")
    return _ok(
        bool(cpus) and cpus == want.nano_cpus, f"NanoCpus {cpus} (requested {want.nano_cpus})"
    )


def _read_only_root(e: Evidence, want: ContainerRequest) -> Result:
    read_only = e.host("ReadonlyRootfs")
    tmpfs = dict(e.host("Tmpfs") or {})
    good = read_only is True and want.read_only_root and tmpfs == dict(want.tmpfs)
    why = "" if want.read_only_root else " (the spec sets sandbox.read_only_root: false)"
    return _ok(good, f"ReadonlyRootfs {read_only!r}{why}; writable tmpfs {tmpfs}")


def _host_interface(e: Evidence, _: ContainerRequest) -> Result:
    wildcard = [p for p in _published(e) if p.startswith(("0.0.0.0:", ":::", "PublishAll"))]
    return _ok(
        not wildcard,
        (
            f"bound to every interface: {wildcard}"
            if wildcard
            else "nothing published, so nothing bound to a wildcard address"
        ),
    )


def _restart(e: Evidence, _: ContainerRequest) -> Result:
    policy = e.host("RestartPolicy") or {}
    name = policy.get("Name") or "no"
    # assure's bar is stricter than on-failure:5: a restarted agent would be an attempt the driver
    # never made
    return _ok(
        name == "no",
        f"RestartPolicy {name}:{policy.get('MaximumRetryCount', 0)} (assure restarts nothing: a new"
        " attempt is a new container)",
    )


def _namespace(
    key: str, expected: Callable[[ContainerRequest], str]
) -> Callable[[Evidence, ContainerRequest], Result]:
    def check(e: Evidence, want: ContainerRequest) -> Result:
        mode = e.host(key) or ""
        return _ok(not mode.startswith("host") and mode == expected(want), f"{key} {mode!r}")

    return check


def _devices(e: Evidence, _: ContainerRequest) -> Result:
    found = {k: e.host(k) for k in ("Devices", "DeviceRequests", "DeviceCgroupRules") if e.host(k)}
    return _ok(
        not found,
        f"exposed: {found}" if found else "no host devices, device requests or device cgroup rules",
    )


def _ulimits(e: Evidence, want: ContainerRequest) -> Result:
    reported = {u.get("Name"): (u.get("Soft"), u.get("Hard")) for u in e.host("Ulimits") or []}
    expected = {u.name: (u.soft, u.hard) for u in want.ulimits}
    return _ok(
        bool(reported) and reported == expected,
        f"Ulimits {reported}" + ("" if reported == expected else f", requested {expected}"),
    )


def _propagation(e: Evidence, _: ContainerRequest) -> Result:
    shared = [
        m.get("Destination")
        for m in e.inspect.get("Mounts") or []
        if "shared" in str(m.get("Propagation") or "")
    ]
    return _ok(
        not shared,
        f"shared propagation on {shared}" if shared else "no mount with shared propagation",
    )


def _seccomp(e: Evidence, want: ContainerRequest) -> Result:
    profiles = [
        o[len("seccomp") + 1 :]
        for o in e.host("SecurityOpt") or []
        if o.startswith(("seccomp=", "seccomp:"))
    ]
    expected = [o.split("=", 1)[1] for o in want.security_opt if o.startswith("seccomp=")]
    shown = ["unconfined" if p == "unconfined" else f"sha256:{seccomp.digest(p)}" for p in profiles]
    good = profiles == expected and "unconfined" not in profiles and e.engine_has("seccomp")
    return _ok(
        good,
        f"profiles {shown}"
        + ("" if e.engine_has("seccomp") else "; the engine has no seccomp support"),
    )


def _no_exec(e: Evidence, _: ContainerRequest) -> Result:
    execs = e.inspect.get("ExecIDs") or []
    return _ok(
        not execs,
        (
            f"exec sessions: {len(execs)}"
            if execs
            else "no exec session (assure never runs docker exec)"
        ),
    )


def _cgroup(e: Evidence, _: ContainerRequest) -> Result:
    parent = e.host("CgroupParent") or ""
    return _ok(
        parent == "",
        (
            f"CgroupParent {parent!r} (the engine's default)"
            if not parent
            else f"CgroupParent {parent!r}, assure sets none"
        ),
    )


def _no_new_privileges(e: Evidence, _: ContainerRequest) -> Result:
    options = e.host("SecurityOpt") or []
    good = "no-new-privileges:true" in options or "no-new-privileges" in options
    return _ok(
        good,
        (
            "no-new-privileges set"
            if good
            else f"SecurityOpt without no-new-privileges: {[o[:40] for o in options]}"
        ),
    )


def _health(e: Evidence, _: ContainerRequest) -> Result:
    check = (e.inspect.get("Config") or {}).get("Healthcheck") or {}
    if check.get("Test") and check["Test"] != ["NONE"]:
        return Status.PASS, f"health check {check['Test']}"
    role = _role(e)
    if role in NO_HEALTHCHECK:
        return Status.NOT_APPLICABLE, NO_HEALTHCHECK[role]
    return Status.FAIL, f"no health check, and {role!r} is no role of assure's"


def _image(e: Evidence, want: ContainerRequest) -> Result:
    image = (e.inspect.get("Config") or {}).get("Image") or ""
    pinned = ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest")
    return _ok(
        pinned and image == want.image,
        f"image {image!r} (requested {want.image!r}; assure's tags are content digests)",
    )


def _pids(e: Evidence, want: ContainerRequest) -> Result:
    limit = e.host("PidsLimit")
    return _ok(
        isinstance(limit, int) and limit > 0 and limit == want.pids_limit,
        f"PidsLimit {limit} (requested {want.pids_limit})",
    )


def _default_bridge(e: Evidence, _: ContainerRequest) -> Result:
    networks = sorted((e.inspect.get("NetworkSettings") or {}).get("Networks") or {})
    on_bridge = e.host("NetworkMode") in ("bridge", "default") or "bridge" in networks
    detail = f"networks {networks}"
    if on_bridge:
        detail += "; on docker0" + (
            " (egress.upstream: bridge; name a user-defined network instead)"
            if _role(e) == Role.EGRESS
            else ""
        )
    return _ok(not on_bridge, detail)


def _role(e: Evidence) -> str:
    return str(((e.inspect.get("Config") or {}).get("Labels") or {}).get("assure.role", ""))


def _docker_socket(e: Evidence, _: ContainerRequest) -> Result:
    found = [
        m.get("Source")
        for m in e.inspect.get("Mounts") or []
        if "docker.sock" in f"{m.get('Source')} {m.get('Destination')}"
    ]
    found += [b for b in e.host("Binds") or [] if "docker.sock" in b]
    return _ok(
        not found, f"Docker socket mounted: {found}" if found else "no Docker socket mounted"
    )


ITEMS: tuple[tuple[str, str, Callable[[Evidence, ContainerRequest], Result]], ...] = (
    ("5.1", "swarm mode is not enabled, if not needed", _swarm),
    ("5.2", "an AppArmor profile is enabled, if applicable", _apparmor),
    ("5.3", "SELinux security options are set, if applicable", _selinux),
    ("5.4", "Linux kernel capabilities are restricted", _capabilities),
    ("5.5", "privileged containers are not used", _privileged),
    ("5.6", "sensitive host system directories are not mounted", _sensitive_mounts),
    ("5.7", "sshd is not run within containers", _sshd),
    ("5.8", "privileged ports are not mapped", _no_ports),
    ("5.9", "only needed ports are open", _no_ports),
    ("5.10", "the host's network namespace is not shared", _host_network),
    ("5.11", "memory usage is limited", _memory),
    ("5.12", "CPU priority is set appropriately", _cpu),
    ("5.13", "the root filesystem is mounted read-only", _read_only_root),
    ("5.14", "incoming traffic is bound to a specific host interface", _host_interface),
    ("5.15", "the restart policy is on-failure:5 (or no)", _restart),
    ("5.16", "the host's process namespace is not shared", _namespace("PidMode", lambda want: "")),
    (
        "5.17",
        "the host's IPC namespace is not shared",
        _namespace("IpcMode", lambda want: want.ipc or ""),
    ),
    ("5.18", "host devices are not directly exposed", _devices),
    ("5.19", "the default ulimit is overwritten at runtime", _ulimits),
    ("5.20", "mount propagation is not shared", _propagation),
    ("5.21", "the host's UTS namespace is not shared", _namespace("UTSMode", lambda want: "")),
    ("5.22", "the default seccomp profile is not disabled", _seccomp),
    ("5.23", "docker exec is not used with --privileged", _no_exec),
    ("5.24", "docker exec is not used with --user=root", _no_exec),
    ("5.25", "cgroup usage is confirmed", _cgroup),
    ("5.26", "the container cannot acquire additional privileges", _no_new_privileges),
    ("5.27", "container health is checked at runtime", _health),
    ("5.28", "the image used is the intended version", _image),
    ("5.29", "the PIDs cgroup limit is used", _pids),
    ("5.30", "Docker's default bridge docker0 is not used", _default_bridge),
    (
        "5.31",
        "the host's user namespaces are not shared",
        _namespace("UsernsMode", lambda want: ""),
    ),
    ("5.32", "the Docker socket is not mounted", _docker_socket),
)


def gather(backend: DockerBackend, cid: str) -> Evidence:
    inspect = backend.inspect(cid)
    running = bool((inspect.get("State") or {}).get("Running"))
    info = backend.info()
    return Evidence(
        inspect,
        backend.processes(cid) if running else None,
        list(info.get("SecurityOptions") or []),
        str((info.get("Swarm") or {}).get("LocalNodeState") or ""),
    )


def check(evidence: Evidence, expected: ContainerRequest) -> list[Item]:
    """Every item of the section, in order. A check that raises on odd data fails its item."""
    items = []
    for item_id, title, judge in ITEMS:
        try:
            status, detail = judge(evidence, expected)
        except Exception as exc:  # odd engine data fails its item, never the check
            status, detail = Status.FAIL, f"cannot read the engine's data: {describe(exc)}"
        items.append(Item(item_id, title, status, detail))
    return items


def failed(items: list[Item]) -> list[Item]:
    return [i for i in items if i.status is Status.FAIL]


def expected_request(
    spec: Spec, role: str, image: str, *, user: tuple[int, int], network: str | None = None
) -> ContainerRequest:
    """What `hardening` asks of a container of `role` (agent, gateway or egress proxy) for
    `spec`, as `user` (an attempt's); `network`: the run's internal egress network, if any.
    Host paths are placeholders: the check compares mount points and modes, the verifier the
    sources.
    """
    mounts = hardening.Mounts(
        workspace=Path("/host/workspace"),
        socket_volume="socket-volume",
        gateway_state=Path("/host/state"),
        gateway_config=Path("/host/config"),
        agent_files=Path("/host/agent") if spec.agent.files else None,
        control=Path("/host/operator"),
        run_state=Path("/host/run-state"),
    )
    if role == Role.AGENT:
        return hardening.agent_request(
            spec, image=image, name="expected", mounts=mounts, labels={}, env={}, user=user
        )
    if role == Role.GATEWAY:
        return hardening.gateway_request(
            spec, image=image, name="expected", mounts=mounts, labels={}, network=network, user=user
        )
    if role == Role.EGRESS and network:
        return hardening.egress_request(
            spec,
            image=image,
            name="expected",
            config_dir=Path("/host/egress-config"),
            log_dir=Path("/host/egress-log"),
            labels={},
            network=network,
            user=user,
        )
    raise ValueError(
        f"no expected request for role {role!r}"
        + (" without its network" if role == Role.EGRESS else "")
    )
