"""The runs under a runs folder, and the suite runs beside it: finding one by id or path, and
listing them all, newest first."""

from __future__ import annotations

import os
import shlex
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from assure.errors import AssureError, unreadable
from assure.records import layout, store
from assure.records.states import INTERRUPTED, RESUMABLE, RunState, shown_verdict
from assure.textsafe import display


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    state: Any
    verdict: Any
    started_at: Any
    tasks: dict[str, Any]  # task -> its state
    resume: str | None = None  # the command that continues it, when its driver is gone
    kind: str = "run"  # or "suite": a suite run (under suites/ beside the runs base)
    specs: dict[str, int] | None = None  # a suite run's: its runs per verdict ("not run" too)
    placement: dict[str, Any] | None = None  # a cluster run's: where it ran, what was lost

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "run_id": self.run_id,
            "state": self.state,
            "verdict": self.verdict,
            "started_at": self.started_at,
            "tasks": self.tasks,
            "specs": self.specs,
            "resume": self.resume,
            "placement": self.placement,
        }


LIST_FIX = "`assure runs` lists the runs (add --runs-dir DIR if they are elsewhere)"


def check_base(runs_dir: Path, *, writable: bool = False) -> Path:
    """`runs_dir` as a runs base: a folder (a missing one is an empty base), and with `writable`
    one a run directory can be made in. Refused in words, never a traceback."""
    fix = "pass --runs-dir a folder you can write to (the default is .assure/runs)"
    try:
        if not stat.S_ISDIR(runs_dir.stat().st_mode):
            raise AssureError("--runs-dir is not a folder", where=str(runs_dir), fix=fix)
    except FileNotFoundError:
        pass  # an empty base (made when a run is)
    except OSError as exc:
        raise AssureError(
            f"--runs-dir is unusable: {unreadable(exc)}", where=str(runs_dir), fix=fix
        ) from None
    if (
        writable
    ):  # probed where it exists, or in its nearest existing folder: nothing is made before a run is
        existing = next(p for p in (runs_dir, *runs_dir.absolute().parents) if p.exists())
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".probe-", dir=existing))
        except OSError as exc:
            raise AssureError(
                "--runs-dir is not a folder a run directory can be made in (the system says:"
                f" {exc.strerror or exc})",
                where=str(runs_dir),
                fix=fix,
            ) from None
    return runs_dir


def locate(run: str, runs_dir: Path) -> Path:
    """The folder a run reference names: an existing folder given as a path wins; otherwise a
    run id, looked up under `runs_dir` (a hostile id never leaves it)."""
    path = Path(run)
    if path.is_dir():
        return path
    if not store.RUN_ID.match(run):
        raise AssureError(f"`{display(run)}` is neither a run's folder nor a run id", fix=LIST_FIX)
    check_base(runs_dir)
    if not (runs_dir / run).is_dir():
        raise AssureError(
            f"no run `{run}` under {display(str(runs_dir))}",
            fix=f"{LIST_FIX}; or pass the run's folder",
        )
    return runs_dir / run


def find(run: str, runs_dir: Path) -> store.RunDir:
    """A run by id (under `runs_dir`) or by its folder: the one way every command names a run."""
    return store.RunDir.open(locate(run, runs_dir))


def shown_state(run_dir: Path, state: Any) -> Any:
    """A run's state as people are told it: `running` with no process holding the run's lock
    (its driver was killed, or its machine went down) is `interrupted`; the rest as recorded."""
    return INTERRUPTED if state == RunState.RUNNING and not store.is_locked(run_dir) else state


def resume_command(base: Path, run_id: str) -> str:
    """`assure resume RUN`, with the runs base when it is not the default one."""
    default = base.absolute() == store.RUNS_DIR.absolute()
    return f"assure resume {run_id}" + ("" if default else f" --runs-dir {shlex.quote(str(base))}")


def locate_suite_run(ref: str, runs_dir: Path) -> Path | None:
    """The suite run `ref` names (its folder, or its id under the suites folder beside
    `runs_dir`), or None when it names none or names a run (a run's id or folder wins)."""
    path = Path(ref)
    if not path.is_dir() and store.RUN_ID.match(ref):
        if (runs_dir / ref).is_dir():
            return None
        path = layout.suites_base(runs_dir) / ref
    try:
        state = store.read_json(layout.SuitePaths(path).state)
    except AssureError:
        return None
    return path if isinstance(state, dict) and isinstance(state.get("runs"), list) else None


