"""The root group: `assure --help` lists every command from COMMANDS without importing one, and a
command's module is imported only when that command is looked up to run or show its own help.

Importing all twelve command modules, and typer building each command from its signature, was
most of `assure --version` and `--help` (issue 25). Each command module still registers its
commands on `common.app` as it is imported; LazyGroup builds the one asked for from there."""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup
from typer.models import CommandInfo, DefaultPlaceholder, ParameterInfo

# name: (its module in assure.cli, the module's Typer for a group or None for a command, the
# first paragraph of its help as `assure --help` shows it), in the order listed there. A unit test
# (tests/unit/test_cli_start.py) holds each help equal to the command's own and the names to
# what the modules register.
COMMANDS: dict[str, tuple[str, str | None, str]] = {
    "run": (
        "run",
        None,
        "Run SPEC's tasks in fresh sandboxes, verify, promote, print the verdict.",
    ),
    "suite": (
        "run",
        None,
        "Run every spec of each SUITE, -j at a time; exit 0 only if each verdict is the one its"
        " spec expects.",
    ),
    "resume": (
        "run",
        None,
        "Continue a run whose driver was killed: same run, same task, next attempt, no effect"
        " repeated.",
    ),
    "validate": (
        "validate",
        None,
        "Check spec files (and suites, with every spec they name) against their schemas in"
        " specs/, and that each can work: its contract as the gate will judge it (ratified, by"
        " someone other than its proposer, hash and terms as they stand) and its agent command"
        " among the agent files; and, when the Docker engine answers, that it holds each image"
        " and runtime the spec names. Report every problem as file:line: field: message, with the"
        " command that fixes it.",
    ),
    "init": (
        "init",
        None,
        "Write a first project: a commented spec, its agent (a tiny one of your own, or a stock"
        " agent with scripted model answers), its workspace, a suite and a README stub. `assure"
        " validate` passes on them and `assure run spec.yaml` passes as written.",
    ),
    "verify": ("runs", None, "Recompute the verdict of a finished run from its directory alone."),
    "diff": ("runs", None, "Show each workspace change of an attempt with its attribution."),
    "doctor": (
        "doctor",
        None,
        "Say what is missing to run assure here (daemon, images, runtimes), or on a Ray cluster,"
        " and how to fix it.",
    ),
    "gc": (
        "doctor",
        None,
        "Remove containers, volumes, networks, workspace filesystems and cluster tasks' scratch"
        " folders left by assure processes that are gone.",
    ),
    "halt": (
        "monitor",
        None,
        "Halt RUN now: every further mutation is denied, the agent is stopped, no new attempt"
        " starts.",
    ),
    "dial": (
        "monitor",
        None,
        "Turn the autonomy dial of RUN: `propose` stops every external effect from here on.",
    ),
    "alerts": ("monitor", None, "List alerts (pending ones stay until `assure ack ID`)."),
    "ack": (
        "monitor",
        None,
        "Acknowledge a pending alert, or every one a filter matches (--all, --run, --kind).",
    ),
    "journal": (
        "monitor",
        None,
        "Query a run's journals (driver events, operator requests, gateway journals), verified"
        " first.",
    ),
    "runs": (
        "runs",
        None,
        "List runs and suite runs, newest first, with their state, tasks and verdicts.",
    ),
    "show": (
        "runs",
        None,
        "A run's timeline: attempts, decisions, overrides, alerts and receipts, in time order;"
        " then each attempt's model exchange (messages, tool calls and results, tokens and cost"
        " per call). A suite run (its id or folder): each of its runs, its verdict and why.",
    ),
    "promote": (
        "runs",
        None,
        "Apply a run's proposed results under a fresh gate decision (dial, contract, verifier);"
        " refuses, writing nothing, when no task can be committed.",
    ),
    "monitor": (
        "monitor",
        None,
        "Watch heartbeats and anomalies: raise alerts that stay pending until `assure ack`, dial"
        " down then halt the runs whose alerts nobody acknowledges.",
    ),
    "health": (
        "monitor",
        None,
        "Print a frontier.machine.health.v1 document (specs/health.schema.json) on stdout. Exit 0"
        " only when the aggregate is pass; 1 when it is degraded, propose_only, blocked or halted"
        " (the document is printed all the same, its `aggregate.causes` say why).",
    ),
    "images": ("images", "images_app", "Build the sandbox images."),
    "contract": ("contract", "contract_app", "Work with a spec's contract."),
    "report": ("report", "report_app", "Reports of runs and suite runs, for people and for CI."),
    "keys": ("keys", "keys_app", "Manage the Ed25519 key that signs receipts."),
    "receipts": ("keys", "receipts_app", "Verify a run's signed receipts and sealed logs."),
    "trust": (
        "keys",
        "trust_app",
        "Earned autonomy: the trust an agent earned in the signed trust ledger.",
    ),
    "conformance": (
        "conformance",
        "conformance_app",
        "Run every row of the standard's live-evidence table on this machine (real containers)"
        " and write packet.json, packet.md and packet.pub.pem. Exit 0 only if every row is PASS.",
    ),
    "bench": (
        "bench",
        "bench_app",
        "Compare the scorecards `make bench` writes (.assure/bench/scorecard*.json).",
    ),
}


