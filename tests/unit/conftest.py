"""Fixtures for the gateway tests: a real in-process gateway on a real unix socket."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from assure import spec
from assure.core import gate
from assure.gateway.config import parse
from assure.gateway.server import Gateway, serve


@pytest.fixture()
def short_dir() -> Iterator[Path]:
    """A directory with a short path: unix socket paths are limited to ~100 bytes."""
    path = Path(tempfile.mkdtemp(prefix="gw", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def ratified_policy(protected: Sequence[str] = ("tests/**",), **overrides: Any) -> dict[str, Any]:
    """A policy whose contract (covering the whole workspace, pinning `protected` and no
    acceptance tests or writable scope) is ratified by someone else."""
    contract = gate.Contract(
        id="c1",
        proposed_by="alice",
        ratified_by="bob",
        scope=("fs:**",),
        autonomy_ceiling=gate.COMMIT,
    )
    return {
        "contract": dataclasses.asdict(gate.ratify(contract, protected=protected)),
        "operator_dial": gate.COMMIT,
        "verifier_trust": gate.COMMIT,
        **overrides,
    }


SPEC_TOOL_CALLS = spec.schema()["properties"]["limits"]["properties"]["tool_calls"][
    "default"
]  # what the host passes when a spec says none


@pytest.fixture()
def gateway_config(tmp_path: Path, short_dir: Path) -> Callable[..., dict[str, Any]]:
    """Build a raw config dict; keyword arguments override `limits` fields."""
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)

    def make(protected: list[str] | None = None, **limits: Any) -> dict[str, Any]:
        return {
            "run_id": "run-test",
            "attempt": 1,
            "socket": str(short_dir / "gw.sock"),
            "workspace": str(workspace),
            "journal": str(tmp_path / "journal.jsonl"),
            "ready_file": str(tmp_path / "ready"),
            "protected": ["tests/**"] if protected is None else protected,
            "limits": {"tool_calls": SPEC_TOOL_CALLS, **limits},
            "policy": ratified_policy() if protected is None else ratified_policy(protected),
        }

    return make


@pytest.fixture()
def start_gateway(
    gateway_config: Callable[..., dict[str, Any]],
) -> Iterator[Callable[..., Gateway]]:
    """Start gateways in this process; every one still running is shut down after the test."""
    started: list[Gateway] = []

    def start(protected: list[str] | None = None, **limits: Any) -> Gateway:
        gateway = serve(parse(gateway_config(protected, **limits)))
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.shutdown()
