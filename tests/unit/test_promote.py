"""Promote applies every change or none, and never follows a link in the workspace or the target."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from assure import spec as spec_mod
from assure.core import control
from assure.records import store
from assure.records.attempt_record import AttemptRecord
from assure.run import promote
from assure.verify.diff import Change
from assure.verify.findings import Verdict
from assure.verify.judge import Judgement
from assure.verify.snapshot import Entry, Snapshot, take
from tests.contracts import ratify_in_place


def _file(path: str, kind: str = "added", mode: int = 0o644) -> dict:
    return {"path": path, "kind": kind, "after": {"kind": "file", "mode": mode}}


def _dir(path: str, kind: str = "added") -> dict:
    return {"path": path, "kind": kind, "after": {"kind": "dir", "mode": 0o755}}


def _deleted(path: str) -> dict:
    return {"path": path, "kind": "deleted", "after": None}


def typed(items: list[dict]) -> tuple[Change, ...]:
    """The changes `items` sketch, as the judge hands them to promote."""
    return tuple(
        Change(
            c["path"],
            c["kind"],
            (),
            None,
            None
            if c["after"] is None
            else Entry(
                c["path"],
                c["after"]["kind"],
                c["after"]["mode"],
                0,
                0,
                0,
                c["after"].get("sha256"),
                None,
                1,
                None,
                (),
                None,
            ),
        )
        for c in items
    )


def _judged(run: store.RunDir, items: list[dict]) -> AttemptRecord:
    """Attempt 1's record as `assure verify` loads it, judged with `items` as its changes, and
    its POST snapshot (post.json) taken of its workspace copy as it stands."""
    workspace = run.attempt(1).workspace
    post = take(workspace) if workspace.is_dir() else Snapshot({}, False, ())
    store.write_json(run.attempt(1).post, post.to_json())

    def entry(path: str, after: dict | None) -> Entry | None:
        if after is None:
            return None
        seen = post.entries.get(path)
        return Entry(
            path,
            after["kind"],
            after["mode"],
            0,
            0,
            0,
            seen.sha256 if seen else None,
            None,
            1,
            None,
            (),
            None,
        )

    changes = tuple(
        Change(c["path"], c["kind"], (), None, entry(c["path"], c["after"])) for c in items
    )
    run.attempt(1).verdict.write_text(
        json.dumps(Judgement(Verdict.PASS, (), changes, None, None).to_json())
    )
    return AttemptRecord.load(run.attempt(1), snapshots=False)


def _with_digests(workspace: Path, items: list[dict]) -> tuple[Snapshot, list[dict]]:
    """POST of `workspace`, and `items` with each file's digest from it (as the judge lists
    them)."""
    post = take(workspace)
    return post, [
        (
            {**c, "after": {**c["after"], "sha256": post.entries[c["path"]].sha256}}
            if c["after"] and c["after"]["kind"] == "file" and c["path"] in post.entries
            else c
        )
        for c in items
    ]


def _commit(workspace: Path, target: Path, items: list[dict]) -> None:
    """What `promote.commit` does to one root: the checks, then the staged bytes applied."""
    promote.preflight(workspace, target, typed(items))
    post, items = _with_digests(workspace, items)
    staged = target.parent / "staged"
    promote.stage(workspace, post, typed(items), staged)
    promote._apply(staged, target, typed(items))


def _tree(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            out[rel] = "link" if p.is_symlink() else "dir" if p.is_dir() else p.read_text()
    return out


@pytest.fixture()
def trees(tmp_path):
    ws, target = tmp_path / "ws", tmp_path / "target"
    ws.mkdir()
    target.mkdir()
    return ws, target


def test_a_file_where_the_target_has_a_folder_fails_before_anything_is_applied(trees):
    ws, target = trees
    (ws / "a.txt").write_text("new a")
    (ws / "d").write_text("a file now")
    (target / "d").mkdir()
    (target / "d" / "keep").write_text("kept")
    before = _tree(target)
    with pytest.raises(promote.PromoteError, match="something else there"):
        _commit(ws, target, [_file("a.txt"), _file("d", "modified")])
    assert _tree(target) == before


def test_a_folder_where_the_target_has_a_file_fails_before_anything_is_applied(trees):
    ws, target = trees
    (ws / "a.txt").write_text("new a")
    (ws / "f").mkdir()
    (ws / "f" / "new.txt").write_text("inside")
    (target / "f").write_text("a file in the target")
    before = _tree(target)
    with pytest.raises(promote.PromoteError, match="something else there"):
        _commit(ws, target, [_file("a.txt"), _dir("f", "modified"), _file("f/new.txt")])
    with pytest.raises(promote.PromoteError, match="f in .* is not a folder"):
        _commit(ws, target, [_file("a.txt"), _file("f/new.txt")])
    assert _tree(target) == before


def test_a_deletion_in_the_same_commit_clears_the_way(trees):
    ws, target = trees
    (ws / "d").write_text("a file now")
    (target / "d").mkdir()
    (target / "d" / "old").write_text("old")
    _commit(ws, target, [_deleted("d/old"), _deleted("d"), _file("d", "added")])
    assert _tree(target) == {"d": "a file now"}


def test_links_in_the_target_or_the_workspace_are_never_followed(trees, tmp_path):
    ws, target = trees
    host = tmp_path / "host"
    host.mkdir()
    (host / "canary").write_text("host data")
    (target / "docs").symlink_to(host)
    (ws / "docs").mkdir()
    (ws / "docs" / "canary").write_text("overwritten?")
    with pytest.raises(promote.PromoteError, match="not a folder"):
        _commit(ws, target, [_file("docs/canary")])
    (ws / "src").symlink_to(host)
    with pytest.raises(promote.PromoteError, match="workspace has no file"):
        _commit(ws, target, [_file("src/canary")])
    with pytest.raises(promote.PromoteError, match="refusing to promote a symlink"):
        _commit(
            ws,
            target,
            [{"path": "src", "kind": "added", "after": {"kind": "symlink", "mode": 0o777}}],
        )
    assert _tree(host) == {"canary": "host data"}
    (ws / "link").symlink_to(host / "canary")
    assert promote._text(ws, "link") is None  # a patch never shows the link target's content
    assert promote._text(ws, "src/canary") == []  # nothing beneath the workspace has that path


def test_files_are_applied_with_git_modes_and_sparse_files_stay_sparse(trees):
    """The agent's modes (0o666, setuid) reach the target as git records them: 0755 or 0644."""
    ws, target = trees
    (ws / "out").mkdir()
    (ws / "out" / "run.sh").write_text("echo hi")
    (ws / "out" / "open.txt").write_text("anyone may write me")
    with open(ws / "out" / "big", "wb") as fh:
        fh.truncate(64 * 2**20)
        fh.write(b"head")
    _commit(
        ws,
        target,
        [
            _dir("out"),
            _file("out/run.sh", mode=0o4777),
            _file("out/open.txt", mode=0o666),
            _file("out/big"),
        ],
    )
    assert (target / "out" / "run.sh").read_text() == "echo hi"
    assert (target / "out" / "run.sh").stat().st_mode & 0o7777 == 0o755
    assert (target / "out" / "open.txt").stat().st_mode & 0o7777 == 0o644
    assert (target / "out" / "big").stat().st_size == 64 * 2**20
    assert (
        target / "out" / "big"
    ).stat().st_blocks * 512 <= promote.STAGE_CHUNK  # the chunk with data, no more


