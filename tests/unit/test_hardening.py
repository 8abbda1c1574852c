"""The hardened container settings, checked without Docker (the integration tests observe them live)."""

from pathlib import Path

import pytest

from assure import spec
from assure.sandbox import hardening
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
                           "PidsLimit": 128, "Memory": 1, "MemorySwap": 1, "Binds": ["/x:/workspace:rw"], "ReadonlyRootfs": True},
            "Config": {"User": "10001:10001"}}
    assert containment(good, read_only_root=True) == []
    bad = {**good, "HostConfig": {**good["HostConfig"], "NetworkMode": "bridge", "Binds": ["/var/run/docker.sock:/s"]}, "Config": {"User": "0"}}
    subjects = sorted(f.subject for f in containment(bad, read_only_root=True))
    assert subjects == ["Config.User", "HostConfig.Binds", "HostConfig.NetworkMode"]
    assert [f.subject for f in containment(good, read_only_root=False)] == ["HostConfig.ReadonlyRootfs"]
