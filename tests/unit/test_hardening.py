"""The hardened container settings, checked without Docker (the integration tests observe them
live)."""

import dataclasses
import os
import stat
from pathlib import Path

import pytest

from assure import spec
from assure.sandbox import hardening, runtimes, seccomp
from assure.sandbox.backend import Mount, Role
from assure.sandbox.docker.backend import create_kwargs
from assure.sandbox.docker.observe import observed
from assure.verify.container import containment as judged
from assure.verify.container import containment_checked

EXAMPLES = Path(__file__).resolve().parents[2] / "specs" / "examples"
USER = (60600, 60600)  # an attempt's leased user


def containment(inspect, *args, **kwargs):
    """The verifier on what Docker's inspect says (as DockerBackend.observe reads it)."""
    return judged(observed(inspect), *args, **kwargs)


@pytest.fixture
def benign():
    return spec.load(EXAMPLES / "benign.yaml")


def agent_kwargs(*args, **kwargs):
    """What the engine is asked for: the request as Docker's create arguments."""
    return create_kwargs(hardening.agent_request(*args, **{"user": USER, **kwargs}))


def gateway_kwargs(*args, **kwargs):
    return create_kwargs(hardening.gateway_request(*args, **{"user": USER, **kwargs}))


def egress_kwargs(*args, **kwargs):
    return create_kwargs(hardening.egress_request(*args, **{"user": USER, **kwargs}))


def mounts(tmp_path):
    return hardening.Mounts(
        tmp_path / "ws",
        "vol-sock",
        tmp_path / "gw",
        tmp_path / "cfg",
        tmp_path / "agent",
        tmp_path / "control",
        tmp_path / "run-state",
    )


def test_agent_container_is_sealed(benign, tmp_path):
    kw = agent_kwargs(
        benign,
        image="img",
        name="n",
        mounts=mounts(tmp_path),
        labels={"a": "b"},
        env={"ASSURE_RUN_ID": "r"},
    )
    assert kw["network_mode"] == "none"
    assert kw["cap_drop"] == ["ALL"] and "cap_add" not in kw
    assert kw["security_opt"] == [
        "no-new-privileges:true",
        f"seccomp={seccomp.profile_text('runc')}",
    ]
    assert kw["read_only"] is True
    assert kw["ipc_mode"] == "none"
    assert kw["privileged"] is False
    assert kw["pids_limit"] == 128
    assert kw["mem_limit"] == kw["memswap_limit"] == 512 * 2**20
    assert kw["nano_cpus"] == 1_000_000_000
    assert kw["ulimits"] == [
        {"name": "nofile", "soft": 1024, "hard": 1024},
        {"name": "fsize", "soft": 2**30, "hard": 2**30},
        {"name": "core", "soft": 0, "hard": 0},
    ]  # no nproc: one budget for every container of the host's uid
    assert kw["tmpfs"] == {"/tmp": f"rw,nosuid,nodev,noexec,size={64 * 2**20}"}
    assert kw["log_config"]["config"]["max-size"] == hardening.LOG_MAX
    assert kw["user"] == "60600:60600"
    assert kw["volumes"]["vol-sock"] == {"bind": "/run/assure", "mode": "ro,nocopy"}
    assert kw["volumes"][str(tmp_path / "ws")] == {"bind": "/workspace", "mode": "rw"}
    assert kw["volumes"][str(tmp_path / "agent")] == {"bind": "/opt/agent", "mode": "ro"}
    assert not any("docker.sock" in k for k in kw["volumes"])
    assert "devices" not in kw and "pid_mode" not in kw and "userns_mode" not in kw
    assert kw["environment"]["ASSURE_GATEWAY_SOCKET"] == "/run/assure/gateway.sock"
    assert kw["command"] == ["sh", "/opt/agent/run.sh"]


def test_gateway_holds_state_the_agent_never_mounts(benign, tmp_path):
    m = mounts(tmp_path)
    agent = agent_kwargs(benign, image="i", name="a", mounts=m, labels={}, env={})
    gateway = gateway_kwargs(benign, image="g", name="g", mounts=m, labels={})
    assert (
        gateway["network_mode"] == "none"
        and gateway["read_only"] is True
        and gateway["cap_drop"] == ["ALL"]
    )
    assert gateway["volumes"]["vol-sock"]["mode"] == "rw,nocopy"
    assert (
        str(m.gateway_state) in gateway["volumes"] and str(m.gateway_state) not in agent["volumes"]
    )
    assert str(m.gateway_config) not in agent["volumes"]
    assert gateway["volumes"][str(m.control)] == {"bind": "/run/assure-control", "mode": "ro"}
    assert str(m.control) not in agent["volumes"] and str(m.run_state) not in agent["volumes"]


