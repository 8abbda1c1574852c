"""The root `app`: its options (--version) and the setup every command gets. Only typer and the
group that lists the commands (`listing`) are imported here: `assure --version` and `--help`
need nothing else (issue 25)."""

from __future__ import annotations

import sys

import typer

from assure.cli import coercion, version_line
from assure.cli.lazy import light_help
from assure.cli.listing import LazyGroup, _help_as_text

light_help()
coercion.install()

HELP = {"help_option_names": ["-h", "--help"]}  # every command and group: -h is --help
app = typer.Typer(
    cls=LazyGroup,
    no_args_is_help=True,
    add_completion=False,
    context_settings=HELP,
    help="Run an untrusted agent in a sealed container and judge it by ground truth.",
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(version_line())
        raise typer.Exit(0)


@app.callback()
def _setup(
    _: bool = typer.Option(
        False,
        "--version",
        callback=_version,
        is_eager=True,
        help="Print assure's version and exit.",
    ),
) -> None:
    # No docstring: typer would print it as the whole app's help, over Typer(help=...).
    # Library code logs (alerts among it); the CLI shows warnings on stderr.
    import logging

    from rich.logging import RichHandler

    from assure.cli.output import err

    logging.basicConfig(
        level=logging.WARNING,
        format="%(message)s",
        handlers=[RichHandler(console=err, show_path=False, show_time=False, markup=False)],
    )


_help_as_text(app)  # the root's own help and --version's; each command's as it is loaded
