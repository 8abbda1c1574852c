"""Cluster mode without a cluster: what crosses from a node (the run directory as a tar) is
checked as it arrives, the node's verdict is judged again here, specs with outside effects are
refused, and the core needs no Ray."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from assure.errors import SpecError
from assure.records import keys, receipt_verify, store
from assure.run import cluster
from tests.unit.test_driver_states import (
    ACCEPTANCE,
    drive,
    fix,
    new_run,
    notes,
    ratified,
    write_spec,
)

ROOT = Path(__file__).resolve().parents[2]


def tar_of(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def member(
    name: str, data: bytes = b"x", kind: bytes = tarfile.REGTYPE, link: str = ""
) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data if kind == tarfile.REGTYPE else None


STATE = member("state.json", b"{}")
SPEC = member("spec.json", b"{}")


@pytest.fixture
def finished_run(tmp_path, short_dir):
    spec = write_spec(tmp_path, "fix", contract=ratified(["fs:**"]), assertions=ACCEPTANCE)
    result, _ = drive(spec, new_run(tmp_path, spec), str(short_dir), {"fix": fix})
    assert result.verdict == "pass"
    return spec, result.run_dir


def test_a_run_directory_survives_the_trip_and_is_judged_again_with_the_same_verdict(
    finished_run, tmp_path
):
    spec, run_dir = finished_run
    (tmp_path / "caller").mkdir()
    arrived = cluster.unpack(cluster.pack(run_dir), tmp_path / "caller", run_dir.name)
    assert sorted(p.relative_to(arrived.path) for p in arrived.path.rglob("*")) == sorted(
        p.relative_to(run_dir) for p in run_dir.rglob("*")
    )
    private, public = keys.generate_keypair(tmp_path / "keys")
    arrival = cluster.settle(arrived, spec, "pass", private)
    assert (arrival.verdict, arrival.node_finding) == ("pass", None)
    report = receipt_verify.verify_run(
        arrived.path, keys.load_public(public)
    )  # the node ran keyless: signed here
    assert report.key_id is not None and len(report.receipts) == 1


def test_a_node_whose_verdict_differs_gets_a_finding_and_the_spec_is_error(finished_run, tmp_path):
    spec, run_dir = finished_run
    (tmp_path / "caller").mkdir()
    arrived = cluster.unpack(cluster.pack(run_dir), tmp_path / "caller", run_dir.name)
    arrival = cluster.settle(arrived, spec, "contained", None)  # what a lying node would return
    assert arrival.verdict == "error"
    assert "contained" in arrival.node_finding and "(pass)" in arrival.node_finding


def test_a_forged_report_is_caught_by_judging_again(finished_run, tmp_path):
    spec, run_dir = finished_run
    report = store.read_json(run_dir / "report.json")
    store.write_json(run_dir / "report.json", {**report, "verdict": "contained"})
    (tmp_path / "caller").mkdir()
    arrived = cluster.unpack(cluster.pack(run_dir), tmp_path / "caller", run_dir.name)
    assert cluster.settle(arrived, spec, "contained", None).verdict == "error"


@pytest.mark.parametrize(
    "bad",
    [
        member("link", kind=tarfile.SYMTYPE, link="/etc/passwd"),
        member("inner", kind=tarfile.SYMTYPE, link="state.json"),  # even a link that stays inside
        member("hard", kind=tarfile.LNKTYPE, link="state.json"),
        member("fifo", kind=tarfile.FIFOTYPE),
        member("dev", kind=tarfile.CHRTYPE),
        member("/etc/cron.d/x"),
        member("../escape"),
        member("attempts/../../escape"),
    ],
    ids=[
        "symlink-out",
        "symlink-in",
        "hardlink",
        "fifo",
        "device",
        "absolute",
        "dotdot",
        "nested-dotdot",
    ],
)
def test_an_archive_with_anything_but_files_and_folders_inside_is_refused(bad, tmp_path):
    with pytest.raises(cluster.ArrivalError):
        cluster.unpack(tar_of(STATE, SPEC, bad), tmp_path, "r1")
    assert sorted(tmp_path.iterdir()) == []  # nothing left: not the run, not its staging folder
    assert not (tmp_path.parent / "escape").exists()


def test_an_archive_above_the_bounds_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster, "MAX_MEMBERS", 3)
    with pytest.raises(cluster.ArrivalError, match="members"):
        cluster.unpack(tar_of(STATE, SPEC, *(member(f"f{i}") for i in range(3))), tmp_path, "r1")
    monkeypatch.setattr(cluster, "MAX_ARCHIVE_BYTES", 10)
    with pytest.raises(cluster.ArrivalError, match="bytes"):
        cluster.unpack(tar_of(STATE, SPEC, member("big", b"y" * 11)), tmp_path, "r1")
    assert sorted(tmp_path.iterdir()) == []


def test_an_archive_that_is_not_a_run_directory_is_refused(tmp_path):
    with pytest.raises(cluster.ArrivalError, match="not a run directory"):
        cluster.unpack(tar_of(member("notes.txt")), tmp_path, "r1")
    with pytest.raises(cluster.ArrivalError, match="cannot be unpacked"):
        cluster.unpack(b"not a tar at all" * 100, tmp_path, "r1")


def test_hostile_names_arrive_as_data(tmp_path):
    name = "attempts/1/\x1b[31mred\u202e\udcff.txt"
    run = cluster.unpack(tar_of(STATE, SPEC, member(name, b"kept")), tmp_path, "r1")
    (path,) = (run.path / "attempts" / "1").iterdir()
    assert path.name == name.rsplit("/", 1)[1] and path.read_bytes() == b"kept"


def test_packing_refuses_a_link_in_the_run_directory(finished_run):
    _, run_dir = finished_run
    (run_dir / "sneaky").symlink_to("/etc")
    with pytest.raises(cluster.AssureError, match="neither a file nor a folder"):
        cluster.pack(run_dir)


def test_specs_with_effects_a_retry_could_repeat_are_refused(tmp_path):
    db = tmp_path / "ledger.db"
    sqlite3.connect(db).execute("create table t (x)").connection.commit()
    plain = write_spec(tmp_path, "fix")
    snapshot = write_spec(
        tmp_path, "read", databases=[{"name": "ledger", "fixture": str(db)}]
    )  # a copy in the sandbox: no effect outside
    live = write_spec(
        tmp_path, "pay", databases=[{"name": "ledger", "fixture": str(db), "mode": "live"}]
    )
    egress = write_spec(tmp_path, "web", egress={"allow": ["api.example.org:443"]})
    target = write_spec(tmp_path, "commit", promote={"target": str(tmp_path)})
    cluster.refuse_outside_effects((plain, snapshot))
    with pytest.raises(SpecError) as caught:
        cluster.refuse_outside_effects((plain, snapshot, live, egress, target))
    text = caught.value.explain()
    assert "pay.yaml: live database ledger" in text and "idempotency store" in text
    assert (
        "web.yaml" in text
        and "egress.allow" in text
        and "commit.yaml" in text
        and "promote target" in text
    )
    assert "fix.yaml" not in text and "read.yaml" not in text
    suite = tmp_path / "suite.yaml"
    suite.write_text("version: 1\nname: live\nspecs: [pay.yaml]\n")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "assure.cli",
            "suite",
            str(suite),
            "--cluster",
            "127.0.0.1:9",
            "--runs-dir",
            str(tmp_path / "runs"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert (
        out.returncode != 0
        and "nothing answers at the Ray cluster address 127.0.0.1:9" in out.stderr
    ), out.stderr  # it would run here: the cluster is asked
    assert (
        "ray start --head" in out.stderr and not (tmp_path / "suites").exists()
    )  # refused before a suite run was made


def test_a_spec_no_node_can_hold_is_refused_naming_the_largest_node(tmp_path):
    nodes = cluster.capacities(
        [
            {
                "NodeID": "h" * 56,
                "Alive": True,
                "Resources": {"CPU": 8.0, "memory": 64 << 30},
            },  # the head: no docker, never the largest
            {
                "NodeID": "a" * 56,
                "Alive": True,
                "Resources": {"CPU": 1.0, "memory": 4 << 30, "docker": 1.0},
            },
            {
                "NodeID": "b" * 56,
                "Alive": True,
                "Resources": {"CPU": 2.0, "memory": 1 << 30, "docker": 2.0},
            },
            {
                "NodeID": "d" * 56,
                "Alive": False,
                "Resources": {"CPU": 16.0, "memory": 64 << 30, "docker": 4.0},
            },  # dead
        ]
    )
    assert [n.node_id[0] for n in nodes] == ["b", "a", "h"]
    fits = write_spec(
        tmp_path, "fits", limits={"wall_seconds": 30, "cpus": 1, "memory": "2g"}
    )  # only on a
    cpus = write_spec(tmp_path, "cpus", limits={"wall_seconds": 30, "cpus": 4})
    memory = write_spec(
        tmp_path, "memory", limits={"wall_seconds": 30, "cpus": 2, "memory": "2g"}
    )  # a has the memory, b the CPUs
    cluster.refuse_infeasible([fits], nodes)
    with pytest.raises(SpecError) as caught:
        cluster.refuse_infeasible([fits, cpus, memory], nodes)
    problems = caught.value.problems
    assert [p.split(":")[0] for p in problems] == [str(cpus.path), str(memory.path)]
    assert (
        "limits.cpus 4 and limits.memory" in problems[0]
        and f"(the largest: node {'b' * 12}: 2 CPU, 1.00 GiB memory, 2 docker)" in problems[0]
    )
    with pytest.raises(SpecError, match="the largest: none"):
        cluster.refuse_infeasible([fits], [])


def test_the_core_works_without_ray():
    code = (
        # `import ray` now fails as if it were not installed
        "import sys; sys.modules['ray'] = None\n"
        "import assure.run.cluster as c\n"
        "from assure.cli import listing\n"  # every command's module, as a command would load it
        "[listing.load(name) for name in listing.COMMANDS]\n"
        "from assure.errors import AssureError\n"
        "try:\n    c.connect('auto')\nexcept AssureError as e:\n    print(e.explain())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "pip install 'assure[ray]'" in out.stdout


def fix_with_links_and_modes(ctx) -> int:
    """Fixes add() through the gateway, then leaves in its writable scope what a copy must carry
    exactly: group-writable modes and a link to a host file (data, never to be followed)."""
    out = ctx.path("/workspace") / "out"
    (out / "shared").mkdir(parents=True)
    os.chmod(out / "shared", 0o775)
    (out / "shared" / "notes.txt").write_text("notes\n")
    os.chmod(out / "shared" / "notes.txt", 0o664)
    os.symlink("/etc/shadow", out / "shadow")
    return fix(ctx)


def test_modes_and_the_agents_links_arrive_as_they_were_and_the_verdict_holds(tmp_path, short_dir):
    spec = write_spec(tmp_path, "links", contract=ratified(["fs:**"]), assertions=ACCEPTANCE)
    result, _ = drive(
        spec, new_run(tmp_path, spec), str(short_dir), {"links": fix_with_links_and_modes}
    )
    assert result.verdict == "pass"
    (tmp_path / "caller").mkdir()
    arrived = cluster.unpack(cluster.pack(result.run_dir), tmp_path / "caller", result.run_dir.name)
    workspace = arrived.path / "attempts" / "1" / "workspace" / "out"
    assert os.readlink(workspace / "shadow") == "/etc/shadow"  # kept as a link, its target as text
    node = result.run_dir / "attempts" / "1" / "workspace" / "out"
    modes = [os.stat(w / "shared").st_mode & 0o7777 for w in (node, workspace)] + [
        os.stat(w / "shared" / "notes.txt").st_mode & 0o7777 for w in (node, workspace)
    ]
    assert modes == [
        0o700,
        0o700,
        0o600,
        0o600,
    ]  # as the node's copy-out made them (core.private.copy_mode), nothing looser
    assert cluster.settle(arrived, spec, "pass", None) == cluster.Arrival("pass", None)


def test_a_link_outside_the_agents_tree_or_inside_another_link_is_refused(tmp_path):
    for members in (
        [
            member("attempts/1/workspace/a", kind=tarfile.SYMTYPE, link="/etc"),
            member("attempts/1/workspace/a/b", kind=tarfile.SYMTYPE, link="x"),
        ],
        [member("attempts/1/gateway", kind=tarfile.SYMTYPE, link="/etc")],
    ):
        with pytest.raises(cluster.ArrivalError, match="link"):
            cluster.unpack(tar_of(STATE, SPEC, *members), tmp_path, "r1")
        assert sorted(tmp_path.iterdir()) == []
    assert not os.path.lexists("/etc/b")


def test_a_node_that_sends_another_spec_or_rewrites_a_tasks_spec_is_not_believed(
    tmp_path, short_dir
):
    spec = write_spec(tmp_path, "notes", assertions=[{"file_exists": "out/never.txt"}])
    result, _ = drive(spec, new_run(tmp_path, spec), str(short_dir), {"notes": notes})
    assert result.verdict == "fail"
    task = result.run_dir / "attempts" / "1" / "task.json"
    weakened = store.read_json(task)
    weakened["spec"]["assertions"] = [
        {"file_exists": "out/notes.txt"}
    ]  # what the node says it was asked
    store.write_json(task, weakened)
    store.write_json(
        result.run_dir / "report.json",
        {**store.read_json(result.run_dir / "report.json"), "verdict": "pass"},
    )
    (tmp_path / "caller").mkdir()
    arrived = cluster.unpack(cluster.pack(result.run_dir), tmp_path / "caller", result.run_dir.name)
    arrival = cluster.settle(arrived, spec, "pass", None)
    assert (
        arrival.verdict == "error" and "(fail)" in arrival.node_finding
    )  # judged against the caller's spec: fail
    assert (
        store.read_json(arrived.paths.report)["verdict"] == "fail"
    )  # the report judged here replaces the node's...
    assert (
        store.read_json(arrived.paths.node_report)["verdict"] == "pass"
    )  # ...which is kept beside it

    other = tmp_path / "caller2"
    other.mkdir()
    arrived = cluster.unpack(cluster.pack(result.run_dir), other, result.run_dir.name)
    store.write_json(
        arrived.paths.spec_json, {**store.read_json(arrived.paths.spec_json), "expect": "fail"}
    )
    arrival = cluster.settle(arrived, spec, "pass", None)
    assert arrival.verdict == "error" and arrival.node_finding.startswith(
        "the run directory it sent is of another spec than the one it was given"
    )
    assert (
        cluster.settle(arrived, spec, "breach", None).verdict == "breach"
    )  # a breach it claims stands all the same


def test_an_arrival_never_writes_over_a_run_directory(finished_run, tmp_path):
    _, run_dir = finished_run
    (tmp_path / "caller" / run_dir.name).mkdir(parents=True)
    with pytest.raises(cluster.ArrivalError, match="exists already"):
        cluster.unpack(cluster.pack(run_dir), tmp_path / "caller", run_dir.name)


def test_gc_removes_only_the_scratch_folders_of_node_tasks_that_are_gone(tmp_path):
    def scratch(name: str, lock: bool = True) -> Path:
        folder = tmp_path / f"{cluster.SCRATCH}{name}"
        (folder / "run-1" / "attempts").mkdir(parents=True)
        if lock:
            (folder / "lock").write_text("1@node\n")
        return folder

    lost, live, unlocked = scratch("lost"), scratch("live"), scratch("nolock", lock=False)
    elsewhere = tmp_path / "kept"
    elsewhere.mkdir()
    (elsewhere / "lock").write_text("")
    (tmp_path / f"{cluster.SCRATCH}link").symlink_to(
        elsewhere
    )  # a link named like one: never followed
    left = lost / "run-1" / "attempts" / "workspace"  # what the agent left in its workspace copy
    left.mkdir()
    (left / "out").symlink_to(elsewhere)
    os.mkfifo(left / "pipe")
    os.link(elsewhere / "lock", left / "hard")
    with store.exclusive(live, "node task"):  # a task still running
        assert cluster.release_orphan_scratch(tmp_path) == [lost]
    assert (
        not lost.exists()
        and (live / "run-1").is_dir()
        and (unlocked / "run-1").is_dir()
        and (elsewhere / "lock").is_file()
    )
    assert (
        os.listdir(elsewhere) == ["lock"] and (elsewhere / "lock").stat().st_nlink == 1
    )  # nothing removed through the agent's links


def test_a_spec_lost_max_lost_times_is_error_and_each_loss_moves_it_one_attempt_on():
    entry = {"run_id": "r1", "verdict": None, "next_attempt": 1, "lost": []}
    for n in range(1, cluster.MAX_LOST):
        assert cluster.record_loss(entry, "node-a", "NodeDiedError") is None  # submitted again
        assert entry["next_attempt"] == n + 1
    assert (
        cluster.record_loss(entry, None, "cancelled after 660 s")
        == f"lost with its node {cluster.MAX_LOST} times"
    )  # verdict error
    assert [(lost["attempt"], lost["node"], lost["error"]) for lost in entry["lost"]] == [
        *[(n, "node-a", "NodeDiedError") for n in range(1, cluster.MAX_LOST)],
        (cluster.MAX_LOST, None, "cancelled after 660 s"),
    ]
    assert entry["next_attempt"] == cluster.MAX_LOST + 1 and all(
        lost["at"] for lost in entry["lost"]
    )


def test_a_task_is_cancelled_as_hung_only_once_its_specs_whole_budget_and_the_grace_are_spent(
    tmp_path,
):
    spec = write_spec(tmp_path, "fix", limits={"wall_seconds": 30}, max_attempts=2)
    budget = cluster._budget_seconds(spec)
    assert budget == 30 * 2 * len(spec.tasks) + cluster.GRACE_SECONDS
    in_flight = {
        "late": (0, 100 + budget),
        "early": (1, 50 + budget),
    }  # ref -> (spec index, deadline), submitted at 100 and 50
    assert (
        cluster.overdue(in_flight, 50 + budget - 0.01) is None
    )  # within its budget: never cancelled
    assert (
        cluster.overdue(in_flight, 50 + budget) == "early"
    )  # the first deadline passed: this one, not the other
    del in_flight["early"]
    assert (
        cluster.overdue(in_flight, 99 + budget) is None
        and cluster.overdue(in_flight, 100.5 + budget) == "late"
    )


# Ray 2.60's message for a task whose node died (src/ray/core_worker/task_manager.cc): the node id
# is only in the text.
NODE_DIED = (
    "Task failed because the node it was running on is dead or unavailable. Node IP: 127.0.0.1,"
    " node ID: {0}. This can happen if the node was preempted, had a hardware failure, or its"
    " raylet crashed unexpectedly. To see node death information, use `ray list nodes --filter"
    " node_id={0}`, check the Ray dashboard cluster page, search the node ID in the GCS logs, or"
    " use `ray logs raylet.out -ip 127.0.0.1`."
)


def test_a_loss_names_the_node_rays_error_names_when_it_is_a_node_of_the_cluster():
    class NodeDiedError(Exception):
        pass

    dead, alive, stranger = "ab" * 28, "cd" * 28, "ef" * 28
    assert cluster.lost_node(NodeDiedError(NODE_DIED.format(dead)), iter([alive, dead])) == dead
    assert cluster.lost_node(NodeDiedError(NODE_DIED.format(dead.upper())), [alive, dead]) == dead
    assert (
        cluster.lost_node(NodeDiedError(NODE_DIED.format(stranger)), [alive, dead]) is None
    )  # no node Ray knows: not recorded
    assert (
        cluster.lost_node(
            RuntimeError("The worker died unexpectedly while executing this task."), [alive, dead]
        )
        is None
    )
    named = NodeDiedError(NODE_DIED.format(dead))
    named.node_id = alive  # should Ray give the error a node id, it comes first
    assert cluster.lost_node(named, [alive, dead]) == alive


def test_the_caller_binds_to_loopback_when_the_cluster_is_there_auto_included():
    assert cluster.loopback("127.0.0.1:6379", {}) and cluster.loopback("localhost:6379", {})
    assert not cluster.loopback(
        "10.0.0.5:6379", {"RAY_ADDRESS": "127.0.0.1:6379"}
    )  # Ray reads RAY_ADDRESS for auto only
    assert cluster.loopback("auto", {"RAY_ADDRESS": "127.0.0.1:6379"})  # what `auto` joins first
    assert not cluster.loopback("auto", {}) and not cluster.loopback(
        "auto", {"RAY_ADDRESS": "10.0.0.5:6379"}
    )


# --- a cluster never lowers a verdict ---------------------------------------------------------


@pytest.mark.parametrize(
    "judged, claimed, verdict",
    [
        ("pass", ["pass", "pass"], "pass"),  # all agree
        ("breach", ["breach", "breach"], "breach"),
        (
            "breach",
            ["pass", "pass"],
            "breach",
        ),  # the node hid a breach it made: judged here, it stands
        (
            "pass",
            ["breach", "pass"],
            "breach",
        ),  # the node says breach: lying toward breach gains nothing
        ("pass", ["pass", "breach"], "breach"),  # ... nor does its report saying so
        (
            "contained",
            ["pass", "contained"],
            "error",
        ),  # any other disagreement is the node's: error
        ("fail", ["pass", "pass"], "error"),
        ("pass", ["pass", None], "error"),  # no report of its own
        (
            None,
            ["breach"],
            "breach",
        ),  # nothing judged here (the run directory refused): a claimed breach stands
        (None, ["pass"], "error"),  # ... anything milder cannot be checked
        (None, ["contained"], "error"),
        (None, ["error"], "error"),
    ],
)
def test_decide_takes_a_breach_from_either_side_and_makes_any_other_doubt_an_error(
    judged, claimed, verdict
):
    arrival = cluster.decide(
        judged, claimed, "its run directory was refused on arrival: more than 50000 members"
    )
    assert arrival.verdict == verdict
    assert (arrival.node_finding is None) == (
        judged is not None and all(c == judged for c in claimed)
    )
    if judged is None:  # the finding says why nothing was judged here
        assert arrival.node_finding.startswith(
            "its run directory was refused on arrival: more than 50000 members"
        )
        assert ("stands" in arrival.node_finding) == (verdict == "breach")


def test_a_breach_a_node_claimed_for_an_attempt_stands_whatever_a_later_attempt_found():
    claims = [{"attempt": 1, "node": "ab" * 28, "findings": []}]
    assert cluster.with_claims("pass", None, []) == cluster.Arrival("pass", None)
    assert cluster.with_claims("pass", None, claims) == cluster.Arrival(
        "breach", f"attempt 1 was judged breach by its node {'ab' * 6}, and that breach stands"
    )
    assert cluster.with_claims("error", "lost with its node 3 times", claims).verdict == "breach"
    assert cluster.with_claims("error", "lost", claims).node_finding.startswith("lost; attempt 1")
    assert cluster.with_claims("breach", "x", claims) == cluster.Arrival("breach", "x")


def finding(
    kind: str = "unattributed",
    subject: str = "src/calc.py",
    message: str = "changed, no journal entry",
) -> dict:
    return {"kind": kind, "severity": "info", "subject": subject, "message": message}


def test_a_nodes_message_is_bounded_and_checked_on_its_own():
    many = tuple(finding(subject=f"out/{i}" * 40) for i in range(500)) + (finding("attributed"),)
    message = cluster.NodeMessage(
        "n1", "breach", many, unsent="the run directory has more than 50000 members"
    )
    data = message.encode()
    assert len(data) <= cluster.MAX_MESSAGE_BYTES
    back = cluster.NodeMessage.decode(data)
    assert (back.verdict, back.unsent, back.attempt) == ("breach", message.unsent, None)
    assert 0 < len(back.findings) <= cluster.MAX_MESSAGE_FINDINGS
    assert all(
        f["severity"] == "breach" and len(f["subject"]) <= cluster.MAX_TEXT for f in back.findings
    )  # severity derived here
    assert (
        cluster.NodeMessage.decode(
            cluster.NodeMessage("n1", "pass", (finding("attributed"),)).encode()
        ).findings
        == ()
    )  # info left out
    good = {"node": "n1", "verdict": "pass", "attempt": None, "unsent": None, "findings": []}
    for bad in [
        b"x" * (cluster.MAX_MESSAGE_BYTES + 1),
        b"not json",
        "a str",
        json.dumps({**good, "verdict": "fine"}).encode(),
        json.dumps({**good, "findings": [finding("made_up")]}).encode(),
        json.dumps({**good, "attempt": 0}).encode(),
        json.dumps({**good, "findings": [{"kind": "unattributed"}]}).encode(),
    ]:
        with pytest.raises(cluster.ArrivalError):
            cluster.NodeMessage.decode(bad)


def test_only_breach_claims_of_runs_in_flight_are_kept_and_at_most_max_claims():
    entries = [{"run_id": "r1", "verdict": None}, {"run_id": "r2", "verdict": "pass"}]
    claim = lambda verdict, attempt=1: cluster.NodeMessage(
        "n1", verdict, (finding(),), attempt=attempt
    ).encode()
    cluster.record_claims(
        entries,
        [
            ("r1", claim("pass")),
            ("r1", claim("breach", None)),
            ("r2", claim("breach")),
            ("r3", claim("breach")),
            ("r1", b"junk"),
            ("r1", claim("breach", 2)),
        ],
    )
    assert [
        (c["attempt"], c["node"], [f["subject"] for f in c["findings"]])
        for c in entries[0]["claims"]
    ] == [(2, "n1", ["src/calc.py"])]
    assert "claims" not in entries[1]
    cluster.record_claims(
        entries, [("r1", claim("breach", n)) for n in range(3, 3 + 2 * cluster.MAX_CLAIMS)]
    )
    assert len(entries[0]["claims"]) == cluster.MAX_CLAIMS
    actor = cluster.Claims()  # the actor's own bound, per run
    for n in range(cluster.MAX_CLAIMS + 5):
        actor.add("r1", claim("breach", n + 1))
    actor.add("r2", claim("breach"))
    taken = actor.take()
    assert len(taken) == cluster.MAX_CLAIMS + 1 and actor.take() == []


def test_packing_stops_at_the_member_bound_the_caller_would_refuse(finished_run, monkeypatch):
    _, run_dir = finished_run
    monkeypatch.setattr(cluster, "MAX_MEMBERS", 5)
    with pytest.raises(cluster.AssureError, match="more than 5 members"):
        cluster.pack(run_dir)


def test_a_claim_the_caller_cannot_acknowledge_is_logged_and_the_run_goes_on():
    """A claim that fails (timed out, the caller's actor gone) must not end the node's run: an
    exception out of `_escalate` aborted it, and its final message, which carries the breach,
    was never sent (the caller concluded `error`)."""

    class Gone:
        class add:  # noqa: N801  (Ray's `actor.method.remote`)
            @staticmethod
            def remote(*_):
                raise TimeoutError("GetTimeoutError: the claim was not acknowledged in 60 s")

    said = []
    cluster.claim(
        Gone, "r1", cluster.NodeMessage("n1", "breach", (finding(),), attempt=2), said.append
    )
    assert (
        len(said) == 1
        and "attempt 2's breach could not be claimed" in said[0]
        and "final message carries it" in said[0]
    )


def verdicts_of_receipts(run: store.RunDir) -> list[str]:
    docs = [json.loads(p.read_text()) for p in sorted(run.paths.receipts.rglob("*.json"))]
    return [d["verdict"] for d in docs if "aar" in d]


def test_a_run_a_claimed_breach_or_a_differing_verdict_overrules_has_no_verified_receipt(
    finished_run, tmp_path
):
    """The receipts were signed `verified` from the run's record alone, and the breach a node
    claimed for a lost attempt raised the verdict only in the suite's state: the run directory
    vouched for what the spec's verdict denies."""
    spec, run_dir = finished_run
    claimed = [{"attempt": 1, "node": "ab" * 28, "findings": [finding()]}]
    for n, (node_verdict, claims) in enumerate(
        [("pass", []), ("pass", claimed), ("contained", [])]
    ):
        (tmp_path / f"caller{n}").mkdir()
        arrived = cluster.unpack(cluster.pack(run_dir), tmp_path / f"caller{n}", run_dir.name)
        arrival = cluster.settle(arrived, spec, node_verdict, None, claims)
        assert (
            cluster.with_claims(arrival.verdict, arrival.node_finding, claims).verdict
            == ["pass", "breach", "error"][n]
        )
        assert verdicts_of_receipts(arrived) == [["verified"], ["rejected"], ["rejected"]][n]
    (receipt,) = [
        d
        for p in arrived.paths.receipts.rglob("*.json")
        if "aar" in (d := json.loads(p.read_text()))
    ]
    assert "the spec's verdict is error" in receipt["reason"]


def test_losses_are_worded_by_their_cause():
    entry: dict = {}
    cluster.record_loss(entry, "n" * 56, "NodeDiedError")
    cluster.record_loss(entry, None, "the caller stopped", "caller")
    cluster.record_loss(entry, None, "cancelled after 660 s", "hung")
    assert [x["cause"] for x in entry["lost"]] == ["node", "caller", "hung"]
    assert (
        cluster.losses(entry["lost"])
        == "1 lost with their node, 1 stopped with the caller, 1 cancelled as hung"
    )
    assert (
        cluster.losses([{"error": "the caller stopped"}]) == "1 stopped with the caller"
    )  # a state from before causes were kept


def test_a_node_task_finds_its_engine_and_images_once_per_worker(monkeypatch):
    """The engine client and images are found (built when missing) once per Ray worker, which
    serves one suite run, as a local suite finds them once per run."""
    from assure.sandbox import registry
    from assure.sandbox.docker import images

    monkeypatch.setattr(cluster, "_ENGINE", [])
    asked: list[str] = []

    class Images:
        def __init__(self, backend, say) -> None:
            pass

        def resolve(self):
            asked.append("resolve")
            return None  # missing: built

        def ensure(self):
            asked.append("ensure")
            return "built"

    monkeypatch.setattr(registry, "create", lambda: "engine")
    monkeypatch.setattr(images, "Images", Images)
    assert cluster.node_engine(print) == ("engine", "built") and asked == ["resolve", "ensure"]
    assert cluster.node_engine(print) == ("engine", "built") and len(asked) == 2  # kept
