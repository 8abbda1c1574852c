"""What the command modules use, imported on first use: `--version` and `--help` need none of
rich, docker, jsonschema or cryptography (issue 25). `render` is assure.records.report, the
records' renderers; cli/output.py prints what they make."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any


class _Lazy:
    """A module, or what a call makes, on first use: `--version` and `--help` need none of
    rich, docker, jsonschema or cryptography, which were most of a bare start (issue 25)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make, self._it, self._lock = make, None, threading.Lock()

    def _get(self) -> Any:
        with self._lock:
            if self._it is None:
                self._it = self._make()
            return self._it

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._get(), attr)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._get()(*args, **kwargs)

    # Special methods skip __getattr__: rich's Live enters its console (`with console:`).
    def __enter__(self) -> Any:
        return self._get().__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self._get().__exit__(*exc)


def _lazy(module: str, name: str | None = None) -> Any:
    return _Lazy(
        lambda: (
            getattr(importlib.import_module(module), name)
            if name
            else importlib.import_module(module)
        )
    )


Table = _lazy("rich.table", "Table")
Text = _lazy("rich.text", "Text")
spec_mod = _lazy("assure.spec")
alerts = _lazy("assure.records.alerts")
runs_mod = _lazy("assure.ops.runs")
junit = _lazy("assure.records.junit")
layout = _lazy("assure.records.layout")
store = _lazy("assure.records.store")
summary = _lazy("assure.records.summary")
render = _lazy("assure.records.report")
AttemptPaths = _lazy("assure.records.layout", "AttemptPaths")
RunPaths = _lazy("assure.records.layout", "RunPaths")
install = _lazy("assure.sandbox.install")
registry = _lazy("assure.sandbox.registry")
runtimes = _lazy("assure.sandbox.runtimes")
DockerBackend = _lazy("assure.sandbox.docker.backend", "DockerBackend")
Images = _lazy("assure.sandbox.docker.images", "Images")
ImageSet = _lazy("assure.sandbox.docker.images", "ImageSet")
