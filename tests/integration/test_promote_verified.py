"""Promote applies exactly what was verified (issue 21, item 3), live.

Before: the run directory was 0755 with world-readable files, the workspace copy kept the
agent's modes (a 0o666 src/calc.py), so a local user (uid 65534) rewrote it after the run and
`assure promote` committed the rewritten bytes; `assure receipts verify` still passed. Now the
run directory is the invoking user's alone, the copy-out normalizes modes, promote re-hashes
every file against POST and refuses a mismatch with the target untouched, and the receipt's
changeset no longer verifies against a swapped copy."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from .conftest import ROOT, ratified, run_dirs

ASSURE = [sys.executable, "-m", "assure.cli"]
NOBODY = 65534
SPECIAL_OR_SHARED = 0o7077  # setuid, setgid, sticky, and every group or other bit


def assure(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(ASSURE + list(args), cwd=cwd, capture_output=True, text=True, timeout=300)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def as_nobody(code: str) -> subprocess.CompletedProcess[str]:
    """`code` run by a local user who is not the invoking one (uid/gid 65534, no other group)."""
    return subprocess.run(
        [
            "setpriv",
            "--reuid",
            str(NOBODY),
            "--regid",
            str(NOBODY),
            "--clear-groups",
            sys.executable,
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def entries(root: Path) -> list[tuple[str, os.stat_result]]:
    found = [(".", os.lstat(root))]
    for folder, dirs, files in os.walk(root):
        found += [
            (os.path.relpath(os.path.join(folder, n), root), os.lstat(os.path.join(folder, n)))
            for n in dirs + files
        ]
    return found


def loose(root: Path) -> list[str]:
    """Entries below root (links aside) that another user could use, or that are not ours."""
    return [
        f"{rel} {stat.S_IMODE(st.st_mode):o} uid {st.st_uid}"
        for rel, st in entries(root)
        if not stat.S_ISLNK(st.st_mode)
        and (st.st_mode & SPECIAL_OR_SHARED or st.st_uid != os.geteuid())
    ]


def wait_for_agent(runs: Path, backend) -> str:
    import time

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if runs.exists() and run_dirs(runs):
            run_id = run_dirs(runs)[0].name
            if any(c.get("assure.role") == "agent" for c in backend.owned(run_id)["containers"]):
                return run_id
        time.sleep(0.1)
    raise AssertionError("the agent never started")


def test_a_hostile_agents_modes_do_not_survive_the_copy_out(run):
    """The corpus agent leaves 0o666 and 0o777 files, 0777, sticky and setgid folders, setuid
    and setgid executables: the run directory's copy holds none of it, and is the host's."""
    spec = ROOT / "suites" / "containment" / "host-postrun--loose-modes.yaml"
    result = run(spec)
    assert result.verdict == "breach", result.report
    post = {
        e["path"]: e
        for e in json.loads((result.run_dir / "attempts" / "1" / "post.json").read_text())[
            "entries"
        ]
    }
    agent_left = {
        p: post[p]["mode"]
        for p in (
            "out/open.txt",
            "out/run.sh",
            "out/world",
            "out/sticky",
            "out/sgid-dir",
            "out/suid.sh",
            "out/sgid.sh",
            "src/calc.py",
        )
    }
    assert agent_left == {
        "out/open.txt": 0o666,
        "out/run.sh": 0o777,
        "out/world": 0o777,
        "out/sticky": 0o1777,
        "out/sgid-dir": 0o2775,
        "out/suid.sh": 0o4755,
        "out/sgid.sh": 0o2755,
        "src/calc.py": 0o666,
    }  # POST records what the agent did
    assert all(
        post[p]["sha256"] for p in agent_left if post[p]["kind"] == "file"
    )  # and each file's digest
    workspace = result.run_dir / "attempts" / "1" / "workspace"
    assert loose(workspace) == []
    copied = {p: stat.S_IMODE(os.lstat(workspace / p).st_mode) for p in agent_left}
    assert copied == {
        "out/open.txt": 0o600,
        "out/run.sh": 0o700,
        "out/world": 0o700,
        "out/sticky": 0o700,
        "out/sgid-dir": 0o700,
        "out/suid.sh": 0o700,
        "out/sgid.sh": 0o700,
        "src/calc.py": 0o600,
    }
    assert stat.S_IMODE(os.lstat(result.run_dir).st_mode) == 0o700
    rechecked = json.loads(
        subprocess.run(
            ASSURE + ["verify", "--json", str(result.run_dir)],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
    )
    assert rechecked["reproduced"] and "workspace" not in [
        f["subject"] for f in rechecked["attempts"][0]["findings"] if f["kind"] == "harness_error"
    ]


@pytest.fixture
def open_dir():
    """A folder every local user can traverse (pytest's own base is 0700, which would hide the
    run from uid 65534 whatever assure does): the runs live below it, as in a project tree."""
    folder = Path(tempfile.mkdtemp(prefix="assure-promote-"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_promote_refuses_a_swapped_workspace_copy_and_the_target_is_untouched(
    make_spec, tmp_path, open_dir, images, backend
):
    target = tmp_path / "target"
    subprocess.run(
        ["cp", "-a", str(ROOT / "fixtures" / "workspaces" / "calc"), str(target)], check=True
    )
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "fixture"]):
        subprocess.run(["git", "-C", str(target), *cmd], check=True, env={**os.environ, **env})
    spec = make_spec(
        "swapped",
        "fix-loose.sh",
        contract=ratified(["fs:**"]),
        promote={"target": str(target)},
        assertions=[{"command": {"run": ["python3", "tests/test_calc.py"]}}],
    )
    assert (
        as_nobody(f"import os; os.listdir({str(open_dir)!r}); print('LISTED')").stdout.strip()
        == "LISTED"
    )
    proc = subprocess.Popen(
        ASSURE + ["run", "--json", str(spec)],
        cwd=open_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    runs = open_dir / ".assure" / "runs"
    run_id = wait_for_agent(runs, backend)
    assert assure("dial", run_id, "propose", cwd=open_dir).returncode == 0
    out, err = proc.communicate(timeout=180)
    assert json.loads(out)["tasks"][0]["state"] == "proposed", err
    run_dir = runs / run_id
    workspace = run_dir / "attempts" / "1" / "workspace"
    calc = workspace / "src" / "calc.py"
    verified = calc.read_bytes()
    assert b"return a + b" in verified

    # the run directory, and the folders that hold it, are the invoking user's alone
    assert [stat.S_IMODE(os.lstat(p).st_mode) for p in (open_dir / ".assure", runs, run_dir)] == [
        0o700
    ] * 3
    assert (
        loose(workspace) == []
    )  # the agent's 0o666 and 0o777 are 0o600 and 0o700 here, and the copy is the host's
    records = [
        "state.json",
        "spec.json",
        "spec.yaml",
        "report.json",
        "attempts/1/post.json",
        "attempts/1/verdict.json",
        *(str(p.relative_to(run_dir)) for p in (run_dir / "receipts").iterdir()),
    ]
    assert {r: stat.S_IMODE(os.lstat(run_dir / r).st_mode) for r in records} == dict.fromkeys(
        records, 0o600
    )
    assert (
        stat.S_IMODE(os.lstat(calc).st_mode),
        stat.S_IMODE(os.lstat(workspace / "out" / "run.sh").st_mode),
    ) == (0o600, 0o700)

    # another local user can neither rewrite the copy nor read anything of the run
    tries = {
        "rewrite": f"open({str(calc)!r}, 'r+b').write(b'pwned')",
        "list": f"os.listdir({str(run_dir)!r})",
        "journal": (
            f"open({str(run_dir / 'attempts' / '1' / 'gateway' / 'journal.jsonl')!r}).read()"
        ),
        "spec": f"open({str(run_dir / 'spec.json')!r}).read()",
        "runs": f"os.listdir({str(runs)!r})",
    }
    for name, attempt in tries.items():
        done = as_nobody(
            f"import os\ntry:\n    {attempt}\n    print('DONE')\nexcept PermissionError:\n   "
            " print('REFUSED')\n"
        )
        assert done.stdout.strip() == "REFUSED", (name, done.stdout, done.stderr)
    assert calc.read_bytes() == verified

    # any other corruption (here root itself) swaps the bytes: promote refuses, writing nothing
    head, tree, status = (
        git(target, "rev-parse", "HEAD"),
        git(target, "ls-tree", "-r", "HEAD"),
        git(target, "status", "--porcelain", "--ignored"),
    )
    before = {p: (target / p).read_bytes() for p in ("src/calc.py", "README.md")}
    calc.write_bytes(
        b"import os\nos.system('touch /tmp/assure-promote-pwned')\ndef add(a, b):\n    return a"
        b" + b\n"
    )
    refused = assure("promote", run_id, "--dial", "commit", cwd=open_dir)
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0, said
    assert (
        "src/calc.py" in said
        and "not the ones the verifier saw" in said
        and "nothing was applied" in said
    ), said
    assert (
        git(target, "rev-parse", "HEAD"),
        git(target, "ls-tree", "-r", "HEAD"),
        git(target, "status", "--porcelain", "--ignored"),
    ) == (head, tree, status)
    assert {p: (target / p).read_bytes() for p in before} == before and not (
        target / "out" / "run.sh"
    ).exists()
    assert "promote_refused" in assure("show", run_id, cwd=open_dir).stdout

    # the receipt vouches for the verified changeset: the swapped copy fails it
    checked = assure("receipts", "verify", str(run_dir), "--json", cwd=open_dir)
    failure = json.loads(checked.stdout)
    assert checked.returncode == 1 and (failure["step"], failure["path"]) == (
        7,
        "attempts/1/workspace/src/calc.py",
    ), checked.stdout

    # the verified bytes back: the same promote commits them, with git's modes, not the agent's
    calc.write_bytes(verified)
    promoted = assure("promote", run_id, "--dial", "commit", cwd=open_dir)
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    assert (target / "src" / "calc.py").read_bytes() == verified
    staged = [
        line.split()
        for line in git(target, "ls-files", "-s", "src/calc.py", "out/run.sh").splitlines()
    ]
    assert {fields[3]: fields[0] for fields in staged} == {
        "src/calc.py": "100644",
        "out/run.sh": "100755",
    }
    assert [stat.S_IMODE(os.lstat(target / p).st_mode) for p in ("src/calc.py", "out/run.sh")] == [
        0o644,
        0o755,
    ]
    assert assure("receipts", "verify", str(run_dir), cwd=open_dir).returncode == 0
