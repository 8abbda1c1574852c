"""`assure init DIR`: a first project a new user can run at once and then edit: a commented
spec, its agent (a tiny one of your own that works through the gateway, or a stock agent's
preset with scripted model answers for the same task), a workspace fixture, a suite of the one
spec and a README stub. The spec's contract is hashed as written (`run/ratify.py`), so `validate`
passes and `assure run` passes on its first try. Nothing that exists is overwritten."""

from __future__ import annotations

import json
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
SCRIPT = "script"  # an agent of your own: agent/run.sh
# the stock agents (assure/presets.py) init can answer with a script for its task; openai-sdk
# is left out: it runs a script of your own too (agent.files), which `script` already is
PRESET_KINDS = ("claude-code", "mini-swe-agent")
KINDS = (SCRIPT, *PRESET_KINDS)
WORKSPACE = "/workspace"  # where the agent container sees the workspace (sandbox/hardening.py)


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
    agent: str = SCRIPT  # one of KINDS
    workspace: Path | None = None  # a folder of your own files; None: a small one written here


def check_kind(kind: str) -> None:
    """Refuse an agent kind init cannot write, naming the ones it can."""
    if kind not in KINDS:
        raise AssureError(
            f"no agent kind `{kind}`",
            where="--agent",
            fix="pass one of: " + ", ".join(KINDS),
        )


AGENT = """#!/bin/sh
# The agent: it runs in a sealed container with no network; its only way out is the gateway,
# reached with `assure-tool TOOL key=value ...`. Replace this with your own agent's command.
set -eu
assure-tool {look} > /dev/null
assure-tool fs.write path={out} content="hello from the agent" > /dev/null
{db}assure-tool task.report status=done summary="wrote {out}" > /dev/null
echo "agent finished"
"""

SPEC = """# {name}: written by `assure init`. Edit it, then `assure validate spec.yaml`.
# The reference for every field: README.md (Spec reference) or specs/spec.schema.json.
version: 1
name: {name}
description: {description}
{agent}# The workspace is copied fresh for every attempt (the original is never touched); the agent
# may change only `writable` paths, and any change under `protected` is a breach.
workspace:
  fixture: {fixture}
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
{databases}{limits}
# Judged by ground truth after the agent is gone: what is in the workspace and the gateway's journal.
assertions:
  - file_contains: {{path: {out}, text: "hello from the agent"}}
  - journal_has: {journal_has}
{db_assertion}  - no_unattributed_changes: true
  - exit_code: 0
expect: pass
"""  # noqa: E501 -- a multi-line text whose lines are its content

OWN_AGENT = """agent:
  command: [sh, /opt/agent/run.sh]   # what runs in the agent container
  files: agent                       # copied read-only to /opt/agent
"""

PRESET_AGENT = """# {kind}, the stock agent, unmodified (assure/presets.py): built into a derived agent image
# once, offline (`assure images build spec.yaml`, or the first run); the description above is
# its prompt, and it edits the workspace itself (so `writable` must cover what it writes).
agent:
  preset: {kind}
# Its model's answers are scripted for this task (model/answers.json), so it runs with no key
# and no network. For the real model: `mode: anthropic` in place of `mode: scripted` and
# `script:`, and ANTHROPIC_API_KEY set on the host (the gateway holds the key: it never enters
# the agent's container). The model block is not a contract term: no new ratification.
model:
  mode: scripted
  script: model/answers.json
  prices: {{claude-sonnet-4-6: {{input: 3, output: 15}}}}   # USD per million tokens: the cost
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
{agent}- `{fixture}`: the files the agent works on, copied fresh for every attempt.
{real}"""

OWN_README = """- `agent/run.sh`: the agent (replace it; it reaches out only through `assure-tool`).
"""

PRESET_README = """- `model/answers.json`: the model's answers to {kind}, scripted for this task.
"""

REAL_MODEL = """
## A real model

The first run needs no key: {kind}'s model answers come from `model/answers.json`. To give
it the real model, edit `model:` in `spec.yaml`:

    model:
      mode: anthropic
      prices: {{claude-sonnet-4-6: {{input: 3, output: 15}}}}

and set the key on the host before `assure run spec.yaml`:

    export ANTHROPIC_API_KEY=sk-ant-...

The gateway holds the key and adds it upstream (through the egress proxy); it never enters the
agent's container, the journal or the reports. `limits.tokens` (default: the preset's) bounds
what a run may spend; the task is the spec's `description`.
"""  # noqa: E501 -- a multi-line text whose lines are its content


