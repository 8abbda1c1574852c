"""Load and validate the gateway's JSON config; the one place that holds the limit defaults.

A typo in the config must not silently weaken the gateway (a misspelt `protected` would
drop every protection), so unknown fields are errors and every error names its field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from typing import Any

from assure.chain import canonical, sha256_hex


class ConfigError(Exception):
    """The config is unusable; `field` names the offending field (dotted)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"gateway config field {field!r}: {message}")
        self.field = field


@dataclass(frozen=True)
class Limits:
    """Resource limits; the defaults here are the only defaults."""

    tool_calls: int = 1000
    max_body_bytes: int = 8 * 1024 * 1024
    max_header_bytes: int = 8 * 1024
    read_timeout_seconds: float = 10.0
    max_connections: int = 16
    max_file_bytes: int = 4 * 1024 * 1024


@dataclass(frozen=True)
class Config:
    run_id: str
    attempt: int
    socket: str
    workspace: str
    journal: str
    ready_file: str
    protected: tuple[str, ...]
    limits: Limits
    digest: str  # sha256 of the canonical JSON the config was parsed from


_REQUIRED_STRINGS = ("run_id", "socket", "workspace", "journal", "ready_file")
_TOP_FIELDS = frozenset((*_REQUIRED_STRINGS, "attempt", "protected", "limits"))


def load(path: str) -> Config:
    """Read and validate the config file at `path`. Raises `ConfigError`."""
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ConfigError("<file>", f"cannot read {path}: {exc}") from None
    return parse(raw)


def parse(raw: Any) -> Config:
    """Validate a decoded config object. Raises `ConfigError`."""
    if not isinstance(raw, dict):
        raise ConfigError("<root>", "must be a JSON object")
    _no_unknown(raw, _TOP_FIELDS, "")
    strings = {name: _string(raw, name) for name in _REQUIRED_STRINGS}
    if "attempt" not in raw:
        raise ConfigError("attempt", "is required")
    attempt = _integer(raw["attempt"], "attempt", minimum=0)
    try:
        digest = sha256_hex(canonical(raw))
    except ValueError as exc:
        raise ConfigError("<root>", f"not canonical JSON: {exc}") from None
    return Config(
        attempt=attempt,
        protected=_globs(raw.get("protected", [])),
        limits=_limits(raw.get("limits", {})),
        digest=digest,
        **strings,
    )


def _no_unknown(obj: dict[str, Any], known: frozenset[str], prefix: str) -> None:
    for key in sorted(set(obj) - known):
        raise ConfigError(prefix + key, f"unknown field (known: {', '.join(sorted(known))})")


def _string(raw: dict[str, Any], name: str) -> str:
    value = raw.get(name)
    if not isinstance(value, str) or not value:
        raise ConfigError(name, "is required and must be a non-empty string")
    return value


def _integer(value: Any, name: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(name, f"must be an integer >= {minimum}, got {value!r}")
    return value


def _globs(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(g, str) and g for g in value):
        raise ConfigError("protected", "must be a list of non-empty glob strings")
    return tuple(value)


def _limits(value: Any) -> Limits:
    if not isinstance(value, dict):
        raise ConfigError("limits", "must be a JSON object")
    known = {f.name: f for f in fields(Limits)}
    _no_unknown(value, frozenset(known), "limits.")
    checked: dict[str, Any] = {}
    for name, item in value.items():
        if known[name].type == "float":
            checked[name] = _seconds(item, f"limits.{name}")
        else:
            checked[name] = _integer(item, f"limits.{name}", minimum=0 if name == "tool_calls" else 1)
    return Limits(**checked)


def _seconds(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(name, f"must be a positive number of seconds, got {value!r}")
    return float(value)