def test_auto_is_leased_per_attempt_as_root_and_a_named_user_is_the_specs(benign):
    named = dataclasses.replace(
        benign, sandbox=dataclasses.replace(benign.sandbox, user="2000:3000")
    )
    assert hardening.fixed_user(named) == (2000, 3000)
    assert hardening.fixed_user(benign) == (
        None if os.geteuid() == 0 else (os.geteuid(), os.getegid())
    )


def test_every_container_of_an_attempt_runs_as_its_user(benign, tmp_path):
    m = mounts(tmp_path)
    assert (
        agent_kwargs(benign, image="i", name="a", mounts=m, labels={}, env={})["user"]
        == "60600:60600"
    )
    assert gateway_kwargs(benign, image="g", name="g", mounts=m, labels={})["user"] == "60600:60600"
    assert (
        egress_kwargs(
            benign,
            image="e",
            name="e",
            config_dir=tmp_path,
            log_dir=tmp_path,
            labels={},
            network="n",
        )["user"]
        == "60600:60600"
    )
    check = hardening.check_request(
        benign,
        image="i",
        name="c",
        command=["true"],
        env={},
        copy=tmp_path,
        labels={},
        stdin=False,
        user=(60601, 60601),
    )
    assert check.user == "60601:60601"


def test_socket_volume_is_a_private_tmpfs_owned_by_the_sandbox_user(benign):
    opts = hardening.socket_volume_options(USER)
    assert opts["type"] == "tmpfs"
    assert "uid=60600,gid=60600" in opts["o"] and "noexec" in opts["o"]


def good_inspect(spec, **host_config):
    """An inspect dict as the engine reports a container created with exactly what we ask for."""
    limits = spec.limits
    return {
        "HostConfig": {
            "NetworkMode": "none",
            "CapDrop": ["ALL"],
            "CapAdd": None,
            "Privileged": False,
            "SecurityOpt": ["no-new-privileges:true", seccomp.security_opt(spec.sandbox.runtime)],
            "IpcMode": "none",
            "PidMode": "",
            "Devices": [],
            "PidsLimit": 128,
            "Memory": 1,
            "MemorySwap": 1,
            "Binds": ["/x:/workspace:rw"],
            "ReadonlyRootfs": True,
            "Runtime": spec.sandbox.runtime,
            "Tmpfs": {"/tmp": hardening.tmpfs_options(limits.tmpfs_bytes)},
            "Ulimits": [
                {"Name": u.name, "Soft": u.soft, "Hard": u.hard}
                for u in hardening.ulimits(limits.nofile, limits.disk_bytes)
            ],
            **host_config,
        },
        "Config": {"User": "10001:10001"},
        "AppArmorProfile": "",
        "Mounts": [
            {
                "Type": "bind",
                "Source": "/home/u/.assure/runs/r/attempts/1/workspace.fs/workspace",
                "Destination": "/workspace",
                "RW": True,
            },
            {"Type": "volume", "Name": "sock", "Destination": "/run/assure", "RW": False},
            {
                "Type": "bind",
                "Source": os.path.normpath(spec.agent.files),
                "Destination": "/opt/agent",
                "RW": False,
            },
        ],
    }


def failed(inspect, spec, engine=("name=seccomp,profile=default",)):
    return sorted(f.subject for f in containment(inspect, spec, list(engine), "attempts/1"))


def test_containment_accepts_the_settings_we_ask_for(benign):
    s = benign
    good = good_inspect(s)
    assert failed(good, s) == []
    bad = {
        **good,
        "HostConfig": {
            **good["HostConfig"],
            "NetworkMode": "bridge",
            "Binds": ["/var/run/docker.sock:/s"],
        },
        "Config": {"User": "0"},
    }
    # the socket's bind is a mount the spec never asked for, wherever the engine lists it
    assert failed(bad, s) == [
        "Config.User",
        "HostConfig.Binds",
        "HostConfig.NetworkMode",
        "Mounts",
    ]
    assert failed(
        good, dataclasses.replace(s, sandbox=dataclasses.replace(s.sandbox, read_only_root=False))
    ) == ["HostConfig.ReadonlyRootfs"]


