"""`assure keys`, `receipts` and `trust`: the signing key, a run's receipts checked, the trust
ledger replayed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from assure.cli.common import (
    JSON_OPTION,
    RUN_ARG,
    RUNS_OPTION,
    _fail,
)
from assure.cli.lazy import (
    Text,
    render,
    runs_mod,
)
from assure.cli.output import (
    _print_json,
    _print_table,
    _whole,
    out,
    plain,
)
from assure.cli.root import HELP
from assure.errors import AssureError

keys_app = typer.Typer(
    no_args_is_help=True, context_settings=HELP, help="Manage the Ed25519 key that signs receipts."
)
receipts_app = typer.Typer(
    no_args_is_help=True,
    context_settings=HELP,
    help="Verify a run's signed receipts and sealed logs.",
)
trust_app = typer.Typer(
    no_args_is_help=True,
    context_settings=HELP,
    help="Earned autonomy: the trust an agent earned in the signed trust ledger.",
)
TRUST_KEY_OPTION = typer.Option(
    None,
    "--public-key",
    metavar="FILE",
    help="Ed25519 public key (PEM) the ledger is signed with (default: `assure keys`' own).",
)


@keys_app.command("generate")
def keys_generate(
    directory: Path | None = typer.Option(
        None,
        "--dir",
        metavar="DIR",
        help="Where to write the key pair (default: ~/.config/assure/keys).",
    ),
    json_out: bool = JSON_OPTION,
) -> None:
    """Make a new Ed25519 key pair for signing receipts; never overwrites a key."""
    from assure.records import keys

    try:
        private_path, public_path = keys.generate_keypair(directory or keys.default_key_dir())
        kid = keys.key_id(keys.load_public(public_path))
    except AssureError as exc:
        raise _fail(exc) from None
    if json_out:
        _print_json(
            {"private_key": str(private_path), "public_key": str(public_path), "key_id": kid}
        )
        return
    out.print(
        f"private key {render.display(str(private_path))} (mode 0600: keep it secret)",
        markup=False,
        highlight=False,
    )
    out.print(
        f"public key  {render.display(str(public_path))} (publish it: it verifies every receipt)",
        markup=False,
        highlight=False,
    )
    out.print(f"key id      {kid}", markup=False, highlight=False)


@receipts_app.command("verify")
def receipts_verify(
    run_ref: str = RUN_ARG,
    public_key: Path | None = typer.Option(
        None,
        "--public-key",
        metavar="FILE",
        help="Ed25519 public key (PEM); without it signatures are NOT-RUN.",
    ),
    runs_dir: Path = RUNS_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Verify RUN's receipts, seal and hash-chained logs with nothing but a public key
    (RUN may be an exported run's folder)."""
    from assure.records import keys
    from assure.records.receipt_format import STEPS, ReceiptError
    from assure.records.receipt_verify import Outcome, verify_run

    try:
        key = keys.load_public(public_key) if public_key is not None else None
        report = verify_run(runs_mod.locate(run_ref, runs_dir), key)
    except ReceiptError as exc:
        if json_out:
            _print_json(
                {
                    "verified": False,
                    "step": exc.step,
                    "step_name": STEPS[exc.step],
                    "path": exc.path,
                    "line": exc.line,
                    "message": exc.detail,
                }
            )
            raise typer.Exit(1) from None
        raise _fail(exc) from None
    except AssureError as exc:
        raise _fail(exc) from None
    if json_out:
        _print_json(report.to_json())
        raise typer.Exit(0)
    table = _whole("step", "check", "outcome", "detail")
    for step in report.steps:
        table.add_row(
            str(step.number),
            plain(step.name),
            (
                Text("passed", style="green")
                if step.outcome is Outcome.PASSED
                else Text("NOT-RUN", style="yellow")
            ),
            plain(step.detail),
        )
    _print_table(table)
    signer = (
        f"signed by {report.key_id}"
        if report.key_id
        else "signatures NOT-RUN (no public key given)"
    )
    out.print(
        plain(
            f"{report.run_id}: {len(report.receipts)} receipts, {len(report.logs)} logs verified;"
            f" {signer}",
            "green",
        )
    )
    raise typer.Exit(0)


