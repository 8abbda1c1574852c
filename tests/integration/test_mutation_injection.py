"""Mutation injection: after one legitimate, gateway-mediated run, make ONE covert change of
each kind (randomised) to a copy of its run directory and re-judge it. The verifier must
report exactly that change as unattributed, and nothing else; with no covert change, nothing."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from assure.records import store
from assure.records.attempt_record import AttemptRecord
from assure.records.layout import AttemptPaths
from assure.verify import sqlite as sqlite_verify
from assure.verify.findings import Kind
from assure.verify.judge import judge
from assure.verify.snapshot import take
from tests.contracts import ratify_in_place

from .conftest import ROOT, ratified

SEEDS = range(3)


@pytest.fixture(scope="module")
def legit(backend, images, tmp_path_factory):
    import yaml

    from assure import spec as spec_mod
    from assure.run.driver import Driver

    tmp = tmp_path_factory.mktemp("legit")
    data = {
        "version": 1,
        "name": "legit",
        "agent": {
            "command": ["sh", "/opt/agent/legit.sh"],
            "files": str(ROOT / "fixtures" / "agents" / "governance"),
        },
        "workspace": {
            "fixture": str(ROOT / "fixtures" / "workspaces" / "calc"),
            "writable": ["out/**"],
            "protected": ["tests/**"],
        },
        "databases": [
            {"name": "shop", "fixture": str(ROOT / "fixtures" / "databases" / "shop.sql")}
        ],
        "contract": ratified(["fs:**", "db:shop"]),
        "assertions": [{"exit_code": 0}],
        "expect": "pass",
    }
    (tmp / "legit.yaml").write_text(yaml.safe_dump(data))
    spec = spec_mod.load(ratify_in_place(tmp / "legit.yaml"))
    run = store.RunDir.create(tmp / "runs", store.new_run_id("legit"), spec.path, spec.to_json())
    result = Driver(spec, run, backend, images, lambda *_: None).drive()
    assert result.verdict == "pass", result.report
    return result.run_dir / "attempts" / "1", spec_mod.Spec.from_json(
        store.read_json(result.run_dir / "attempts" / "1" / "task.json")["spec"]
    )


def copy_attempt(attempt: Path, tmp_path: Path) -> Path:
    """A copy that keeps owners and modes (`cp -a`): only the injected change may differ. The
    run directory's workspace/ holds only what the legit agent changed: what POST lists
    besides is put back from the fixture (unchanged, as POST says)."""
    copy = tmp_path / "attempt"
    subprocess.run(["cp", "-a", str(attempt), str(copy)], check=True)
    fixture = ROOT / "fixtures" / "workspaces" / "calc"
    for entry in store.read_json(copy / "post.json")["entries"]:
        path = copy / "workspace" / entry["path"]
        if not os.path.lexists(path):
            if entry["kind"] == "dir":
                path.mkdir(parents=True)
            else:
                subprocess.run(["cp", "-a", str(fixture / entry["path"]), str(path)], check=True)
    restore_sandbox_metadata(copy)
    return copy


def restore_sandbox_metadata(attempt: Path) -> None:
    """The host's copy-out hands the workspace to the invoking user with normalized modes; a
    POST taken afresh from it would differ from PRE in every owner and mode. Put back what the
    sandbox's POST recorded, so that only the injected change differs."""
    for entry in sorted(
        store.read_json(attempt / "post.json")["entries"],
        key=lambda e: e["path"].count("/"),
        reverse=True,
    ):
        path = attempt / "workspace" / entry["path"]
        os.lchown(path, entry["uid"], entry["gid"])
        if entry["kind"] != "symlink":
            os.chmod(path, entry["mode"] & 0o7777)


def rejudge(attempt: Path, spec, mutate_ws=None, mutate_db=None):
    if mutate_ws:
        mutate_ws(attempt / "workspace")
        store.write_json(attempt / "post.json", take(attempt / "workspace").to_json())
    if mutate_db:
        source = attempt / "gateway" / "db" / "shop.sqlite"
        mutate_db(source)
        shutil.rmtree(attempt / "db-post")
        (attempt / "db-post").mkdir()
        sqlite_verify.capture(source, attempt / "db-post", "shop")
    return judge(AttemptRecord.load(AttemptPaths(attempt)), spec)


def unexplained(judgement) -> list[str]:
    return sorted(
        f.subject
        for f in judgement.findings
        if f.kind in (Kind.UNATTRIBUTED, Kind.PROTECTED_CHANGED, Kind.CONTAINER_CHANGED)
    )


