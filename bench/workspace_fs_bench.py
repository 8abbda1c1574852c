"""The bounded workspace (a loop-mounted ext4 per attempt) against the plain bind-mounted
folder it replaced, measured in the same run, rounds interleaved.

Two fixtures: `calc` (the examples' 5 files) and a real repository of 5,000+ files (a copy
of this Python's standard library, ~250 MB, made once under /tmp), each with limits.disk
1.25x its size (at least 64 MiB). For each, a trivial attempt (`true`, one exit_code
assertion) runs through the driver, once as assure runs it (mkfs + mount, fixture copied in,
PRE, run, POST on the sealed mount, the copy-out of what changed, unmount) and once with the
old plain folder (fixture copied, PRE, run, POST in place; no mount, no copy-out). Prints the
median attempt wall time, the median prepare, snapshot (POST, with copy-out), copy-out and
unmount phases, the ratios bounded / plain, and the most the host held at once for the
attempt (files' allocated blocks, sampled; the mounted filesystems are counted as their
images) against limits.disk. Then the bounded attempt with one `command` check: its checks
phase and what the host held during it.
Usage: python bench/workspace_fs_bench.py [ROUNDS]   (root and loop devices needed)
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import statistics
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from assure import spec as spec_mod
from assure.records import store
from assure.run import attempt as attempt_mod
from assure.run import driver as driver_mod
from assure.run.driver import Driver
from assure.sandbox import workspace_fs
from assure.sandbox.docker.backend import DockerBackend
from assure.sandbox.docker.images import Images
from assure.verify.snapshot import take

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
REPO_CACHE = Path(tempfile.gettempdir()) / "assure-bench-stdlib"
PHASES = ("prepare", "snapshot", "copy_out", "unmount")  # copy_out is part of snapshot
SAMPLE_SECONDS = 0.05  # how often the host's allocation for the attempt is read
WORKSPACE_PHASES = (
    "prepare",
    "snapshot",
    "unmount",
)  # where the two differ; start, run, collect, verify are the same


def repository() -> Path:
    """A real tree of 5,000+ files: the standard library without site-packages (copied once)."""
    if not REPO_CACHE.is_dir():
        tmp = Path(
            tempfile.mkdtemp(prefix=f".{REPO_CACHE.name}.", dir=REPO_CACHE.parent)
        )  # two benches at once: each its own
        try:
            shutil.copytree(
                sysconfig.get_paths()["stdlib"],
                tmp / "tree",
                symlinks=True,
                ignore=shutil.ignore_patterns("site-packages"),
            )
            try:
                (tmp / "tree").rename(REPO_CACHE)
            except OSError:  # the other bench made it first
                pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return REPO_CACHE


class PlainWorkspace:
    """Before bounded disk: the attempt's workspace/ folder itself, bind-mounted as it is."""

    def __init__(self, attempt_dir: Path):
        self.workspace = (
            attempt_dir / "workspace"
        )  # made by the attempt's fixture copy, as on the mount

    @classmethod
    def create(cls, attempt_dir: Path, **_: Any) -> PlainWorkspace:
        return cls(attempt_dir)

    def release(self) -> None:
        pass


class PlainAttempt(attempt_mod.Attempt):
    def _snapshot_post(self, facts: dict[str, Any]) -> None:
        self._post = take(self.paths.workspace, reuse=self._pre)
        store.write_json(self.paths.post, self._post.to_json())
        self._capture_databases("post")


@contextlib.contextmanager
def plain() -> Iterator[None]:
    saved = workspace_fs.WorkspaceFs, driver_mod.Attempt
    # swapped for the measurement and restored below
    workspace_fs.WorkspaceFs, driver_mod.Attempt = PlainWorkspace, PlainAttempt  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        # restored: the measurement swapped them above
        workspace_fs.WorkspaceFs, driver_mod.Attempt = saved  # type: ignore[misc]


def spec_for(tmp: Path, name: str, fixture: Path, disk: int, check: bool = False) -> spec_mod.Spec:
    path = tmp / f"{name}.yaml"
    command = ", {command: {run: [sh, -c, 'ls -R > /dev/null']}}"  # reads every folder
    path.write_text(
        f"version: 1\nname: {name}\nagent: {{command: ['true']}}\nworkspace: {{fixture:"
        f" {fixture}}}\nlimits: {{disk: {disk // 2**20}m}}\n"
        f"assertions: [{{exit_code: 0}}{command if check else ''}]\nexpect: pass\n"
    )
    return spec_mod.load(path)


def allocated(root: Path) -> int:
    """Bytes the host allocated for the files beneath root (st_blocks), never entering a
    mounted filesystem (its image is counted)."""
    total, dev = 0, os.lstat(root).st_dev
    for dirpath, dirnames, filenames in os.walk(root):
        keep = []
        for name in dirnames + filenames:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if st.st_dev == dev:
                total += st.st_blocks * 512
                if name in dirnames:
                    keep.append(name)
        dirnames[:] = keep
    return total


class Peak:
    """The most `allocated(root)` was while the context ran, sampled on a thread."""

    def __init__(self, root: Path):
        self.root, self.most, self._done = root, 0, threading.Event()

    def __enter__(self) -> Peak:
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._done.wait(SAMPLE_SECONDS):
            with contextlib.suppress(OSError):
                self.most = max(self.most, allocated(self.root))

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()


