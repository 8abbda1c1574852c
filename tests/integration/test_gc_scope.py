"""`assure gc` on the real engine takes only what is its user's to take: an orphan this user's
process left, or one of a run in its --runs-dir; another user's orphan only with --all-users.
`--dry-run` lists them and removes nothing (only dry runs here: a real gc on a shared engine
would take other tests' orphans of this same user)."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

ASSURE = [sys.executable, "-m", "assure.cli"]
OTHER_UID = "54321"


def volume(name: str, uid: str, run: str) -> None:
    labels = {
        "assure.owner": "assure",
        "assure.pid": "999999999",
        "assure.host": socket.gethostname(),
        "assure.uid": uid,
        "assure.run": run,
    }
    subprocess.run(
        ["docker", "volume", "create", *(f"--label={k}={v}" for k, v in labels.items()), name],
        check=True,
        capture_output=True,
        timeout=60,
    )


def gc(runs: Path, *flags: str) -> list[str]:
    done = subprocess.run(
        ASSURE + ["gc", "--dry-run", "--runs-dir", str(runs), *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_gc_takes_this_user_s_and_this_runs_folder_s_orphans_and_a_dry_run_removes_nothing(
    tmp_path: Path, backend
) -> None:
    tag = secrets.token_hex(4)
    runs = tmp_path / "runs"
    here = f"fh-here-20260101T000000Z-{tag[:6]}"
    (runs / here).mkdir(parents=True)
    names = {
        "mine": f"fh-gc-mine-{tag}",
        "foreign": f"fh-gc-foreign-{tag}",
        "here": f"fh-gc-here-{tag}",
    }
    volume(names["mine"], str(os.getuid()), f"fh-elsewhere-20260101T000000Z-{tag[:6]}")
    volume(names["foreign"], OTHER_UID, f"fh-elsewhere-20260101T000000Z-{tag[:6]}")
    volume(names["here"], OTHER_UID, here)  # another user's, but a run of this runs folder
    try:
        listed = gc(runs)
        assert (
            f"would remove volume {names['mine']}" in listed
            and f"would remove volume {names['here']}" in listed
        ), listed
        assert f"would remove volume {names['foreign']}" not in listed, listed
        everyone = gc(runs, "--all-users")
        assert all(f"would remove volume {n}" in everyone for n in names.values()), everyone
        left = {v["name"] for v in backend.owned()["volumes"]}
        assert set(names.values()) <= left  # a dry run removed nothing
        as_json = json.loads(
            subprocess.run(
                ASSURE + ["gc", "--dry-run", "--json", "--runs-dir", str(runs)],
                capture_output=True,
                text=True,
                timeout=120,
            ).stdout
        )
        assert as_json["dry_run"] is True and f"volume {names['mine']}" in as_json["names"]
    finally:
        subprocess.run(
            ["docker", "volume", "rm", "-f", *names.values()], capture_output=True, timeout=60
        )
