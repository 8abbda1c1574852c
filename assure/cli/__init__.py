"""The `assure` command line: parse, call the library once, render. Nothing else lives here.

One module per command group; `output` prints, `common` holds what the groups share, and
this module assembles `app` (the console script `assure = assure.cli:app`)."""

from __future__ import annotations

import inspect
import re

import typer

from assure.cli import (
    bench,
    conformance,
    contract,
    doctor,
    images,
    init,
    keys,
    monitor,
    report,
    run,
    runs,
    validate,
)
from assure.cli.common import DEFAULT_SPEC, EXIT, EXIT_HARNESS, EXIT_UNEXPECTED, app
from assure.cli.output import FOLD_ROOM

__all__ = ["DEFAULT_SPEC", "EXIT", "EXIT_HARNESS", "EXIT_UNEXPECTED", "FOLD_ROOM", "app", "main"]


# Each module registers its commands on `app` as it is imported; `assure --help` lists them in
# the order registered, which is this one (a command missing here fails the import).
ORDER = (
    "run",
    "suite",
    "resume",
    "validate",
    "init",
    "verify",
    "diff",
    "doctor",
    "gc",
    "halt",
    "dial",
    "alerts",
    "ack",
    "journal",
    "runs",
    "show",
    "promote",
    "monitor",
    "health",
)
# the modules whose commands are `app`'s own; the groups' modules are added below
COMMAND_MODULES = (run, validate, init, runs, doctor, monitor)


def _command_name(info: typer.models.CommandInfo) -> str:
    return info.name or str(getattr(info.callback, "__name__", ""))


app.registered_commands.sort(key=lambda info: ORDER.index(_command_name(info)))
app.add_typer(images.images_app, name="images")
app.add_typer(contract.contract_app, name="contract")
app.add_typer(report.report_app, name="report")
app.add_typer(keys.keys_app, name="keys")
app.add_typer(keys.receipts_app, name="receipts")
app.add_typer(keys.trust_app, name="trust")
app.add_typer(conformance.conformance_app, name="conformance")
app.add_typer(bench.bench_app, name="bench")


_MARKUP_TAG = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


def escape_markup(markup: str) -> str:
    """rich.markup.escape, without rich's markup, emoji and style code, which `assure --version`
    has no use for (issue 25); tests/unit/test_cli_start.py holds the two equal."""

    def backslashes(match: re.Match[str]) -> str:
        slashes, tag = match.groups()
        return f"{slashes}{slashes}\\{tag}"

    markup = _MARKUP_TAG.sub(backslashes, markup)
    return markup + "\\" if markup.endswith("\\") and not markup.endswith("\\\\") else markup


def _help_as_text(group: typer.Typer, done: set[int]) -> None:
    """Make every help string of `group` and its subgroups plain text, once (`done`: an option
    object several commands share). Typer reads help as Rich markup, which ate `needs
    assure[ray]`, and keeps a docstring's line breaks in the command list, which broke lines
    mid-sentence: escape the brackets and join each paragraph's lines."""
    from typer.models import DefaultPlaceholder, ParameterInfo

    def text(raw: str) -> str:
        return escape_markup(
            "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(raw).split("\n\n"))
        )

    infos: list[typer.models.CommandInfo | typer.models.TyperInfo] = [
        *group.registered_commands,
        *([group.registered_callback] if group.registered_callback else []),
    ]
    for info in infos:
        if id(info) not in done and info.callback is not None:
            done.add(id(info))
            doc = info.help if isinstance(info.help, str) else inspect.getdoc(info.callback)
            if doc:
                info.help = text(doc)
            for param in inspect.signature(info.callback).parameters.values():
                if (
                    isinstance(param.default, ParameterInfo)
                    and param.default.help
                    and id(param.default) not in done
                ):
                    done.add(id(param.default))
                    param.default.help = text(param.default.help)
    if not isinstance(group.info.help, DefaultPlaceholder) and group.info.help:
        group.info.help = text(group.info.help)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _help_as_text(sub.typer_instance, done)


_help_as_text(app, set())


def main() -> None:  # pragma: no cover - console entry point
    app()
