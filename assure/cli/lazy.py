"""What the command modules use, imported on first use: `--version` and `--help` need none of
rich, docker, jsonschema or cryptography (issue 25). `render` is assure.records.report, the
records' renderers; cli/output.py prints what they make."""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import threading
import types
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


class _Markdown:
    """rich.markdown.Markdown, made on first use (typer's help in markdown mode: not assure's)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        from rich.markdown import Markdown

        return Markdown(*args, **kwargs)


class _Traceback:
    """rich.traceback.Traceback, imported on first use (typer's pretty traceback of a crash)."""

    @staticmethod
    def from_exception(*args: Any, **kwargs: Any) -> Any:
        from rich.traceback import Traceback

        return Traceback.from_exception(*args, **kwargs)


def _stubs() -> dict[str, types.ModuleType]:
    made = {}
    for name, attr, stand_in in (
        ("rich.markdown", "Markdown", _Markdown),
        ("rich.traceback", "Traceback", _Traceback),
    ):
        module = types.ModuleType(name)
        setattr(module, attr, stand_in)
        made[name] = module
    return made


class _RichUtilsLoader(importlib.machinery.SourceFileLoader):
    """Runs typer.rich_utils with stand-ins for the two modules, then takes them out of
    sys.modules again, so any later `import rich.markdown` gets the real one."""

    def exec_module(self, module: types.ModuleType) -> None:
        stubs = {n: m for n, m in _stubs().items() if n not in sys.modules}
        sys.modules.update(stubs)
        try:
            super().exec_module(module)
        finally:
            for name, stub in stubs.items():
                if sys.modules.get(name) is stub:
                    del sys.modules[name]


class _LightRichUtils:
    """typer.rich_utils, which renders `--help`, imports rich.markdown (markdown-it, pygments)
    and rich.traceback (attrs, rich.pretty) at its top, for Markdown help and a crash's pretty
    traceback: about 40 % of `assure --help` (issue 25). This finder loads it with stand-ins
    that import each on first use; anything it does not recognise is left to the usual finders."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "typer.rich_utils":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or type(spec.loader) is not importlib.machinery.SourceFileLoader:
            return spec
        spec.loader = _RichUtilsLoader(spec.loader.name, spec.loader.path)
        return spec


def light_help() -> None:
    """Install the finder (once), before typer.rich_utils is imported: root.py calls it."""
    if "typer.rich_utils" not in sys.modules and not any(
        isinstance(f, _LightRichUtils) for f in sys.meta_path
    ):
        sys.meta_path.insert(0, _LightRichUtils())
