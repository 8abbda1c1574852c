"""`assure images`: build the sandbox images."""

from __future__ import annotations

from pathlib import Path

import typer

from assure.cli.common import (
    JSON_OPTION,
    _fail,
)
from assure.cli.lazy import (
    Images,
    install,
    registry,
    spec_mod,
)
from assure.cli.output import (
    _print_json,
    err,
    out,
)
from assure.cli.root import HELP
from assure.errors import AssureError

images_app = typer.Typer(
    no_args_is_help=True, context_settings=HELP, help="Build the sandbox images."
)


@images_app.command("build")
def images_build(
    specs: list[Path] | None = typer.Argument(
        None, metavar="SPEC", help="Specs whose agent.install images to build too."
    ),
    json_out: bool = JSON_OPTION,
) -> None:
    """Build the base, agent and gateway images (no registry needed), and each SPEC's derived
    agent image (its agent.install); skip what is up to date."""
    try:
        loaded = [spec_mod.load(p) for p in specs or []]
        backend = registry.create()
        built = Images(backend, lambda msg: err.print(f"images: {msg}")).ensure()
        derived = {
            s.name: install.ensure(s, backend, built, lambda msg: err.print(f"images: {msg}"))
            for s in loaded
            if s.agent.install
        }
    except AssureError as exc:
        raise _fail(exc) from None
    roles = ("base", "agent", "gateway", "egress")
    if json_out:
        _print_json(
            {
                **{role: getattr(built, role) for role in roles},
                **({"installs": derived} if derived else {}),
            }
        )
        return
    for role in roles:
        out.print(f"{role:8} {getattr(built, role)}")
    for name, tag in derived.items():
        out.print(f"{'install':8} {tag}  ({name})", markup=False, highlight=False)
