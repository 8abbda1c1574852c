"""The promote gate: the host's one chokepoint for durable mutation, using `gate.decide()`.

A verified attempt is committed only when the same decision function the gateway uses
allows it: a ratified contract covering every changed path, and effective autonomy at
`commit` (operator dial, contract ceiling, and the trust of a verifier that just ran; no
assertions means no verifier, which means propose-only). Otherwise the result becomes a
reviewable bundle under `proposals/`, applied later by `assure promote RUN` under a fresh
decision. Commits are idempotent (a marker records a finished one), so a promotion cut by
`kill -9` is finished on resume, never applied twice.

A commit applies exactly the bytes the verifier saw: every file is read once from the
attempt's workspace copy (confined, no link followed), hashed as it is staged into the
promotion's own folder, and compared with its digest in POST; one mismatch refuses the
whole commit before the target is touched, and the target is written from the staged bytes.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import fcntl
import hashlib
import os
import stat
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from assure.core import confined, control, gate, private
from assure.core.chain import iter_chain
from assure.core.effects import Op
from assure.errors import AssureError
from assure.records import applied, layout, store
from assure.records.attempt_record import AttemptRecord
from assure.run import earned, policy
from assure.spec import Spec
from assure.textsafe import display
from assure.verify.diff import Change
from assure.verify.snapshot import Entry, Snapshot

STAGE_CHUNK = 1 << 20
MAX_PATCH_FILE_BYTES = 1 * 2**20
MAX_PATCH_BYTES = 16 * 2**20  # a proposal's whole patch: past it, changes are named, not shown
MAX_PROMOTE_FILE_BYTES = (
    applied.MAX_FILE_BYTES
)  # a bigger file was never hashed by the verifier: never promoted
GIT_ENV = {
    "GIT_AUTHOR_NAME": "assure",
    "GIT_AUTHOR_EMAIL": "assure@localhost",
    "GIT_COMMITTER_NAME": "assure",
    "GIT_COMMITTER_EMAIL": "assure@localhost",
}


class PromoteError(AssureError):
    """A commit could not be completed; the task becomes `commit_failed`, never `committed`."""


def decide(
    spec: Spec,
    run: store.RunDir,
    record: AttemptRecord,
    *,
    dial: str | None = None,
    signing_key: Path | None = None,
) -> gate.Decision:
    """One decision per changed path; the first that is not `allow` decides. The operator's
    dial is `dial` when given (a later `assure promote --dial`), else the run's control record;
    either only lowers the spec's own. Under a contract's trust policy the verifier's trust is
    at most what the agent earned in the trust ledger (`signing_key`'s, beside the runs)."""
    if spec.promote is None:
        return gate.Decision(
            gate.DENY, "promote.no_target", "no promote target in the spec: propose-only"
        )
    override = control.read(run.control_dir)
    operator = dial if dial is not None else override.dial
    level = gate.LEVELS[spec.autonomy.dial]
    if operator is not None:
        level = min(level, gate.LEVELS[operator])
    has_verifier = bool(spec.assertions)
    rollback = (  # the host keeps a backup of what it replaces
        f"promote:{run.run_id}:{record.number}"
    )
    ctx = gate.Context(
        known_tools=frozenset({"promote"}),
        now=time.time(),
        budget=gate.Budget(),
        protected=spec.workspace.protected,
        contract=policy.contract(spec, spec.contract),
        assertions=policy.pinned(spec)["assertions"],
        writable=spec.workspace.writable,
        operator_dial=level,
        verifier_trust=verifier_trust(spec, run, record, signing_key),
        verifier_fresh=has_verifier,
        rollbacks={rollback: ("fs:**",)},
        halted=override.halted,  # the backup covers every promoted path
    )
    decision = gate.Decision(gate.ALLOW, "promote.no_changes", "nothing to promote")
    for change in record.changes():
        created = change.kind == "added" and change.after is not None and change.after.kind == "dir"
        action = gate.Action(
            "promote",
            True,
            path=change.path,
            resource_mode="live",
            reversible=True,
            rollback_ref=rollback,
            folder=created,
        )
        decision = gate.decide(action, ctx)
        if not decision.allowed:
            return decision
    return decision


def propose(run: store.RunDir, task_id: str, record: AttemptRecord) -> Path:
    """A reviewable bundle: the changes, a patch, the SQL changesets and the verdict."""
    bundle = run.paths.proposal(task_id)
    bundle.root.mkdir(parents=True, exist_ok=True)
    items = record.changes()
    manifest = {"task": task_id, "attempt": record.number, "changes": [c.to_json() for c in items]}
    store.write_json(bundle.manifest, manifest)
    bundle.patch.write_text(_patch(run.paths.base, record.paths.workspace, items), encoding="utf-8")
    journal = record.paths.journal
    records = iter_chain(journal) if journal.is_file() else []
    sql = [
        r["effect"]
        for r in records
        if r.get("event") == "tool_call"
        and r.get("decision") == "allow"
        and isinstance(r.get("effect"), dict)
        and r["effect"].get("op") == Op.SQL
    ]
    store.write_json(bundle.changesets, sql)
    store.write_json(bundle.verdict, record.verdict_json())
    return bundle.root


def _patch(base: Path, workspace: Path, items: Sequence[Change]) -> str:
    """A unified diff of the changes, at most about MAX_PATCH_BYTES (a file whose diff would
    go past it is named, not shown)."""
    out, size = [], 0
    for change in items:
        path = change.path
        before, after = _text(base, path), _text(workspace, path)
        if before is None or after is None:
            out.append(f"Binary, special or large file {display(path)} ({change.kind})\n")
            continue
        # difflib leaves a last line without its newline as it is; patch(1) and git apply
        # need it marked, or the next line of the patch is glued onto it
        lines = [
            line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
            for line in difflib.unified_diff(
                before, after, f"a/{display(path)}", f"b/{display(path)}"
            )
        ]
        length = sum(len(line) for line in lines)
        if size + length > MAX_PATCH_BYTES:
            out.append(
                f"Not shown: {display(path)} ({change.kind}): the patch would exceed"
                f" {MAX_PATCH_BYTES} bytes\n"
            )
            continue
        size += length
        out.extend(lines)
    return "".join(out)


def _text(root: Path, rel: str) -> list[str] | None:
    """The lines of a small UTF-8 regular file beneath root ([] if absent), read confined;
    None for anything else (a symlink on the way, a special file, too big, binary)."""
    st = confined.lstat(root, rel)
    if st is None:
        return []
    try:
        return (
            confined.read_file(root, rel, MAX_PATCH_FILE_BYTES)
            .decode("utf-8")
            .splitlines(keepends=True)
        )
    except (OSError, UnicodeDecodeError):
        return None


def commit(
    spec: Spec, run: store.RunDir, task_id: str, record: AttemptRecord, base: Path
) -> dict[str, Any]:
    """Apply an attempt's changes to the target (and the run's base); in a git target, one
    commit per task. Idempotent: a finished commit is recorded and returned as is."""
    promotion = run.paths.promotion(task_id)
    marker = promotion.committed
    if marker.is_file():
        done: dict[str, Any] = store.read_json(marker)  # written below, once committed
        return done
    if spec.promote is None:
        raise PromoteError(
            "the spec has no promote target", fix="add `promote: {target: ...}` to the spec"
        )
    target = (spec.path.parent / spec.promote.target).resolve()
    if not target.is_dir():
        raise PromoteError(
            f"the promote target {target} is not a folder", fix="create it (or `git init` it) first"
        )
    promotion.root.mkdir(parents=True, exist_ok=True)
    items = record.changes()
    workspace = record.paths.workspace
    post = record.post or _post(record)
    with _target_lock(
        target
    ):  # runs side by side commit to one target one at a time (git's index is one)
        for root in (target, base):
            preflight(workspace, root, items)
        stage(
            workspace, post, items, promotion.staged
        )  # the last check: nothing is written to the target before it
        _backup(target, items, promotion.backup)
        for root in (target, base):
            _apply(promotion.staged, root, items)
        result: dict[str, Any] = {
            "target": str(target),
            "paths": [c.path for c in items],
            "changeset_sha256": applied.digest(
                applied.vouched(workspace, [c.to_json() for c in items])
            ),
        }
        if (
            target / ".git"
        ).exists():  # folders are not staged: git would take the user's untracked files inside them
            staged = [c.path for c in items if (after := _after(c)) is None or after.kind != "dir"]
            result["git_commit"] = _git_commit(target, run.run_id, task_id, staged)
    store.write_json(marker, result)
    confined.remove(promotion.root, promotion.staged.name)
    return result


def _post(record: AttemptRecord) -> Snapshot:
    """The attempt's POST snapshot, which every promoted file is checked against."""
    try:
        return Snapshot.from_json(store.read_json(record.paths.post))
    except (AssureError, ValueError, TypeError, KeyError) as exc:
        raise PromoteError(
            f"cannot promote attempt {record.number}: its {layout.POST} is unreadable ({exc})",
            fix="re-run the attempt; nothing was applied",
        ) from None


def stage(workspace: Path, post: Snapshot, items: Sequence[Change], staged: Path) -> None:
    """Copy every file of the commit from the workspace copy into `staged` (made afresh, the
    host's own), hashing the bytes as they pass, and compare each digest with POST's; raises
    PromoteError naming the first file that differs, cannot be read, or was never hashed.
    Each file is opened once, confined and without following a link, and read through that
    one descriptor: the bytes checked are the bytes staged, and the commit applies those."""
    if os.path.lexists(staged):
        confined.remove(staged.parent, staged.name)
    private.make_folder(staged)
    try:
        for change in items:
            after = _after(change)
            if after is not None and after.kind == "file":
                _stage_checked(workspace, post, change.path, after, staged)
    except BaseException:
        confined.remove(
            staged.parent, staged.name
        )  # a refused commit leaves nothing of what it read
        raise


def _stage_checked(workspace: Path, post: Snapshot, path: str, after: Entry, staged: Path) -> None:
    """Stage one file (`after`: as the judged change saw it), or refuse the commit
    (PromoteError) saying which check it failed."""
    entry = post.entries.get(path)
    want = entry.sha256 if entry is not None and entry.kind == "file" else None
    if want is None:
        raise PromoteError(
            f"refusing to promote {display(path)}: the verifier holds no digest of it in"
            f" {layout.POST}",
            fix=(
                f"the verifier hashes files up to {MAX_PROMOTE_FILE_BYTES} bytes; nothing was"
                " applied"
            ),
        )
    if after.sha256 != want:
        raise PromoteError(
            f"refusing to promote {display(path)}: the judged change and {layout.POST} disagree on"
            " its digest",
            fix="the run directory was changed after the run: re-run it; nothing was applied",
        )
    try:
        got = _stage_file(workspace, path, staged)
    except OSError as exc:
        raise PromoteError(
            f"refusing to promote {display(path)}: the attempt's workspace copy cannot be read as a"
            f" file ({exc.strerror or exc})",
            fix="re-run the attempt; nothing was applied",
        ) from None
    if got != want:
        raise PromoteError(
            f"refusing to promote {display(path)}: its bytes in the attempt's workspace copy are"
            f" not the ones the verifier saw (sha256 {got[:16]}, {layout.POST} has {want[:16]})",
            fix=(
                "the run directory was changed after the run: re-run it, and find who wrote there;"
                " nothing was applied"
            ),
        )


def _stage_file(workspace: Path, rel: str, staged: Path) -> str:
    """Read `rel` once from the workspace copy into `staged/rel` (holes stay holes); its SHA-256."""
    fd, st = confined.open_file(workspace, rel)
    try:
        if st.st_size > MAX_PROMOTE_FILE_BYTES:
            raise confined.TooLarge(errno.EFBIG, f"larger than {MAX_PROMOTE_FILE_BYTES} bytes")
        parent, _, name = rel.rpartition("/")
        if parent:
            confined.make_dirs(staged, parent)
        dfd = confined.open_dir(staged, parent) if parent else os.open(staged, confined.OPEN_DIR)
        try:
            out = os.open(
                name,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                private.FILE_MODE,
                dir_fd=dfd,
            )
        finally:
            os.close(dfd)
        try:
            digest, offset = hashlib.sha256(), 0
            while chunk := os.read(fd, STAGE_CHUNK):
                if (
                    offset + len(chunk) > MAX_PROMOTE_FILE_BYTES
                ):  # grew since the fstat: not what POST hashed
                    raise confined.TooLarge(
                        errno.EFBIG, f"larger than {MAX_PROMOTE_FILE_BYTES} bytes"
                    )
                digest.update(chunk)
                if chunk.count(0) != len(chunk):
                    os.pwrite(out, chunk, offset)
                offset += len(chunk)
            os.ftruncate(out, offset)
            return digest.hexdigest()
        finally:
            os.close(out)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _target_lock(target: Path) -> Iterator[None]:
    """flock on the target folder itself (no file of ours lands in it), held until the commit
    is made; another process (or thread) committing to the same target waits its turn."""
    fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _backup(target: Path, items: Sequence[Change], backup: Path) -> None:
    """Keep what the commit replaces: the rollback the gate was told the host can confirm.
    Taken once (complete, then renamed): a resumed commit never backs up its own output."""
    if backup.exists():
        return
    tmp = backup.with_name(".backup.tmp")
    if tmp.exists():
        confined.remove(tmp.parent, tmp.name)
    tmp.mkdir()
    for change in items:
        st = confined.lstat(target, change.path)
        if st is not None and stat.S_ISREG(st.st_mode):
            confined.copy_file(
                target, change.path, tmp, change.path, max_bytes=confined.COPY_MAX_BYTES
            )
    os.replace(tmp, backup)


def _after(change: Change) -> Entry | None:
    """What the change leaves at its path; None for a deletion (a `deleted` change, or one that
    leaves nothing)."""
    return None if change.kind == "deleted" else change.after


def preflight(workspace: Path, root: Path, items: Sequence[Change]) -> None:
    """Every change must apply to `root` as it is, or none is applied: each path's parents are
    real folders (or missing), nothing of another type stands where a file or folder goes
    (unless a deletion of this commit clears it), and each file or folder is one in the
    workspace (its bytes are `stage`'s to check). Raises PromoteError naming the first that does
    not.
    """
    deleted = [c.path for c in items if _after(c) is None]

    def present(rel: str) -> os.stat_result | None:
        if any(rel == d or rel.startswith(d + "/") for d in deleted):
            return None
        return confined.lstat(root, rel)

    for change in items:
        if any(part.casefold() == ".git" for part in change.path.split("/")):
            raise PromoteError(
                f"refusing to promote {display(change.path)}: it is inside a git folder, and git"
                " would run what it holds (hooks, core.fsmonitor) on this host",
                fix="keep .git out of the contract's scope; nothing was applied",
            )
        after = _after(change)
        if after is None:
            continue
        path, kind = change.path, after.kind
        if kind not in ("file", "dir"):
            raise PromoteError(
                f"refusing to promote a {kind} at {display(path)}",
                fix="only files and folders are promoted",
            )
        parts = path.split("/")
        for n in range(1, len(parts)):
            parent = "/".join(parts[:n])
            st = present(parent)
            if st is not None and not stat.S_ISDIR(st.st_mode):
                raise PromoteError(
                    f"cannot promote {display(path)}: {display(parent)} in {root} is not a folder",
                    fix=(
                        "a file replaced a folder or the reverse: resolve it by hand, nothing was"
                        " applied"
                    ),
                )
        st = present(path)
        want = stat.S_ISDIR if kind == "dir" else stat.S_ISREG
        if st is not None and not want(st.st_mode):
            raise PromoteError(
                f"cannot promote {display(path)} as a {kind}: {root} has something else there",
                fix=(
                    "a file replaced a folder or the reverse: resolve it by hand, nothing was"
                    " applied"
                ),
            )
        source = confined.lstat(workspace, path)
        if source is None or not want(source.st_mode):
            raise PromoteError(
                f"cannot promote {display(path)}: the attempt's workspace has no {kind} there",
                fix="re-run the attempt",
            )


def _apply(staged: Path, root: Path, items: Sequence[Change]) -> None:
    """Make `root` match the attempt for each changed path (deepest deletions first), fd-
    relative and without following links; files come from `staged` (`stage`), each with
    `private.promoted_mode`; `preflight` has passed."""
    deletions = sorted((c for c in items if _after(c) is None), key=lambda c: -c.path.count("/"))
    for change in deletions + sorted(
        (c for c in items if c not in deletions), key=lambda c: c.path
    ):
        path, after = change.path, _after(change)
        if after is None:
            confined.remove(root, path)
        elif after.kind == "dir":
            confined.make_dirs(root, path)
        else:
            confined.copy_file(
                staged,
                path,
                root,
                path,
                max_bytes=MAX_PROMOTE_FILE_BYTES,
                mode=private.promoted_mode(after.mode),
            )


def _git_commit(target: Path, run_id: str, task_id: str, paths: list[str]) -> str:
    def git(*args: str) -> str:
        # --literal-pathspecs: a promoted name (`:(glob)**`, say) is a path, never pathspec magic
        done = subprocess.run(
            ["git", "--literal-pathspecs", "-C", str(target), *args],
            capture_output=True,
            text=True,
            env={**os.environ, **GIT_ENV},
        )
        if done.returncode != 0:
            raise PromoteError(f"git {args[0]} failed: {done.stderr.strip()[-500:]}")
        return done.stdout.strip()

    trailer = (
        f"run: {run_id}\ntask: {display(task_id)}\nreceipt:"
        f" {layout.RECEIPTS}/{layout.receipt_filename(task_id)}"
    )
    with_head = subprocess.run(
        ["git", "-C", str(target), "log", "-1", "--format=%B"], capture_output=True, text=True
    )
    if with_head.returncode == 0 and trailer in with_head.stdout:
        return git("rev-parse", "HEAD")  # committed before a crash: do not commit twice
    # exactly these files, ignored by the target's .gitignore or not (git add refused those, after
    # the apply)
    if paths:
        git("update-index", "--add", "--remove", "--", *paths)
    git(
        "commit",
        "--allow-empty",
        "--no-verify",
        "-m",
        f"assure: task {display(task_id)}\n\n{trailer}\n",
    )
    return git("rev-parse", "HEAD")


def verifier_trust(
    spec: Spec, run: store.RunDir, record: AttemptRecord, signing_key: Path | None
) -> int:
    """The spec's verifier trust, lowered to what the agent earned if the contract asks it to."""
    granted = policy.verifier_trust(spec)
    if spec.contract is None or spec.contract.trust is None:
        return granted
    return min(granted, earned.earned(spec, record, run.path.parent, signing_key)[0])
