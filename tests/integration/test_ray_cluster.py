"""`assure suite --cluster` on a real Ray cluster on this machine: a head and two workers with
the `docker` resource, on loopback only (tests/integration/ray_cluster.py), each spec run by a
worker on the engine, judged again and signed by the caller.

A suite spread over both workers; a worker whose raylet is SIGKILLed mid-run (the spec runs
again on the other worker, one attempt number on, the loss names the dead node, and `assure gc`
removes what the dead worker left); the caller killed with kill -9 mid-suite (the same command
continues it, finished specs kept); a node that builds the agent and gateway images on first
use; `--cluster auto` joining the cluster RAY_ADDRESS names; a breach whose run directory is too
large to send (the node's message carries it, and it stays a breach). Every Ray process is stopped
by
process id at the end.

The nodes and callers use images of their own (`ASSURE_IMAGE_NAMESPACE`, made here from the
shared engine's base and build cache, removed at the end), so the rebuild test neither needs
nor touches the images anyone else on this machine is using.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import docker
import pytest

from assure.records import html_report, keys
from assure.sandbox.backend import LABEL_PID, LABEL_RUN
from assure.sandbox.docker.images import Images, ImageSet
from tests.integration import ray_cluster

ROOT = Path(__file__).resolve().parents[2]
SUITE = Path(__file__).resolve().parent / "specs" / "cluster" / "suite.yaml"
SLOW = SUITE.parent / "specs" / "slow-pass.yaml"
QUICK = SUITE.parent / "specs" / "quick-pass-1.yaml"
BULK = ROOT / "suites" / "containment" / "covert--bulk-hides-breach.yaml"
EGRESS = ROOT / "suites" / "containment" / "network--egress-proxy-self.yaml"
ASSURE = [sys.executable, "-m", "assure.cli"]
NAMESPACE = (  # this module's images: `<NAMESPACE>-agent:<digest>`
    f"assuretest-{uuid.uuid4().hex[:8]}"
)
ENV = {**ray_cluster.ENV, "ASSURE_IMAGE_NAMESPACE": NAMESPACE}


def namespaced(engine: docker.DockerClient) -> list[str]:
    return [
        t for image in engine.images.list() for t in image.tags if t.startswith(f"{NAMESPACE}-")
    ]


@pytest.fixture(scope="module")
def ns_images(images, backend):
    """This module's images: the shared base tagged into the namespace, the others built from it
    (the build cache's, seconds), every tag of the namespace removed at the end."""
    engine = docker.from_env()
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("ASSURE_IMAGE_NAMESPACE", NAMESPACE)
            engine.images.get(images.base).tag(f"{NAMESPACE}-base", images.base.split(":")[1])
            made = Images(backend).ensure()
        yield made
    finally:
        for tag in namespaced(engine):
            engine.images.remove(tag, noprune=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, ns_images):  # built once here, so no node builds them mid-test
    c = ray_cluster.start(
        tmp_path_factory.mktemp("ray"), worker_env={"ASSURE_IMAGE_NAMESPACE": NAMESPACE}
    )
    yield c
    c.stop()
    leftover = [p for n in c.nodes for p in n.pids()]
    assert leftover == [], f"Ray processes still alive: {leftover}"


def caller(c: ray_cluster.LocalCluster, suite: Path, runs: Path, *extra: str) -> list[str]:
    return c.in_ns(
        *ASSURE, "suite", str(suite), "--cluster", c.address, "--runs-dir", str(runs), *extra
    )


def suite_state(runs: Path) -> dict:
    (state,) = (runs.parent / "suites").glob("*/state.json")
    return json.loads(state.read_text())


def run_assure(
    argv: list[str], cwd: Path, timeout: float = 400
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)


def tcp_peers(netns: str) -> list[str]:
    """Every TCP address (local and peer) of every socket in the namespace."""
    lines = subprocess.run(
        ["nsenter", f"--net=/run/netns/{netns}", "--", "ss", "-tanH"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return [
        addr.rsplit(":", 1)[0].removeprefix("[::ffff:").rstrip("]")
        for line in lines
        for addr in line.split()[3:5]
    ]


def test_a_suite_spreads_over_both_workers_and_every_verdict_is_judged_again_here(
    cluster, tmp_path
):
    """With -j above the cluster's `docker` slots, the specs that wait in Ray's queue say how long
    (their deadlines count from their start on the node, not from their submission)."""
    private, public = keys.generate_keypair(tmp_path / "keys")
    runs = tmp_path / "runs"
    out = run_assure(
        caller(cluster, SUITE, runs, "--json", "--key", str(private), "-j", "4"), tmp_path
    )  # 4 in flight, 2 docker slots
    assert out.returncode == 0, out.stderr[-3000:]
    state = suite_state(runs)
    queued = [r["queued_seconds"] for r in state["runs"] if r.get("queued_seconds")]
    assert queued and max(queued) >= 1, state[
        "runs"
    ]  # the specs past the 2 slots waited in Ray's queue, and it was measured
    assert f"queued {max(queued):g} s" in out.stderr  # and shown
    assert [(r["verdict"], r.get("node_finding"), r["lost"]) for r in state["runs"]] == [
        ("fail", None, []),
        *[("pass", None, [])] * 4,
    ]
    workers = {n["NodeID"] for n in cluster.alive_nodes() if n["Resources"].get("docker")}
    assert {r["node"] for r in state["runs"]} == workers and len(
        workers
    ) == 2  # each worker ran at least one spec
    assert all(r["started_at"] and r["finished_at"] for r in state["runs"])
    first_done = min(r["finished_at"] for r in state["runs"])
    assert (
        max(r["started_at"] for r in state["runs"]) < first_done
    )  # the fifth was submitted as the first task ended, before the caller had judged it
    for r in state["runs"]:
        run_dir = runs / r["run_id"]
        verified = run_assure(
            [*ASSURE, "receipts", "verify", str(run_dir), "--public-key", str(public), "--json"],
            tmp_path,
            60,
        )
        assert verified.returncode == 0 and json.loads(verified.stdout)["signatures"] == "passed", (
            verified.stdout + verified.stderr
        )
        assert (
            run_dir / "attempts" / "1" / "reverify.json"
        ).is_file()  # judged here, from the folder alone
    peers = tcp_peers(cluster.netns)
    assert peers and set(peers) <= {
        "127.0.0.1",
        "0.0.0.0",
        "*",
    }, peers  # all of Ray's traffic is on loopback
    ray_pids = {p for n in cluster.nodes for p in n.pids()}
    host = subprocess.run(["ss", "-tanpH"], capture_output=True, text=True, check=True).stdout
    assert not any(f"pid={p}," in host for p in ray_pids)  # and none of it is on the host's network


def wait_until(what, timeout: float, step: float = 0.3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := what():
            return value
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what.__doc__ or what}")


def one_spec_suite(tmp_path: Path, spec: Path) -> Path:
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"version: 1\nname: one\nspecs: [{json.dumps(str(spec))}]\n")
    return suite


def test_a_breach_behind_a_bulk_of_files_arrives_and_is_judged_again_here(cluster, tmp_path):
    """covert--bulk-hides-breach: a covert edit plus 50,100 files in out/. The copy-out keeps
    only what this verdict's readers open (at most the HTML page's detailed changes), so the
    run directory is small enough to send; it arrives, is judged again here, and the breach
    stands. (A run directory past the caller's bounds: tests/unit/test_cluster.py.)"""
    runs, junit = tmp_path / "runs", tmp_path / "junit.xml"
    out = run_assure(
        caller(cluster, one_spec_suite(tmp_path, BULK), runs, "--json", "--junit", str(junit)),
        tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]  # the spec expects breach, and so it is
    (entry,) = suite_state(runs)["runs"]
    assert (entry["verdict"], entry["node_verdict"], entry["lost"]) == ("breach", "breach", [])
    assert "node_finding" not in entry, entry  # it arrived and was judged here
    workspace = runs / entry["run_id"] / "attempts" / "1" / "workspace"
    copied = sum(len(files) for _, _, files in os.walk(workspace))
    assert 0 < copied <= html_report.MAX_CHANGES, copied
    (result,) = json.loads(out.stdout)["results"]
    assert (result["verdict"], result["as_expected"]) == ("breach", True)
    assert ("unattributed", "breach", "src/calc.py") in [
        (f["kind"], f["severity"], f["subject"]) for f in result["findings"]
    ]
    xml = junit.read_text()
    assert "verdict: breach" in xml and "<error" not in xml and "<failure" not in xml


def test_the_caller_killed_mid_suite_continues_with_the_same_command_and_keeps_finished_specs(
    cluster, tmp_path
):
    runs = tmp_path / "runs"
    argv = caller(cluster, SUITE, runs, "-j", "1")
    first = subprocess.Popen(
        argv, cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:

        def two_finished():
            """two specs finished"""
            try:
                done = [r for r in suite_state(runs)["runs"] if r["verdict"] is not None]
            except (ValueError, OSError):
                return None
            return done if len(done) >= 2 else None

        kept = wait_until(two_finished, 240)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    again = run_assure(argv, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "continuing unfinished suite run" in again.stderr
    assert (
        "stopped with the caller" in again.stderr and "lost with their node" not in again.stderr
    )  # the caller's own stop, worded as such
    state = suite_state(runs)
    assert all(r["verdict"] is not None for r in state["runs"])
    ran = [json.loads((runs / r["run_id"] / "state.json").read_text()) for r in state["runs"]]
    spans = sorted((r["started_at"], r["finished_at"]) for r in ran)  # each run, by its node
    assert all(
        done <= then for (_, done), (then, _) in zip(spans, spans[1:], strict=False)
    )  # -j 1: one spec on the nodes at a time (the caller judges one while the next runs)
    by_id = {r["run_id"]: r for r in state["runs"]}
    for r in kept:  # finished before the kill: the same run, not run again
        assert by_id[r["run_id"]]["finished_at"] == r["finished_at"]
    (stopped,) = [r for r in state["runs"] if r["lost"]]  # the one in flight at the kill
    shown = run_assure([*ASSURE, "show", stopped["run_id"], "--runs-dir", str(runs)], tmp_path, 60)
    assert shown.returncode == 0, shown.stderr
    assert "stopped by the caller (its own stop" in shown.stdout  # in its run folder too
    assert "lost with its node" not in shown.stdout
    assert len(list(runs.iterdir())) == len(
        state["runs"]
    )  # one run directory per spec, nothing half-arrived
    gc_left_behind(
        tmp_path, [r["run_id"] for r in state["runs"]]
    )  # what the task Ray ended with the caller left


def gc_left_behind(cwd: Path, run_ids: list[str]) -> None:
    """`assure gc` removes every container, volume and node scratch folder of these runs (their
    makers are dead). Whether a task Ray ended left any depends on when Ray ended it; the
    node-kill test's does."""
    engine = docker.from_env()

    def ours() -> list[str]:
        # sparse: the engine's listing as is; docker-py would inspect each container it lists,
        # and one that another session removes in between would fail the test with a 404
        found = [
            *engine.containers.list(all=True, sparse=True, filters={"label": LABEL_RUN}),
            *engine.volumes.list(filters={"label": LABEL_RUN}),
        ]
        return [
            x.id
            for x in found
            if (x.attrs.get("Labels") or x.attrs.get("Config", {}).get("Labels") or {}).get(
                LABEL_RUN
            )
            in run_ids
        ]

    def scratch() -> list[Path]:  # the nodes' temp folder is this machine's
        return [p for r in run_ids for p in Path(tempfile.gettempdir()).glob(f"assure-node-*/{r}")]

    gc = run_assure([*ASSURE, "gc"], cwd, 120)
    assert gc.returncode == 0, gc.stderr
    assert ours() == [] and scratch() == []


def test_a_worker_killed_mid_run_loses_its_attempt_and_the_spec_runs_again_on_the_other(
    cluster, tmp_path
):
    """Its raylet SIGKILLed mid-attempt: the task's watchdog (a process of its own on the node)
    removes the agent and gateway by itself, long before the spec's deadline; the spec runs
    again on the other worker, one attempt number on, and the loss names the dead node."""
    runs = tmp_path / "runs"
    engine = docker.from_env()
    proc = subprocess.Popen(
        caller(cluster, one_spec_suite(tmp_path, SLOW), runs, "--json"),
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def agent_running():
            """the slow spec's agent container, on this cluster (the shared engine has others')"""
            found = engine.containers.list(filters={"label": ["assure.role=agent"]}, sparse=True)
            ours = {p for n in cluster.nodes for p in n.pids()}
            return [
                labels
                for c in found
                if (labels := c.attrs.get("Labels") or {})
                .get(LABEL_RUN, "")
                .startswith("slow-pass-")
                and labels.get(LABEL_PID, "").isdigit()
                and int(labels[LABEL_PID]) in ours
            ]

        (agent,) = wait_until(agent_running, 240)
        worker_pid = int(agent[LABEL_PID])
        (victim,) = [n for n in cluster.nodes if worker_pid in n.pids()]
        os.kill(victim.raylet(), signal.SIGKILL)
        killed = time.monotonic()

        def sandbox_gone():
            """the dead worker's agent and gateway removed on its node, with no gc run"""
            return not engine.containers.list(
                all=True, sparse=True, filters={"label": [f"{LABEL_PID}={worker_pid}"]}
            )

        wait_until(
            sandbox_gone, 60, 0.5
        )  # its watchdog's doing: the driver that enforced the deadline is gone
        gone_after = time.monotonic() - killed
        stdout, stderr = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    (entry,) = suite_state(runs)["runs"]
    assert (
        entry["verdict"] == "pass" and len(entry["lost"]) == 1 and entry["lost"][0]["attempt"] == 1
    )
    assert (
        entry["lost"][0]["node"] == victim.node_id and entry["node"] != victim.node_id
    )  # the loss names the dead node
    (result,) = json.loads(stdout)["results"]  # and so do the summary and its line
    assert result["placement"]["node"] == entry["node"] and result["placement"]["where"] == "node"
    assert [(x["attempt"], x["node"], x["cause"]) for x in result["placement"]["lost"]] == [
        (1, victim.node_id, "node")
    ]
    assert "1 lost with their node" in stderr
    listed = run_assure([*ASSURE, "runs", "--runs-dir", str(runs), "--json"], ROOT, 60)
    (row,) = [r for r in json.loads(listed.stdout) if r["run_id"] == entry["run_id"]]
    placed = row["placement"]  # from the run folder, written there by the caller
    assert (placed["node"], placed["address"], placed["lost"]) == (
        entry["node"],
        "127.0.0.1",
        result["placement"]["lost"],
    )
    assert placed["started_at"] > placed["lost"][0]["at"]  # its second start, after the loss
    shown = run_assure([*ASSURE, "show", entry["run_id"], "--runs-dir", str(runs)], ROOT, 60)
    assert f"lost: attempt 1 at {placed['lost'][0]['at']} on node {victim.node_id}: lost with" in (
        shown.stdout
    )
    assert sorted(p.name for p in (runs / entry["run_id"] / "attempts").iterdir()) == [
        "2"
    ]  # the run went on with attempt+1
    assert (
        engine.containers.list(
            all=True, sparse=True, filters={"label": [f"{LABEL_RUN}={entry['run_id']}"]}
        )
        == []
    )
    assert not list(
        Path(tempfile.gettempdir()).glob(f"assure-node-*/{entry['run_id']}")
    )  # nor its task's scratch folder
    print(f"the dead worker's sandbox was gone {gone_after:.1f} s after its raylet was killed")
    gc_left_behind(tmp_path, [entry["run_id"]])


def worker_ids(c: ray_cluster.LocalCluster) -> set[str]:
    return {n.node_id for n in c.nodes if n.name.startswith("worker")}


def test_a_node_builds_the_images_on_first_use_with_the_same_digests(
    cluster, tmp_path, ns_images: ImageSet, images: ImageSet
):
    """This module's agent and gateway images are removed from the engine (every tag of each, its
    digest and `latest`: the namespace's own, no one else's), so the rebuild is the build
    cache's and takes seconds; the base and the egress image stay. A suite on the cluster then has
    its node build both again in its task, from the same recipe: the same tags, the same image
    ids, and the same digests as the shared images'."""
    engine = docker.from_env()
    shared = set(namespaced(engine))
    before = {tag: engine.images.get(tag).id for tag in (ns_images.agent, ns_images.gateway)}
    assert [t.split(":")[1] for t in before] == [
        images.agent.split(":")[1],
        images.gateway.split(":")[1],
    ]  # the digests do not name the namespace
    for tag in before:
        for name in (tag, tag.split(":")[0] + ":latest"):
            engine.images.remove(name, noprune=True)
    assert not any(t in before for t in namespaced(engine))
    runs = tmp_path / "runs"
    out = run_assure(caller(cluster, one_spec_suite(tmp_path, QUICK), runs), tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    (entry,) = suite_state(runs)["runs"]
    assert entry["verdict"] == "pass" and entry["node"] in worker_ids(cluster)
    assert {
        tag: engine.images.get(tag).id for tag in before
    } == before  # the same digest tags, the same images
    assert set(namespaced(engine)) == shared  # `latest` too
    logs = "".join(
        p.read_text(errors="replace") for p in Path(cluster.ray_tmp).glob("session_*/logs/worker-*")
    )  # every node's
    for tag in before:  # built in the node's task, the one that ran the spec
        assert f"assure node {entry['node']}: building {tag}" in logs, tag


def test_a_node_builds_a_specs_derived_image_by_the_digest_a_local_run_would_use(
    cluster, tmp_path, ns_images: ImageSet
):
    """A spec with an `agent.install` (a binary here): its node builds the derived image in its
    task, tagged as `install.agent_image` names it for a run on this machine, and the agent runs
    the installed program. The tag is removed at the end (this module's agent image is in it)."""
    from assure import spec as spec_mod
    from assure.sandbox import install

    hello = tmp_path / "hello"
    hello.write_text("#!/bin/sh\necho hello from the install\n")
    spec = tmp_path / "install-on-node.yaml"
    spec.write_text(
        "version: 1\nname: install-on-node\n"
        f"agent: {{command: [hello], install: {{binaries: [{json.dumps(str(hello))}]}}}}\n"
        f"workspace: {{fixture: {json.dumps(str(ROOT / 'fixtures' / 'workspaces' / 'calc'))}}}\n"
        "limits: {wall_seconds: 60}\nassertions:\n  - exit_code: 0\nexpect: pass\n"
    )
    tag = install.agent_image(spec_mod.load(spec), ns_images)
    engine = docker.from_env()
    try:
        runs = tmp_path / "runs"
        out = run_assure(caller(cluster, one_spec_suite(tmp_path, spec), runs), tmp_path)
        assert out.returncode == 0, out.stderr[-3000:]
        (entry,) = suite_state(runs)["runs"]
        assert entry["verdict"] == "pass" and entry["node"] in worker_ids(cluster)
        logs = "".join(
            p.read_text(errors="replace")
            for p in Path(cluster.ray_tmp).glob("session_*/logs/worker-*")
        )
        assert f"assure node {entry['node']}: building {tag}" in logs
        (log,) = runs.glob("*/attempts/1/agent.log")
        assert "hello from the install" in log.read_text()
    finally:
        try:
            engine.images.remove(tag, noprune=True)
        except docker.errors.ImageNotFound:
            pass


def test_cluster_auto_joins_the_cluster_ray_address_names(cluster, tmp_path):
    runs = tmp_path / "runs"
    argv = cluster.in_ns(
        *ASSURE,
        "suite",
        str(one_spec_suite(tmp_path, QUICK)),
        "--cluster",
        "auto",
        "--runs-dir",
        str(runs),
    )
    out = subprocess.run(
        argv,
        cwd=tmp_path,
        env={**ENV, "RAY_ADDRESS": cluster.address},
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "on the Ray cluster auto" in out.stderr
    (entry,) = suite_state(runs)["runs"]
    assert (
        entry["verdict"] == "pass" and entry["node"] in worker_ids(cluster) and entry["lost"] == []
    )


def test_a_wrong_address_and_a_spec_no_node_holds_fail_fast_before_a_suite_run_is_written(
    cluster, tmp_path
):
    """Nothing at the address, an HTTP/1 server, and an HTTP/2 server that answers SETTINGS and
    then garbage (it passed a probe that stopped at SETTINGS, and Ray then retried for 25-30 s):
    each refused in seconds with the address and the fix (Ray alone retried for minutes), and the
    real head passes the same probe. A spec asking 2 CPUs of 1-CPU nodes: refused naming the spec
    and the largest node (Ray would have queued it, silently, for ever). No suite run is written
    for any of them."""
    runs = tmp_path / "runs"
    suite = one_spec_suite(tmp_path, QUICK)
    garbage = (
        "import socket; s = socket.create_server(('127.0.0.1', 6393))\n"
        "while True:\n c = s.accept()[0]; c.recv(65536)\n"
        " c.sendall(bytes(3) + b'\\x04' + bytes(5) + b'\\xffgarbage' * 100); c.close()"
    )
    servers = [
        subprocess.Popen(cluster.in_ns(*argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for argv in (
            (sys.executable, "-m", "http.server", "6392", "--bind", "127.0.0.1"),
            (sys.executable, "-c", garbage),
        )
    ]
    try:
        for address, said in (
            ("127.0.0.1:6390", "nothing answers at the Ray cluster address 127.0.0.1:6390"),
            ("127.0.0.1:6392", "what answers at 127.0.0.1:6392 is not a Ray GCS"),
            ("127.0.0.1:6393", "what answers at 127.0.0.1:6393 is not a Ray GCS"),
        ):
            started = time.monotonic()
            out = run_assure(
                cluster.in_ns(
                    *ASSURE, "suite", str(suite), "--cluster", address, "--runs-dir", str(runs)
                ),
                tmp_path,
                120,
            )
            took = time.monotonic() - started
            assert (
                out.returncode != 0 and said in out.stderr and "ray start --head" in out.stderr
            ), out.stderr[-2000:]
            assert "Failed to connect to GCS" not in out.stderr, out.stderr[-2000:]  # Ray never ran
            assert took < 15, (
                took
            )  # the interpreter and its imports included; Ray alone took over 150 s
    finally:
        for server in servers:
            server.kill()
            server.wait(10)
    probed = subprocess.run(
        cluster.in_ns(
            sys.executable,
            "-c",
            f"from assure.run import cluster; cluster.probe({cluster.address!r})",
        ),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probed.returncode == 0, probed.stderr[-2000:]
    big = tmp_path / "big.yaml"
    big.write_text(
        QUICK.read_text()
        .replace("name: quick-pass-1", "name: too-big")
        .replace("{wall_seconds: 30}", "{wall_seconds: 30, cpus: 2}")
        .replace("../../../../../fixtures", str(ROOT / "fixtures"))
    )
    out = run_assure(caller(cluster, one_spec_suite(tmp_path, big), runs), tmp_path, 120)
    assert out.returncode != 0, out.stderr[-2000:]
    assert (
        f"{big}: limits.cpus 2 and limits.memory" in out.stderr
        and "no node of the cluster holds it (the largest: node " in out.stderr
    ), out.stderr[-2000:]
    assert ": 1 CPU," in out.stderr  # the largest worker's
    assert not (tmp_path / "suites").exists() and not runs.exists()


def test_a_mixed_suite_runs_what_the_cluster_cannot_here_beside_it(cluster, tmp_path):
    """The README's case: a spec with egress.allow (a retry on another node could repeat its
    effects) runs on the caller, beside the cluster's spec, instead of refusing the whole suite;
    `--check --cluster` says which."""
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"version: 1\nname: mixed\nspecs: [{json.dumps(str(QUICK))}, {json.dumps(str(EGRESS))}]\n"
    )
    check = run_assure(
        [*ASSURE, "suite", str(suite), "--check", "--cluster", cluster.address], tmp_path, 60
    )
    assert check.returncode == 0 and "2 specs (1 run here, not on the cluster" in check.stdout, (
        check.stdout + check.stderr
    )
    runs = tmp_path / "runs"
    out = run_assure(caller(cluster, suite, runs, "--json"), tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    quick, egress = suite_state(runs)["runs"]
    assert (
        quick["verdict"] == "pass" and quick["node"] in worker_ids(cluster) and "where" not in quick
    )
    assert (egress["verdict"], egress["where"], egress.get("node")) == ("contained", "here", None)
    assert egress["here_because"] == ["an HTTP upstream (egress.allow)"]
    assert "network-egress-proxy-self: contained (expects contained) here" in out.stderr
    assert (runs / egress["run_id"] / "attempts" / "1").is_dir()
    shown = run_assure([*ASSURE, "show", egress["run_id"], "--runs-dir", str(runs), "--json"], ROOT)
    assert json.loads(shown.stdout)["placement"]["where"] == "here"


def test_doctor_checks_the_cluster_and_each_of_its_nodes(cluster, tmp_path):
    """`doctor --cluster`: Ray on both sides, the `docker` resource, and on each worker (a task
    pinned to it) the engine, the images (the same tags as the caller's) and assure's version. A
    wrong address is one failed check, in seconds. Ray's own noise (its 8.8.8.8 probe) is not shown.
    """
    out = run_assure(
        cluster.in_ns(*ASSURE, "doctor", "--cluster", cluster.address, "--json"), tmp_path, 180
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    alive = cluster.alive_nodes()  # an earlier test of the module may have killed a worker
    workers = {n["NodeID"] for n in alive if n["Resources"].get("docker")}
    assert workers and checks["docker resource"]["status"] == "ok"
    assert f"{len(workers)} of {len(alive)} nodes" in checks["docker resource"]["detail"]
    for node in workers:
        name = f"node {node[:12]}"
        assert all(
            checks[f"{name} {part}"]["status"] == "ok"
            for part in ("ray", "assure", "engine", "images")
        ), checks
        assert checks[f"{name} images"]["detail"].startswith(f"{NAMESPACE}-agent:")
    assert checks["ray stop"]["status"] == "info"
    assert "8.8.8.8" not in out.stderr, out.stderr[-2000:]
    started = time.monotonic()
    wrong = run_assure(
        cluster.in_ns(*ASSURE, "doctor", "--cluster", "127.0.0.1:6391", "--json"), tmp_path, 60
    )
    assert wrong.returncode == 1 and time.monotonic() - started < 30
    (address,) = [c for c in json.loads(wrong.stdout)["checks"] if c["name"] == "cluster address"]
    assert (
        address["status"] == "missing"
        and "nothing answers at the Ray cluster address 127.0.0.1:6391" in address["detail"]
    )


def test_a_head_with_token_authentication_is_joined_with_its_token_and_refused_fast_without(
    ns_images, tmp_path
):
    """A head and a worker started with Ray's token authentication (RAY_AUTH_MODE=token): a
    caller with the same token runs a spec on it; one with another token, or with none, is
    refused in seconds with what to set (Ray alone retried a wrong token for as long as a wrong
    address, printing `InvalidAuthToken`), and no suite run is written."""
    token = uuid.uuid4().hex * 2
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    (tmp_path / "ray").mkdir()
    c = ray_cluster.start(
        tmp_path / "ray", workers=1, worker_env={"ASSURE_IMAGE_NAMESPACE": NAMESPACE}, env=auth
    )
    try:
        suite = one_spec_suite(tmp_path, QUICK)
        for name, env, said in (
            ("other", {**auth, "RAY_AUTH_TOKEN": uuid.uuid4().hex * 2}, "refused this caller's"),
            ("none", {}, "wants a Ray token (a head started with RAY_AUTH_MODE=token)"),
        ):
            runs, started = tmp_path / name / "runs", time.monotonic()
            out = subprocess.run(
                caller(c, suite, runs),
                cwd=tmp_path,
                env={**ENV, **env},
                capture_output=True,
                text=True,
                timeout=120,
            )
            took = time.monotonic() - started
            assert out.returncode != 0 and said in out.stderr, out.stderr[-2000:]
            assert "RAY_AUTH_TOKEN" in out.stderr and "InvalidAuthToken" not in out.stderr
            assert took < 15, took  # the interpreter and its imports included: Ray alone, 20 s+
            assert not runs.exists() and not (tmp_path / "suites").exists()
        out = subprocess.run(
            caller(c, suite, tmp_path / "runs", "--json"),
            cwd=tmp_path,
            env={**ENV, **auth},
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        assert [r["verdict"] for r in json.loads(out.stdout)["results"]] == ["pass"]
    finally:
        c.stop()
