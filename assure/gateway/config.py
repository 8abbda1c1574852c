"""The gateway's config: one frozen `Config`, built by the host (run/attempt.py), written once
as JSON (`Config.to_json`) and read back here, validated (`load`, `parse`); the one place that
holds the gateway's limit defaults.

A typo in the config must not silently weaken the gateway (a misspelt `protected` would
drop every protection), so unknown fields are errors and every error names its field.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping

from assure.core import gate
from assure.core.chain import canonical, sha256_hex
from assure.core.limits import MODEL_EXCHANGE_SECONDS
from assure.core.record import asdict, dataclass, field, fields
from assure.gateway.egress import Egress

TYPE_CHECKING = False  # typing.TYPE_CHECKING; the gateway boots without typing (core/__init__)
if TYPE_CHECKING:
    from typing import Any


class ConfigError(Exception):
    """The config is unusable; `field` names the offending field (dotted)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"gateway config field {field!r}: {message}")
        self.field = field


@dataclass(frozen=True)
class Limits:
    """Resource limits; the defaults here are the only defaults, but for `tool_calls` and
    `wall_seconds`: those are the spec's (defaults in specs/spec.schema.json), which the host
    always passes."""

    tool_calls: int
    # Counted from the gateway's own start, which precedes the agent's: the gateway's budget
    # runs out before the host's deadline, so no call is allowed while the host stops the
    # agent (its SIGTERM grace). None: no wall-clock budget (a gateway run by a test).
    wall_seconds: float | None = None
    max_body_bytes: int = 8 * 1024 * 1024
    max_header_bytes: int = 8 * 1024
    read_timeout_seconds: float = 10.0
    idle_timeout_seconds: float = (
        30.0  # a kept-alive connection with no request this long is closed
    )
    max_connections: int = 16
    max_file_bytes: int = 4 * 1024 * 1024
    # Every request (tool calls, replays, model calls, rejected requests, connections over
    # the cap) counts; past this the gateway reports a budget breach and the host stops.
    requests: int = 10_000
    # The journal's size; reaching it journals `journal_full`, reports a budget breach and
    # serves no further call (the closing records and an effect's outcome still fit).
    max_journal_bytes: int = 64 * 1024 * 1024
    # A JSON body is pre-scanned before it is parsed: deeper nesting or more elements
    # (values in arrays and objects) is refused with 400 (an 8 MB `[{},{},...]` parses
    # to ~200 MB of objects).
    max_json_depth: int = 64
    max_json_items: int = 100_000
    # A journaled agent string longer than this (idempotency_key, rollback_ref, human_gate,
    # and the gate inputs that carry them) is journaled as `sha256:<hex>` of its UTF-8.
    max_journal_field_chars: int = 256

    def to_json(self) -> dict[str, object]:
        """`tool_calls`, and every limit that is not the default here (the host passes the
        spec's `tool_calls` and `wall_seconds`; the rest are the gateway's own)."""
        return _not_default(self, keep=("tool_calls",))


@dataclass(frozen=True)
class Policy:
    """What the gate needs besides the clock and the counters. Absent: no contract, so every
    mutation is denied (fail closed)."""

    contract: gate.Contract | None = None
    assertions: Any = ()  # what the contract pins besides its own terms (the host's policy.pinned):
    writable: tuple[str, ...] = ()  # digested by the gate, never interpreted here
    operator_dial: int = gate.PROPOSE
    verifier_trust: int = gate.PROPOSE
    verifier_stale_seconds: float = 10.0
    human_gates: tuple[gate.HumanGate, ...] = ()
    rollbacks: Mapping[str, tuple[str, ...]] = field(
        default_factory=dict
    )  # confirmed ref -> scope globs it covers
    tokens_limit: int | None = None  # counted by the model proxy
    cost_limit: float | None = None

    def __post_init__(self) -> None:
        """Read-only all the way down (the gate judges a frozen copy: Config.pinned)."""
        if self.contract is not None:
            object.__setattr__(self, "contract", gate.freeze_contract(self.contract))
        object.__setattr__(self, "assertions", gate.freeze(self.assertions))
        object.__setattr__(self, "rollbacks", gate.freeze(self.rollbacks))

    def to_json(self) -> dict[str, Any]:
        c = self.contract
        out: dict[str, Any] = {
            "contract": None
            if c is None
            else {f.name: gate.thaw(getattr(c, f.name)) for f in fields(c)},
            "assertions": gate.thaw(self.assertions),
            "writable": list(self.writable),
            "operator_dial": self.operator_dial,
            "verifier_trust": self.verifier_trust,
            "human_gates": [asdict(g) for g in self.human_gates],
            "rollbacks": gate.thaw(self.rollbacks),
            "tokens_limit": self.tokens_limit,
            "cost_limit": self.cost_limit,
        }
        if self.verifier_stale_seconds != Policy.verifier_stale_seconds:
            out["verifier_stale_seconds"] = self.verifier_stale_seconds
        return out


