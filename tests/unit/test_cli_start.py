"""What the CLI defers to start faster (issue 25) stays deferred and changes nothing a user sees:
`--help` renders the same with typer.rich_utils' stand-ins as with the real modules, a crash
still gets rich's traceback, markup is escaped as rich escapes it, `--version` is the installed
version, and a bare start imports no command module."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
from rich.markup import escape
from typer.testing import CliRunner

import assure
from assure.cli import DEFAULT_SPEC, app, escape_markup, listing

HELP = """
import sys
{pre}
from typer.testing import CliRunner
from assure.cli import app
out = CliRunner().invoke(app, {args!r}, prog_name="assure", terminal_width=100).output
sys.stdout.write(out)
print("LOADED", "rich.markdown" in sys.modules, "rich.traceback" in sys.modules)
"""


def _help(args: list[str], *, real: bool) -> tuple[str, str]:
    # typer.rich_utils imported first: assure's finder never sees it, as before the change
    pre = "import typer.rich_utils" if real else ""
    code = HELP.format(pre=pre, args=args)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    text, _, loaded = done.stdout.rpartition("LOADED")
    return text, loaded.strip()


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["report", "--help"]])
def test_help_is_the_same_without_markdown_and_traceback_imported(args: list[str]) -> None:
    light, loaded = _help(args, real=False)
    real, _ = _help(args, real=True)
    assert light == real
    assert "Usage: assure" in light
    assert loaded == "False False"


def test_a_crash_still_gets_rich_s_traceback() -> None:
    code = """
import sys
import assure.cli
from typer import rich_utils
from rich.traceback import Traceback
try:
    raise ValueError("boom")
except ValueError as exc:
    tb = rich_utils.Traceback.from_exception(type(exc), exc, exc.__traceback__)
print(type(tb) is Traceback)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True"


@pytest.mark.parametrize(
    "text",
    ["needs assure[ray]", "[bold]x[/bold]", "\\[a]", "\\\\[#fff]", "[@click]", "[A] [a[b]]", "x\\"],
)
def test_markup_is_escaped_as_rich_escapes_it(text: str) -> None:
    assert escape_markup(text) == escape(text)


def test_version_is_the_installed_one() -> None:
    assert importlib.metadata.version("assure") == assure.__version__


FAST_VERSION = """
import sys
sys.argv = ["assure", {args}]
from assure.cli import main
try:
    main()
finally:
    print("TYPER", "typer" in sys.modules)
"""


@pytest.mark.parametrize("args", [["--version"], ["--version", "run"]])
def test_the_console_script_answers_version_alone_without_typer_as_typer_does(
    args: list[str],
) -> None:
    code = FAST_VERSION.format(args=", ".join(map(repr, args)))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    text, _, loaded = done.stdout.rpartition("TYPER")
    assert text == CliRunner().invoke(app, args, prog_name="assure").output
    assert text == f"assure {assure.__version__}\n"
    # only the bare `--version` skips typer; with anything else typer parses, as before
    assert loaded.strip() == str(args != ["--version"])
    scripts = importlib.metadata.entry_points(group="console_scripts", name="assure")
    assert [s.value for s in scripts] == ["assure.cli:main"]


# what a bare start must not import: each is tens of ms, and none is needed to print the version
# or the list of commands (issue 25)
HEAVY = (
    "docker",
    "jsonschema",
    "anthropic",
    "apsw",
    "cryptography",
    "yaml",
    "pydantic",
    "rich.traceback",
    "rich.markdown",
    "assure.spec",
    "assure.run",
    "assure.records",
    "assure.sandbox",
    "assure.verify",
)
START = """
import sys
from typer.testing import CliRunner
from assure.cli import app
CliRunner().invoke(app, {args!r}, prog_name="assure", catch_exceptions=False)
print(*sorted(m for m in sys.modules if m.split(".")[0] in {roots!r}))
"""


@pytest.mark.parametrize("args", [["--version"], ["--help"], []])
def test_a_bare_start_imports_no_command_module_nor_a_heavy_package(args: list[str]) -> None:
    roots = {h.split(".")[0] for h in HEAVY}
    code = START.format(args=args, roots=roots)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert [h for h in HEAVY if h in loaded] == []
    assert not [m for m in loaded if m.startswith("assure.cli.") and m not in LIGHT], loaded


LIGHT = {"assure.cli.root", "assure.cli.listing", "assure.cli.lazy", "assure.cli.coercion"}


def test_the_listing_names_every_command_with_its_own_one_line_help() -> None:
    """listing.COMMANDS is what `assure --help` shows without importing a command: each help
    must be the first paragraph of the command's own, and no command may be missing."""
    ctx = typer.Context(typer.main.get_command(app))
    group = ctx.command
    registered = {listing._command_name(i) for i in app.registered_commands}
    for name, (_, _group, short) in listing.COMMANDS.items():
        command = group.get_command(ctx, name)
        assert command is not None and command.help, name
        assert short == command.help.split("\n\n")[0], name
    # every module's commands loaded now: each one registered on the root app is listed
    assert registered | {listing._command_name(i) for i in app.registered_commands} <= set(
        listing.COMMANDS
    )


