"""Integration tests run real containers on the local Docker engine. A missing engine fails
the run loudly: these tests are never skipped and Docker is never mocked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from assure import spec as spec_mod
from assure.errors import AssureError
from assure.records import store
from assure.records.run_report import Report
from assure.run.driver import Driver, RunResult
from assure.sandbox.docker.backend import DockerBackend
from assure.sandbox.docker.images import Images, ImageSet
from tests.contracts import ratify_in_place

ROOT = Path(__file__).resolve().parents[2]
SPECS = Path(__file__).resolve().parent / "specs"
EXAMPLES = ROOT / "specs" / "examples"


# The tests run on pytest-xdist's workers (`make test`), a group at a time: a file's tests stay
# together on one worker, in order, with their module fixtures (a Ray cluster, a built suite)
# set up once; a file in SPLIT_FILES shares nothing between its tests but the engine, and each
# of its tests is a group of its own. The longest groups are handed out first
# (`--no-loadscope-reorder` keeps this order), so none of them starts last and holds up the end.
SPLIT_FILES = {"test_containment_corpus.py"}
LONGEST_FIRST = (
    "test_containment_corpus.py::test_the_corpus_gets_every_verdict_it_expects[runsc]",
    "test_ray_cluster.py",
    "test_containment_corpus.py::test_the_corpus_gets_every_verdict_it_expects[runc]",
)


def _group(item: pytest.Item) -> str:
    path = Path(str(item.fspath))
    return f"{path.name}::{item.name}" if path.name in SPLIT_FILES else path.name


def pytest_collection_modifyitems(items):
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.docker)
            item.add_marker(pytest.mark.xdist_group(_group(item)))
    rank = {group: n for n, group in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(_group(item), len(rank)))


@pytest.fixture(scope="session")
def backend() -> DockerBackend:
    try:
        return DockerBackend()
    except AssureError as exc:
        pytest.fail(
            f"the Docker engine is required for the integration tests: {exc.explain()}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def images(backend) -> ImageSet:
    return Images(backend).ensure()


@pytest.fixture
def run(backend, images, tmp_path):
    """Run a spec (a path, or the name of an example or test spec) into a fresh runs folder."""

    def go(name_or_path: str | Path) -> RunResult:
        path = Path(name_or_path)
        if not path.is_file():
            path = next(
                p
                for p in (EXAMPLES / f"{name_or_path}.yaml", SPECS / f"{name_or_path}.yaml")
                if p.is_file()
            )
        spec = spec_mod.load(path)
        run = store.RunDir.create(
            tmp_path / "runs", store.new_run_id(spec.name), spec.path, spec.to_json()
        )
        result = Driver(spec, run, backend, images, lambda *_: None).drive()
        # every real report reads back through the strict typed reader and writes as the same bytes
        written = run.paths.report.read_bytes()
        again = tmp_path / "report-again.json"
        store.write_json(again, Report.from_json(json.loads(written)).to_json())
        assert again.read_bytes() == written
        return result

    return go


def findings(result: RunResult, attempt: int = 0) -> dict[str, list[str]]:
    """kind -> subjects, for exact comparisons."""
    out: dict[str, list[str]] = {}
    for f in result.report["attempts"][attempt]["findings"]:
        out.setdefault(f["kind"], []).append(f["subject"])
    return {k: sorted(v) for k, v in out.items()}


def _ours(resource: dict[str, str], basetemp: Path) -> bool:
    """Made by this test session: by this process, or for a run whose folder is under this
    session's temporary folders (a CLI child's). Other sessions on the same engine (a
    helper's worktree, a developer beside CI) are not this session's leaks."""
    if resource.get("assure.pid") == str(os.getpid()):
        return True
    run_id = resource.get("assure.run", "")
    patterns = ("runs", ".assure/runs", "*/runs", "*/.assure/runs")
    return bool(run_id) and any(next(basetemp.glob(f"*/{p}/{run_id}"), None) for p in patterns)


def mounts_and_loops_under(root: Path) -> tuple[list[str], list[str]]:
    """Mount points (from /proc/self/mountinfo) and loop devices (`losetup -a`) beneath root."""
    import subprocess

    prefix = str(root.resolve()) + "/"
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
        points = [p for p in (line.split(" ")[4] for line in fh) if p.startswith(prefix)]
    listed = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout.splitlines()
    return points, [line for line in listed if prefix in line]


@pytest.fixture(autouse=True)
def no_leftovers(backend, tmp_path_factory):
    """Every test must leave no container, volume, network, workspace mount or loop device of its
    own behind."""
    basetemp = tmp_path_factory.getbasetemp()
    before = {k: {i["id"] for i in v} for k, v in backend.owned().items()}
    mounted = mounts_and_loops_under(basetemp)
    yield
    after = {k: {i["id"] for i in v if _ours(i, basetemp)} for k, v in backend.owned().items()}
    leaked = {k: after[k] - before[k] for k in after if after[k] - before[k]}
    assert not leaked, f"left behind: {leaked}"
    now = mounts_and_loops_under(basetemp)
    assert (set(now[0]) - set(mounted[0]), set(now[1]) - set(mounted[1])) == (
        set(),
        set(),
    ), f"left mounted: {now}"


def ratified(scope: list[str], ceiling: str = "commit", **changes: object) -> dict:
    """A contract ratified by someone other than its proposer; `make_spec` fills in its digests
    (`tests.contracts.ratify_in_place`) for the spec it ends up in."""
    return {
        "id": "c-test",
        "proposed_by": "alice",
        "ratified_by": "bob",
        "scope": scope,
        "autonomy_ceiling": ceiling,
        **changes,
    }


@pytest.fixture
def make_spec(tmp_path):
    """Write a spec for a governance agent script into tmp_path and return its path."""
    import yaml

    def make(name: str, script: str, **fields: object) -> Path:
        data = {
            "version": 1,
            "name": name,
            "agent": {
                "command": ["sh", f"/opt/agent/{script}"],
                "files": str(ROOT / "fixtures" / "agents" / "governance"),
            },
            "workspace": {
                "fixture": str(ROOT / "fixtures" / "workspaces" / "calc"),
                "writable": ["out/**"],
                "protected": ["tests/**"],
            },
            "limits": {"wall_seconds": 60},
            "assertions": [],
            "expect": "pass",
            **fields,
        }
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return ratify_in_place(path)

    return make


def run_dirs(runs: Path) -> list[Path]:
    """The run directories under a runs folder (`.health/` and other dot folders are not runs)."""
    return sorted(p for p in runs.iterdir() if p.is_dir() and not p.name.startswith("."))


def live_ledger(tmp_path: Path) -> Path:
    """A 'live' database outside any run, writable by the sandbox user (as a real one must be)."""
    import os
    import sqlite3

    live = tmp_path / "live" / "ledger.sqlite"
    live.parent.mkdir()
    db = sqlite3.connect(live)
    db.execute("CREATE TABLE entries (id INTEGER PRIMARY KEY, amount INTEGER)")
    db.commit()
    db.close()
    for path in (live.parent, live):
        os.chown(path, 10001, 10001)
    return live