class LazyGroup(TyperGroup):
    """`common.app`'s click group. While it renders its own help it lists stand-ins made from
    COMMANDS (a name and its help); any other look-up gets the real command, imported then."""

    _listing = False

    def __init__(self, *args: Any, commands: Any = None, **kwargs: Any) -> None:
        # what the modules imported so far registered: built again, made plain, when looked up
        super().__init__(*args, **kwargs)

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        if self._listing:
            return TyperCommand(cmd_name, help=COMMANDS[cmd_name][2])
        if cmd_name not in self.commands:
            self.commands[cmd_name] = load(cmd_name)
        return self.commands[cmd_name]

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


def load(name: str) -> Any:
    """The click command or group `name`, its module imported and its help made plain text."""
    from assure.cli.root import app

    module_name, group, _ = COMMANDS[name]
    module = importlib.import_module(f"assure.cli.{module_name}")
    if group is not None:
        sub: typer.Typer = getattr(module, group)
        _help_as_text(sub)
        command: Any = typer.main.get_group(sub)
        command.name = name
        return command
    info = next(i for i in app.registered_commands if _command_name(i) == name)
    _help_as_text_of(info)
    return typer.main.get_command_from_info(
        info,
        pretty_exceptions_short=app.pretty_exceptions_short,
        rich_markup_mode=app.rich_markup_mode,
    )


def _command_name(info: CommandInfo) -> str:
    return info.name or str(getattr(info.callback, "__name__", "")).replace("_", "-")


_MARKUP_TAG = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")
_DONE: set[int] = set()  # the infos and options made plain already: some options are shared


def escape_markup(markup: str) -> str:
    """rich.markup.escape, without rich's markup, emoji and style code, which `assure --version`
    has no use for (issue 25); tests/unit/test_cli_start.py holds the two equal."""

    def backslashes(match: re.Match[str]) -> str:
        slashes, tag = match.groups()
        return f"{slashes}{slashes}\\{tag}"

    markup = _MARKUP_TAG.sub(backslashes, markup)
    return markup + "\\" if markup.endswith("\\") and not markup.endswith("\\\\") else markup


def plain_help(raw: str) -> str:
    """Typer reads help as Rich markup, which ate `needs assure[ray]`, and keeps a docstring's
    line breaks in the command list, which broke lines mid-sentence: escape the brackets and
    join each paragraph's lines."""
    return escape_markup(
        "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(raw).split("\n\n"))
    )


def _help_as_text_of(info: Any) -> None:
    """Make the help of one command (or group callback) and of its options plain text, once."""
    if id(info) in _DONE or info.callback is None:
        return
    _DONE.add(id(info))
    doc = info.help if isinstance(info.help, str) else inspect.getdoc(info.callback)
    if doc:
        info.help = plain_help(doc)
    for param in inspect.signature(info.callback).parameters.values():
        if (
            isinstance(param.default, ParameterInfo)
            and param.default.help
            and id(param.default) not in _DONE
        ):
            _DONE.add(id(param.default))
            param.default.help = plain_help(param.default.help)


def _help_as_text(group: typer.Typer) -> None:
    """`_help_as_text_of` for every command of `group`, its callback and its own help."""
    for info in [
        *group.registered_commands,
        *([group.registered_callback] if group.registered_callback else []),
    ]:
        _help_as_text_of(info)
    if id(group) not in _DONE and not isinstance(group.info.help, DefaultPlaceholder):
        _DONE.add(id(group))
        if group.info.help:
            group.info.help = plain_help(group.info.help)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _help_as_text(sub.typer_instance)