def test_the_agent_must_have_run_as_the_user_its_attempt_leased(benign):
    """container.json's `user` is what the host leased; the engine must report the same."""
    good = good_inspect(benign)  # 10001:10001
    engine = ["name=seccomp,profile=default"]
    assert containment(good, benign, engine, "attempts/1", user="10001:10001") == []
    [finding] = containment(good, benign, engine, "attempts/1", user="60600:60600")
    assert finding.subject == "Config.User" and "60600:60600" in finding.message
    named = dataclasses.replace(
        benign, sandbox=dataclasses.replace(benign.sandbox, user="10002:10002")
    )
    assert [f.subject for f in containment(good, named, engine, "attempts/1")] == [
        "Config.User"
    ]  # a record without `user`: the spec's


@pytest.mark.parametrize(
    "security_opt",
    [
        ["no-new-privileges:true"],  # the engine's default profile, not ours
        ["no-new-privileges:true", "seccomp=unconfined"],
        [
            "no-new-privileges:true",
            seccomp.security_opt("runc").replace('"io_uring_setup",', ""),
        ],  # our profile, edited
        ["no-new-privileges:true", seccomp.security_opt("runc"), "seccomp=unconfined"],
    ],
)
def test_containment_requires_our_seccomp_profile(benign, security_opt):
    s = benign
    assert failed(good_inspect(s, SecurityOpt=security_opt), s) == [
        "HostConfig.SecurityOpt seccomp"
    ]


def test_containment_says_what_the_engine_reports_as_json_not_a_python_repr(benign):
    s = benign
    inspect = good_inspect(s, Runtime=None, Privileged=None)
    inspect["Mounts"][1]["Destination"] = None  # a mount the engine reports without a destination
    messages = {
        f.subject: f.message
        for f in containment(inspect, s, ["name=seccomp,profile=default"], "attempts/1")
    }
    assert messages["HostConfig.Runtime"] == 'expected "runc", engine reports null'
    assert messages["HostConfig.Privileged"].endswith("engine reports null")
    assert '"null": "ro"' in messages["Mounts"] and "None" not in " ".join(messages.values())


def test_containment_reports_a_profile_by_digest_not_its_text(benign):
    s = benign
    [finding] = containment(
        good_inspect(s, SecurityOpt=["no-new-privileges:true", "seccomp={}"]),
        s,
        ["name=seccomp"],
        "attempts/1",
    )
    assert len(finding.message) < 300 and f"sha256:{seccomp.digest('{}')}" in finding.message


def test_containment_requires_an_engine_that_applies_seccomp(benign):
    s = benign
    assert failed(good_inspect(s), s, engine=["name=apparmor"]) == [
        "AppArmorProfile",
        "engine seccomp support",
    ]


def test_containment_refuses_unconfined_apparmor(benign):
    s = benign
    engine = ["name=apparmor", "name=seccomp,profile=default"]
    assert failed({**good_inspect(s), "AppArmorProfile": "docker-default"}, s, engine) == []
    assert failed({**good_inspect(s), "AppArmorProfile": "unconfined"}, s, engine) == [
        "AppArmorProfile"
    ]
    assert failed({**good_inspect(s), "AppArmorProfile": ""}, s, engine) == ["AppArmorProfile"]
    opt = ["no-new-privileges:true", seccomp.security_opt("runc"), "apparmor=unconfined"]
    assert failed(good_inspect(s, SecurityOpt=opt), s) == ["AppArmorProfile"]
    assert failed(good_inspect(s), s) == []  # an engine without AppArmor reports no profile


def test_containment_requires_the_spec_runtime(benign):
    s = benign
    assert failed(good_inspect(s, Runtime="runsc"), s) == ["HostConfig.Runtime"]
    gvisor = dataclasses.replace(s, sandbox=dataclasses.replace(s.sandbox, runtime="runsc"))
    assert failed(good_inspect(gvisor), gvisor) == []
    # each runtime has its own profile: runc's under a runsc spec (or the reverse) is not it
    assert failed(
        good_inspect(gvisor, SecurityOpt=["no-new-privileges:true", seccomp.security_opt("runc")]),
        gvisor,
    ) == ["HostConfig.SecurityOpt seccomp"]
    assert failed(
        good_inspect(s, SecurityOpt=["no-new-privileges:true", seccomp.security_opt("runsc")]), s
    ) == ["HostConfig.SecurityOpt seccomp"]