def test_a_file_whose_bytes_differ_from_post_is_refused_before_anything_is_written(trees, tmp_path):
    """The workspace copy rewritten after the run (a local user, a disk fault): the commit
    names the file and the target is as it was, the other, unchanged files included."""
    ws, target = trees
    (ws / "a.txt").write_text("verified a")
    (ws / "b.txt").write_text("verified b")
    (target / "a.txt").write_text("the user's a")
    items = [_file("a.txt", "modified"), _file("b.txt")]
    post, items = _with_digests(ws, items)
    (ws / "b.txt").write_text("swapped after the run")
    before = _tree(target)
    with pytest.raises(
        promote.PromoteError,
        match="refusing to promote b.txt: its bytes .* are not the ones the verifier saw",
    ):
        promote.stage(ws, post, typed(items), tmp_path / "staged")
    assert (
        _tree(target) == before and not (tmp_path / "staged").exists()
    )  # nothing of what it read is left either
    with pytest.raises(
        promote.PromoteError, match="holds no digest"
    ):  # a file POST never hashed is never promoted
        promote.stage(ws, Snapshot({}, False, ()), typed(items[:1]), tmp_path / "staged")
    with pytest.raises(promote.PromoteError, match="the judged change and post.json disagree"):
        promote.stage(
            ws,
            post,
            typed([{**items[0], "after": {**items[0]["after"], "sha256": None}}]),
            tmp_path / "staged",
        )