@dataclass(frozen=True)
class Database:
    """A gateway-owned SQLite database: `path` inside the gateway container; `mode` is
    `sandbox` (a per-attempt copy) or `live` (the real file, an external effect)."""

    name: str
    path: str
    mode: str

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "path": self.path, "mode": self.mode}


@dataclass(frozen=True)
class Price:
    """What a model's tokens cost, in currency per million tokens."""

    input: float
    output: float
    cache_write: float
    cache_read: float


MODEL_MODES = ("anthropic", "openai", "replay", "scripted")
UPSTREAM_MODES = (
    "anthropic",
    "openai",
)  # an API upstream: the Anthropic API, or any OpenAI-compatible one
ALLOW_FIELDS = ("request_keys", "tool_types", "content", "betas")  # model.allow: features.Allow
# Server-tool fees, currency per request, by `usage.server_tool_use` field: Anthropic's list
# prices in USD (web search $10 per 1,000; web fetch has no fee beyond its tokens).
# What a replay ignores when it matches a request (`model.volatile`, modelmatch.Volatile), by
# default: request ids that do not change the answer (Claude Code's `metadata.user_id` holds a
# fresh device and session id each run; OpenAI's `user`), and a line of the prompt that
# states today's date (Claude Code's system prompt: "Today's date is 2026-12-02.").
DEFAULT_VOLATILE_FIELDS = ("metadata", "user")
DEFAULT_VOLATILE_TEXT = (r"(?im)^.*\bdate\b.*\b\d{4}-\d{2}-\d{2}\b.*$",)
SERVER_TOOL_FEES = {"web_search_requests": 0.01, "web_fetch_requests": 0.0}


@dataclass(frozen=True)
class Model:
    """Model access (`POST /v1/messages`, model.py): where answers come from, where every
    request and response is recorded (`blob_dir`), and what tokens cost. Absent: no model.

    `anthropic`: the real API at `upstream`, through the egress proxy, with the key read from
    `key_file`; `openai`: the same for an OpenAI-compatible API (OpenAI, vLLM, Ollama, a LiteLLM
    proxy: `upstream` without the `/v1`); `replay`: the answers recorded in `recording` (gateway
    journals + their blob
    dir); `scripted`: the answers listed in the `script` file, in order."""

    mode: str
    blob_dir: str
    prices: Mapping[str, Price] = field(default_factory=dict)
    upstream: str | None = None  # anthropic: scheme://host[:port][/prefix], on egress.allow
    key_file: str | None = None  # anthropic: read by the gateway only
    allow_http: bool = False  # anthropic: accept a plain-http upstream (local test servers)
    recording: tuple[str, ...] = ()  # replay: gateway journals, in order
    recording_blob_dir: str | None = None  # replay: the blob dir those journals reference
    script: str | None = None  # scripted: a JSON list of responses
    volatile: tuple[tuple[str, ...], tuple[str, ...]] = (
        DEFAULT_VOLATILE_FIELDS,
        DEFAULT_VOLATILE_TEXT,
    )  # replay: (fields, text) ignored when matching (modelmatch.Volatile)
    timeout_seconds: float = MODEL_EXCHANGE_SECONDS  # one upstream exchange, start to end
    max_response_bytes: int = 32 * 1024 * 1024
    allow: Mapping[str, frozenset[str]] = field(
        default_factory=dict
    )  # ALLOW_FIELDS -> names beyond features.py's defaults
    server_tool_fees: Mapping[str, float] = field(default_factory=lambda: dict(SERVER_TOOL_FEES))

    def to_json(self) -> dict[str, Any]:
        """What `_model` reads back as this model: the mode's own fields, and the common ones
        where they are not the defaults."""
        out: dict[str, Any] = {
            "mode": self.mode,
            "blob_dir": self.blob_dir,
            "prices": {name: asdict(price) for name, price in self.prices.items()},
        }
        if self.allow:
            out["allow"] = {name: sorted(items) for name, items in self.allow.items()}
        fees = {k: v for k, v in self.server_tool_fees.items() if SERVER_TOOL_FEES.get(k) != v}
        if fees:
            out["server_tool_fees"] = fees
        if self.timeout_seconds != MODEL_EXCHANGE_SECONDS:
            out["timeout_seconds"] = self.timeout_seconds
        if self.max_response_bytes != Model.max_response_bytes:
            out["max_response_bytes"] = self.max_response_bytes
        if self.mode in UPSTREAM_MODES:
            out.update(upstream=self.upstream, key_file=self.key_file, allow_http=self.allow_http)
        elif self.mode == "replay":
            out["recording"] = {
                "journals": list(self.recording),
                "blob_dir": self.recording_blob_dir,
            }
            if self.volatile != (DEFAULT_VOLATILE_FIELDS, DEFAULT_VOLATILE_TEXT):
                out["volatile"] = {"fields": list(self.volatile[0]), "text": list(self.volatile[1])}
        else:
            out["script"] = self.script
        return out


