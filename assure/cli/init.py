"""`assure init`: write a first project that validates and passes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from assure.cli.common import (
    _fail,
)
from assure.cli.output import (
    out,
    plain,
)
from assure.cli.root import app
from assure.errors import AssureError


@app.command()
def init(
    folder: Path = typer.Argument(
        Path("."),
        metavar="DIR",
        help=(
            "Where to write the project (default: here); made if missing, nothing in it"
            " overwritten."
        ),
    ),
    name: str = typer.Option(
        "my-first-spec",
        "--name",
        metavar="NAME",
        help="The spec's name (lowercase letters, digits, dashes).",
    ),
    writable: list[str] | None = typer.Option(
        None,
        "--writable",
        metavar="GLOB",
        help="A path the agent may change (repeatable; default: out/**).",
    ),
    protected: list[str] | None = typer.Option(
        None,
        "--protected",
        metavar="GLOB",
        help="A path whose change is a breach (repeatable; default: src/**).",
    ),
    proposed_by: str | None = typer.Option(
        None,
        "--proposed-by",
        metavar="NAME",
        help="Who proposes the contract (default: $USER@localhost).",
    ),
    ratified_by: str = typer.Option(
        "reviewer@localhost",
        "--ratified-by",
        metavar="NAME",
        help="Who ratifies it: someone other than the proposer.",
    ),
    database: str | None = typer.Option(
        None,
        "--database",
        metavar="NAME",
        help="Also a SQLite database the gateway owns, which the agent writes a row to.",
    ),
    agent: str | None = typer.Option(
        None,
        "--agent",
        metavar="KIND",
        help=(
            "script (default): a tiny agent of your own; or a stock agent's preset, its model"
            " answers scripted for the task: claude-code, mini-swe-agent."
        ),
    ),
    workspace: Path | None = typer.Option(
        None,
        "--workspace",
        metavar="DIR",
        help=(
            "A folder of your own files for the agent to work on (default: a small one written"
            " in DIR/workspace); the spec names it, copied fresh for every attempt."
        ),
    ),
    ask: bool | None = typer.Option(
        None,
        "--ask/--no-ask",
        help="Ask for each choice no flag gave (default: when the input is a terminal).",
    ),
) -> None:
    """Write a first project: a commented spec, its agent (a tiny one of your own, or a stock
    agent with scripted model answers), its workspace, a suite and a README stub. `assure
    validate` passes on them and `assure run spec.yaml` passes as written."""
    import sys

    from assure.ops import init as scaffold

    try:
        if agent is not None:
            scaffold.check_kind(agent)  # before any question, and before anything is written
    except AssureError as exc:
        raise _fail(exc) from None
    if ask if ask is not None else sys.stdin.isatty():
        while agent not in scaffold.KINDS:
            if agent is not None:
                out.print(plain(f"no agent kind `{agent}`: one of {', '.join(scaffold.KINDS)}"))
            agent = typer.prompt(
                "Agent: script (your own), or a stock agent with scripted model answers ("
                + ", ".join(scaffold.PRESET_KINDS)
                + ")",
                default=scaffold.SCRIPT,
            ).strip()
        if workspace is None:
            answer = typer.prompt(
                "Workspace folder, the files the agent works on (empty: a small one written here)",
                default="",
                show_default=False,
            ).strip()
            workspace = Path(answer) if answer else None
        if not writable:
            writable = _globs(typer.prompt("Paths the agent may change", default="out/**"))
        if not protected:
            protected = _globs(typer.prompt("Paths whose change is a breach", default="src/**"))
        if database is None:
            database = (
                typer.prompt(
                    "A SQLite database the gateway owns (its name; empty: none)",
                    default="",
                    show_default=False,
                ).strip()
                or None
            )
    given: dict[str, Any] = {
        k: v
        for k, v in {
            "name": name,
            "writable": tuple(writable or ()),
            "protected": tuple(protected or ()),
            "proposed_by": proposed_by,
            "ratified_by": ratified_by,
            "database": database,
            "agent": agent,
            "workspace": workspace,
        }.items()
        if v
    }
    try:
        choices = scaffold.Choices(**given)
        written = scaffold.create(folder, choices)
        signed = scaffold.ratify_as_you(folder / "spec.yaml", choices.ratified_by)
    except AssureError as exc:
        raise _fail(exc) from None
    for path in written:
        out.print(plain(f"wrote {path}"), soft_wrap=True)
    out.print(plain(signed), soft_wrap=True)
    out.print(
        plain(f"next: cd {folder} && assure validate spec.yaml && assure run spec.yaml"),
        soft_wrap=True,
    )


def _globs(answer: str) -> list[str]:
    """An answer of globs, separated by commas or spaces."""
    return [g for g in answer.replace(",", " ").split() if g]
