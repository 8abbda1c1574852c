"""`assure init DIR`: a first project a new user can run at once and then edit: a commented
spec, a tiny agent that works through the gateway, a workspace fixture, a suite of the one spec
and a README stub. The spec's contract is hashed as written (`run/ratify.py`), so `validate`
passes and `assure run` passes on its first try. Nothing that exists is overwritten."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from assure import spec as spec_mod
from assure.errors import AssureError
from assure.records import keys
from assure.run import ratifiers, ratify

NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
DB_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")  # the schema's
PERSON = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$")  # written into the YAML as it is


@dataclass(frozen=True)
class Choices:
    """What `assure init` asks (its flags): every answer has a default that runs."""

    name: str = "my-first-spec"
    writable: tuple[str, ...] = ("out/**",)
    protected: tuple[str, ...] = ("src/**",)
    proposed_by: str = field(
        default_factory=lambda: (
            f"{re.sub(r'[^A-Za-z0-9._+-]', '', os.environ.get('USER', '')) or 'you'}@localhost"
        )
    )
    ratified_by: str = "reviewer@localhost"
    database: str | None = (
        None  # a SQLite database the gateway owns (the agent writes a row through db.execute)
    )


AGENT = """#!/bin/sh
# The agent: it runs in a sealed container with no network; its only way out is the gateway,
# reached with `assure-tool TOOL key=value ...`. Replace this with your own agent's command.
set -eu
assure-tool fs.read path=src/greeting.txt > /dev/null
assure-tool fs.write path={out} content="hello from the agent" > /dev/null
{db}assure-tool task.report status=done summary="wrote {out}" > /dev/null
echo "agent finished"
"""

SPEC = """# {name}: written by `assure init`. Edit it, then `assure validate spec.yaml`.
# The reference for every field: README.md (Spec reference) or specs/spec.schema.json.
version: 1
name: {name}
description: A first spec - the agent writes {out} through the gateway.
agent:
  command: [sh, /opt/agent/run.sh]   # what runs in the agent container
  files: agent                       # copied read-only to /opt/agent
# The workspace is copied fresh for every attempt (the original is never touched); the agent
# may change only `writable` paths, and any change under `protected` is a breach.
workspace:
  fixture: workspace
  writable: {writable}
  protected: {protected}
# The contract says what the agent may touch; someone other than its proposer ratifies it.
# The ratifier signs the terms with their key: edit them and the gate refuses the contract
# until it is ratified again, `assure contract ratify spec.yaml --as NAME` (their key must be
# in the trusted-ratifiers keyring). autonomy_ceiling propose: results are only proposed.
contract:
  id: {name}
  proposed_by: {proposed_by}
  ratified_by: {ratified_by}
  scope: {scope}
  autonomy_ceiling: propose
{databases}limits:
  wall_seconds: 60
  tool_calls: 20
# Judged by ground truth after the agent is gone: what is in the workspace and the gateway's journal.
assertions:
  - file_contains: {{path: {out}, text: "hello from the agent"}}
  - journal_has: {{tool: fs.write, decision: allow, path: {out}}}
{db_assertion}  - no_unattributed_changes: true
  - exit_code: 0
expect: pass
"""  # noqa: E501 -- a multi-line text whose lines are its content

DATABASES = """# A SQLite database the gateway owns (the agent never sees its file): sandbox mode, a copy per attempt.
databases:
  - {{name: {db}, fixture: databases/{db}.sql, mode: sandbox}}
"""  # noqa: E501 -- a multi-line text whose lines are its content

SUITE = """# A suite: `assure suite suite.yaml` runs each spec and checks each verdict is its `expect`.
version: 1
name: {name}-suite
specs:
  - spec.yaml
"""  # noqa: E501 -- a multi-line text whose lines are its content

README = """# {name}