def test_the_staged_bytes_are_the_hashed_ones(trees, tmp_path):
    """Stage reads each file once: what lands in `staged` is exactly what was hashed, and
    nothing is read from the workspace again (a link swapped in afterwards reaches nothing)."""
    ws, target = trees
    (ws / "a.txt").write_text("verified")
    post, items = _with_digests(ws, [_file("a.txt")])
    promote.stage(ws, post, typed(items), tmp_path / "staged")
    (ws / "a.txt").unlink()
    (ws / "a.txt").symlink_to("/etc/shadow")
    promote._apply(tmp_path / "staged", target, typed(items))
    assert (target / "a.txt").read_text() == "verified" and not (target / "a.txt").is_symlink()
    with pytest.raises(
        promote.PromoteError, match="a.txt: the attempt's workspace copy cannot be read as a file"
    ):
        promote.stage(
            ws, post, typed(items), tmp_path / "staged"
        )  # a link in the copy is never followed


def test_a_halted_run_promotes_nothing_and_the_backup_covers_every_path(tmp_path):
    root = Path(__file__).resolve().parents[2]
    data = {
        "version": 1,
        "name": "p",
        "agent": {"command": ["true"], "files": str(root / "fixtures" / "agents" / "benign")},
        "workspace": {
            "fixture": str(root / "fixtures" / "workspaces" / "calc"),
            "protected": ["tests/**"],
        },
        "promote": {"target": str(tmp_path / "target")},
        "assertions": [{"exit_code": 0}],
        "expect": "pass",
        "contract": {
            "id": "c",
            "proposed_by": "alice",
            "ratified_by": "bob",
            "scope": ["fs:**"],
            "autonomy_ceiling": "commit",
        },
    }
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    spec = spec_mod.load(ratify_in_place(tmp_path / "p.yaml"))
    run = store.RunDir.create(tmp_path / "runs", "p-run", spec.path, spec.to_json())
    run.attempt(1).root.mkdir(parents=True)
    attempt = _judged(run, [_file("src/calc.py", "modified")])
    assert (
        promote.decide(spec, run, attempt).outcome == "allow"
    )  # the promote backup is a rollback for fs:**
    control.request(run.control_dir, run_id="p-run", actor="carol", halt=True)
    assert (
        promote.decide(spec, run, attempt).outcome,
        promote.decide(spec, run, attempt).rule,
    ) == ("deny", "operator_halt")


@pytest.mark.parametrize(
    "path", [".git/config", ".git/hooks/post-commit", "sub/.git/config", ".GIT/config"]
)
def test_nothing_is_promoted_into_a_git_folder(trees, path):
    """A promoted .git/config (core.fsmonitor) or hook would run the agent's code on the host
    at the commit's own `git add`/`git commit`, as the host's user."""
    ws, target = trees
    (target / ".git" / "hooks").mkdir(parents=True)
    (ws / Path(path).parent).mkdir(parents=True, exist_ok=True)
    (ws / path).write_text("[core]\n\tfsmonitor = touch /tmp/pwned\n")
    (ws / "a.txt").write_text("a")
    before = _tree(target)
    with pytest.raises(promote.PromoteError, match="refusing to promote .* git"):
        _commit(ws, target, [_file("a.txt"), _file(path, mode=0o755)])
    assert _tree(target) == before


@pytest.mark.parametrize("name", [":(glob)**", "*"])
def test_git_reads_promoted_names_literally(tmp_path, name):
    """A file named `:(glob)**` is a pathspec to git: the commit must stage that file, not
    the target's untracked files that the attempt never touched."""
    import subprocess

    target = tmp_path / "repo"
    target.mkdir()
    subprocess.run(["git", "init", "-q", str(target)], check=True)
    (target / "secret.env").write_text("TOKEN=1")
    (target / name).write_text("agent's file")
    promote._git_commit(target, "run", "task", [name])
    listed = subprocess.run(
        ["git", "-C", str(target), "ls-files", "-z"], capture_output=True, text=True, check=True
    ).stdout.split("\0")
    assert [f for f in listed if f] == [name]