@dataclass(frozen=True)
class Config:
    """The attempt's whole gateway config, checked by `load` (a docstring: dataclass would
    otherwise build one from inspect.signature at every boot)."""

    run_id: str
    attempt: int
    socket: str
    workspace: str
    journal: str
    ready_file: str
    protected: tuple[str, ...]
    limits: Limits
    policy: Policy = Policy()
    goal_id: str = ""
    control_dir: str | None = None  # operator overrides (read-only mount)
    breach_file: str | None = None  # written when a budget runs out, for the host to halt
    idempotency_db: str | None = None  # run-level store that outlives attempts
    heartbeat_file: str | None = None  # `last_success_at` for the monitor
    egress: Egress | None = None  # None: the run has no network at all
    databases: tuple[Database, ...] = ()
    model: Model | None = None  # None: no model access (/v1/messages answers 404)
    # sha256 of the canonical JSON the config was parsed from (`parse`; the journal's
    # `config_sha256`): what the gateway read, so not part of the value the host built
    digest: str = field(default="", compare=False)
    # The contract and what it is judged against (policy's, and `protected`), frozen with their
    # term digests once: `decide()` reads them instead of digesting nine terms per mutation.
    # Derived here, so a changed config (dataclasses.replace) is a new snapshot.
    pinned: gate.Pinned = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "protected", tuple(self.protected))
        policy = self.policy
        object.__setattr__(
            self,
            "pinned",
            gate.Pinned(
                contract=policy.contract,
                assertions=policy.assertions,
                protected=self.protected,
                writable=policy.writable,
            ),
        )

    def to_json(self) -> dict[str, Any]:
        """The config file: what `parse` reads back as this config (the host writes it once)."""
        out: dict[str, Any] = {
            "run_id": self.run_id,
            "attempt": self.attempt,
            "socket": self.socket,
            "workspace": self.workspace,
            "journal": self.journal,
            "ready_file": self.ready_file,
            "protected": list(self.protected),
            "limits": self.limits.to_json(),
            "goal_id": self.goal_id,
            "policy": self.policy.to_json(),
        }
        out.update(
            (name, getattr(self, name))
            for name in _OPTIONAL_STRINGS[1:]
            if getattr(self, name) is not None
        )
        out["databases"] = [db.to_json() for db in self.databases]
        if self.egress is not None:
            e = self.egress
            out["egress"] = {"proxy": f"{e.proxy_host}:{e.proxy_port}", "allow": sorted(e.allow)}
        if self.model is not None:
            out["model"] = self.model.to_json()
        return out


