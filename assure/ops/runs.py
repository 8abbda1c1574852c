"""The runs under a runs folder: finding one by id or path, and listing them all."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assure.errors import AssureError
from assure.records import layout, store


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    state: Any
    verdict: Any
    started_at: Any
    tasks: dict[str, Any]  # task -> its state

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "state": self.state, "verdict": self.verdict, "started_at": self.started_at, "tasks": self.tasks}


def find(run: str, runs_dir: Path) -> store.RunDir:
    """A run by id (under `runs_dir`) or by path; a hostile id never leaves the runs folder."""
    path = Path(run)
    if not path.is_dir():
        if not store.RUN_ID.match(run):
            raise AssureError(f"{run!r} is not a run id or a run directory", fix="`assure runs` lists them")
        path = runs_dir / run
    return store.RunDir.open(path)


def listing(runs_dir: Path) -> list[RunSummary]:
    """Every run with a readable state file, by run id; unreadable ones are left out."""
    rows = []
    for path in sorted(runs_dir.glob(f"*/{layout.STATE}")) if runs_dir.is_dir() else []:
        try:
            state = store.read_json(path)
        except AssureError:
            continue
        tasks = state.get("tasks", {})
        rows.append(RunSummary(path.parent.name, state.get("state"), state.get("verdict"), state.get("started_at"),
                               {t: v.get("state") for t, v in tasks.items()}))
    return rows