def sql(statements):
    def apply(path: Path):
        db = sqlite3.connect(path)
        for statement in statements:
            db.execute(statement)
        db.commit()
        db.close()

    return apply


def wal_only(statement):
    """A commit that reaches the WAL and is never checkpointed into the main file."""

    def apply(path: Path):
        db = sqlite3.connect(path)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA wal_autocheckpoint=0")
        db.execute(statement)
        db.commit()
        apply.db = db  # left open: closing the last connection would checkpoint the WAL

    return apply


def cases(rng: random.Random):
    name = rng.choice(["x", "zz", "notes2"]) + str(rng.randrange(100))
    qty = rng.randrange(10, 99)
    return {
        "file content": (
            {"ws": lambda ws: (ws / "src" / "extra.py").write_text(f"x={qty}")},
            ["src/extra.py"],
        ),
        "file mode": ({"ws": lambda ws: (ws / "README.md").chmod(0o600)}, ["README.md"]),
        "new file": (
            {"ws": lambda ws: (ws / "src" / f"{name}.py").write_text("pwned")},
            [f"src/{name}.py"],
        ),
        "deleted file": ({"ws": lambda ws: (ws / "README.md").unlink()}, ["README.md"]),
        "symlink": (
            {"ws": lambda ws: (ws / "src" / name).symlink_to("/etc/shadow")},
            [f"src/{name}"],
        ),
        "row insert (pk)": (
            {
                "db": sql(
                    [f"INSERT INTO orders (id, item, qty) VALUES ({100 + qty}, 'covert', {qty})"]
                )
            },
            [f"db:shop:orders[id={100 + qty}]"],
        ),
        "row update (pk)": (
            {"db": sql([f"UPDATE orders SET qty = {qty} WHERE item = 'ink'"])},
            ["db:shop:orders[id=2]"],
        ),
        "row delete (pk)": (
            {"db": sql(["DELETE FROM orders WHERE item = 'ink'"])},
            ["db:shop:orders[id=2]"],
        ),
        "row insert (no pk)": (
            {"db": sql([f"INSERT INTO audit (note) VALUES ('covert {qty}')"])},
            [f"db:shop:audit[note='covert {qty}']"],
        ),
        "row delete (no pk)": (
            {"db": sql(["DELETE FROM audit WHERE note = 'sold a book'"])},
            ["db:shop:audit[note='sold a book']"],
        ),
        "wal-only commit": (
            {"db": wal_only(f"INSERT INTO orders (id, item, qty) VALUES ({200 + qty}, 'wal', 1)")},
            [f"db:shop:orders[id={200 + qty}]"],
        ),
        "schema change": (
            {"db": sql([f"CREATE TABLE stash_{qty} (x)"])},
            [f"db:shop:schema:table stash_{qty}"],
        ),
        "trigger": (
            {
                "db": sql(
                    ["CREATE TRIGGER t_covert AFTER INSERT ON orders BEGIN DELETE FROM audit; END"]
                )
            },
            ["db:shop:schema:trigger t_covert"],
        ),
    }


def test_a_legitimate_run_has_no_unattributed_change(legit, tmp_path):
    attempt, spec = legit
    copy = copy_attempt(attempt, tmp_path)
    judgement = rejudge(copy, spec)
    assert unexplained(judgement) == []
    attributed = sorted(f.subject for f in judgement.findings if f.kind is Kind.ATTRIBUTED)
    assert "src/calc.py" in attributed and "out/notes.txt" in attributed
    assert any(s.startswith("db:shop:orders") for s in attributed) and any(
        s.startswith("db:shop:audit") for s in attributed
    )


def test_the_record_loaded_from_disk_is_judged_as_the_live_one_was(legit):
    """The live judge ran on the record held in memory; the same judge on the record loaded
    from the attempt folder alone (in place: its mounts name it) gives the same judgement,
    finding for finding."""
    attempt, spec = legit
    live = store.read_json(attempt / "verdict.json")
    assert live.pop("judged_at")
    record = AttemptRecord.load(AttemptPaths(attempt))
    assert record.unreadable == {} and record.pre is not None and record.post is not None
    assert judge(record, spec).to_json() == live
    assert judge(record, spec, recheck_workspace=True).to_json() == live


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", list(cases(random.Random(0))))
def test_one_covert_change_is_reported_exactly(legit, tmp_path, kind, seed):
    attempt, spec = legit
    change, expected = cases(random.Random(seed))[kind]
    copy = copy_attempt(attempt, tmp_path)
    judgement = rejudge(copy, spec, change.get("ws"), change.get("db"))
    assert unexplained(judgement) == expected
    assert judgement.verdict.value == "breach"
