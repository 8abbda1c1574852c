"""What every command group shares: exit codes, how an error is shown, the options several
commands take, and the engine and spec checks before a run (the root `app` is root's)."""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path
from typing import Any

import typer

from assure.cli.lazy import DockerBackend, ImageSet, Text, layout, runs_mod, spec_mod, store
from assure.cli.output import _safe_lines, err, plain
from assure.errors import AssureError

DEFAULT_SPEC = Path(__file__).resolve().parents[2] / "specs" / "examples" / "benign.yaml"
EXIT = {"pass": 0, "contained": 0, "fail": 3, "breach": 4, "error": 5}
EXIT_HARNESS, EXIT_UNEXPECTED = 1, 6


def _fail(exc: AssureError) -> typer.Exit:
    err.print("error:", _safe_lines(exc.explain()), style="bold red", markup=False, highlight=False)
    return typer.Exit(EXIT_HARNESS)


def _sigterm_as_interrupt() -> None:
    """Make `kill` behave like Ctrl-C so every `finally` cleans up its containers; both also
    set `stop.INTERRUPTED`, which the attempt's run loop reads in case the raise was lost."""
    from assure.run.stop import INTERRUPTED

    def handler(signum: int, frame: Any) -> None:
        INTERRUPTED.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def _backend_and_images(*specs: spec_mod.Spec) -> tuple[DockerBackend, ImageSet]:
    """`preflight.engine`, saying on stderr what it builds."""
    from assure.run import preflight

    # a one-line sayer, passed as it is
    say = lambda msg: err.print(Text.assemble(("images: ", "dim"), plain(msg)))  # noqa: E731
    return preflight.engine(list(specs), say)


KEY_OPTION = typer.Option(
    None,
    "--key",
    metavar="FILE",
    envvar="ASSURE_SIGNING_KEY",
    help="Ed25519 private key (PEM) to sign receipts; none: keyless.",
)
JUNIT_OPTION = typer.Option(
    None,
    "--junit",
    metavar="FILE",
    help="Also write a JUnit XML report here (one testcase per spec), for CI.",
)


def _writable(**files: Path | None) -> None:
    """Refuse before anything runs an output file (by option name: `junit=` is --junit) that
    could not be written at the end: its folder missing, a folder in its place, or a folder
    nothing can be made in (probed with a file made and removed: as root, /proc passes
    os.access and still refuses)."""
    for option, f in files.items():
        if f is None:
            continue
        where, fix = f"--{option} {f}", f"pass --{option} a file in a folder you can write to"
        if not f.parent.is_dir():
            raise AssureError(
                "no such folder for an output file",
                where=where,
                fix="create the folder first, or name another file",
            )
        if f.is_dir():
            raise AssureError("this output file is a folder", where=where, fix=fix)
        try:
            fd, probe = tempfile.mkstemp(prefix=".probe-", dir=f.parent)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise AssureError(
                f"this output file cannot be written: {exc.strerror or exc}", where=where, fix=fix
            ) from None


def _write_out(path: Path, write: Any) -> None:
    try:
        write()
    except OSError as exc:
        raise _fail(
            AssureError(f"cannot write it: {exc.strerror or exc}", where=str(path))
        ) from None


def _runs_base(value: Path) -> Path:
    """--runs-dir, refused in words when it names a file (a missing folder is an empty base)."""
    try:
        base: Path = runs_mod.check_base(value)
        return base
    except AssureError as exc:
        raise _fail(exc) from None


def runs_option(
    help: str = "The runs base: where run directories are (and a RUN given by id is looked up).",
) -> Any:
    return typer.Option(
        layout.RUNS_DIR, "--runs-dir", metavar="DIR", callback=_runs_base, help=help
    )


RUNS_OPTION = runs_option()
RUN_ARG = typer.Argument(
    ..., metavar="RUN", help="A run id (looked up under --runs-dir) or a run's folder."
)
JSON_OPTION = typer.Option(False, "--json", help="Print the result as JSON on stdout.")


def _spec_of(rd: store.RunDir) -> spec_mod.Spec:
    """The run's spec, reloaded from its source and checked unchanged since the run began."""
    recorded = spec_mod.Spec.from_json(rd.spec_json())
    loaded = spec_mod.load(recorded.path, recorded.sample.id if recorded.sample else None)
    if loaded != recorded:
        raise AssureError(
            "the spec changed since this run started",
            where=str(recorded.path),
            fix="restore it, or start a new run with --new",
        )
    return loaded