def _not_default(record: Any, keep: tuple[str, ...] = ()) -> dict[str, object]:
    """A flat dataclass's fields that are in `keep` or differ from their defaults."""
    return {
        f.name: getattr(record, f.name)
        for f in fields(record)
        if f.name in keep or getattr(record, f.name) != f.default
    }


_REQUIRED_STRINGS = ("run_id", "socket", "workspace", "journal", "ready_file")
_OPTIONAL_STRINGS = ("goal_id", "control_dir", "breach_file", "idempotency_db", "heartbeat_file")
_TOP_FIELDS = frozenset(
    (
        *_REQUIRED_STRINGS,
        *_OPTIONAL_STRINGS,
        "attempt",
        "protected",
        "limits",
        "policy",
        "egress",
        "databases",
        "model",
    )
)
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
    egress = _egress(raw["egress"]) if "egress" in raw else None
    return Config(
        attempt=attempt,
        protected=_globs(raw.get("protected", [])),
        limits=_limits(raw.get("limits", {})),
        digest=digest,
        policy=_policy(raw.get("policy", {})),
        egress=egress,
        databases=_databases(raw.get("databases", [])),
        model=_model(raw["model"], egress) if "model" in raw else None,
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
    if "tool_calls" not in value:
        raise ConfigError("limits.tool_calls", "is required: the host passes the spec's limit")
    checked: dict[str, Any] = {}
    for name, item in value.items():
        if known[name].type in ("float", "float | None"):
            checked[name] = _seconds(item, f"limits.{name}")
        else:
            checked[name] = _integer(
                item, f"limits.{name}", minimum=0 if name == "tool_calls" else 1
            )
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
                raise ConfigError(
                    f"policy.{name}", f"must be an autonomy level 0..2, got {value[name]!r}"
                )
            out[name] = value[name]
    if value.get("tokens_limit") is not None:
        out["tokens_limit"] = _integer(value["tokens_limit"], "policy.tokens_limit", minimum=0)
    if value.get("cost_limit") is not None:
        cost = value["cost_limit"]
        if (
            isinstance(cost, bool)
            or not isinstance(cost, (int, float))
            or not math.isfinite(cost)
            or cost < 0
        ):
            raise ConfigError("policy.cost_limit", f"must be a number >= 0, got {cost!r}")
        out["cost_limit"] = float(cost)
    if "verifier_stale_seconds" in value:
        out["verifier_stale_seconds"] = _seconds(
            value["verifier_stale_seconds"], "policy.verifier_stale_seconds"
        )
    if value.get("contract") is not None:
        out["contract"] = _record(
            gate.Contract, value["contract"], "policy.contract", tuples=("scope",)
        )
    if "assertions" in value:
        out["assertions"] = value["assertions"]
    if "writable" in value:
        if not isinstance(value["writable"], list) or not all(
            isinstance(g, str) for g in value["writable"]
        ):
            raise ConfigError("policy.writable", "must be a list of globs")
        out["writable"] = tuple(value["writable"])
    if "human_gates" in value:
        if not isinstance(value["human_gates"], list):
            raise ConfigError("policy.human_gates", "must be a list")
        out["human_gates"] = tuple(
            _record(gate.HumanGate, g, f"policy.human_gates[{i}]")
            for i, g in enumerate(value["human_gates"])
        )
    if "rollbacks" in value:
        rollbacks = value["rollbacks"]
        if not isinstance(rollbacks, dict) or not all(
            isinstance(s, list) and s and all(isinstance(g, str) and g for g in s)
            for s in rollbacks.values()
        ):
            raise ConfigError(
                "policy.rollbacks",
                'must be an object {"<ref>": ["<scope glob>", ...]}: each confirmed ref with the'
                " scopes it covers",
            )
        out["rollbacks"] = {ref: tuple(scopes) for ref, scopes in rollbacks.items()}
    return Policy(**out)


def _record(cls: Any, value: Any, name: str, tuples: tuple[str, ...] = ()) -> Any:
    """Build a gate dataclass from a JSON object; its own type checks happen in the gate."""
    if not isinstance(value, dict):
        raise ConfigError(name, "must be a JSON object")
    _no_unknown(value, frozenset(f.name for f in fields(cls)), f"{name}.")
    try:
        return cls(
            **{k: tuple(v) if k in tuples and isinstance(v, list) else v for k, v in value.items()}
        )
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
            raise ConfigError(
                f"{where}.mode", f"is required: one of {', '.join(_DB_MODES)}, got {mode!r}"
            )
        out.append(Database(name, path, mode))
    return tuple(out)


def _seconds(value: Any, name: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigError(name, f"must be a positive number of seconds, got {value!r}")
    return float(value)


def _egress(value: Any) -> Egress:
    """`{"proxy": "egress-proxy:3128", "allow": ["api.example.com:443", ...]}`."""
    if not isinstance(value, dict):
        raise ConfigError(
            "egress", 'must be a JSON object {"proxy": "host:port", "allow": ["host:port", ...]}'
        )
    _no_unknown(value, frozenset(("proxy", "allow")), "egress.")
    proxy_host, proxy_port = _hostport(value.get("proxy"), "egress.proxy")
    allow = value.get("allow")
    if not isinstance(allow, list) or not allow:
        raise ConfigError("egress.allow", 'must be a non-empty list of "host:port" strings')
    keys = frozenset(
        "{}:{}".format(*_hostport(item, f"egress.allow[{i}]")) for i, item in enumerate(allow)
    )
    return Egress(proxy_host, proxy_port, keys)


def egress(proxy: str, allow: Iterable[str]) -> Egress:
    """The `egress` section the host builds (the proxy's "host:port", the exact "host:port"s
    it lets pass), checked as the gateway checks it."""
    return _egress({"proxy": proxy, "allow": list(allow)})


def _hostport(value: Any, name: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":") if isinstance(value, str) else ("", "", "")
    valid_host = (
        bool(host)
        and len(host) <= 253
        and all(c.isascii() and (c.isalnum() or c in ".-") for c in host)
    )
    if (
        not sep
        or not valid_host
        or not port.isdigit()
        or len(port) > 5
        or not 1 <= int(port) <= 65535
    ):
        raise ConfigError(
            name,
            f'must be "host:port" (letters, digits, dots, dashes; port 1..65535), got {value!r}',
        )
    return host.lower(), int(port)


_MODEL_COMMON = (
    "mode",
    "blob_dir",
    "prices",
    "timeout_seconds",
    "max_response_bytes",
    "allow",
    "server_tool_fees",
)
_MODEL_BY_MODE = {
    "anthropic": (("upstream", "key_file"), ("allow_http",)),  # (required, optional)
    "openai": (("upstream", "key_file"), ("allow_http",)),
    "replay": (("recording",), ("volatile",)),
    "scripted": (("script",), ()),
}
_PRICE_FIELDS = tuple(f.name for f in fields(Price))


def _model(value: Any, egress: Egress | None) -> Model:
    """`{"mode": "anthropic" | "openai" | "replay" | "scripted", "blob_dir": "/abs", ...}` (see
    `Model`)."""
    if not isinstance(value, dict):
        raise ConfigError("model", 'must be a JSON object {"mode": ..., "blob_dir": ..., ...}')
    mode = value.get("mode")
    if mode not in MODEL_MODES:
        raise ConfigError(
            "model.mode", f"is required: one of {', '.join(MODEL_MODES)}, got {mode!r}"
        )
    required, optional = _MODEL_BY_MODE[mode]
    for key in sorted(value):
        if key in _MODEL_COMMON or key in required or key in optional:
            continue
        modes = [m for m, (req, opt) in _MODEL_BY_MODE.items() if key in req or key in opt]
        if modes:
            raise ConfigError(
                f"model.{key}", f"is only used in mode {modes[0]!r}, not {mode!r}; remove it"
            )
        known = sorted(
            {*_MODEL_COMMON, *(k for req, opt in _MODEL_BY_MODE.values() for k in (*req, *opt))}
        )
        raise ConfigError(f"model.{key}", f"unknown field (known: {', '.join(known)})")
    for key in required:
        if key not in value:
            raise ConfigError(f"model.{key}", f"is required in mode {mode!r}")
    out: dict[str, Any] = {
        "mode": mode,
        "blob_dir": _abs_path(value.get("blob_dir"), "model.blob_dir"),
    }
    out["prices"] = _prices(value.get("prices", {}))
    if "timeout_seconds" in value:
        out["timeout_seconds"] = _seconds(value["timeout_seconds"], "model.timeout_seconds")
    if "max_response_bytes" in value:
        out["max_response_bytes"] = _integer(
            value["max_response_bytes"], "model.max_response_bytes", minimum=1
        )
    if "allow" in value:
        out["allow"] = _allow(value["allow"])
    if "server_tool_fees" in value:
        out["server_tool_fees"] = {**SERVER_TOOL_FEES, **_fees(value["server_tool_fees"])}
    if mode in UPSTREAM_MODES:
        if not isinstance(value.get("allow_http", False), bool):
            raise ConfigError("model.allow_http", "must be true or false")
        out["allow_http"] = value.get("allow_http", False)
        out["upstream"] = _upstream(value["upstream"], egress, out["allow_http"])
        out["key_file"] = _abs_path(value["key_file"], "model.key_file")
    elif mode == "replay":
        journals, blobs = _recording(value["recording"])
        out.update(recording=journals, recording_blob_dir=blobs)
        if "volatile" in value:
            out["volatile"] = _volatile(value["volatile"])
    else:
        out["script"] = _abs_path(value["script"], "model.script")
    return Model(**out)


def _allow(value: Any) -> dict[str, frozenset[str]]:
    """`{"request_keys": [...], "tool_types": [...], "content": [...], "betas": [...]}`: names, each
    a short string."""
    if not isinstance(value, dict):
        raise ConfigError(
            "model.allow",
            f"must be an object with any of {', '.join(ALLOW_FIELDS)} (lists of names)",
        )
    _no_unknown(value, frozenset(ALLOW_FIELDS), "model.allow.")
    out: dict[str, frozenset[str]] = {}
    for name, items in value.items():
        if not isinstance(items, list) or not all(
            isinstance(i, str) and 0 < len(i) <= 128 for i in items
        ):
            raise ConfigError(
                f"model.allow.{name}", "must be a list of names (strings of 1..128 characters)"
            )
        out[name] = frozenset(items)
    return out


def _fees(value: Any) -> dict[str, float]:
    """`{"web_search_requests": 0.01}`: currency per server-tool request."""
    if not isinstance(value, dict):
        raise ConfigError(
            "model.server_tool_fees",
            f"must be an object {{{', '.join(SERVER_TOOL_FEES)}: currency per request}}",
        )
    _no_unknown(value, frozenset(SERVER_TOOL_FEES), "model.server_tool_fees.")
    for name, fee in value.items():
        if (
            isinstance(fee, bool)
            or not isinstance(fee, (int, float))
            or not math.isfinite(fee)
            or fee < 0
        ):
            raise ConfigError(
                f"model.server_tool_fees.{name}",
                f"must be a number >= 0 (currency per request), got {fee!r}",
            )
    return {name: float(fee) for name, fee in value.items()}


def _abs_path(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
        raise ConfigError(name, f"must be an absolute path, got {value!r}")
    return value


def _prices(value: Any) -> dict[str, Price]:
    """`{"claude-sonnet-4-5": {"input": 3, "output": 15, "cache_write": 3.75, "cache_read":
    0.3}}`."""
    if not isinstance(value, dict):
        raise ConfigError(
            "model.prices",
            'must be an object {"<model id>": {"input", "output", "cache_write", "cache_read"}}',
        )
    out: dict[str, Price] = {}
    for model, price in value.items():
        where = f"model.prices.{model}"
        if not model or len(model) > 128:
            raise ConfigError(where, "model ids must be 1..128 characters")
        if not isinstance(price, dict):
            raise ConfigError(
                where,
                f"must be an object with {', '.join(_PRICE_FIELDS)} (currency per million tokens)",
            )
        _no_unknown(price, frozenset(_PRICE_FIELDS), f"{where}.")
        for name in _PRICE_FIELDS:
            number = price.get(name)
            if (
                isinstance(number, bool)
                or not isinstance(number, (int, float))
                or not math.isfinite(number)
                or number < 0
            ):
                raise ConfigError(
                    f"{where}.{name}",
                    f"is required: a number >= 0 (currency per million tokens), got {number!r}",
                )
        out[model] = Price(**{name: float(price[name]) for name in _PRICE_FIELDS})
    return out


def _upstream(value: Any, egress: Egress | None, allow_http: bool) -> str:
    """The API's base URL; its host:port must be on `egress.allow` (the gateway only reaches
    it through the egress proxy)."""
    if not isinstance(value, str):
        raise ConfigError(
            "model.upstream", f'must be a base URL like "https://api.anthropic.com", got {value!r}'
        )
    # here, not at the top: it (and the ipaddress it imports) costs every boot, and only a model or
    # egress URL needs it
    import urllib.parse

    parts = urllib.parse.urlsplit(value)
    if parts.query or parts.fragment or value.endswith("?") or value.endswith("#"):
        raise ConfigError("model.upstream", f"must have no query or fragment, got {value!r}")
    from assure.gateway import (
        http,
    )  # only a model section needs it; see tools.py on why not at the top

    try:
        target = http.parse_target({"method": "POST", "url": value})
    except http.Refused as exc:
        raise ConfigError("model.upstream", exc.message) from None
    if target.scheme != "https" and not allow_http:
        raise ConfigError(
            "model.upstream",
            f"{value!r} is plain http, which would send the API key in clear; use https (or set"
            ' "allow_http": true for a local test server)',
        )
    if egress is None:
        raise ConfigError(
            "model.upstream",
            "needs an `egress` section: the gateway reaches the model API only through the egress"
            " proxy",
        )
    try:
        http.check(egress, target)
    except http.Refused as exc:
        raise ConfigError(
            "model.upstream",
            f"{exc.message}: add {target.key!r} to egress.allow (and to the egress proxy's allow)",
        ) from None
    return value.rstrip("/")


def _volatile(value: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`{"fields": ["metadata", "messages.*.cache_control"], "text": ["(?m)^Today.*$"]}`:
    dotted JSON paths (`*`: any key or item) and regular expressions; each defaults to ours."""
    if not isinstance(value, dict):
        raise ConfigError(
            "model.volatile",
            'must be an object {"fields": [dotted JSON paths], "text": [regular expressions]}',
        )
    _no_unknown(value, frozenset(("fields", "text")), "model.volatile.")
    out: list[tuple[str, ...]] = []
    for name, default in (("fields", DEFAULT_VOLATILE_FIELDS), ("text", DEFAULT_VOLATILE_TEXT)):
        items = value.get(name, list(default))
        if (
            not isinstance(items, list)
            or len(items) > 64
            or not all(isinstance(i, str) and 0 < len(i) <= 1024 for i in items)
        ):
            raise ConfigError(
                f"model.volatile.{name}",
                "must be a list of at most 64 non-empty strings of at most 1024 characters",
            )
        out.append(tuple(items))
    for i, path in enumerate(out[0]):
        if not all(path.split(".")):
            raise ConfigError(
                f"model.volatile.fields[{i}]",
                f"{path!r} is not a dotted JSON path like metadata.user_id or"
                " messages.*.cache_control",
            )
    for i, pattern in enumerate(out[1]):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(
                f"model.volatile.text[{i}]", f"is not a valid regular expression: {exc}"
            ) from None
    return out[0], out[1]


def _recording(value: Any) -> tuple[tuple[str, ...], str]:
    """`{"journals": ["/recording/journal.jsonl", ...], "blob_dir": "/recording/blobs"}`."""
    if not isinstance(value, dict):
        raise ConfigError(
            "model.recording",
            'must be an object {"journals": ["/abs/journal.jsonl", ...], "blob_dir": "/abs"}',
        )
    _no_unknown(value, frozenset(("journals", "blob_dir")), "model.recording.")
    journals = value.get("journals")
    if not isinstance(journals, list) or not journals:
        raise ConfigError(
            "model.recording.journals",
            "is required: a non-empty list of absolute paths of gateway journals",
        )
    paths = tuple(
        _abs_path(item, f"model.recording.journals[{i}]") for i, item in enumerate(journals)
    )
    return paths, _abs_path(value.get("blob_dir"), "model.recording.blob_dir")
