"""The hardened container settings, checked without Docker (the integration tests observe them live)."""

import dataclasses
import os
import stat
from pathlib import Path

import pytest

from assure import spec
from assure.sandbox import hardening, runtimes
from assure.verify.container import containment

EXAMPLES = Path(__file__).resolve().parents[2] / "specs" / "examples"


@pytest.fixture
def benign():
    return spec.load(EXAMPLES / "benign.yaml")


def mounts(tmp_path):
    return hardening.Mounts(tmp_path / "ws", "vol-sock", tmp_path / "gw", tmp_path / "cfg", tmp_path / "agent", tmp_path / "control", tmp_path / "run-state")


def test_agent_container_is_sealed(benign, tmp_path):
    kw = hardening.agent_kwargs(benign, image="img", name="n", mounts=mounts(tmp_path), labels={"a": "b"}, env={"ASSURE_RUN_ID": "r"})
    assert kw["network_mode"] == "none"
    assert kw["cap_drop"] == ["ALL"] and "cap_add" not in kw
    assert kw["security_opt"] == ["no-new-privileges:true"]
    assert kw["read_only"] is True
    assert kw["ipc_mode"] == "none"
    assert kw["privileged"] is False
    assert kw["pids_limit"] == 128
    assert kw["mem_limit"] == kw["memswap_limit"] == 512 * 2**20
    assert kw["nano_cpus"] == 1_000_000_000
    assert kw["ulimits"] == [{"name": "nofile", "soft": 1024, "hard": 1024}]
    assert kw["tmpfs"] == {"/tmp": f"rw,nosuid,nodev,noexec,size={64 * 2**20}"}
    assert kw["log_config"]["config"]["max-size"] == hardening.LOG_MAX
    assert kw["user"].split(":")[0] != "0"
    assert kw["volumes"]["vol-sock"] == {"bind": "/run/assure", "mode": "ro,nocopy"}
    assert kw["volumes"][str(tmp_path / "ws")] == {"bind": "/workspace", "mode": "rw"}
    assert kw["volumes"][str(tmp_path / "agent")] == {"bind": "/opt/agent", "mode": "ro"}
    assert not any("docker.sock" in k for k in kw["volumes"])
    assert "devices" not in kw and "pid_mode" not in kw and "userns_mode" not in kw
    assert kw["environment"]["ASSURE_GATEWAY_SOCKET"] == "/run/assure/gateway.sock"
    assert kw["command"] == ["sh", "/opt/agent/run.sh"]


def test_gateway_holds_state_the_agent_never_mounts(benign, tmp_path):
    m = mounts(tmp_path)
    agent = hardening.agent_kwargs(benign, image="i", name="a", mounts=m, labels={}, env={})
    gateway = hardening.gateway_kwargs(benign, image="g", name="g", mounts=m, labels={})
    assert gateway["network_mode"] == "none" and gateway["read_only"] is True and gateway["cap_drop"] == ["ALL"]
    assert gateway["volumes"]["vol-sock"]["mode"] == "rw,nocopy"
    assert str(m.gateway_state) in gateway["volumes"] and str(m.gateway_state) not in agent["volumes"]
    assert str(m.gateway_config) not in agent["volumes"]
    assert gateway["volumes"][str(m.control)] == {"bind": "/run/assure-control", "mode": "ro"}
    assert str(m.control) not in agent["volumes"] and str(m.run_state) not in agent["volumes"]


def test_auto_user_is_never_root(benign):
    uid, gid = hardening.sandbox_user(benign)
    assert uid != 0 and gid != 0


def test_socket_volume_is_a_private_tmpfs_owned_by_the_sandbox_user(benign):
    uid, gid = hardening.sandbox_user(benign)
    opts = hardening.socket_volume_options(benign)
    assert opts["type"] == "tmpfs"
    assert f"uid={uid},gid={gid}" in opts["o"] and "noexec" in opts["o"]


def test_containment_accepts_the_settings_we_ask_for():
    good = {"HostConfig": {"NetworkMode": "none", "CapDrop": ["ALL"], "CapAdd": None, "Privileged": False,
                           "SecurityOpt": ["no-new-privileges:true"], "IpcMode": "none", "PidMode": "", "Devices": [],
                           "PidsLimit": 128, "Memory": 1, "MemorySwap": 1, "Binds": ["/x:/workspace:rw"], "ReadonlyRootfs": True,
                           "Runtime": "runc"},
            "Config": {"User": "10001:10001"}}
    assert containment(good, read_only_root=True, runtime="runc") == []
    bad = {**good, "HostConfig": {**good["HostConfig"], "NetworkMode": "bridge", "Binds": ["/var/run/docker.sock:/s"]}, "Config": {"User": "0"}}
    subjects = sorted(f.subject for f in containment(bad, read_only_root=True, runtime="runc"))
    assert subjects == ["Config.User", "HostConfig.Binds", "HostConfig.NetworkMode"]
    assert [f.subject for f in containment(good, read_only_root=False, runtime="runc")] == ["HostConfig.ReadonlyRootfs"]


