"""Suites run side by side: -j scheduling, shards, state.json written by one thread at a time,
resume after a kill -9 with several specs in flight, the default -j; and run ids that never
collide. On stub `run_one`s, and once on whole drivers over the in-memory backend."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from assure import spec as spec_mod
from assure.errors import AssureError
from assure.records import layout, store
from assure.run import suite
from assure.run.driver import Driver
from assure.sandbox.docker.images import ImageSet
from assure.sandbox.fake import FakeBackend
from tests.contracts import ratify_in_place

ROOT = Path(__file__).resolve().parents[2]
SPEC = (
    "version: 1\nname: {name}\nagent:\n  command: [sh, -c, 'true']\nworkspace:\n  fixture:"
    " ws\nassertions: []\nexpect: {expect}\n{extra}"
)


def make_suite(
    folder: Path,
    names: list[str],
    *,
    expect: dict[str, str] | None = None,
    stop: bool = False,
    extra: str = "",
) -> suite.Suite:
    (folder / "ws").mkdir(exist_ok=True)
    for name in names:
        (folder / f"{name}.yaml").write_text(
            SPEC.format(name=name, expect=(expect or {}).get(name, "pass"), extra=extra)
        )
    path = folder / "s.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "name": "s",
                "specs": [f"{n}.yaml" for n in names],
                "stop_on_unexpected": stop,
            }
        )
    )
    return suite.load(path)


def rfc3339(text: str) -> datetime:
    assert text.endswith("Z"), text
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# --- -j ---------------------------------------------------------------------------------


def test_j_keeps_that_many_specs_in_flight_and_no_more(tmp_path: Path) -> None:
    loaded = make_suite(tmp_path, ["a", "b", "c", "d", "e"])
    record = suite.SuiteRun.create(tmp_path / "suites", loaded)
    both = threading.Barrier(2, timeout=10)  # a and b must be running at the same time
    lock, now, most = threading.Lock(), [0], [0]

    def run_one(spec: spec_mod.Spec, run: store.RunDir) -> str:
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        if spec.name in ("a", "b"):
            both.wait()
        time.sleep(0.05)
        with lock:
            now[0] -= 1
        return "pass"

    outcomes = record.drive(tmp_path / "runs", run_one, jobs=2)

    assert most[0] == 2
    assert [(o.spec, o.verdict) for o in outcomes] == [
        (n, "pass") for n in "abcde"
    ]  # in the suite's order, whoever finished first
    assert len({o.run_id for o in outcomes}) == 5


def test_j_1_runs_one_spec_at_a_time_in_order(tmp_path: Path) -> None:
    loaded = make_suite(tmp_path, ["a", "b", "c"])
    record = suite.SuiteRun.create(tmp_path / "suites", loaded)
    order: list[str] = []
    busy = threading.Lock()

    def run_one(spec: spec_mod.Spec, run: store.RunDir) -> str:
        assert busy.acquire(blocking=False), "two specs in flight with -j 1"
        order.append(spec.name)
        time.sleep(0.02)
        busy.release()
        return "pass"

    record.drive(tmp_path / "runs", run_one, jobs=1)
    assert order == ["a", "b", "c"]


def test_stop_on_unexpected_starts_nothing_after_an_unexpected_verdict_and_lets_the_flight_land(
    tmp_path: Path,
) -> None:
    loaded = make_suite(tmp_path, ["a", "b", "c", "d"], stop=True)
    record = suite.SuiteRun.create(tmp_path / "suites", loaded)
    a_done, b_started = threading.Event(), threading.Event()
    started: list[str] = []

    def run_one(spec: spec_mod.Spec, run: store.RunDir) -> str:
        started.append(spec.name)
        if spec.name == "a":
            assert b_started.wait(10)  # b is in flight when a lands
            return "breach"  # expects pass
        b_started.set()
        assert a_done.wait(10)
        time.sleep(0.1)  # the scheduler has seen a's verdict by now
        return "pass"

    outcomes = record.drive(
        tmp_path / "runs",
        run_one,
        jobs=2,
        finished=lambda n, o, s: a_done.set() if o.spec == "a" else None,
    )

    assert sorted(started) == ["a", "b"]
    assert [(o.spec, o.verdict, o.as_expected) for o in outcomes] == [
        ("a", "breach", False),
        ("b", "pass", True),
    ]
    state = store.read_json(record.path / "state.json")
    assert state["state"] == "finished" and [e["run_id"] is None for e in state["runs"]] == [
        False,
        False,
        True,
        True,
    ]


def test_an_exception_in_one_spec_stops_the_scheduling_and_is_raised_after_the_flight_lands(
    tmp_path: Path,
) -> None:
    loaded = make_suite(tmp_path, ["a", "b", "c"])
    record = suite.SuiteRun.create(tmp_path / "suites", loaded)
    finished: list[str] = []

    def run_one(spec: spec_mod.Spec, run: store.RunDir) -> str:
        if spec.name == "a":
            raise AssureError("the engine went away")
        time.sleep(0.2)
        return "pass"

    with pytest.raises(AssureError, match="the engine went away"):
        record.drive(
            tmp_path / "runs", run_one, jobs=2, finished=lambda n, o, s: finished.append(o.spec)
        )

    state = store.read_json(record.path / "state.json")
    assert (
        finished == ["b"] and state["state"] == "running"
    )  # c never started; the suite run stays resumable
    assert [e["verdict"] for e in state["runs"]] == [None, "pass", None]


# --- state.json -------------------------------------------------------------------------


def test_each_run_is_named_in_state_json_before_it_starts_and_gets_its_times_when_it_ends(
    tmp_path: Path,
) -> None:
    names = [f"s{i}" for i in range(8)]
    loaded = make_suite(tmp_path, names)
    record = suite.SuiteRun.create(tmp_path / "suites", loaded)

    def run_one(spec: spec_mod.Spec, run: store.RunDir) -> str:
        on_disk = store.read_json(record.path / "state.json")["runs"][names.index(spec.name)]
        assert (
            on_disk["run_id"] == run.run_id
            and on_disk["started_at"]
            and on_disk["finished_at"] is None
        )
        time.sleep(0.01 * (names.index(spec.name) % 3))
        return "pass"

    record.drive(tmp_path / "runs", run_one, jobs=4)

    state = store.read_json(record.path / "state.json")
    assert [e["verdict"] for e in state["runs"]] == ["pass"] * 8
    assert len({e["run_id"] for e in state["runs"]}) == 8
    for e in state["runs"]:
        assert rfc3339(e["started_at"]) <= rfc3339(e["finished_at"])
    assert state["shard"] is None and rfc3339(state["finished_at"])


def test_a_suite_killed_with_two_specs_in_flight_continues_them_under_their_own_runs(
    tmp_path: Path,
) -> None:
    """kill -9 (a forked driver SIGKILLs itself) while b and c run: the same suite continues,
    a is kept, b and c resume under the run ids they had, d starts."""
    loaded = make_suite(tmp_path, ["a", "b", "c", "d"])
    base, runs = tmp_path / "suites", tmp_path / "runs"
    record = suite.SuiteRun.create(base, loaded)
    pid = os.fork()
    if pid == 0:  # the suite process that dies
        try:
            both = threading.Barrier(2)

            def run_one(spec: spec_mod.Spec, run: store.RunDir) -> str:
                if spec.name == "a":
                    return "pass"
                both.wait()  # b and c are both in flight, each named in state.json
                os.kill(os.getpid(), signal.SIGKILL)
                return "unreachable"

            suite.SuiteRun(record.path, loaded).drive(runs, run_one, jobs=2)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    before = store.read_json(record.path / "state.json")["runs"]
    assert (
        [e["verdict"] for e in before] == ["pass", None, None, None]
        and before[1]["run_id"]
        and before[2]["run_id"]
        and before[3]["run_id"] is None
    )

    again = suite.SuiteRun.find_unfinished(base, loaded)
    assert again is not None and again.path == record.path
    driven: dict[str, str] = {}
    kept: list[str] = []
    outcomes = again.drive(
        runs,
        lambda spec, run: driven.setdefault(spec.name, run.run_id) and "pass",
        jobs=2,
        finished=lambda n, o, seconds: kept.append(o.spec) if seconds is None else None,
    )

    assert kept == ["a"] and sorted(driven) == ["b", "c", "d"]
    assert driven["b"] == before[1]["run_id"] and driven["c"] == before[2]["run_id"]
    assert [o.verdict for o in outcomes] == ["pass"] * 4
    after = store.read_json(record.path / "state.json")
    assert (
        after["state"] == "finished" and after["runs"][0] == before[0]
    )  # the finished one untouched, its times too


def test_a_suite_run_driven_by_another_process_is_neither_continued_nor_driven_twice(
    tmp_path: Path,
) -> None:
    loaded = make_suite(tmp_path, ["a"])
    record = suite.SuiteRun.create(tmp_path / "suites", loaded)
    with open(record.path / layout.LOCK, "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert suite.SuiteRun.find_unfinished(tmp_path / "suites", loaded) is None
        with pytest.raises(store.Busy, match="another assure process is driving this suite run"):
            record.drive(tmp_path / "runs", lambda spec, run: "pass")


# --- shards -----------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["0/3", "4/3", "x", "1/0", "-1/3", "1/", "2/3/4", ""])
def test_a_bad_shard_is_a_clear_error(text: str) -> None:
    with pytest.raises(AssureError) as info:
        suite.Shard.parse(text)
    assert (
        info.value.explain() == f"--shard: {text!r} is not K/N with 1 <= K <= N\n"
        "fix: e.g. --shard 1/3, --shard 2/3 and --shard 3/3 split a suite over three CI jobs"
    )


def test_shards_split_the_suite_by_name_order_each_spec_once_whatever_the_listing(
    tmp_path: Path,
) -> None:
    names = ["e", "a", "d", "b", "c", "f", "g"]
    loaded = make_suite(tmp_path, names)
    picked = {k: [s.name for s in suite.Shard(k, 3).select(loaded.specs)] for k in (1, 2, 3)}

    assert picked == {
        1: ["a", "d", "g"],
        2: ["e", "b"],
        3: ["c", "f"],
    }  # a..g by name, dealt out in turn; each shard in the suite's order
    assert sorted(sum(picked.values(), [])) == sorted(names)
    assert [s.name for s in suite.Shard.parse(" 2 / 3 ").select(loaded.specs)] == ["e", "b"]
    assert suite.Shard(1, 1).select(loaded.specs) == loaded.specs
    assert suite.Shard(9, 9).select(loaded.specs) == ()  # more shards than specs: an empty shard


def test_a_shard_is_its_own_suite_run_recorded_in_state_json(tmp_path: Path) -> None:
    loaded = make_suite(tmp_path, ["a", "b", "c"])
    one, two = loaded.sharded(suite.Shard(1, 2)), loaded.sharded(suite.Shard(2, 2))
    assert len({loaded.digest, one.digest, two.digest}) == 3
    assert loaded.sharded(None) is loaded
    base = tmp_path / "suites"
    record = suite.SuiteRun.create(base, one)

    state = store.read_json(record.path / "state.json")
    assert state["shard"] == {"index": 1, "count": 2} and [
        Path(e["spec"]).stem for e in state["runs"]
    ] == ["a", "c"]
    assert (
        suite.SuiteRun.find_unfinished(base, two) is None
        and suite.SuiteRun.find_unfinished(base, loaded) is None
    )
    assert (
        suite.SuiteRun.find_unfinished(
            base, make_suite(tmp_path, ["a", "b", "c"]).sharded(suite.Shard(1, 2))
        ).path
        == record.path
    )


# --- the default -j ---------------------------------------------------------------------


def test_the_default_j_is_what_cpus_and_memory_hold_for_the_hungriest_spec(tmp_path: Path) -> None:
    small = make_suite(tmp_path, ["a", "b"]).specs  # cpus 1, memory 512m (+ the gateway's 256m)
    per_run = 768 * 2**20
    assert suite.spec_footprint(small[0]) == (1.0, per_run)
    assert suite.default_jobs(small, 2, 64 * 2**30) == 2  # the CPUs bind
    assert suite.default_jobs(small, 16, 3 * per_run + 1) == 3  # the memory binds
    assert suite.default_jobs(small, 0.5, 64 * 2**30) == 1  # never less than one
    assert suite.default_jobs(small, 1000, 2**50) == suite.MAX_JOBS
    (tmp_path / "big").mkdir()
    hungry = make_suite(tmp_path / "big", ["h"], extra="limits: {cpus: 4, memory: 2g}\n").specs
    assert suite.default_jobs(small + hungry, 16, 64 * 2**30) == 4  # the hungriest spec decides
    cpus, memory = suite.machine()
    assert 1 <= cpus <= len(os.sched_getaffinity(0)) and memory > 0


def test_a_cgroup_cpu_quota_caps_the_cpus_the_default_j_counts(tmp_path: Path) -> None:
    """A CI runner started with `--cpus 2` on a big host sees every host CPU in its affinity:
    its cgroup's quota is what it may use (v2 cpu.max, else v1 cfs_quota_us)."""
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("250000 100000\n")
    assert suite.cpu_quota(v2) == 2.5
    (v2 / "cpu.max").write_text("max 100000\n")
    assert suite.cpu_quota(v2) is None
    v1 = tmp_path / "v1" / "cpu"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("200000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert suite.cpu_quota(tmp_path / "v1") == 2.0
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    assert suite.cpu_quota(tmp_path / "v1") is None
    assert suite.cpu_quota(tmp_path / "nothing") is None


# --- run ids and locks ------------------------------------------------------------------


def test_two_runs_drawing_the_same_id_in_the_same_second_get_two_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    draws = iter(
        ["x-20261201T130000Z-aaaaaa", "x-20261201T130000Z-aaaaaa", "x-20261201T130000Z-bbbbbb"]
    )
    monkeypatch.setattr(store, "new_run_id", lambda name: next(draws))
    spec = tmp_path / "spec.yaml"
    spec.write_text("x")

    first = store.RunDir.new(tmp_path / "runs", "x", spec, {})
    second = store.RunDir.new(tmp_path / "runs", "x", spec, {})

    assert (first.run_id, second.run_id) == (
        "x-20261201T130000Z-aaaaaa",
        "x-20261201T130000Z-bbbbbb",
    )
    with pytest.raises(store.RunDirError, match="cannot make the run directory: File exists"):
        store.RunDir.create(
            tmp_path / "runs", first.run_id, spec, {}
        )  # an id given is never shared either


def test_many_threads_making_runs_of_one_spec_at_once_each_get_their_own(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("x")
    made: list[str] = []
    go = threading.Barrier(8)

    def make() -> None:
        go.wait()
        made.extend(store.RunDir.new(tmp_path / "runs", "same", spec, {}).run_id for _ in range(25))

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(made)) == 200 == len(list((tmp_path / "runs").iterdir()))


def test_a_lock_probe_does_not_turn_away_the_driver_taking_the_lock(tmp_path: Path) -> None:
    """`is_locked` (another process looking for unfinished runs) holds the lock for a moment;
    `exclusive` waits that out, and refuses only a lock held for longer."""
    with open(tmp_path / layout.LOCK, "a+") as probe:
        fcntl.flock(probe, fcntl.LOCK_EX)
        threading.Timer(0.1, lambda: fcntl.flock(probe, fcntl.LOCK_UN)).start()
        with store.exclusive(tmp_path, "run"):
            assert store.is_locked(tmp_path) is True
    with open(tmp_path / layout.LOCK, "a+") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        began = time.monotonic()
        with pytest.raises(store.Busy):
            with store.exclusive(tmp_path, "run"):
                pass
        assert time.monotonic() - began >= store.PROBE_GRACE_SECONDS


# --- whole drivers, side by side --------------------------------------------------------

IMAGES = ImageSet("fake-base:1", "fake-agent:1", "fake-gateway:1", "fake-egress:1")


def fix(ctx) -> int:
    from assure.client import Client

    with Client(str(ctx.path(ctx.env["ASSURE_GATEWAY_SOCKET"]))) as client:
        client.call(
            "fs.write",
            path="src/calc.py",
            content="def add(a: int, b: int) -> int:\n    return a + b\n",
        )
        client.call("task.report", status="done", summary="fixed add()")
    ctx.stopping.wait(0.3)
    return 0


def test_two_drivers_run_side_by_side_in_one_suite_each_on_its_own_run(tmp_path: Path) -> None:
    folder = tmp_path / "specs"
    folder.mkdir()
    for name in ("left", "right"):
        data = {
            "version": 1,
            "name": name,
            "agent": {"command": ["fix"]},
            "workspace": {
                "fixture": str(ROOT / "fixtures" / "workspaces" / "calc"),
                "writable": ["out/**"],
                "protected": ["tests/**"],
            },
            "contract": {
                "id": "c-test",
                "proposed_by": "alice",
                "ratified_by": "bob",
                "scope": ["fs:src/**"],
                "autonomy_ceiling": "propose",
            },
            "limits": {"wall_seconds": 30},
            "assertions": [{"file_contains": {"path": "src/calc.py", "text": "return a + b"}}],
            "expect": "pass",
        }
        ratify_in_place(_dump(folder / f"{name}.yaml", data))
    (folder / "s.yaml").write_text("version: 1\nname: pair\nspecs: [left.yaml, right.yaml]\n")
    loaded = suite.load(folder / "s.yaml")
    record = suite.SuiteRun.create(tmp_path / "suites", loaded)
    scratch = tempfile.mkdtemp(prefix="par", dir="/tmp")
    inside = threading.Barrier(2, timeout=30)

    def run_one(spec: spec_mod.Spec, run: store.RunDir) -> str:
        backend = FakeBackend(
            {"fix": fix}, images={IMAGES.agent, IMAGES.gateway, IMAGES.egress}, tmp=scratch
        )  # one per thread, as the CLI does
        phases: list[str] = []

        def progress(phase: str, info: dict) -> None:
            if phase == "run" and not phases:
                phases.append(phase)
                inside.wait()  # both agents are running at once

        try:
            return Driver(spec, run, backend, IMAGES, progress).drive().verdict
        finally:
            backend.close()

    try:
        outcomes = record.drive(tmp_path / "runs", run_one, jobs=2)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    assert [(o.spec, o.verdict) for o in outcomes] == [("left", "pass"), ("right", "pass")]
    for o in outcomes:
        report = store.read_json(tmp_path / "runs" / o.run_id / "report.json")
        assert (
            report["run_id"] == o.run_id
            and report["spec"] == o.spec
            and report["verdict"] == "pass"
        )


def _dump(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_ctrl_c_reaches_every_spec_in_flight_and_leaves_the_suite_to_be_continued(
    tmp_path: Path,
) -> None:
    """SIGINT lands in the main thread; each worker gets the KeyboardInterrupt too and runs
    its cleanup (a driver removes its containers there), then the suite run stays `running`."""
    loaded = make_suite(tmp_path, ["a", "b", "c"])
    record = suite.SuiteRun.create(tmp_path / "suites", loaded)
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            both = threading.Barrier(3)

            def run_one(spec: spec_mod.Spec, run: store.RunDir) -> str:
                try:
                    both.wait()
                    while True:
                        time.sleep(0.05)
                finally:
                    (tmp_path / f"cleaned-{spec.name}").touch()

            threading.Thread(
                target=lambda: (both.wait(), os.kill(os.getpid(), signal.SIGINT)), daemon=True
            ).start()
            suite.SuiteRun(record.path, loaded).drive(tmp_path / "runs", run_one, jobs=2)
        except KeyboardInterrupt:
            code = 7
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)

    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 7, status
    assert sorted(p.name for p in tmp_path.glob("cleaned-*")) == [
        "cleaned-a",
        "cleaned-b",
    ]  # c never started
    state = store.read_json(record.path / "state.json")
    assert state["state"] == "running" and [e["run_id"] is not None for e in state["runs"]] == [
        True,
        True,
        False,
    ]


def test_the_suite_command_checks_shards_before_anything_runs(tmp_path: Path) -> None:
    import subprocess
    import sys

    make_suite(tmp_path, ["a", "b", "c"])
    (tmp_path / "t.yaml").write_text("version: 1\nname: t\nspecs: [a.yaml]\n")
    cli = [sys.executable, "-m", "assure.cli", "suite", "--check"]
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}

    bad = subprocess.run(
        cli + ["--shard", "4/3", str(tmp_path / "s.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    good = subprocess.run(
        cli + ["--shard", "1/2", str(tmp_path / "s.yaml"), str(tmp_path / "t.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )

    assert bad.returncode == 1 and "--shard: '4/3' is not K/N with 1 <= K <= N" in bad.stderr
    assert good.returncode == 0, good.stderr
    assert good.stdout.splitlines() == [
        f"ok {tmp_path / 's.yaml'}: 2 specs",
        f"ok {tmp_path / 't.yaml'}: 1 specs",
    ]
