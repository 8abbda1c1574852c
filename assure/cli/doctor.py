"""`assure doctor` and `gc`: what is missing to run here, and what gone processes left."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from assure.cli.common import (
    JSON_OPTION,
    RUNS_OPTION,
    _fail,
)
from assure.cli.lazy import (
    Text,
    registry,
    runtimes,
    spec_mod,
)
from assure.cli.output import (
    _print_json,
    _whole,
    out,
    plain,
)
from assure.cli.root import app
from assure.errors import AssureError


@app.command()
def doctor(
    specs: list[Path] = typer.Argument(
        None,
        metavar="SPEC",
        help="Specs whose sandbox.runtime and agent.install image must be available here.",
    ),
    cluster: str = typer.Option(
        None,
        "--cluster",
        metavar="ADDRESS",
        help=(
            "Check a Ray cluster instead (its head's host:port): Ray on both sides, the docker"
            " resource, each node's engine, images and assure version."
        ),
    ),
    json_out: bool = JSON_OPTION,
) -> None:
    """Say what is missing to run assure here (daemon, images, runtimes), or on a Ray cluster, and
    how to fix it."""
    from assure.ops import doctor as checks

    try:
        loaded = [spec_mod.load(path) for path in specs or []]
    except AssureError as exc:
        raise _fail(exc) from None
    if cluster is not None:
        from assure.ops import doctor_cluster

        report = doctor_cluster.diagnose(cluster, doctor_cluster.local_images())
    else:
        report = checks.diagnose(
            {s.sandbox.runtime for s in loaded}, [s for s in loaded if s.agent.install is not None]
        )
    if json_out:
        _print_json(
            {
                "ok": report.ok,
                "checks": [dataclasses.asdict(c) for c in report.checks],
                "register_gvisor": (
                    list(runtimes.registration_steps()) if report.register_gvisor else []
                ),
            }
        )
        raise typer.Exit(0 if report.ok else 1)
    styles = {
        checks.Status.OK: "green",
        checks.Status.MISSING: "red",
        checks.Status.OPTIONAL: "yellow",
        checks.Status.ABSENT: "yellow",
    }
    table = _whole("check", "status", "detail / fix")
    for c in report.checks:
        status = (
            plain(c.value or "")
            if c.status is checks.Status.INFO
            else Text(str(c.status), style=styles[c.status])
        )
        table.add_row(plain(c.name), status, plain(c.detail))
    out.print(table)
    if report.register_gvisor:
        out.print(
            "to register gVisor's runsc with this engine, as root:", markup=False, highlight=False
        )
        for step in runtimes.registration_steps():
            out.print(f"  {step}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(0 if report.ok else 1)


@app.command()
def gc(
    everything: bool = typer.Option(
        False, "--all", help="Also remove resources of runs that are still going."
    ),
    json_out: bool = JSON_OPTION,
    runs_dir: Path = RUNS_OPTION,
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Remove nothing: list what would be removed."
    ),
    all_users: bool = typer.Option(
        False,
        "--all-users",
        help=(
            "Also what other users' processes left (default: only this user's, and the runs of"
            " --runs-dir)."
        ),
    ),
) -> None:
    """Remove containers, volumes, networks, workspace filesystems and cluster tasks' scratch
    folders left by assure processes that are gone."""
    from assure.ops import gc as collector

    try:
        removed = collector.collect(
            registry.create(),
            everything=everything,
            runs_dir=runs_dir,
            all_users=all_users,
            dry_run=dry_run,
        )
    except AssureError as exc:
        raise _fail(exc) from None
    if json_out:
        _print_json(dataclasses.asdict(removed))
        return
    if dry_run:
        for name in removed.names:
            out.print(plain(f"would remove {name}"), soft_wrap=True)
    out.print(
        f"{'would remove' if dry_run else 'removed'} {removed.containers} containers,"
        f" {removed.volumes} volumes, {removed.networks} networks, {removed.workspaces} workspace"
        f" filesystems, {removed.node_scratch} node scratch folders",
        markup=False,
        highlight=False,
    )