def test_containment_names_a_runtime_other_than_the_specs():
    ran = {"HostConfig": {"Runtime": "runc"}}
    failed = [f for f in containment(ran, read_only_root=True, runtime="runsc") if f.subject == "HostConfig.Runtime"]
    assert len(failed) == 1 and "runtime runsc" in failed[0].message and "'runc'" in failed[0].message
    missing = [f for f in containment({"HostConfig": {}}, read_only_root=True, runtime="runc") if f.subject == "HostConfig.Runtime"]
    assert len(missing) == 1


def gvisor(benign):
    return dataclasses.replace(benign, sandbox=dataclasses.replace(benign.sandbox, runtime="runsc"))


def test_under_gvisor_the_agent_and_checks_run_in_runsc_and_the_sidecars_in_runc(benign, tmp_path):
    spec = gvisor(benign)
    m = dataclasses.replace(mounts(tmp_path), socket_volume=str(tmp_path / "socket"))
    agent = hardening.agent_kwargs(spec, image="i", name="a", mounts=m, labels={}, env={})
    gateway = hardening.gateway_kwargs(spec, image="g", name="g", mounts=m, labels={})
    egress = hardening.egress_kwargs(spec, image="e", name="e", config_dir=tmp_path, log_dir=tmp_path, labels={}, network="n")
    assert agent["runtime"] == "runsc" and hardening.common_kwargs(spec, {}, "1m", 8)["runtime"] == "runsc"
    assert gateway["runtime"] == egress["runtime"] == "runc"
    # the socket folder is a bind mount (no `nocopy`, which only volumes take): read-only for the agent
    assert agent["volumes"][str(tmp_path / "socket")] == {"bind": "/run/assure", "mode": "ro"}
    assert gateway["volumes"][str(tmp_path / "socket")] == {"bind": "/run/assure", "mode": "rw"}
    # the pids cgroup counts gVisor's own host tasks: the spec's limit is scaled, the sidecars' is not
    assert agent["pids_limit"] == runtimes.pids_limit("runsc", 128) > 128
    assert gateway["pids_limit"] == hardening.GATEWAY_PIDS


def test_under_runc_every_container_runs_in_runc_with_the_socket_volume(benign, tmp_path):
    m = mounts(tmp_path)
    for kw in (hardening.agent_kwargs(benign, image="i", name="a", mounts=m, labels={}, env={}),
               hardening.gateway_kwargs(benign, image="g", name="g", mounts=m, labels={})):
        assert kw["runtime"] == "runc" and kw["volumes"]["vol-sock"]["mode"].endswith(",nocopy")
    assert not runtimes.socket_on_host("runc") and runtimes.socket_on_host("runsc")


def test_the_socket_folder_is_private_to_the_sandbox_user(benign, tmp_path):
    folder = tmp_path / "socket"
    hardening.make_socket_folder(folder, gvisor(benign))
    st = folder.stat()
    assert stat.S_IMODE(st.st_mode) == 0o700
    assert (st.st_uid, st.st_gid) == hardening.sandbox_user(benign) or os.geteuid() != 0
    with pytest.raises(FileExistsError):  # never reuses a folder that is already there
        hardening.make_socket_folder(folder, benign)


def test_a_runsc_registered_without_host_uds_or_oci_seccomp_is_refused_with_the_registration():
    engine = {"runc": {"path": "runc"}, "runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none", "--oci-seccomp"]}}
    assert "--host-uds=open" in runtimes.problem("runsc", engine)
    assert "--oci-seccomp" in runtimes.problem("runsc", {"runsc": {"runtimeArgs": ["--host-uds=open"]}})
    assert "no runtime 'runsc'" in runtimes.problem("runsc", {"runc": {}})
    for args in (["--host-uds=open", "--oci-seccomp"], ["--host-uds=all", "--network=none", "-oci-seccomp"], ["--fsgofer-host-uds", "--oci-seccomp=true"]):
        assert runtimes.problem("runsc", {"runsc": {"runtimeArgs": args}}) is None
    assert runtimes.problem("runc", engine) is None
    fix = runtimes.fix("runsc")
    assert '"runtimeArgs": ["--host-uds=open", "--network=none", "--oci-seccomp"]' in fix and "kill -HUP" in fix and "daemon.json" in fix