def attempt(
    backend,
    images,
    spec,
    runs: Path,
    phases: dict[str, list[float]],
    peaks: list[int] | None = None,
) -> float:
    start = time.perf_counter()
    run = store.RunDir.create(runs, store.new_run_id(spec.name), spec.path, spec.to_json())
    with contextlib.ExitStack() as stack:
        # the attempts' folder: the run's base/ (the fixture, for promote) is no attempt's
        peak = stack.enter_context(Peak(run.path / "attempts")) if peaks is not None else None
        result = Driver(spec, run, backend, images, lambda *_: None).drive()
    elapsed = time.perf_counter() - start
    if peak is not None and peaks is not None:
        peaks.append(peak.most)
    # the containment check names the plain folder as the wrong mount source: the one finding
    # allowed
    wrong_source = [
        f for f in result.report["attempts"][0]["findings"] if f["subject"] == "Mounts sources"
    ]
    assert result.verdict == "pass" or (
        workspace_fs.WorkspaceFs is PlainWorkspace
        and len(wrong_source) == 1
        and all(
            f["severity"] != "breach" or f in wrong_source
            for f in result.report["attempts"][0]["findings"]
        )
    ), result.report
    timings = result.report["attempts"][0]["timings"]
    for phase in (*PHASES, "checks"):
        phases.setdefault(phase, []).append(timings.get(phase, 0.0))
    shutil.rmtree(run.path)
    return elapsed


def main() -> None:
    # the plain variant's one breach (its mount source, allowed in `attempt`) raises an alert
    # per attempt: expected here, so not printed
    logging.getLogger("assure.records.alerts").setLevel(logging.ERROR)
    workspace_fs.require()
    backend = DockerBackend()
    images = Images(backend).ensure()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        fixtures = {
            "calc (5 files)": ROOT / "fixtures" / "workspaces" / "calc",
            "repository": repository(),
        }
        files = sum(1 for p in fixtures["repository"].rglob("*") if p.is_file())
        for label, fixture in fixtures.items():
            size = sum(p.lstat().st_size for p in fixture.rglob("*"))
            disk = max(64 * 2**20, -(-int(size * 1.25) // 2**20) * 2**20)
            spec = spec_for(tmp, "bench", fixture, disk)
            with plain():
                attempt(
                    backend, images, spec, tmp / "runs", {}
                )  # warm-up: page cache, hash helpers
            attempt(backend, images, spec, tmp / "runs", {})
            walls: dict[str, list[float]] = {"plain": [], "bounded": []}
            phases: dict[str, dict[str, list[float]]] = {"plain": {}, "bounded": {}}
            for _ in range(ROUNDS):
                with plain():
                    walls["plain"].append(
                        attempt(backend, images, spec, tmp / "runs", phases["plain"])
                    )
                walls["bounded"].append(
                    attempt(backend, images, spec, tmp / "runs", phases["bounded"])
                )
            name = f"{label}, {files} files" if label == "repository" else label
            p, b = statistics.median(walls["plain"]), statistics.median(walls["bounded"])
            print(
                f"{name}: attempt median plain {p * 1000:.0f} ms, bounded {b * 1000:.0f} ms, ratio"
                f" {b / p:.2f}x (+{(b - p) * 1000:.0f} ms)"
            )
            for phase in PHASES:
                pm, bm = (
                    statistics.median(phases["plain"][phase]) * 1000,
                    statistics.median(phases["bounded"][phase]) * 1000,
                )
                ratio = f"ratio {bm / pm:.2f}x" if pm >= 0.5 else "(no such step before)"
                print(f"  {phase:<8} plain {pm:7.1f} ms  bounded {bm:7.1f} ms  {ratio}")
            own = {
                mode: (
                    statistics.median(
                        [sum(phases[mode][ph][i] for ph in WORKSPACE_PHASES) for i in range(ROUNDS)]
                    )
                    * 1000
                )
                for mode in phases
            }
            print(
                f"  workspace phases (prepare + snapshot + unmount): plain {own['plain']:.0f} ms,"
                f" bounded {own['bounded']:.0f} ms, ratio {own['bounded'] / own['plain']:.2f}x"
                f" ({own['bounded'] - own['plain']:+.0f} ms per attempt)"
            )
            peaks: dict[str, list[int]] = {"plain": [], "bounded": []}
            with plain():  # one more of each, sampled (the walks would slow the timed rounds)
                attempt(backend, images, spec, tmp / "runs", {}, peaks["plain"])
            attempt(backend, images, spec, tmp / "runs", {}, peaks["bounded"])
            pp, bp = peaks["plain"][0], peaks["bounded"][0]
            print(
                f"  peak host disk: plain {pp / 2**20:.0f} MiB, bounded {bp / 2**20:.0f} MiB"
                f" ({bp / pp:.2f}x plain), limits.disk {disk // 2**20} MiB:"
                f" bounded peak {bp / disk:.2f}x limits.disk"
            )
            checked = spec_for(tmp, "bench-check", fixture, disk, check=True)
            check_phases: dict[str, list[float]] = {}
            for _ in range(ROUNDS):
                attempt(backend, images, checked, tmp / "runs", check_phases)
            check_peak: list[int] = []
            attempt(backend, images, checked, tmp / "runs", check_phases, check_peak)
            print(
                f"  with one command check: checks phase median"
                f" {statistics.median(check_phases['checks']) * 1000:.0f} ms, peak host disk"
                f" {check_peak[0] / 2**20:.0f} MiB ({check_peak[0] / disk:.2f}x limits.disk)"
            )


if __name__ == "__main__":
    main()