def suite_resume_command(runs_dir: Path, state: dict[str, Any]) -> str:
    """`assure suite SOURCE`, with its shard and the runs base when it is not the default one."""
    shard = shard_read if isinstance(shard_read := state.get("shard"), dict) else None
    default = runs_dir.absolute() == store.RUNS_DIR.absolute()
    return (
        f"assure suite {shlex.quote(str(state.get('source')))}"
        + (f" --shard {shard.get('index')}/{shard.get('count')}" if shard else "")
        + ("" if default else f" --runs-dir {shlex.quote(str(runs_dir))}")
    )


def listing(runs_dir: Path) -> list[RunSummary]:
    """Every run and suite run with a readable state file, newest first (by when it started);
    unreadable ones are left out."""
    rows = _runs(runs_dir) + _suite_runs(runs_dir)
    return sorted(rows, key=lambda r: (_when(r.started_at), r.run_id), reverse=True)


def _when(stamp: Any) -> datetime:
    """An RFC 3339 time, comparable; the oldest possible for one missing or odd."""
    try:
        when = datetime.fromisoformat(str(stamp))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _states(base: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Each folder of `base` with a readable state file, and its state (a mapping)."""
    for path in base.glob(f"*/{layout.STATE}") if base.is_dir() else []:
        try:
            state = store.read_json(path)
        except AssureError:
            continue
        if isinstance(state, dict):
            yield path, state


def _suite_runs(runs_dir: Path) -> list[RunSummary]:
    rows = []
    for path, state in _states(layout.suites_base(runs_dir)):
        if not isinstance(state.get("runs"), list):
            continue
        verdicts: dict[str, int] = {}
        for entry in state["runs"]:
            verdict = entry.get("verdict") if isinstance(entry, dict) else None
            key = str(verdict) if verdict is not None else "not run"
            verdicts[key] = verdicts.get(key, 0) + 1
        shown = shown_state(path.parent, state.get("state"))
        rows.append(
            RunSummary(
                path.parent.name,
                shown,
                None,
                state.get("started_at"),
                {},
                suite_resume_command(runs_dir, state) if shown == INTERRUPTED else None,
                kind="suite",
                specs=verdicts,
            )
        )
    return rows


def _runs(runs_dir: Path) -> list[RunSummary]:
    rows = []
    for path, state in _states(runs_dir):
        tasks = state.get("tasks", {})
        shown = shown_state(path.parent, state.get("state"))
        rows.append(
            RunSummary(
                path.parent.name,
                shown,
                shown_verdict(state.get("state"), state.get("verdict")),
                state.get("started_at"),
                {t: v.get("state") for t, v in tasks.items()},
                resume_command(runs_dir, path.parent.name) if shown in RESUMABLE else None,
                placement=read_placement(path.parent),
            )
        )
    return rows


def read_placement(run_dir: Path) -> dict[str, Any] | None:
    """A cluster run's placement file (records/summary.placement's shape), None for a local
    run's or one unreadable or of another shape."""
    path = layout.RunPaths(run_dir).placement
    try:
        placed = store.read_json(path) if path.is_file() else None
    except AssureError:
        return None
    if not isinstance(placed, dict) or placed.get("where") not in ("here", "node"):
        return None
    return placed if isinstance(placed.get("lost"), list) else None


def where(placed: dict[str, Any] | None) -> str:
    """A placement in a few words, for a table: `here`, `node 1a2b3c4d5e6f`, `, 1 lost`."""
    if placed is None:
        return "-"
    ran = "here" if placed["where"] == "here" else f"node {str(placed.get('node') or '?')[:12]}"
    lost = placed["lost"]
    by_caller = sum(1 for loss in lost if isinstance(loss, dict) and loss.get("cause") == "caller")
    more = [f"{len(lost) - by_caller} lost"] if len(lost) > by_caller else []
    more += [f"{by_caller} stopped by the caller"] if by_caller else []
    return ", ".join([ran, *more])
