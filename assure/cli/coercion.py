"""typer's coercion of a command's plain values (str, int, Path, and lists of them) without
pydantic. typer 0.29 coerces every parameter of the command that runs through a pydantic
TypeAdapter, and importing pydantic and building them was about a fifth of `assure run`'s start
(issue 25). Each value here is what typer's adapter returns for it (tests/unit/test_cli_start.py
holds the two equal); any other annotation or value goes to typer's own adapter, so errors
read as typer writes them. With a typer that coerces otherwise, `install` does nothing."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_origin

try:
    from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
    from typer._param_types import coerce_cli_path
    from typer.core import _TyperParameter
except ImportError:  # pragma: no cover - a typer without per-parameter adapters
    _TyperParameter = None  # type: ignore[assignment,misc]  # a class name, None there

# what int() and pydantic read alike; signs, spaces, underscores and the like go to pydantic
_INT = re.compile(r"-?[0-9]{1,18}")
_MISS = object()


def _leaf(annotation: Any, descriptor: Any, value: Any, param: Any, ctx: Any) -> Any:
    """The value typer's adapter makes of `value` for a plain `annotation`, or _MISS."""
    info = descriptor.parameter_info
    if info.parser is not None:
        return _MISS
    if annotation is str:
        return value if type(value) is str else _MISS
    if annotation is int:
        if type(value) is str and _INT.fullmatch(value):
            value = int(value)
        if type(value) is not int or info.clamp:
            return _MISS
        low, high = info.min, info.max
        return (
            _MISS
            if (low is not None and value < low) or (high is not None and value > high)
            else value
        )
    if annotation is Path and info.path_type is None and not info.allow_dash:
        if type(value) is str:
            value = Path(value)  # what pydantic's Path makes of a str
        if not isinstance(value, Path):
            return _MISS
        return coerce_cli_path(value, info, path_type=Path, param=param, ctx=ctx)
    return _MISS


if _TyperParameter is not None:

    @dataclass(frozen=True)
    class _Plain(RuntimeParam):
        """A parameter's coercion: the plain rules first, typer's adapter (made once) else."""

        descriptor: TypeDescriptor
        _real: list[RuntimeParam] = field(default_factory=list, compare=False)

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            annotation: Any = self.annotation
            if get_origin(annotation) is list and isinstance(value, (list, tuple)):
                (item,) = get_args(annotation)
                made = [_leaf(item, self.descriptor, v, param, ctx) for v in value]
                if _MISS not in made:
                    return made
            elif get_origin(annotation) is None:
                made = _leaf(annotation, self.descriptor, value, param, ctx)
                if made is not _MISS:
                    return made
            if not self._real:
                self._real.append(build_runtime_param(self.descriptor))
            return self._real[0]._coerce_value(value, param, ctx)


def install() -> None:
    """typer.core builds each parameter's coercion with `_plain` from here on (root.py calls
    this before any command is built)."""
    if _TyperParameter is not None:
        import typer.core

        typer.core.build_runtime_param = _plain  # type: ignore[attr-defined]  # re-exported name


def _plain(descriptor: Any) -> Any:
    if descriptor.file_annotation is not None:
        return build_runtime_param(descriptor)
    return _Plain(descriptor.parameter_info, descriptor.annotation, descriptor)