def _trust_report(ledger: Path, public_key: Path | None, runs: Path | None) -> dict[str, Any]:
    """The whole ledger replayed from its receipts (and the runs' receipts checked against it)."""
    from assure.records import keys, layout, trust

    key = keys.load_public(public_key or keys.default_key_dir() / keys.PUBLIC_NAME)
    found = []
    for path in sorted(runs.glob(f"*/{layout.RECEIPTS}/*.json")) if runs else ():
        if path.name != layout.SEAL and not path.is_symlink() and path.is_file():
            try:
                found.append(json.loads(path.read_bytes()))
            except (ValueError, OSError):
                continue  # not a receipt: `assure receipts verify` judges it
    return trust.verify_ledger(ledger, key, receipts=found)


def _level_name(n: int) -> str:
    from assure.core import gate

    return {v: k for k, v in gate.LEVELS.items()}.get(n, str(n))


@trust_app.command("show")
def trust_show(
    agent: str = typer.Argument(
        ...,
        metavar="AGENT",
        help="The agent's identity digest (a receipt's trust.agent), or its start.",
    ),
    scope: str | None = typer.Option(
        None, "--scope", metavar="SCOPE", help="Only this scope (CONTRACT-ID@HASH)."
    ),
    public_key: Path | None = TRUST_KEY_OPTION,
    runs_dir: Path = RUNS_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """AGENT's earned trust in each scope, why, and what would change it.

    Every rise and fall is listed with the receipts it counted."""
    from assure.records import layout, trust

    try:
        report = _trust_report(runs_dir / layout.TRUST / trust.LEDGER, public_key, runs_dir)
    except AssureError as exc:
        raise _fail(exc) from None
    wanted = agent.removeprefix("sha256:")
    shown = {
        k: lv
        for k, lv in report["levels"].items()
        if k.split(" ", 1)[0].removeprefix("sha256:").startswith(wanted)
        and scope in (None, k.split(" ", 1)[1])
    }
    events = [e for e in report["events"] if trust.key_of(e["agent"], e["scope"]) in shown]
    if json_out:
        _print_json({"levels": shown, "events": events})
        raise typer.Exit(0)
    if not shown:
        raise _fail(
            AssureError(
                f"the trust ledger has no history for agent {agent!r}"
                + (f" in scope {scope!r}" if scope else ""),
                fix=(
                    "a receipt's trust.agent names an agent; `assure trust verify LEDGER` lists"
                    " them"
                ),
            )
        )
    for k, lv in shown.items():
        name, where = k.split(" ", 1)
        out.print(plain(f"{name} in {where}: {_level_name(lv['level'])}", "bold"))
        out.print(plain(f"  why: {lv['why']}"))
        out.print(plain(f"  what would change it: {lv['next']}"))
        for e in (e for e in events if trust.key_of(e["agent"], e["scope"]) == k):
            out.print(
                plain(
                    f"  {e['time']} {_level_name(e['from'])} -> {_level_name(e['to'])}: {e['why']}"
                    f" ({len(e['receipts'])} receipt(s):"
                    f" {', '.join(r[:12] for r in e['receipts'])})"
                )
            )


@trust_app.command("verify")
def trust_verify(
    ledger: Path = typer.Argument(..., metavar="LEDGER", help="The trust ledger (ledger.jsonl)."),
    public_key: Path | None = TRUST_KEY_OPTION,
    runs_dir: Path = RUNS_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Recompute every level in LEDGER from its receipts alone, offline.

    Checks each entry's signature and place in the chain, each receipt's signature, time and
    pinned head, and the receipts under --runs-dir against it (a rolled-back ledger shows)."""
    try:
        report = _trust_report(ledger, public_key, runs_dir)
    except AssureError as exc:
        if json_out:
            _print_json({"verified": False, "message": exc.message})
            raise typer.Exit(1) from None
        raise _fail(exc) from None
    if json_out:
        _print_json(
            {"verified": True, **{k: report[k] for k in ("entries", "head", "levels", "events")}}
        )
        raise typer.Exit(0)
    table = _whole("agent", "scope", "level", "why")
    for k, lv in report["levels"].items():
        name, where = k.split(" ", 1)
        table.add_row(plain(name), plain(where), plain(_level_name(lv["level"])), plain(lv["why"]))
    _print_table(table)
    out.print(
        plain(
            f"{ledger}: {report['entries']} entries verified, {len(report['events'])} rises and"
            " falls",
            "green",
        )
    )
