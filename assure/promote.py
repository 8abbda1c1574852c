"""The promote gate: the host's one chokepoint for durable mutation, using `gate.decide()`.

A verified attempt is committed only when the same decision function the gateway uses
allows it: a ratified contract covering every changed path, and effective autonomy at
`commit` (operator dial, contract ceiling, and the trust of a verifier that just ran; no
assertions means no verifier, which means propose-only). Otherwise the result becomes a
reviewable bundle under `proposals/`, applied later by `assure promote RUN` under a fresh
decision. Commits are idempotent (a marker records a finished one), so a promotion cut by
`kill -9` is finished on resume, never applied twice.
"""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from . import control, gate, policy, store
from .chain import iter_chain
from .receipts import receipt_filename
from .errors import AssureError
from .spec import Spec
from .textsafe import display

MAX_PATCH_FILE_BYTES = 1 * 2**20
GIT_ENV = {"GIT_AUTHOR_NAME": "assure", "GIT_AUTHOR_EMAIL": "assure@localhost", "GIT_COMMITTER_NAME": "assure", "GIT_COMMITTER_EMAIL": "assure@localhost"}


class PromoteError(AssureError):
    """A commit could not be completed; the task becomes `commit_failed`, never `committed`."""


def slug(task_id: str) -> str:
    """A file name for a task id that is hostile input (the receipt's name, less `.json`)."""
    return receipt_filename(task_id).removesuffix(".json")


def changes(attempt_dir: Path) -> list[dict[str, Any]]:
    return store.read_json(attempt_dir / "verdict.json")["changes"]


def decide(spec: Spec, run: store.RunDir, attempt_dir: Path) -> gate.Decision:
    """One decision per changed path; the first that is not `allow` decides."""
    if not spec.data.get("promote"):
        return gate.Decision(gate.DENY, "promote.no_target", "no promote target in the spec: propose-only")
    autonomy = spec.data.get("autonomy", {})
    override = control.read(run.control_dir)
    dial = gate.LEVELS[autonomy.get("dial", "commit")]
    if override.dial is not None:
        dial = min(dial, gate.LEVELS[override.dial])
    has_verifier = bool(spec.data["assertions"])
    rollback = f"promote:{run.run_id}:{attempt_dir.name}"  # the host keeps a backup of what it replaces
    ctx = gate.Context(
        known_tools=frozenset({"promote"}), now=time.time(), budget=gate.Budget(),
        protected=spec.workspace.protected, contract=policy.contract(spec.data.get("contract")),
        operator_dial=dial, verifier_trust=gate.LEVELS[autonomy.get("verifier_trust", "commit")] if has_verifier else gate.PROPOSE,
        verifier_fresh=has_verifier, rollbacks={rollback: ("fs:**",)},  # the backup covers every promoted path halted=override.halted,
    )
    decision = gate.Decision(gate.ALLOW, "promote.no_changes", "nothing to promote")
    for change in changes(attempt_dir):
        action = gate.Action("promote", True, path=change["path"], resource_mode="live", reversible=True, rollback_ref=rollback)
        decision = gate.decide(action, ctx)
        if not decision.allowed:
            return decision
    return decision


def propose(run: store.RunDir, task_id: str, attempt_dir: Path) -> Path:
    """A reviewable bundle: the changes, a patch, the SQL changesets and the verdict."""
    bundle = run.path / "proposals" / slug(task_id)
    bundle.mkdir(parents=True, exist_ok=True)
    store.write_json(bundle / "proposal.json", {"task": task_id, "attempt": int(attempt_dir.name), "changes": changes(attempt_dir)})
    (bundle / "patch.diff").write_text(_patch(run.path / "base", attempt_dir / "workspace", changes(attempt_dir)), encoding="utf-8")
    journal = attempt_dir / "gateway" / "journal.jsonl"
    records = iter_chain(journal) if journal.is_file() else []
    sql = [r["effect"] for r in records if r.get("event") == "tool_call" and r.get("decision") == "allow" and isinstance(r.get("effect"), dict) and r["effect"].get("op") == "sql"]
    store.write_json(bundle / "changesets.json", sql)
    shutil.copyfile(attempt_dir / "verdict.json", bundle / "verdict.json")
    return bundle