def test_containment_requires_exactly_the_expected_mounts_and_modes(benign):
    s = benign
    good = good_inspect(s)
    extra = {
        **good,
        "Mounts": (
            good["Mounts"]
            + [{"Type": "bind", "Source": "/home", "Destination": "/mnt", "RW": False}]
        ),
    }
    writable_socket = {
        **good,
        "Mounts": [
            {**m, "RW": True} if m["Destination"] == "/run/assure" else m for m in good["Mounts"]
        ],
    }
    missing_agent_files = {**good, "Mounts": good["Mounts"][:2]}
    for inspect in (extra, writable_socket):
        assert failed(inspect, s) == ["Mounts"]
    assert failed(missing_agent_files, s) == ["Mounts", "Mounts sources"]
    assert (
        failed(
            missing_agent_files,
            dataclasses.replace(s, agent=dataclasses.replace(s.agent, files=None)),
        )
        == []
    )


@pytest.mark.parametrize(
    "destination, source",
    [
        ("/workspace", "/"),  # the host's root as the workspace
        (
            "/workspace",
            "/home/u/.assure/runs/r/attempts/2/workspace",
        ),  # another attempt's workspace
        ("/opt/agent", "/home/u"),  # not the spec's agent files
    ],
)
def test_containment_requires_the_bind_sources(benign, destination, source):
    s = benign
    good = good_inspect(s)
    moved = {
        **good,
        "Mounts": [
            {**m, "Source": source} if m["Destination"] == destination else m
            for m in good["Mounts"]
        ],
    }
    assert failed(moved, s) == ["Mounts sources"]


@pytest.mark.parametrize(
    "tmpfs",
    [
        {"/tmp": "rw,nosuid,nodev,size=67108864"},  # exec allowed
        {"/tmp": "rw,nosuid,noexec,size=67108864"},  # devices allowed
        {"/tmp": "rw,nodev,noexec,size=67108864"},  # setuid allowed
        {"/tmp": "rw,nosuid,nodev,noexec,size=1073741824"},  # bigger than the spec says
        {"/tmp": "rw,nosuid,nodev,noexec"},  # no size: half the host's memory
        {"/tmp": "rw,nosuid,nodev,noexec,size=67108864", "/var/tmp": "rw"},
        None,
    ],
)
def test_containment_requires_the_tmp_tmpfs_options(benign, tmpfs):
    s = benign
    assert failed(good_inspect(s, Tmpfs=tmpfs), s) == ["HostConfig.Tmpfs"]


def test_containment_requires_the_ulimits(benign):
    s = benign
    good = good_inspect(s)
    no_core_limit = [u for u in good["HostConfig"]["Ulimits"] if u["Name"] != "core"]
    raised = [
        {**u, "Hard": u["Hard"] * 2} if u["Name"] == "nofile" else u
        for u in good["HostConfig"]["Ulimits"]
    ]
    for ulimits in (no_core_limit, raised, None):
        assert failed(good_inspect(s, Ulimits=ulimits), s) == ["HostConfig.Ulimits"]


def test_every_check_is_named_in_the_record(benign):
    checked = containment_checked(benign)
    assert {
        "HostConfig.Runtime",
        "HostConfig.SecurityOpt seccomp",
        "AppArmorProfile",
        "Mounts",
        "HostConfig.Tmpfs",
        "HostConfig.Ulimits",
        "HostConfig.NetworkMode",
    } <= set(checked)
    assert len(checked) == len(set(checked))


def test_the_profile_is_dockers_default_with_the_exploit_syscalls_denied():
    import json

    base = json.loads(seccomp.BASE.read_text())
    ours = json.loads(seccomp.profile_text("runc"))
    refusals, ours["syscalls"][:2] = ours["syscalls"][:2], []
    assert (
        refusals == list(seccomp.SOCKET_REFUSALS) and ours["syscalls"].pop() == seccomp.SOCKET_ALLOW
    )
    assert ours["defaultAction"] == base["defaultAction"] == "SCMP_ACT_ERRNO"
    allowed = {n for r in ours["syscalls"] if r["action"] == "SCMP_ACT_ALLOW" for n in r["names"]}
    assert "io_uring_setup" in {
        n for r in base["syscalls"] if r["action"] == "SCMP_ACT_ALLOW" for n in r["names"]
    }
    assert not allowed & set(seccomp.DENIED)
    [deny] = [r for r in ours["syscalls"] if set(seccomp.DENIED) & set(r["names"])]
    assert (
        deny["action"] == "SCMP_ACT_ERRNO"
        and deny["errnoRet"] == 1
        and sorted(deny["names"]) == sorted(seccomp.DENIED)
    )
    # everything else the base allows is still allowed, under the same conditions
    kept = [
        {**r, "names": [n for n in r["names"] if n not in (*seccomp.DENIED, *seccomp.SOCKETS)]}
        for r in base["syscalls"]
    ]
    assert [r for r in kept if r["names"]] == ours["syscalls"][:-1]