def _message(n: int, text: str, tool: tuple[str, dict[str, str]] | None) -> dict[str, object]:
    """One scripted Messages response (the script format: specs/spec.schema.json
    `$defs.model_script`): a text block, then a tool call if any, else the end of the turn."""
    content: list[dict[str, object]] = [{"type": "text", "text": text}]
    if tool is not None:
        content.append(
            {"type": "tool_use", "id": f"toolu_init_{n}", "name": tool[0], "input": tool[1]}
        )
    return {
        "id": f"msg_init_{n}",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": content,
        "stop_reason": "tool_use" if tool is not None else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 1000,
            "output_tokens": 80,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def answers(kind: str, out: str, db_command: str | None) -> list[dict[str, object]]:
    """The model's answers to a preset's agent for init's task, in the order it asks: write
    `out` (and the database row), then finish, each in the agent's own tools (Claude Code's
    Write and Bash, mini-swe-agent's bash actions and its submit line)."""
    steps: list[tuple[str, tuple[str, dict[str, str]] | None]]  # (text, tool call or the end)
    if kind == "claude-code":
        steps = [
            (
                "Writing the file.",
                ("Write", {"file_path": f"{WORKSPACE}/{out}", "content": "hello from the agent\n"}),
            )
        ]
        if db_command:
            steps.append(("Adding the row.", ("Bash", {"command": db_command})))
        steps.append((f"Done: wrote {out}.", None))
    elif kind == "mini-swe-agent":
        parent = out.rsplit("/", 1)[0] if "/" in out else "."
        write = f"mkdir -p {parent} && printf 'hello from the agent\\n' > {out}"
        steps = [
            (
                "Writing the file.",
                ("bash", {"command": write + (f" && {db_command}" if db_command else "")}),
            ),
            (
                "Done. Submitting.",
                ("bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}),
            ),
        ]
    else:
        raise ValueError(f"no scripted answers for {kind}")  # KINDS and this function disagree
    return [_message(n, text, tool) for n, (text, tool) in enumerate(steps, 1)]


def _flow(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"


def create(folder: Path, choices: Choices) -> list[Path]:
    """Write the project into `folder` (made if missing); refuse, writing nothing, a bad name,
    a path outside the workspace, or a file that is there already. Returns what it wrote."""
    check_kind(choices.agent)
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
    fixture = "workspace"
    if choices.workspace is not None:
        given = choices.workspace.absolute()
        if not given.is_dir():
            raise AssureError(
                f"`{choices.workspace}` is not a folder",
                where="--workspace",
                fix="pass the folder of files the agent works on (or leave it out for a small one)",
            )
        fixture = os.path.relpath(given, folder.absolute())  # the spec's paths are its folder's
    scope = tuple(f"fs:{g}" for g in choices.writable) + ((f"db:{db}",) if db else ())
    db_command = (
        f"assure-tool db.execute db={db} sql=\"INSERT INTO notes (text) VALUES ('hello')\""
        if db
        else None
    )
    kind = choices.agent
    own = kind == SCRIPT
    if own:
        agent_files = {
            "agent/run.sh": AGENT.format(
                out=out,
                db=f"{db_command} > /dev/null\n" if db else "",
                look="fs.list path=." if choices.workspace else "fs.read path=src/greeting.txt",
            )
        }
    else:
        agent_files = {
            "model/answers.json": json.dumps(answers(kind, out, db_command), indent=2) + "\n"
        }
    description = (
        f"A first spec - the agent writes {out} through the gateway."
        if own
        else f"Write the file {out} with the one line: hello from the agent."
        + (f" Then add a row to the {db} database's notes table with: {db_command}" if db else "")
    )
    files = {
        "spec.yaml": SPEC.format(
            name=choices.name,
            out=out,
            description=json.dumps(description),  # a YAML double-quoted scalar
            agent=OWN_AGENT if own else PRESET_AGENT.format(kind=kind),
            limits=(
                "limits:\n  wall_seconds: 60\n  tool_calls: 20"
                if own
                else "limits: {wall_seconds: 120, memory: 1g}   # tokens: the preset's default"
            ),
            journal_has=(
                f"{{tool: fs.write, decision: allow, path: {out}}}"
                if own
                else "{event: model_call}   # its model was asked, through the gateway"
            ),
            fixture=json.dumps(fixture),
            writable=_flow(choices.writable),
            protected=_flow(choices.protected),
            proposed_by=choices.proposed_by,
            ratified_by=choices.ratified_by,
            scope=_flow(scope),
            databases=DATABASES.format(db=db) if db else "",
            db_assertion="  - journal_has: {tool: db.execute, decision: allow}\n" if db else "",
        ),
        "suite.yaml": SUITE.format(name=choices.name),
        "README.md": README.format(
            name=choices.name,
            agent=OWN_README if own else PRESET_README.format(kind=kind),
            real="" if own else REAL_MODEL.format(kind=kind),
            fixture=fixture.rstrip("/") + "/",
        ),
        **agent_files,
        **(
            {
                f"databases/{db}.sql": (
                    "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL);\n"
                )
            }
            if db
            else {}
        ),
    }
    if choices.workspace is None:
        files["workspace/src/greeting.txt"] = "hello from the fixture\n"
        files[f"workspace/{out.rsplit('/', 1)[0]}/.keep" if "/" in out else "workspace/.keep"] = ""
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
