"""`assure conformance`: run the live-evidence table and write the signed packet; verify one."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from assure.cli.common import (
    _backend_and_images,
    _fail,
)
from assure.cli.output import (
    out,
    plain,
)
from assure.cli.root import HELP
from assure.errors import AssureError, unreadable
from assure.records.obligations import OBLIGATIONS

conformance_app = typer.Typer(
    invoke_without_command=True,
    context_settings=HELP,
    help="Run suites/conformance/ live and write the signed packet; verify one.",
)


@conformance_app.callback()
def conformance_cmd(
    ctx: typer.Context,
    out_dir: Path = typer.Option(
        Path(".assure") / "conformance",
        "--out",
        metavar="DIR",
        help="Where the dated packet folder goes.",
    ),
    key: Path | None = typer.Option(
        None,
        "--key",
        metavar="FILE",
        envvar="ASSURE_SIGNING_KEY",
        help=(
            "Ed25519 private key (PEM) for the runs and the packet; none: a fresh one beside the"
            " packet."
        ),
    ),
    only: list[str] | None = typer.Option(
        None,
        "--only",
        metavar="ID",
        help=f"Run only these obligation ids (the rest are NOT-RUN): {', '.join(OBLIGATIONS)}.",
    ),
) -> None:
    """Run every row of the standard's live-evidence table on this machine (real containers)
    and write packet.json, packet.md and packet.pub.pem. Exit 0 only if every row is PASS."""
    if ctx.invoked_subcommand is not None:
        return
    from assure.ops import conformance

    try:
        conformance.check_only(only)
        _backend_and_images()
        paths = conformance.run(
            out_dir,
            key,
            only,
            progress=lambda r: out.print(
                plain(f"{r.status:8} {r.id} ({r.seconds} s) {r.reason}"), soft_wrap=True
            ),
        )
    except AssureError as exc:
        raise _fail(exc) from None
    for p in paths:
        out.print(plain(str(p)))
    doc = json.loads(paths[0].read_text())
    raise typer.Exit(0 if all(o["status"] == "PASS" for o in doc["obligations"].values()) else 1)


@conformance_app.command("verify")
def conformance_verify(
    packet: Path = typer.Argument(..., metavar="PACKET", help="The packet.json to check."),
    public_key: Path = typer.Option(
        ..., "--public-key", metavar="FILE", help="Ed25519 public key (PEM) of the packet's signer."
    ),
) -> None:
    """Check a packet offline: its shape, every obligation PASS, FAIL or NOT-RUN with a reason, its
    signature."""
    from assure.records import conformance_packet, keys

    try:
        doc = json.loads(packet.read_text(encoding="utf-8"))
        conformance_packet.verify(doc, keys.load_public(public_key))
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(
            AssureError(
                f"unreadable packet: {unreadable(exc)}",
                where=str(packet),
                fix="pass the packet.json `assure conformance` wrote",
            )
        ) from None
    except ValueError as exc:
        raise _fail(
            AssureError(
                f"unreadable packet: not JSON ({exc})",
                where=str(packet),
                fix="pass the packet.json `assure conformance` wrote",
            )
        ) from None
    except AssureError as exc:
        raise _fail(exc) from None
    counts = {
        s: sum(o["status"] == s for o in doc["obligations"].values())
        for s in ("PASS", "FAIL", "NOT-RUN")
    }
    out.print(
        plain(
            f"packet verified, signed by {doc['signature']['key_id']}: "
            + ", ".join(f"{n} {s}" for s, n in counts.items()),
            "green",
        )
    )