def socket_rules(profile):
    return [r for r in profile["syscalls"] if {"socket", "socketpair"} & set(r["names"])]


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_socket_is_allowed_only_after_the_refusals_of_vsock_and_uevent_netlink(runtime):
    import json

    profile = json.loads(seccomp.profile_text(runtime))
    low32 = lambda i, v: {
        "index": i,
        "value": 0xFFFFFFFF,
        "valueTwo": v,
        "op": "SCMP_CMP_MASKED_EQ",
    }
    vsock, uevent, allow = socket_rules(profile)
    assert (
        profile["syscalls"][:2] == [vsock, uevent] and profile["syscalls"][-1] == allow
    )  # the first of overlapping rules wins
    assert (vsock["action"], vsock["errnoRet"], vsock["args"], sorted(vsock["names"])) == (
        "SCMP_ACT_ERRNO",
        97,
        [low32(0, 40)],
        ["socket", "socketpair"],
    )
    assert (uevent["action"], uevent["errnoRet"], uevent["args"], uevent["names"]) == (
        "SCMP_ACT_ERRNO",
        93,
        [low32(0, 16), low32(2, 15)],
        ["socket"],
    )
    assert (
        allow["action"] == "SCMP_ACT_ALLOW" and allow["args"]
    )  # never unconditional: runc would refuse the profile


def test_clone3_is_let_through_to_gvisor_and_refused_with_enosys_under_runc():
    import json

    runc, runsc = (json.loads(seccomp.profile_text(r)) for r in ("runc", "runsc"))
    clone3 = lambda p, action: [
        r for r in p["syscalls"] if "clone3" in r["names"] and r["action"] == action
    ]
    assert not clone3(runsc, "SCMP_ACT_ERRNO") and [
        r["args"] for r in clone3(runsc, "SCMP_ACT_ALLOW") if not r["includes"]
    ] == [[]]
    assert any(
        r.get("errnoRet") == 38 and not r["includes"] for r in clone3(runc, "SCMP_ACT_ERRNO")
    )
    # clone3 is the only difference
    strip = lambda p: [
        {**r, "names": [n for n in r["names"] if n != "clone3"]} for r in p["syscalls"]
    ]
    assert [r for r in strip(runsc) if r["names"]] == [r for r in strip(runc) if r["names"]]


def test_containment_names_a_runtime_other_than_the_specs(benign):
    s = benign
    wanted = dataclasses.replace(s, sandbox=dataclasses.replace(s.sandbox, runtime="runsc"))
    assert failed(good_inspect(s), wanted) == [
        "HostConfig.Runtime",
        "HostConfig.SecurityOpt seccomp",
    ]  # and runc's profile, not gVisor's
    assert "HostConfig.Runtime" in failed(good_inspect(s, Runtime=None), s)


def gvisor(benign):
    return dataclasses.replace(benign, sandbox=dataclasses.replace(benign.sandbox, runtime="runsc"))


def test_under_gvisor_the_agent_and_checks_run_in_runsc_and_the_sidecars_in_runc(benign, tmp_path):
    spec = gvisor(benign)
    m = dataclasses.replace(mounts(tmp_path), socket_volume=str(tmp_path / "socket"))
    agent = agent_kwargs(spec, image="i", name="a", mounts=m, labels={}, env={})
    gateway = gateway_kwargs(spec, image="g", name="g", mounts=m, labels={})
    egress = egress_kwargs(
        spec, image="e", name="e", config_dir=tmp_path, log_dir=tmp_path, labels={}, network="n"
    )
    assert (
        agent["runtime"] == "runsc"
        and hardening.common_request(spec, Role.CHECK, "i", {}, 2**20, 8, user=USER).runtime
        == "runsc"
    )
    assert gateway["runtime"] == egress["runtime"] == "runc"
    # the socket folder is a bind mount (no `nocopy`, which only volumes take): read-only for the
    # agent
    assert agent["volumes"][str(tmp_path / "socket")] == {"bind": "/run/assure", "mode": "ro"}
    assert gateway["volumes"][str(tmp_path / "socket")] == {"bind": "/run/assure", "mode": "rw"}
    # the pids cgroup counts gVisor's own host tasks: the spec's limit is scaled, the sidecars' is
    # not
    assert agent["pids_limit"] == runtimes.pids_limit("runsc", 128) > 128
    assert gateway["pids_limit"] == hardening.GATEWAY_PIDS


