"""The warm pool (issue 14, run/pool.py), live: a claimed pair carries no trace of its creation
(environment, fds, processes, sockets, files) and gives its agent exactly what a cold start
gives it; nothing of one attempt reaches another; a pooled attempt that fails before its
start still removes its pair; a retry or a resumed run never takes a pair; the pool is gone
after an exit, Ctrl-C or SIGTERM, and `assure gc` removes what a kill -9 left; the whole
containment suite holds with the pool on.

The pool is driven in-process where the test needs a claim to happen (`WarmPool.wait_full`
before the attempt: deterministic), and through `assure suite --pool` where the test is about
the command's own exits."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from assure import spec as spec_mod
from assure.records import store
from assure.run.driver import Driver, RunResult
from assure.run.pool import LABEL_POOL, Settings, WarmPool, has_reader, ineligible
from assure.sandbox.docker.backend import DockerBackend
from tests.contracts import ratify_in_place
from tests.integration.conftest import ROOT, mounts_and_loops_under, run_dirs

ASSURE = [sys.executable, "-m", "assure.cli"]
TRACE_FILES = ROOT / "fixtures" / "agents" / "pool"
CALC = ROOT / "fixtures" / "workspaces" / "calc"
TRACE = ["bash", "/opt/agent/trace.sh"]
FILL_SECONDS = 120  # a pool of one or two pairs fills in a few seconds; this is the bound


def spec_file(
    folder: Path,
    name: str,
    command: list[str] = TRACE,
    env: dict[str, str] | None = None,
    **fields: object,
) -> Path:
    data = {
        "version": 1,
        "name": name,
        "agent": {"command": command, "files": str(TRACE_FILES), **({"env": env} if env else {})},
        "workspace": {"fixture": str(CALC), "writable": ["out/**"], "protected": ["tests/**"]},
        "limits": {"wall_seconds": 60},
        "assertions": [{"exit_code": 0}],
        "expect": "pass",
        **fields,
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return ratify_in_place(path)


def drive(
    path: Path, runs: Path, backend: DockerBackend, images, pool: WarmPool | None = None
) -> RunResult:
    spec = spec_mod.load(path)
    run = store.RunDir.create(runs, store.new_run_id(spec.name), spec.path, spec.to_json())
    return Driver(spec, run, backend, images, lambda *_: None, pool=pool).drive()


@pytest.fixture
def warm(images, tmp_path):
    """A full warm pool of `size` pairs for these specs' shapes, in tmp_path/runs (its own
    engine client, as `assure suite` gives it); closed after the test."""
    made: list[WarmPool] = []

    def make(size: int, *specs: Path) -> WarmPool:
        pool = WarmPool(DockerBackend(), images, tmp_path / "runs", Settings(size))
        made.append(pool)
        pool.want(
            [spec_mod.load(p) for p in specs for _ in range(size)]
        )  # `size` claims to come each: the pool makes no more
        assert pool.wait_full(FILL_SECONDS), "the pool never filled"
        return pool

    yield make
    for pool in made:
        pool.close()


def attempt(result: RunResult | Path, n: int = 1) -> Path:
    return (result.run_dir if isinstance(result, RunResult) else result) / "attempts" / str(n)


def facts(result: RunResult | Path, n: int = 1) -> dict:
    return json.loads((attempt(result, n) / "container.json").read_text())


def traced(result: RunResult) -> dict[str, bytes]:
    """What fixtures/agents/pool/trace.sh saw, file by file (the attempt's copied-out workspace)."""
    folder = attempt(result) / "workspace" / "out" / "trace"
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def environ(raw: bytes) -> dict[str, str]:
    return dict(entry.split("=", 1) for entry in raw.decode().split("\0") if entry)


def fds(raw: bytes) -> dict[int, str]:
    """fd -> what it points to, pipe and socket inode numbers left out (they differ per run)."""
    out = {}
    for line in raw.decode().splitlines():
        fd, target = line.split(" ", 1)
        out[int(fd)] = target.split(":[", 1)[0] if ":[" in target else target
    return out


def processes(trace: dict[str, bytes]) -> dict[str, str]:
    """Visible pid -> its cmdline, the trace's own pids named ("self", "lister")."""
    named = {trace["pid"].decode().strip(): "self", trace["lister"].decode().strip(): "lister"}
    out = {}
    for line in trace["procs"].decode().splitlines():
        pid, cmdline = line.split("\t", 1)
        out[named.get(pid, pid)] = cmdline.strip()
    return out


def mount_points(raw: bytes) -> set[str]:
    return {line.split(" ")[4] for line in raw.decode().splitlines()}


def fixture_listing() -> set[str]:
    return {str(p.relative_to(CALC)) for p in CALC.rglob("*")}


def journal(result: RunResult) -> list[dict]:
    return [
        json.loads(line)
        for line in (attempt(result) / "gateway" / "journal.jsonl").read_text().splitlines()
    ]


def at(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_a_claimed_pair_carries_no_trace_of_its_creation(tmp_path, backend, images, warm):
    spec = spec_file(tmp_path, "trace", env={"TRACE": "on"})
    runs = tmp_path / "runs"
    cold = drive(spec, runs, backend, images)
    pool = warm(1, spec)
    pooled = drive(spec, runs, backend, images, pool)

    assert (cold.verdict, pooled.verdict) == ("pass", "pass")
    assert "pool" not in facts(cold) and "pool" in facts(pooled), (
        "the pooled attempt did not claim its pair"
    )
    claimed = facts(pooled)["pool"]
    assert claimed["pool"] == pool.pool_id and claimed["created_at"] < facts(pooled)["started_at"]
    c, p = traced(cold), traced(pooled)

    # environment: the same variables with the same values, this run's id; nothing names the pool
    cold_env, pooled_env = environ(c["environ"]), environ(p["environ"])
    assert (cold_env["ASSURE_RUN_ID"], pooled_env["ASSURE_RUN_ID"]) == (
        cold.run_dir.name,
        pooled.run_dir.name,
    )
    assert {**pooled_env, "ASSURE_RUN_ID": "-"} == {**cold_env, "ASSURE_RUN_ID": "-"}
    assert not [k for k in pooled_env if "pool" in k.lower() or "claim" in k.lower()]
    assert not [
        k for k in environ(p["init-environ"]) if "pool" in k.lower() or "claim" in k.lower()
    ]
    assert set(environ(p["init-environ"])) <= set(
        environ(c["init-environ"])
    )  # pid 1 started before the claim: less, never more

    # open fds: stdin, stdout, stderr and bash's own script fd, nothing inherited from the wait
    assert (
        fds(p["fds"])
        == fds(c["fds"])
        == {
            0: "/dev/null",
            1: "pipe",
            2: "pipe",
            255: "/opt/agent/trace.sh",
        }
    )

    # processes: the engine's init and the agent's own, nothing left from the gate
    cold_procs, pooled_procs = processes(c), processes(p)
    assert set(pooled_procs) == set(cold_procs) == {"1", "self", "lister"}
    assert pooled_procs["self"] == pooled_procs["lister"] == "bash /opt/agent/trace.sh"
    assert pooled_procs["1"].startswith("/sbin/docker-init -- /bin/bash -c ")

    # sockets: none in the agent's network namespace, unix or inet
    for name in [n for n in c if n.startswith("net-")]:
        assert len(p[name].splitlines()) == len(c[name].splitlines()) == 1, (
            name,
            p[name],
        )  # the header only
    assert set(n for n in p if n.startswith("net-")) == set(n for n in c if n.startswith("net-"))
    assert (
        p["run-assure"] == c["run-assure"] == b"gateway.sock s\n"
    )  # the gateway's socket, nothing else

    # files: /tmp empty, the workspace exactly the fixture, the same mounts but the claim's own
    assert p["tmp"] == c["tmp"] == b""
    assert (
        set(p["workspace"].decode().splitlines()) - {""}
        == set(c["workspace"].decode().splitlines()) - {""}
        == fixture_listing()
    )
    assert mount_points(p["mountinfo"]) - mount_points(c["mountinfo"]) == {"/run/assure-claim"}
    assert mount_points(c["mountinfo"]) - mount_points(p["mountinfo"]) == set()
    assert p["workspace-stat"] == c["workspace-stat"]
    assert sorted(p["agent-files"].splitlines()) == sorted(
        c["agent-files"].splitlines()
    )  # copied at the claim, as mounted when cold
    assert p["hello"] == c["hello"] == b"hello\n"  # modes kept: an agent file runs as it is
    for made in (
        "status",
        "ulimits",
        "id",
        "cgroup",
    ):  # capabilities, seccomp, limits, user: the same container
        assert p[made] == c[made] and p[made], made
    assert (p["claim"], c["claim"]) == (
        b"argv\nenv\n",
        b"",
    )  # the claim holds this attempt's command and environment, no more
    claim = attempt(pooled) / "agent-claim"
    assert (claim / "argv").read_bytes() == b"".join(a.encode() + b"\0" for a in TRACE)
    assert environ((claim / "env").read_bytes()).items() <= pooled_env.items()

    # the gateway: its journal starts at this claim, for this run; its state folder as a cold one's
    records = journal(pooled)
    assert records[0]["seq"] in (0, 1) and records[0]["event"] == "gateway_started"
    assert {(r["run_id"], r["attempt"]) for r in records} == {(pooled.run_dir.name, 1)}
    assert (
        at(records[0]["ts"]) >= facts(pooled)["started_at"]
    )  # nothing journaled before the attempt began
    assert sorted(os.listdir(attempt(pooled) / "gateway")) == sorted(
        os.listdir(attempt(cold) / "gateway")
    )
    assert (
        attempt(pooled) / "gateway.log"
    ).read_bytes() == b""  # the gateway said nothing while it waited


def test_a_pair_is_free_only_once_its_gateway_and_agent_wait_on_their_fifos(
    tmp_path, backend, images, warm
):
    """The readiness rule (pool.has_reader): a free pair's gateway has booted, bound its socket
    and opened its store, and its agent has run its warm-up, each now blocked on its FIFO; so a
    claim waits for neither, and its agent's first call is the journal's first call."""
    spec = spec_file(tmp_path, "ready", command=["assure-tool", "fs.list", "path=."])
    pool = warm(1, spec)
    [pair] = [p for free in pool._free.values() for p in free]
    for fifo in (pair.root / "gateway-config" / "wake", pair.root / "agent-claim" / "wake"):
        assert has_reader(fifo), fifo
    assert (pair.root / ".run-state" / "idempotency.sqlite").is_file()
    result = drive(spec, tmp_path / "runs", backend, images, pool)

    assert result.verdict == "pass", [f for a in result.report["attempts"] for f in a["findings"]]
    records = journal(result)
    assert [r["event"] for r in records][0] == "gateway_started"
    assert [r["tool"] for r in records if r["event"] == "tool_call"] == ["fs.list"]
    assert facts(result)["started_at"] <= facts(result)["agent_started_at"]


def test_the_agent_environment_is_its_spec_s_cold_or_pooled_whatever_its_names(
    tmp_path, backend, images, warm
):
    """The gate's shell (sandbox/docker/gate.py) must not leak its own variables into the agent's
    environment, nor let the spec's names collide with them; HOME is assure's, as when cold."""
    env = {
        "HOME": "/workspace",
        "n": "3",
        "limit": "4",
        "argv": "5",
        "envs": "6",
        "kv": "7",
        "TRACE": "a b=c\nd",
    }
    spec = spec_file(tmp_path, "names", env=env)
    runs = tmp_path / "runs"
    cold = drive(spec, runs, backend, images)
    pooled = drive(spec, runs, backend, images, warm(1, spec))

    assert "pool" in facts(pooled)
    assert (cold.verdict, pooled.verdict) == ("pass", "pass"), [
        f for a in pooled.report["attempts"] for f in a["findings"]
    ]
    expected = {**env, "HOME": "/tmp"}
    for result in (cold, pooled):
        got = environ(traced(result)["environ"])
        assert {k: got.get(k) for k in expected} == expected, result.run_dir.name


def test_a_spec_setting_a_variable_bash_keeps_starts_cold(tmp_path, backend, images, warm):
    """UID is read-only in bash: the claim's gate could not export it (exit 125, the agent never
    ran), where a cold start hands it over; such a spec is not pooled (pool.BASH_OWN)."""
    spec = spec_file(tmp_path, "uid", env={"UID": "1000", "TRACE": "on"})
    pool = warm(1, spec_file(tmp_path, "same-shape"))
    result = drive(spec, tmp_path / "runs", backend, images, pool)

    assert result.verdict == "pass", [f for a in result.report["attempts"] for f in a["findings"]]
    assert "pool" not in facts(result)
    assert environ(traced(result)["environ"])["UID"] == "1000"


def test_idle_pairs_wait_without_using_the_cpu(tmp_path, backend, images, warm):
    """A free pair's gateway and agent block on their FIFOs until the claim: polling (a stat
    every 2 ms, a socket test every 10 ms) cost ~23 and ~17 ms of CPU a second per container,
    plus their roots' FUSE daemons: eighteen idle pairs took a core of this two-core machine."""
    import docker

    pool = warm(2, spec_file(tmp_path, "idle"))
    client = docker.from_env()
    ids = [c["id"] for c in backend.owned()["containers"] if c.get(LABEL_POOL) == pool.pool_id]

    def used(cid: str) -> tuple[float, int]:
        usage = client.api.stats(cid, stream=False, one_shot=True)["cpu_stats"]["cpu_usage"][
            "total_usage"
        ]  # ns
        return time.monotonic(), usage

    time.sleep(1)  # past their boot
    before = {cid: used(cid) for cid in ids}
    time.sleep(3)
    after = {cid: used(cid) for cid in ids}
    per_second = {
        cid: (after[cid][1] - before[cid][1]) / (after[cid][0] - before[cid][0]) / 1e6
        for cid in ids
    }  # ms of CPU a second
    assert len(ids) == 4 and max(per_second.values()) < 5, per_second


def test_nothing_of_one_pooled_attempt_reaches_the_next(tmp_path, backend, images, warm):
    spec = spec_file(tmp_path, "twice")
    runs = tmp_path / "runs"
    pool = warm(2, spec)
    first = drive(spec, runs, backend, images, pool)
    second = drive(spec, runs, backend, images, pool)

    assert (first.verdict, second.verdict) == ("pass", "pass")
    a, b = facts(first)["pool"], facts(second)["pool"]
    assert a["pair"] != b["pair"]
    assert {a["agent"], a["gateway"]}.isdisjoint({b["agent"], b["gateway"]}) and a["volume"] != b[
        "volume"
    ]
    users = [
        facts(r)["user"] for r in (first, second)
    ]  # each pair booted as a uid of its own, held until its attempt ended
    assert users[0] != users[1] and users == [
        facts(r)["observed"]["user"] for r in (first, second)
    ], users
    assert (
        attempt(first) / "workspace" / "out" / "left-behind"
    ).read_text().strip() == first.run_dir.name
    trace = traced(second)
    assert "out/left-behind" not in trace["workspace"].decode().splitlines()
    assert trace["tmp"] == b""  # the first agent's /tmp/left-behind is gone with its container
    assert (
        not (attempt(second) / "workspace" / "out" / "left-behind").read_text().strip()
        == first.run_dir.name
    )
    seen = b"".join(trace.values()) + b"".join(
        p.read_bytes() for p in (attempt(second) / "agent-claim").iterdir()
    )
    assert first.run_dir.name.encode() not in seen
    owned = backend.owned()
    left = {c["id"] for c in owned["containers"]} & {
        a["agent"],
        a["gateway"],
        b["agent"],
        b["gateway"],
    }
    assert not left, f"claimed pairs' containers outlived their attempts: {left}"
    assert not {v["id"] for v in owned["volumes"]} & {a["volume"], b["volume"]}


def test_a_pooled_attempt_that_fails_before_its_start_removes_its_pair(
    tmp_path, backend, images, warm
):
    """The pair is the attempt's from the claim on: a fixture that does not fit its disk fails
    the prepare phase after the claim, and the pair's containers and volume must still go."""
    fixture = tmp_path / "big"
    fixture.mkdir()
    (fixture / "blob").write_bytes(os.urandom(12 * 2**20))
    spec = spec_file(
        tmp_path, "big", command=["true"], limits={"wall_seconds": 60, "disk": "8m", "inodes": 2048}
    )
    data = yaml.safe_load(spec.read_text())
    data["workspace"]["fixture"] = str(fixture)
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    result = drive(spec, tmp_path / "runs", backend, images, warm(1, spec))

    assert result.verdict == "error"
    errors = [
        f["message"]
        for f in result.report["attempts"][0]["findings"]
        if f["kind"] == "harness_error"
    ]
    assert any("does not fit in the workspace filesystem" in e for e in errors), errors
    claimed = json.loads((attempt(result) / "pool.json").read_text())
    owned = backend.owned()
    assert not {c["id"] for c in owned["containers"]} & {
        claimed["agent"],
        claimed["gateway"],
    }, "the claimed pair's containers were left"
    assert claimed["volume"] not in {v["id"] for v in owned["volumes"]}
    assert mounts_and_loops_under(tmp_path / "runs" / result.run_dir.name) == ([], [])


def test_a_retry_never_takes_a_pair(tmp_path, backend, images, warm):
    spec = spec_file(
        tmp_path,
        "retry",
        command=["true"],
        max_attempts=2,
        assertions=[{"file_exists": "out/never.txt"}],
        expect="fail",
    )
    result = drive(
        spec, tmp_path / "runs", backend, images, warm(2, spec)
    )  # a free pair left for the retry to refuse

    (task,) = result.report["tasks"]
    assert (task["state"], task["attempts"]) == ("quarantined", [1, 2])
    assert result.verdict == "fail"
    assert "pool" in facts(
        result, 1
    )  # the run's first attempt: a fresh run's folders, so it claimed
    assert "pool" not in facts(result, 2) and not (attempt(result, 2) / "pool.json").exists()
    assert [
        f["kind"] for f in result.report["attempts"][1]["findings"] if f["severity"] != "info"
    ] == ["assertion_failed"]


def test_a_resumed_run_never_takes_a_pair(tmp_path, backend, images, warm):
    spec = spec_file(tmp_path, "resumed", command=["true"], max_attempts=2)
    killed = subprocess.run(
        ASSURE + ["run", str(spec)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ASSURE_FAILPOINT": "start"},
    )
    assert killed.returncode == -9, killed.stderr
    (run_dir,) = run_dirs(tmp_path / ".assure" / "runs")
    pool = warm(2, spec)
    result = Driver(
        spec_mod.load(spec), store.RunDir.open(run_dir), backend, images, lambda *_: None, pool=pool
    ).drive()

    assert result.verdict == "pass"
    (task,) = result.report["tasks"]
    assert task["attempts"] == [1, 2]
    assert "pool" not in facts(run_dir, 2) and not (attempt(run_dir, 2) / "pool.json").exists()
    events = [
        json.loads(line)["event"] for line in (run_dir / "events.jsonl").read_text().splitlines()
    ]
    assert "run_resumed" in events and "attempt_interrupted" in events


CLAIM_AND_DIE = """\
import sys
from pathlib import Path
from assure import spec as spec_mod
from assure.records import store
from assure.run.driver import Driver
from assure.run.pool import Settings, WarmPool
from assure.sandbox.docker.backend import DockerBackend
from assure.sandbox.docker.images import Images
backend = DockerBackend()
images = Images(backend).ensure()
spec, runs = spec_mod.load(Path(sys.argv[1])), Path(sys.argv[2])
pool = WarmPool(DockerBackend(), images, runs, Settings(1))
pool.want([spec])
assert pool.wait_full(120)
run = store.RunDir.create(runs, store.new_run_id(spec.name), spec.path, spec.to_json())
Driver(spec, run, backend, images, lambda *_: None, pool=pool).drive()  # ASSURE_FAILPOINT=start: kill -9 here
"""  # noqa: E501 -- a multi-line text whose lines are its content


def test_a_driver_killed_in_a_pooled_attempt_is_resumed_and_its_pair_reaped(
    tmp_path, backend, images
):
    """The claimed pair's containers carry the pool's labels, not the run's: `assure resume`
    finds them by the attempt's pool.json and removes them before its next attempt."""
    spec = spec_file(tmp_path, "killed", command=["true"], max_attempts=2)
    runs = tmp_path / ".assure" / "runs"
    child = subprocess.Popen(
        [sys.executable, "-c", CLAIM_AND_DIE, str(spec), str(runs)],
        cwd=tmp_path,
        env={**os.environ, "ASSURE_FAILPOINT": "start"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, err = child.communicate(timeout=300)
        assert child.returncode == -9, err
        (run_dir,) = run_dirs(runs)
        claimed = json.loads((attempt(run_dir) / "pool.json").read_text())
        assert {claimed["agent"], claimed["gateway"]} <= {
            c["id"] for c in backend.owned()["containers"]
        }  # what the kill left

        resumed = subprocess.run(
            ASSURE + ["resume", run_dir.name, "--json"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )

        assert resumed.returncode == 0, resumed.stderr
        report = json.loads(resumed.stdout)
        assert report["verdict"] == "pass" and report["tasks"][0]["attempts"] == [1, 2]
        owned = backend.owned()
        assert not {c["id"] for c in owned["containers"]} & {
            claimed["agent"],
            claimed["gateway"],
        }, "the claimed pair was not reaped"
        assert claimed["volume"] not in {v["id"] for v in owned["volumes"]}
        assert "pool" not in facts(run_dir, 2)
        assert mounts_and_loops_under(run_dir) == ([], [])
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
        gc(runs, tmp_path)  # the dead pool's free pair
    assert_nothing_left(backend, child.pid, tmp_path)


# --- assure suite --pool: the pool's own lifetime ---------------------------------------------


def write_suite(folder: Path, specs: list[Path]) -> Path:
    path = folder / "suite.yaml"
    path.write_text(
        yaml.safe_dump({"version": 1, "name": "pooled", "specs": [p.name for p in specs]})
    )
    return path


def pool_resources(backend: DockerBackend, pid: int) -> dict[str, list[dict]]:
    """What the pool of the `assure` process `pid` made (its labels name the pool and the pid)."""
    return {
        kind: [i for i in items if i.get(LABEL_POOL) and i.get("assure.pid") == str(pid)]
        for kind, items in backend.owned().items()
    }


def pool_folders(runs: Path) -> list[Path]:
    return sorted((runs / ".pool").iterdir()) if (runs / ".pool").is_dir() else []


def assert_nothing_left(backend: DockerBackend, pid: int, tmp_path: Path) -> None:
    runs = tmp_path / ".assure" / "runs"
    assert pool_resources(backend, pid) == {"containers": [], "volumes": [], "networks": []}
    mine = [c for c in backend.owned()["containers"] if c.get("assure.pid") == str(pid)]
    assert not mine, f"containers of the suite left behind: {[c['name'] for c in mine]}"
    assert pool_folders(runs) == []
    assert mounts_and_loops_under(tmp_path) == ([], [])


def wait_for_full_pool(backend: DockerBackend, proc: subprocess.Popen, pairs: int) -> None:
    """Until the suite's pool holds `pairs` whole pairs (an agent is a pair's last container)."""
    deadline = time.monotonic() + FILL_SECONDS
    while time.monotonic() < deadline and proc.poll() is None:
        if (
            len(
                [
                    c
                    for c in pool_resources(backend, proc.pid)["containers"]
                    if c.get("assure.role") == "agent"
                ]
            )
            >= pairs
        ):
            return
        time.sleep(0.2)
    raise AssertionError(f"the pool never held {pairs} pairs (exit {proc.poll()})")


def stopped(proc: subprocess.Popen, runs: Path, cwd: Path) -> None:
    """After a test of the suite's process, pass or fail: it is gone, and so is what it left."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)
    gc(runs, cwd)


def gc(runs: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ASSURE + ["gc", "--runs-dir", str(runs)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def trivial(folder: Path, name: str, seconds: int = 0) -> Path:
    return spec_file(folder, name, command=["sh", "-c", f"sleep {seconds}"])


def sleeper(folder: Path) -> Path:
    return spec_file(
        folder,
        "sleeper",
        command=["sh", "-c", "sleep 300"],
        limits={"wall_seconds": 120},
        expect="fail",
    )


def test_the_pool_is_removed_when_the_suite_exits(tmp_path, backend, images):
    suite = write_suite(
        tmp_path, [trivial(tmp_path, "first", seconds=3), trivial(tmp_path, "second")]
    )  # first: time to fill
    runs = tmp_path / ".assure" / "runs"
    proc = subprocess.Popen(
        ASSURE + ["suite", "--pool", "2", "-j", "1", str(suite)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        printed, err = proc.communicate(timeout=300)

        assert proc.returncode == 0 and "Traceback" not in err, err
        assert "a warm pool of 2 pairs per shape" in err
        by_name = {run.name.split("-")[0]: run for run in run_dirs(runs)}
        assert sorted(by_name) == ["first", "second"]
        assert "pool" in facts(by_name["second"])  # a pair made while the first ran
        hits, misses, cold = map(
            int,
            re.search(r"warm pool: (\d+) hits, (\d+) misses, (\d+) cold starts", printed).groups(),
        )  # issue 27 item 6: at the end of the suite's output
        pooled = sum("pool" in facts(run) for run in by_name.values())
        assert (hits, hits + cold, misses <= cold) == (pooled, 2, True)
        assert_nothing_left(backend, proc.pid, tmp_path)
    finally:
        stopped(proc, runs, tmp_path)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_the_pool_is_removed_on_ctrl_c_and_sigterm(sig, tmp_path, backend, images):
    suite = write_suite(tmp_path, [sleeper(tmp_path), trivial(tmp_path, "after")])
    runs = tmp_path / ".assure" / "runs"
    proc = subprocess.Popen(
        ASSURE + ["suite", "--pool", "2", "-j", "1", str(suite)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_full_pool(backend, proc, 2)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)

        assert proc.returncode == 130 and "Traceback" not in err, err
        assert "interrupted" in err
        assert_nothing_left(backend, proc.pid, tmp_path)
    finally:
        stopped(proc, runs, tmp_path)


def test_a_pool_killed_with_kill_9_is_removed_by_gc(tmp_path, backend, images):
    suite = write_suite(tmp_path, [sleeper(tmp_path), trivial(tmp_path, "after")])
    runs = tmp_path / ".assure" / "runs"
    proc = subprocess.Popen(
        ASSURE + ["suite", "--pool", "2", "-j", "1", str(suite)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_full_pool(backend, proc, 2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

        left = pool_resources(backend, proc.pid)
        assert (
            len(left["containers"]) >= 4 and len(left["volumes"]) >= 2
        )  # two whole pairs at least, as the kill found them
        (folder,) = pool_folders(runs)
        assert len([p for p in folder.iterdir() if p.name.startswith("pair-")]) >= 2
        assert mounts_and_loops_under(folder)[0], "no free pair's workspace filesystem is mounted"

        done = gc(runs, tmp_path)

        assert done.returncode == 0, done.stderr
        assert_nothing_left(backend, proc.pid, tmp_path)
        for run in run_dirs(
            runs
        ):  # the sleeper's own containers too: its driver died with the pool
            assert not backend.owned(run.name)["containers"]
    finally:
        stopped(proc, runs, tmp_path)


# --- containment with the pool on ---------------------------------------------------------------


# Per attack category of the hostile corpus, up to this many of the specs the pool can serve, in
# name order (secrets has one: its others use egress). Every kind of attack meets a pooled pair,
# in about an eighth of the time the whole corpus took with the pool on (there most attempts
# missed the pool and ran cold, as test_containment_corpus.py runs all of them under each runtime).
POOLED_PER_CATEGORY = 4
# Their bulk is the host's post-run steps, which a pooled attempt shares with a cold one; each
# costs as much as twenty others.
NOT_POOLED = {"covert--bulk-hides-breach", "host-postrun--huge-tree"}


def pooled_corpus(folder: Path) -> Path:
    """A suite of up to POOLED_PER_CATEGORY pool-eligible specs of each category of the corpus."""
    chosen: dict[str, list[Path]] = {}
    for path in sorted((ROOT / "suites" / "containment").glob("*--*.yaml")):
        category = path.name.split("--", 1)[0]
        picked = chosen.setdefault(category, [])
        if (
            len(picked) < POOLED_PER_CATEGORY
            and path.stem not in NOT_POOLED
            and ineligible(spec_mod.load(path)) is None
        ):
            picked.append(path)
    assert all(chosen.values()), chosen  # every category has a spec the pool serves
    suite = folder / "pooled-containment.yaml"
    specs = [str(path) for picked in chosen.values() for path in picked]
    suite.write_text(yaml.safe_dump({"version": 1, "name": "pooled-containment", "specs": specs}))
    return suite


def test_the_containment_suite_holds_with_the_pool_on(tmp_path, images):
    suite = pooled_corpus(tmp_path)
    started = time.monotonic()
    done = subprocess.run(
        ASSURE + ["suite", "--pool", "2", "-j", "2", "--json", str(suite)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    took = time.monotonic() - started

    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-4000:]
    result = json.loads(done.stdout)
    unexpected = [
        (r["spec"], r["verdict"]) for r in result["results"] if not r.get("as_expected", True)
    ]
    assert not unexpected, unexpected
    pooled, cold = [], []
    for run in run_dirs(tmp_path / ".assure" / "runs"):
        for folder in sorted((run / "attempts").iterdir()):
            container = json.loads((folder / "container.json").read_text())
            (pooled if "pool" in container else cold).append(folder)
    assert len(pooled) >= (len(pooled) + len(cold)) // 2, (
        f"only {len(pooled)} of {len(pooled) + len(cold)} attempts claimed a pair in {took:.0f} s"
    )
    for folder in pooled:  # the post-run containment check held for every pooled attempt
        verdict = json.loads((folder / "verdict.json").read_text())
        assert verdict["containment"]["failed"] == [], (folder, verdict["containment"])
        assert not [f for f in verdict["findings"] if f["kind"] == "containment_failed"], folder
    print(
        f"containment suite with the pool on: {took:.0f} s, {len(pooled)} pooled and {len(cold)}"
        " cold attempts"
    )