Written by `assure init`. From this folder (`assure` is your assure checkout's `.venv/bin/assure`):

    assure validate spec.yaml      # the spec as the gate will judge it
    assure run spec.yaml           # one run: fresh sandbox, verdict, receipts
    assure suite suite.yaml        # every spec of the suite

- `spec.yaml`: what runs, what it may touch, how it is judged.
- `agent/run.sh`: the agent (replace it with yours; it reaches out only through `assure-tool`).
- `workspace/`: the files the agent works on, copied fresh for every attempt.
"""


def _flow(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"


def create(folder: Path, choices: Choices) -> list[Path]:
    """Write the project into `folder` (made if missing); refuse, writing nothing, a bad name,
    a path outside the workspace, or a file that is there already. Returns what it wrote."""
    if not NAME.match(choices.name):
        raise AssureError(
            f"`{choices.name}` is not a spec name",
            where="--name",
            fix="use lowercase letters, digits and dashes, at most 40",
        )
    for flag, person in (
        ("--proposed-by", choices.proposed_by),
        ("--ratified-by", choices.ratified_by),
    ):
        if not PERSON.match(person):
            raise AssureError(
                f"`{person}` is not a name for the contract",
                where=flag,
                fix="use letters, digits and . _ @ + - (e.g. ann@example.org)",
            )
    if choices.proposed_by == choices.ratified_by:
        raise AssureError(
            "the contract's proposer would ratify it: the gate refuses that",
            where="--ratified-by",
            fix="name someone other than --proposed-by",
        )
    for flag, globs in (("--writable", choices.writable), ("--protected", choices.protected)):
        for glob in globs:
            if (
                not glob
                or glob.startswith("/")
                or ".." in glob.split("/")
                or any(c in glob for c in '"\n\\')
            ):
                raise AssureError(
                    f"`{glob}` is not a path glob inside the workspace",
                    where=flag,
                    fix='pass a relative glob such as "out/**"',
                )
    out = choices.writable[0].split("*")[0].rstrip("/")
    out = f"{out}/hello.txt" if out else "hello.txt"
    db = choices.database
    if db is not None and not DB_NAME.match(db):
        raise AssureError(
            f"`{db}` is not a database name",
            where="--database",
            fix="use a lowercase letter, then letters, digits or _ (at most 32)",
        )
    scope = tuple(f"fs:{g}" for g in choices.writable) + ((f"db:{db}",) if db else ())
    files = {
        "spec.yaml": SPEC.format(
            name=choices.name,
            out=out,
            writable=_flow(choices.writable),
            protected=_flow(choices.protected),
            proposed_by=choices.proposed_by,
            ratified_by=choices.ratified_by,
            scope=_flow(scope),
            databases=DATABASES.format(db=db) if db else "",
            db_assertion="  - journal_has: {tool: db.execute, decision: allow}\n" if db else "",
        ),
        "suite.yaml": SUITE.format(name=choices.name),
        "README.md": README.format(name=choices.name),
        "agent/run.sh": AGENT.format(
            out=out,
            db=(
                f"assure-tool db.execute db={db} sql=\"INSERT INTO notes (text) VALUES ('hello')\""
                " > /dev/null\n"
                if db
                else ""
            ),
        ),
        **(
            {
                f"databases/{db}.sql": (
                    "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL);\n"
                )
            }
            if db
            else {}
        ),
        "workspace/src/greeting.txt": "hello from the fixture\n",
        f"workspace/{out.rsplit('/', 1)[0]}/.keep" if "/" in out else "workspace/.keep": "",
    }
    there = [name for name in files if (folder / name).exists() or (folder / name).is_symlink()]
    if there:
        raise AssureError(
            f"already there: {', '.join(there)}",
            where=str(folder),
            fix="pass an empty or new folder to `assure init`",
        )
    written = []
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    spec = spec_mod.load(folder / "spec.yaml")
    ratify.write(
        spec, ratify.compute(spec)
    )  # the terms as written: ratified by `ratified_by`, who should read them
    return written


def ratify_as_you(path: Path, name: str) -> str:
    """Sign the written contract as `name` with your own key (made if you have none), and
    trust that key for `name` in your keyring if it holds none for it: you chose these terms
    just now. After an edit, review them and `assure contract ratify` again."""
    directory = keys.default_key_dir()
    if not (directory / keys.PRIVATE_NAME).exists():
        keys.generate_keypair(directory)
    key = keys.load_private(directory / keys.PRIVATE_NAME)
    spec = spec_mod.load(path)
    signature = ratify.sign(spec, ratify.compute(spec), name, key)
    keyring = ratifiers.own()
    try:
        ratifiers.trust(keyring, name, key.public_key())
    except ratifiers.KeyringError as exc:
        return f"signed as {name} with {signature['key_id']}, but not trusted: {exc.explain()}"
    return (
        f"ratified the contract as {name} with your key {signature['key_id']}"
        f" (trusted in {keyring})"
    )