def _patch(base: Path, workspace: Path, items: list[dict[str, Any]]) -> str:
    out = []
    for change in items:
        path = change["path"]
        before, after = _text(base / path), _text(workspace / path)
        if before is None or after is None:
            out.append(f"Binary, special or large file {display(path)} ({change['kind']})\n")
            continue
        for line in difflib.unified_diff(before, after, f"a/{display(path)}", f"b/{display(path)}"):
            # difflib leaves a last line without its newline as it is; patch(1) and git apply
            # need it marked, or the next line of the patch is glued onto it
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _text(path: Path) -> list[str] | None:
    if not path.exists() and not path.is_symlink():
        return []
    if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_PATCH_FILE_BYTES:
        return None
    try:
        return path.read_text(encoding="utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def commit(spec: Spec, run: store.RunDir, task_id: str, attempt_dir: Path, base: Path) -> dict[str, Any]:
    """Apply an attempt's changes to the target (and the run's base); in a git target, one
    commit per task. Idempotent: a finished commit is recorded and returned as is."""
    record_dir = run.path / "promotions" / slug(task_id)
    marker = record_dir / "committed.json"
    if marker.is_file():
        return store.read_json(marker)
    target = (spec.path.parent / spec.data["promote"]["target"]).resolve()
    if not target.is_dir():
        raise PromoteError(f"the promote target {target} is not a folder", fix="create it (or `git init` it) first")
    record_dir.mkdir(parents=True, exist_ok=True)
    items = changes(attempt_dir)
    _backup(target, items, record_dir / "backup")
    for root in (target, base):
        _apply(attempt_dir / "workspace", root, items)
    result: dict[str, Any] = {"target": str(target), "paths": [c["path"] for c in items]}
    if (target / ".git").exists():
        result["git_commit"] = _git_commit(target, run.run_id, task_id, slug(task_id), [c["path"] for c in items])
    store.write_json(marker, result)
    return result


def _backup(target: Path, items: list[dict[str, Any]], backup: Path) -> None:
    """Keep what the commit replaces: the rollback the gate was told the host can confirm.
    Taken once (complete, then renamed): a resumed commit never backs up its own output."""
    if backup.exists():
        return
    tmp = backup.with_name(".backup.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for change in items:
        source = target / change["path"]
        if source.is_file() and not source.is_symlink():
            dest = tmp / change["path"]
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest)
    os.replace(tmp, backup)


def _apply(workspace: Path, root: Path, items: list[dict[str, Any]]) -> None:
    """Make `root` match the workspace for each changed path (deepest deletions first)."""
    deletions = sorted((c for c in items if c["kind"] == "deleted" or c.get("after") is None), key=lambda c: -c["path"].count("/"))
    for change in deletions + sorted((c for c in items if c not in deletions), key=lambda c: c["path"]):
        dest, source = root / change["path"], workspace / change["path"]
        if change["kind"] == "deleted" or change.get("after") is None:
            if dest.is_dir() and not dest.is_symlink():
                shutil.rmtree(dest)
            elif dest.exists() or dest.is_symlink():
                dest.unlink()
            continue
        kind = change["after"]["kind"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        if kind == "dir":
            dest.mkdir(exist_ok=True)
        elif kind == "file":
            tmp = dest.with_name(f".{dest.name}.assure-tmp")
            shutil.copyfile(source, tmp, follow_symlinks=False)
            os.chmod(tmp, change["after"]["mode"] & 0o777)
            os.replace(tmp, dest)
        else:
            raise PromoteError(f"refusing to promote a {kind} at {display(change['path'])}", fix="only files and folders are promoted")


def _git_commit(target: Path, run_id: str, task_id: str, task_slug: str, paths: list[str]) -> str:
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(target), *args], capture_output=True, text=True, env={**os.environ, **GIT_ENV})
        if done.returncode != 0:
            raise PromoteError(f"git {args[0]} failed: {done.stderr.strip()[-500:]}")
        return done.stdout.strip()

    trailer = f"run: {run_id}\ntask: {display(task_id)}\nreceipt: receipts/{task_slug}.json"
    with_head = subprocess.run(["git", "-C", str(target), "log", "-1", "--format=%B"], capture_output=True, text=True)
    if with_head.returncode == 0 and trailer in with_head.stdout:
        return git("rev-parse", "HEAD")  # committed before a crash: do not commit twice
    if paths:
        git("add", "--all", "--", *paths)
    git("commit", "--allow-empty", "--no-verify", "-m", f"assure: task {display(task_id)}\n\n{trailer}\n")
    return git("rev-parse", "HEAD")