def _outcome(runtime: Any, value: Any, param: Any, ctx: Any) -> Any:
    try:
        made = runtime.coerce(value, param=param, ctx=ctx)
    except typer.BadParameter as exc:
        return ("error", exc.format_message())
    return (type(made), made)


def test_plain_coercion_makes_what_typer_s_adapters_make(tmp_path: Path) -> None:
    """Every parameter of every command, coerced by assure.cli.coercion and by typer's own
    pydantic adapters, from strings as a command line gives them and from typed defaults."""
    from typer._coercion import build_runtime_param
    from typer.core import _TyperParameter

    (tmp_path / "f").write_text("")
    samples: list[Any] = ["3", "007", "-1", "+3", " 3", "3_0", "0", "x", "", " a ", "-"]
    samples += ["a/../b/", str(tmp_path / "f"), str(tmp_path), str(tmp_path / "missing")]
    samples += [3, 0, -5, True, 2.5, Path("p"), ["1", "x"], ("a", "b"), [str(tmp_path)]]
    ctx = typer.Context(typer.main.get_command(app))
    seen = 0
    for name in listing.COMMANDS:
        command = ctx.command.get_command(ctx, name)
        commands = [command, *getattr(command, "commands", {}).values()]
        for c in commands:
            for param in [*c.params, c.get_help_option(ctx)]:
                if not isinstance(param, _TyperParameter):
                    continue
                ours, real = param.get_runtime_param(), build_runtime_param(param.type_descriptor)
                assert type(ours).__name__ == "_Plain" or param.type_descriptor.file_annotation
                for value in samples:
                    seen += 1
                    expected = _outcome(real, value, param, ctx)
                    assert _outcome(ours, value, param, ctx) == expected, (
                        c.name,
                        param.name,
                        value,
                    )
    assert seen > 1000


def test_run_s_start_imports_no_pydantic(tmp_path: Path) -> None:
    """typer's adapters import pydantic; assure's plain coercion leaves them for what it does
    not cover (`assure run` stopped where it loads the spec: its SPEC and every option parsed)."""
    code = f"""
import os, sys
import assure.spec
def stop(*args):
    print("PYDANTIC", "pydantic" in sys.modules, flush=True)
    os._exit(0)
assure.spec.load = stop
from assure.cli import app
app(["run", {str(DEFAULT_SPEC)!r}, "--runs-dir", {str(tmp_path)!r}, "--new", "--junit",
     {str(tmp_path / "j.xml")!r}], prog_name="assure")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "PYDANTIC False" in done.stdout, done.stderr[-2000:]


MAIN = """
import sys
sys.argv = ["assure", *{args!r}]
from assure.cli import main
try:
    main()
finally:
    print("TYPER", "typer" in sys.modules, file=sys.stderr)
"""
TYPER = """
from assure.cli.root import app
app({args!r}, prog_name="assure")
"""


def _console(code: str, env: dict[str, str]) -> tuple[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


@pytest.mark.parametrize("args", [["--help"], ["-h"]])
def test_help_from_its_kept_copy_is_what_typer_prints_and_needs_no_typer(
    args: list[str], tmp_path: Path
) -> None:
    import os

    env = {**os.environ, "ASSURE_CACHE": str(tmp_path), "COLUMNS": "100"}
    typer_s, _ = _console(TYPER.format(args=args), env)
    first, loaded = _console(MAIN.format(args=args), env)  # a miss: typer prints, it is kept
    assert (first, loaded.strip()) == (typer_s, "TYPER True")
    again, loaded = _console(MAIN.format(args=args), env)
    assert (again, loaded.strip()) == (typer_s, "TYPER False")
    # what the output depends on is in the key: another width is a miss, typer's own output
    narrow = {**env, "COLUMNS": "60"}
    typer_narrow, _ = _console(TYPER.format(args=args), narrow)
    assert typer_narrow != typer_s
    assert _console(MAIN.format(args=args), narrow) == (typer_narrow, "TYPER True\n")
    # the program's name is in the usage line: another argv[0] is another key
    renamed, _ = _console(MAIN.format(args=args).replace('"assure", *', '"other", *'), env)
    assert "Usage: other " in renamed
    # a kept copy is used only under its whole key: one edited to say otherwise is not
    (kept,) = [p for p in (tmp_path / "help").iterdir() if p.read_text().endswith(typer_s)]
    line, _, text = kept.read_text().partition("\n")
    kept.write_text(line.replace("100", "101") + "\n" + "forged")
    assert _console(MAIN.format(args=args), env) == (typer_s, "TYPER True\n")
