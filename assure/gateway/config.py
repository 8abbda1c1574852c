"""Load and validate the gateway's JSON config; the one place that holds the limit defaults.

A typo in the config must not silently weaken the gateway (a misspelt `protected` would
drop every protection), so unknown fields are errors and every error names its field.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, fields
from typing import Any

from assure import gate
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
class Policy:
    """What the gate needs besides the clock and the counters. Absent: no contract, so every
    mutation is denied (fail closed)."""

    contract: gate.Contract | None = None
    operator_dial: int = gate.PROPOSE
    verifier_trust: int = gate.PROPOSE
    verifier_stale_seconds: float = 10.0
    human_gates: tuple[gate.HumanGate, ...] = ()
    rollbacks: frozenset[str] = frozenset()
    tokens_limit: int | None = None  # counted by the model proxy
    cost_limit: float | None = None


@dataclass(frozen=True)
class Egress:
    """Outbound HTTP for `http.request`: the egress proxy to send through and the exact
    `host:port`s (host lowercased) the gateway itself lets pass. Absent: no egress."""

    proxy_host: str
    proxy_port: int
    allow: frozenset[str]


@dataclass(frozen=True)
class Database:
    """A gateway-owned SQLite database: `path` inside the gateway container; `mode` is
    `sandbox` (a per-attempt copy) or `live` (the real file, an external effect)."""

    name: str
    path: str
    mode: str


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
    policy: Policy = Policy()
    goal_id: str = ""
    control_dir: str | None = None  # operator overrides (read-only mount)
    breach_file: str | None = None  # written when a budget runs out, for the host to halt
    idempotency_db: str | None = None  # run-level store that outlives attempts
    egress: Egress | None = None  # None: the run has no network at all
    databases: tuple[Database, ...] = ()


_REQUIRED_STRINGS = ("run_id", "socket", "workspace", "journal", "ready_file")
_OPTIONAL_STRINGS = ("goal_id", "control_dir", "breach_file", "idempotency_db")
_TOP_FIELDS = frozenset((*_REQUIRED_STRINGS, *_OPTIONAL_STRINGS, "attempt", "protected", "limits", "policy", "egress", "databases"))
_DB_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_DB_MODES = ("sandbox", "live")


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
        policy=_policy(raw.get("policy", {})),
        egress=_egress(raw["egress"]) if "egress" in raw else None,
        databases=_databases(raw.get("databases", [])),
        **{name: _string(raw, name) for name in _OPTIONAL_STRINGS if name in raw},
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


def _policy(value: Any) -> Policy:
    if not isinstance(value, dict):
        raise ConfigError("policy", "must be a JSON object")
    _no_unknown(value, frozenset(f.name for f in fields(Policy)), "policy.")
    levels = range(gate.PROPOSE, gate.IRREVERSIBLE + 1)
    out: dict[str, Any] = {}
    for name in ("operator_dial", "verifier_trust"):
        if name in value:
            if value[name] not in levels or isinstance(value[name], bool):
                raise ConfigError(f"policy.{name}", f"must be an autonomy level 0..2, got {value[name]!r}")
            out[name] = value[name]
    if value.get("tokens_limit") is not None:
        out["tokens_limit"] = _integer(value["tokens_limit"], "policy.tokens_limit", minimum=0)
    if value.get("cost_limit") is not None:
        cost = value["cost_limit"]
        if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not math.isfinite(cost) or cost < 0:
            raise ConfigError("policy.cost_limit", f"must be a number >= 0, got {cost!r}")
        out["cost_limit"] = float(cost)
    if "verifier_stale_seconds" in value:
        out["verifier_stale_seconds"] = _seconds(value["verifier_stale_seconds"], "policy.verifier_stale_seconds")
    if value.get("contract") is not None:
        out["contract"] = _record(gate.Contract, value["contract"], "policy.contract", tuples=("scope",))
    if "human_gates" in value:
        if not isinstance(value["human_gates"], list):
            raise ConfigError("policy.human_gates", "must be a list")
        out["human_gates"] = tuple(_record(gate.HumanGate, g, f"policy.human_gates[{i}]") for i, g in enumerate(value["human_gates"]))
    if "rollbacks" in value:
        if not isinstance(value["rollbacks"], list) or not all(isinstance(r, str) for r in value["rollbacks"]):
            raise ConfigError("policy.rollbacks", "must be a list of strings")
        out["rollbacks"] = frozenset(value["rollbacks"])
    return Policy(**out)


def _record(cls: Any, value: Any, name: str, tuples: tuple[str, ...] = ()) -> Any:
    """Build a gate dataclass from a JSON object; its own type checks happen in the gate."""
    if not isinstance(value, dict):
        raise ConfigError(name, "must be a JSON object")
    _no_unknown(value, frozenset(f.name for f in fields(cls)), f"{name}.")
    try:
        return cls(**{k: tuple(v) if k in tuples and isinstance(v, list) else v for k, v in value.items()})
    except TypeError as exc:
        raise ConfigError(name, str(exc)) from None


def _databases(value: Any) -> tuple[Database, ...]:
    """`[{"name": "shop", "path": "/var/lib/assure/db/shop.db", "mode": "sandbox"}, ...]`."""
    if not isinstance(value, list):
        raise ConfigError("databases", 'must be a list of {"name", "path", "mode"} objects')
    out: list[Database] = []
    for i, item in enumerate(value):
        where = f"databases[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(where, 'must be a JSON object {"name", "path", "mode"}')
        _no_unknown(item, frozenset(("name", "path", "mode")), f"{where}.")
        name, path, mode = item.get("name"), item.get("path"), item.get("mode")
        if not isinstance(name, str) or not _DB_NAME.fullmatch(name):
            raise ConfigError(f"{where}.name", f"must match {_DB_NAME.pattern}, got {name!r}")
        if any(db.name == name for db in out):
            raise ConfigError(f"{where}.name", f"duplicate database name {name!r}")
        if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
            raise ConfigError(f"{where}.path", f"must be an absolute path, got {path!r}")
        if mode not in _DB_MODES:
            raise ConfigError(f"{where}.mode", f"is required: one of {', '.join(_DB_MODES)}, got {mode!r}")
        out.append(Database(name, path, mode))
    return tuple(out)


def _seconds(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(name, f"must be a positive number of seconds, got {value!r}")
    return float(value)


def _egress(value: Any) -> Egress:
    """`{"proxy": "egress-proxy:3128", "allow": ["api.example.com:443", ...]}`."""
    if not isinstance(value, dict):
        raise ConfigError("egress", 'must be a JSON object {"proxy": "host:port", "allow": ["host:port", ...]}')
    _no_unknown(value, frozenset(("proxy", "allow")), "egress.")
    proxy_host, proxy_port = _hostport(value.get("proxy"), "egress.proxy")
    allow = value.get("allow")
    if not isinstance(allow, list) or not allow:
        raise ConfigError("egress.allow", 'must be a non-empty list of "host:port" strings')
    keys = frozenset("{}:{}".format(*_hostport(item, f"egress.allow[{i}]")) for i, item in enumerate(allow))
    return Egress(proxy_host, proxy_port, keys)


def _hostport(value: Any, name: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":") if isinstance(value, str) else ("", "", "")
    valid_host = bool(host) and len(host) <= 253 and all(c.isascii() and (c.isalnum() or c in ".-") for c in host)
    if not sep or not valid_host or not port.isdigit() or len(port) > 5 or not 1 <= int(port) <= 65535:
        raise ConfigError(name, f'must be "host:port" (letters, digits, dots, dashes; port 1..65535), got {value!r}')
    return host.lower(), int(port)