def test_under_runc_every_container_runs_in_runc_with_the_socket_volume(benign, tmp_path):
    m = mounts(tmp_path)
    for kw in (
        agent_kwargs(benign, image="i", name="a", mounts=m, labels={}, env={}),
        gateway_kwargs(benign, image="g", name="g", mounts=m, labels={}),
    ):
        assert kw["runtime"] == "runc" and kw["volumes"]["vol-sock"]["mode"].endswith(",nocopy")
    assert not runtimes.socket_on_host("runc") and runtimes.socket_on_host("runsc")


def test_the_socket_folder_is_private_to_the_sandbox_user(benign, tmp_path):
    folder = tmp_path / "socket"
    hardening.make_socket_folder(folder, USER)
    st = folder.stat()
    assert stat.S_IMODE(st.st_mode) == 0o700
    assert (st.st_uid, st.st_gid) == USER or os.geteuid() != 0
    with pytest.raises(FileExistsError):  # never reuses a folder that is already there
        hardening.make_socket_folder(folder, USER)


def test_a_runsc_registered_without_host_uds_or_oci_seccomp_is_refused_with_the_registration():
    engine = {
        "runc": {"path": "runc"},
        "runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none", "--oci-seccomp"]},
    }
    assert "--host-uds=open" in runtimes.problem("runsc", engine)
    assert "--oci-seccomp" in runtimes.problem(
        "runsc", {"runsc": {"runtimeArgs": ["--host-uds=open"]}}
    )
    assert "no runtime 'runsc'" in runtimes.problem("runsc", {"runc": {}})
    for args in (
        ["--host-uds=open", "--oci-seccomp"],
        ["--host-uds=all", "--network=none", "-oci-seccomp"],
        ["--fsgofer-host-uds", "--oci-seccomp=true"],
    ):
        assert runtimes.problem("runsc", {"runsc": {"runtimeArgs": args}}) is None
    assert runtimes.problem("runc", engine) is None
    fix = runtimes.fix("runsc")
    assert (
        '"runtimeArgs": ["--host-uds=open", "--network=none", "--oci-seccomp"]' in fix
        and "kill -HUP" in fix
        and "daemon.json" in fix
    )


def test_a_shared_check_container_keeps_every_hardening_of_a_check_container(benign, tmp_path):
    """The shared container differs from a per-check one only where its sequencer starts the
    checks: its command, root with CAP_SETUID and CAP_SETGID only (to start each as the
    attempt's user), stdin open (its requests), no init (it is pid 1), and /workspace and /tmp
    as the host's views (rslave) in place of a copy and a tmpfs."""
    one = hardening.check_request(
        benign,
        image="i",
        name="c",
        command=["true"],
        env={},
        copy=tmp_path / "copy",
        labels={"l": "v"},
        stdin=False,
        user=(60601, 60601),
    )
    shared = hardening.shared_check_request(
        benign,
        image="i",
        name="c",
        views=tmp_path,
        labels={"l": "v"},
        user=(60601, 60601),
        sequencer="pass",
    )
    differ = {"command", "user", "mounts", "tmpfs", "init", "working_dir", "cap_add", "stdin_open"}
    assert {k: v for k, v in dataclasses.asdict(shared).items() if k not in differ} == {
        k: v for k, v in dataclasses.asdict(one).items() if k not in differ
    }
    assert shared.user == "0:0" and shared.init is False and shared.stdin_open
    assert shared.command == ("python3", "-I", "-S", "-c", "pass", "60601", "60601")
    assert shared.read_only_root and shared.network == "none" and shared.cap_drop == ("ALL",)
    assert shared.cap_add == ("SETUID", "SETGID") and not one.cap_add
    assert shared.mounts == (
        Mount(str(tmp_path / "workspace"), "/workspace", propagation="rslave"),
        Mount(str(tmp_path / "tmp"), "/tmp", propagation="rslave"),
    )
    assert shared.tmpfs == {}  # /tmp is a fresh tmpfs the host mounts for each check
    assert create_kwargs(shared)["volumes"][str(tmp_path / "tmp")] == {
        "bind": "/tmp",
        "mode": "rw,rslave",
    }
