"""The runs under a runs folder: finding one by id or path, and listing them all."""

from __future__ import annotations

import os
import shlex
import stat
import tempfile
from dataclasses import dataclass
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

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "state": self.state,
            "verdict": self.verdict,
            "started_at": self.started_at,
            "tasks": self.tasks,
            "resume": self.resume,
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
                f"--runs-dir is not a folder a run directory can be made in (the system says: {exc.strerror or exc})",
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


def listing(runs_dir: Path) -> list[RunSummary]:
    """Every run with a readable state file, by run id; unreadable ones are left out."""
    rows = []
    for path in sorted(runs_dir.glob(f"*/{layout.STATE}")) if runs_dir.is_dir() else []:
        try:
            state = store.read_json(path)
        except AssureError:
            continue
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
            )
        )
    return rows