def test_a_proposals_patch_is_bounded_whatever_the_attempt_left(trees):
    """Each file's diff was bounded (1 MiB) but not their sum: 1 GiB of new files in the
    writable scope became a patch of about 1 GiB, built in the host's memory."""
    ws, base = trees
    line = b"x" * 99 + b"\n"
    for n in range(40):
        (ws / f"f{n}").write_bytes(line * (2**20 // 100))
    patch = promote._patch(base, ws, typed([_file(f"f{n}") for n in range(40)]))
    assert len(patch.encode()) <= promote.MAX_PATCH_BYTES + 4096
    assert "f39" in patch  # every change is still named


def test_a_git_commit_holds_exactly_the_promoted_files_ignored_or_not(tmp_path):
    """git add failed on a promoted path the target's .gitignore matches, after every file was
    written (half-applied: commit_failed, the target changed and uncommitted); and a folder in
    the changes (a mode change) staged the user's untracked files inside it."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    target = tmp_path / "target"
    (target / "conf").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(target)], check=True)
    (target / ".gitignore").write_text("*.log\n")
    subprocess.run(["git", "-C", str(target), "add", ".gitignore"], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(target),
            "-c",
            "user.name=u",
            "-c",
            "user.email=u@x",
            "commit",
            "-qm",
            "init",
        ],
        check=True,
    )
    (target / "conf" / "secret.yaml").write_text("token: 1")  # the user's, untracked
    data = {
        "version": 1,
        "name": "p",
        "agent": {"command": ["true"], "files": str(root / "fixtures" / "agents" / "benign")},
        "workspace": {
            "fixture": str(root / "fixtures" / "workspaces" / "calc"),
            "protected": ["tests/**"],
        },
        "promote": {"target": str(target)},
        "assertions": [{"exit_code": 0}],
        "expect": "pass",
    }
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    spec = spec_mod.load(tmp_path / "p.yaml")
    run = store.RunDir.create(tmp_path / "runs", "p-run", spec.path, spec.to_json())
    attempt = tmp_path / "runs" / "p-run" / "attempts" / "1"
    (attempt / "workspace" / "out").mkdir(parents=True)
    (attempt / "workspace" / "conf").mkdir()
    (attempt / "workspace" / "out" / "run.log").write_text("log")
    items = [_dir("out"), _file("out/run.log"), _dir("conf", "modified")]
    base = tmp_path / "base"
    base.mkdir()
    promote.commit(spec, run, "main", _judged(run, items), base)
    committed = subprocess.run(
        ["git", "-C", str(target), "show", "--name-only", "--format=", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert committed == ["out/run.log"]


def test_runs_side_by_side_commit_to_one_git_target_one_at_a_time(tmp_path):
    """Six runs of one spec promote into one repository at once: each commit is made, none
    meets another's index.lock (the commits take the target's lock in turn)."""
    import subprocess
    import threading

    root = Path(__file__).resolve().parents[2]
    target = tmp_path / "target"
    target.mkdir()
    subprocess.run(["git", "init", "-q", str(target)], check=True)
    data = {
        "version": 1,
        "name": "p",
        "agent": {"command": ["true"], "files": str(root / "fixtures" / "agents" / "benign")},
        "workspace": {
            "fixture": str(root / "fixtures" / "workspaces" / "calc"),
            "protected": ["tests/**"],
        },
        "promote": {"target": str(target)},
        "assertions": [{"exit_code": 0}],
        "expect": "pass",
    }
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    spec = spec_mod.load(tmp_path / "p.yaml")
    jobs = []
    for i in range(6):
        run = store.RunDir.new(tmp_path / "runs", "p", spec.path, spec.to_json())
        (run.attempt(1).workspace / "out").mkdir(parents=True)
        (run.attempt(1).workspace / "out" / f"{i}.txt").write_text(str(i))
        base = tmp_path / f"base{i}"
        base.mkdir()
        jobs.append((run, _judged(run, [_dir("out"), _file(f"out/{i}.txt")]), base))
    go, failures = threading.Barrier(len(jobs)), []

    def commit(run, record, base) -> None:
        go.wait()
        try:
            promote.commit(spec, run, "main", record, base)
        except promote.PromoteError as exc:
            failures.append(str(exc))

    threads = [threading.Thread(target=commit, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert failures == []
    log = subprocess.run(
        ["git", "-C", str(target), "log", "--format=%s"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert log == ["assure: task main"] * 6
    files = subprocess.run(
        ["git", "-C", str(target), "ls-files"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert files == [f"out/{i}.txt" for i in range(6)]
