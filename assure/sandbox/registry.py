"""Backends by name: the one place that constructs a sandbox engine (`create`), and the names a
spec's `sandbox.backend` may take. Imported lazily by name, so choosing the fake never
imports docker-py and a node's watchdog pays for the engine's client only when it cleans."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from assure.errors import SandboxError

DEFAULT = "docker"
BACKENDS = {  # name -> "module:class"; an out-of-tree backend adds one line here
    "docker": "assure.sandbox.docker.backend:DockerBackend",
    "fake": "assure.sandbox.fake:FakeBackend",
}


def create(name: str = DEFAULT) -> Any:
    """A new backend of the registered `name` (a `SandboxBackend`; Docker is also the
    `ImageBuilder` and answers doctor's engine facts)."""
    if name not in BACKENDS:
        raise SandboxError(
            f"no sandbox backend named {name!r}",
            fix=f"set sandbox.backend to one of: {', '.join(sorted(BACKENDS))}",
        )
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)()


def chosen(names: Iterable[str]) -> str:
    """The one backend the specs of a command name (the default if none): a suite whose specs
    name different engines is refused, never run on the first one's."""
    found = sorted(set(names)) or [DEFAULT]
    if len(found) > 1:
        raise SandboxError(
            f"the specs name different sandbox backends ({', '.join(found)})",
            fix="run the specs of each backend in a command of their own",
        )
    return found[0]
