"""`assure contract`: a spec's contract hashed and ratified."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from assure.cli.common import (
    _fail,
)
from assure.cli.lazy import (
    render,
    spec_mod,
)
from assure.cli.output import (
    err,
)
from assure.cli.root import HELP
from assure.errors import AssureError

contract_app = typer.Typer(
    no_args_is_help=True, context_settings=HELP, help="Work with a spec's contract."
)


CONTRACT_TASK_OPTION = typer.Option(
    None,
    "--task",
    metavar="TASK",
    help="The contract governing this task (its own block, else the spec's).",
)


@contract_app.command("hash")
def contract_hash(
    spec: Path = typer.Argument(..., metavar="SPEC", help="Spec file."),
    task: str | None = CONTRACT_TASK_OPTION,
    write: bool = typer.Option(
        False,
        "--write",
        help="Put the new terms and hash into SPEC's contract block (the rest stays as written).",
    ),
) -> None:
    """Print the term digests and hash SPEC's contract must carry to be ratified as it stands
    (YAML for its contract block), and say which terms changed since the ones it carries."""
    from assure.run import ratify

    try:
        loaded = spec_mod.load(spec)
        found = ratify.compute(loaded, task)
        if write:
            ratify.write(loaded, found)
    except AssureError as exc:
        raise _fail(exc) from None
    sys.stdout.write(found.to_yaml())
    changed = found.changed()
    if changed is None:
        err.print(
            "the contract carries no term digests (none yet, or an older format): have these"
            " ratified",
            markup=False,
        )
    elif changed or found.carried_hash != found.hash:
        err.print(
            "changed since the terms it carries: "
            + (", ".join(changed) or "hash")
            + "; have it re-ratified",
            markup=False,
        )
    else:
        err.print("unchanged: the contract carries these terms and hash", markup=False)
    if write:
        err.print(f"written to {render.display(str(spec))}", markup=False)


@contract_app.command("ratify")
def contract_ratify(
    spec: Path = typer.Argument(..., metavar="SPEC", help="Spec file."),
    name: str = typer.Option(
        ..., "--as", metavar="NAME", help="Who ratifies: someone other than the proposer."
    ),
    key: Path | None = typer.Option(
        None,
        "--key",
        metavar="FILE",
        help=(
            "The ratifier's Ed25519 private key (PEM); default: the one `assure keys generate`"
            " made."
        ),
    ),
    task: str | None = CONTRACT_TASK_OPTION,
    trust: bool = typer.Option(
        False,
        "--trust",
        help="Also trust the key for NAME in your own keyring (ratifiers.yaml beside your keys).",
    ),
) -> None:
    """Sign SPEC's contract terms as they stand, as NAME: writes the terms, hash, `ratified_by`
    and the signature into SPEC. The gate accepts it only if a trusted-ratifiers keyring
    (yours, ratifiers.yaml beside your keys, or one in ASSURE_RATIFIERS) holds this key for NAME."""
    from assure.records import keys
    from assure.run import ratifiers, ratify

    try:
        private_key = keys.load_private(key or keys.default_key_dir() / keys.PRIVATE_NAME)
        loaded = spec_mod.load(spec)
        found = ratify.compute(loaded, task)
        contract = ratify.spec_contract(loaded, found.at)
        if name.strip().casefold() == contract.proposed_by.strip().casefold():
            raise AssureError(
                f"{name!r} proposed this contract: the gate refuses a self-ratified one",
                where=str(spec),
                fix="have someone other than the proposer ratify it",
            )
        signature = ratify.sign(loaded, found, name, private_key)
        keyring = ratifiers.own()
        if trust and ratifiers.trust(keyring, name, private_key.public_key()):
            err.print(f"trusted {name} in {render.display(str(keyring))}", markup=False)
        check = ratifiers.check(loaded.name, ratify.spec_contract(spec_mod.load(spec), found.at))
    except AssureError as exc:
        raise _fail(exc) from None
    err.print(
        f"ratified {render.display(str(spec))} (contract {contract.id!r}, {found.hash}) as "
        f"{name} with key {signature['key_id']}",
        markup=False,
    )
    if check.problem:
        err.print(f"but the gate will refuse it: {check.problem}", markup=False)
        raise typer.Exit(1)
