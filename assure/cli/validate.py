"""`assure validate`: check spec and suite files, and that each can work here, before a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from assure.cli.common import (
    JSON_OPTION,
)
from assure.cli.lazy import (
    registry,
    render,
    spec_mod,
)
from assure.cli.output import (
    _print_json,
    _safe_lines,
    err,
    out,
)
from assure.cli.root import app
from assure.errors import AssureError


@app.command()
def validate(
    specs: list[Path] = typer.Argument(..., metavar="FILE", help="Spec or suite files to check."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Check spec files (and suites, with every spec they name) against their schemas in specs/,
    and that each can work: its contract as the gate will judge it (ratified, by someone other
    than its proposer, hash and terms as they stand) and its agent command among the agent
    files; and, when the Docker engine answers, that it holds each image and runtime the spec
    names. Report every problem as file:line: field: message, with the command that fixes it."""
    from assure.run import preflight
    from assure.run import suite as suite_mod

    bad, results = 0, []
    engine: list[
        Any
        # the engine, asked at most once, and only by a spec that names an image or runtime to look
        # for
    ] = []

    def engine_problems(s: spec_mod.Spec) -> list[preflight.Problem]:
        if not preflight.needs_engine(s):
            return []
        if not engine:
            try:
                engine.append(registry.create())
            except AssureError as exc:
                engine.append(exc)
        if isinstance(engine[0], AssureError):
            return [
                preflight.Problem(
                    str(s.path),
                    f"its images and sandbox.runtime were not checked: {engine[0].message}",
                    engine[0].fix or "start the Docker engine",
                    fatal=False,
                )
            ]
        return preflight.engine_problems(s, engine[0])

    for path in specs:
        try:
            loaded = (
                suite_mod.load(path).specs
                if suite_mod.is_suite(path)
                else spec_mod.load_samples(path)
            )
            found = list(  # the samples of one spec share its problems: each said once
                dict.fromkeys(
                    p for s in loaded for p in [*preflight.problems(s), *engine_problems(s)]
                )
            )
            signed = list(dict.fromkeys(line for s in loaded for line in preflight.ratified(s)))
        except AssureError as exc:
            bad += 1
            results.append(
                {
                    "file": str(path),
                    "ok": False,
                    "problems": exc.message.split("\n"),
                    "fix": exc.fix,
                    "notes": [],
                }
            )
            if not json_out:
                err.print(_safe_lines(exc.explain()), markup=False, highlight=False)
            continue
        fatal = [p for p in found if p.fatal]
        bad += bool(fatal)
        results.append(
            {
                "file": str(path),
                "ok": not fatal,
                "problems": [f"{p.where}: {p.message}" for p in fatal],
                "fix": "; ".join(p.fix for p in fatal) or None,
                "notes": [f"{p.where}: {p.message}" for p in found if not p.fatal],
                "ratified": signed,
            }
        )
        if json_out:
            continue
        for problem in found:
            first, *rest = problem.lines()
            err.print(
                _safe_lines("\n".join([first if problem.fatal else f"note: {first}", *rest])),
                markup=False,
                highlight=False,
            )
        if not fatal:
            out.print(f"ok {render.display(str(path))}", markup=False, highlight=False)
            for line in signed:
                out.print(_safe_lines(f"  {line}"), markup=False, highlight=False)
    if json_out:
        _print_json(results)
    raise typer.Exit(1 if bad else 0)
