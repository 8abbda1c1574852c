"""What is missing to run assure on this host (bounded workspaces, the engine, runtimes,
seccomp, images) and how to fix it: a list of checks the CLI renders."""

from __future__ import annotations

import dataclasses
import enum
import os
import shutil
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field

from assure import spec as spec_mod
from assure.errors import AssureError
from assure.ops import cis
from assure.sandbox import backend as sandbox
from assure.sandbox import install, registry, runtimes, uids, workspace_fs
from assure.sandbox.docker import DockerBackend
from assure.sandbox.images import Images, ImageSet, base_mode, base_tags

# The spec whose defaults the CIS check creates containers for (every limit at its default).
DEFAULTS_SPEC = spec_mod.SCHEMAS / "examples" / "benign.yaml"


class Status(enum.StrEnum):
    OK = "ok"
    MISSING = "missing"  # the host cannot run assure (or a wanted runtime) until it is fixed
    OPTIONAL = "optional"  # missing, but no spec asked for it
    ABSENT = "absent"  # not on this host; assure works without it
    INFO = "info"  # a fact, not a check


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    value: str | None = None  # INFO: what to show as the status


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    register_gvisor: bool = False  # print runtimes.registration_steps()

    @property
    def ok(self) -> bool:
        return all(c.status is not Status.MISSING for c in self.checks)

    def add(self, name: str, good: bool, detail: str) -> None:
        self.checks.append(Check(name, Status.OK if good else Status.MISSING, detail))


def diagnose(wanted: Iterable[str] = (), installs: Iterable[spec_mod.Spec] = ()) -> Report:
    """Every check; `wanted`: the sandbox runtimes the caller's specs need; `installs`: the
    specs whose derived agent image (agent.install) must be built."""
    wanted = set(wanted)
    report = Report()
    try:
        workspace_fs.require()
        report.add(
            "bounded workspace",
            True,
            "root, loop devices, mkfs.ext4: each attempt gets a filesystem of limits.disk",
        )
    except AssureError as exc:
        report.add("bounded workspace", False, f"{exc.message}; fix: {exc.fix}")
    try:
        _engine(report, wanted, list(installs))
    except AssureError as exc:
        report.add("docker engine", False, exc.explain())
    return report


def _engine(report: Report, wanted: set[str], installs: list[spec_mod.Spec]) -> None:
    backend = registry.create()
    version = backend.version()
    report.add(
        "docker engine", True, f"engine {version.get('Version')} (API {version.get('ApiVersion')})"
    )
    engine_runtimes = backend.runtimes()
    report.add("runtime runc", "runc" in engine_runtimes, ", ".join(sorted(engine_runtimes)))
    for name in sorted(wanted | {runtimes.RUNSC}):
        if name == runtimes.RUNC:
            continue
        label = f"runtime {name}" + (" (gVisor)" if runtimes.is_gvisor(name) else "")
        problem = runtimes.problem(name, engine_runtimes)
        if problem is None:
            args = " ".join(engine_runtimes[name].get("runtimeArgs") or [])
            report.add(
                label,
                True,
                f"registered: {engine_runtimes[name].get('path')} {args}; specs may set"
                f" sandbox.runtime: {name}",
            )
        elif name in wanted:
            report.register_gvisor |= runtimes.is_gvisor(name)
            report.add(
                label,
                False,
                f"{problem}; "
                + (
                    "register it (the steps are below)"
                    if runtimes.is_gvisor(name)
                    else runtimes.fix(name)
                ),
            )
        else:
            report.register_gvisor = True
            report.checks.append(
                Check(label, Status.OPTIONAL, f"{problem}; needed only for sandbox.runtime: {name}")
            )
    security = backend.security_options()
    seccomp_on = any(o.startswith("name=seccomp") for o in security)
    report.add(
        "seccomp",
        seccomp_on,
        (
            "the engine applies assure's profile"
            if seccomp_on
            else (
                "the engine was built without seccomp: assure's syscall filter would not apply; use"
                " an engine with seccomp"
            )
        ),
    )
    apparmor = any(o.startswith("name=apparmor") for o in security)
    report.checks.append(
        Check(
            "AppArmor",
            Status.OK if apparmor else Status.ABSENT,
            (
                "the engine confines containers with its default profile"
                if apparmor
                else "not on this host: seccomp, capabilities and no-new-privileges still apply"
            ),
        )
    )
    found = Images(backend).resolve()
    report.add(
        "images",
        found is not None,
        (
            f"{found.agent}, {found.gateway}"
            if found
            else "run `assure images build` (or `make images`)"
        ),
    )
    tags = base_tags()
    have_tool = shutil.which("debootstrap") is not None
    if found is not None:
        _cis(report, backend, found)
    for (
        spec
    ) in installs:  # the same tag `run` would build and use, computed without fetching anything
        try:
            to_install = spec.agent.install  # set: `installs` are the specs that have one
            tag = (
                install.tag(to_install, found.agent, fetch=False)
                if found is not None and to_install is not None
                else None
            )
        except install.NotFetched:
            tag = None
        built = tag is not None and backend.image_exists(tag)
        report.add(
            f"agent install ({spec.name})",
            built,
            tag
            if tag is not None and built
            else f"not built: run `assure images build {spec.path}`",
        )
    report.checks.append(
        Check(
            "base image source",
            Status.INFO,
            f"bootstrap tag {tags['bootstrap']}; debootstrap"
            f" {'installed' if have_tool else 'not installed (apt-get install debootstrap)'}",
            value=base_mode(),
        )
    )


def _cis(report: Report, backend: DockerBackend, images: ImageSet) -> None:
    """CIS Docker Benchmark section 5 on what this engine makes of assure's agent and gateway
    requests: each created (never started, so no mounts and no processes), inspected, removed."""
    spec = spec_mod.load(DEFAULTS_SPEC)
    labels = sandbox.labels("doctor", 0, os.getpid(), socket.gethostname())
    for role, image in ((sandbox.Role.AGENT, images.agent), (sandbox.Role.GATEWAY, images.gateway)):
        try:
            with uids.lease_for(spec) as lease:  # as an attempt's container would be
                want = dataclasses.replace(
                    cis.expected_request(spec, role, image, user=lease.ids),
                    mounts=(),
                    name=None,
                    labels=labels,
                )
                cid = backend.create_container(want)
                try:
                    items = cis.check(cis.gather(backend, cid), want)
                finally:
                    backend.remove_container(cid)
        except AssureError as exc:
            report.add(
                f"CIS 5 ({role})", False, f"cannot create a container to inspect: {exc.explain()}"
            )
            continue
        failed = cis.failed(items)
        skipped = [i.id for i in items if i.status is cis.Status.NOT_APPLICABLE]
        detail = (
            f"{len(items) - len(failed) - len(skipped)} of {len(items)} items hold; not applicable"
            f" here: {', '.join(skipped)}"
            if not failed
            else "; ".join(f"{i.id} {i.title}: {i.detail}" for i in failed)
        )
        report.add(f"CIS 5 ({role})", not failed, detail)
