"""Runtime health: every critical component publishes `last_success_at`; the manifest says
where each one publishes it and how old it may get.

A heartbeat is one small JSON file, replaced atomically on each success:
`{component, last_success_at, pid, host, detail}` (`last_success_at` in Unix seconds).
Where they live (the defaults; a manifest file may change them):

| component | file | written by |
|---|---|---|
| driver   | `<runs base>/.health/driver.json` | the host driver (the attempt loop) |
| verifier | `<run>/control/verifier.json` | the host's attempt loop, every 100 ms while an attempt runs |
| gateway  | `<run>/attempts/<n>/gateway/heartbeat.json` | the gateway, on start and after each successful call |
| monitor  | `<runs base>/.health/monitor.json` | `assure monitor`, every pass |

A heartbeat path is relative to the runs base, or, when it starts with `{run}/`, to each
run directory (checked only while the run's current attempt is in progress); `{attempt}`
stands for that attempt's number. `.health` can never be a run id (`store.RUN_ID` starts
with a letter or digit). Every limit below is stated once, here, as a number.
Standard library only (YAML is imported only to read a `.yaml` manifest): the gateway may
import `beat`.

Manifest file (`assure monitor --manifest FILE`, JSON or YAML; every field optional, unknown
fields refused). `components`, when given, replaces the list; an entry named like a default
component takes that default's values for the fields it leaves out:

    interval_seconds: 5
    ack_window_seconds: 300        # T1 (per component: its own ack_window_seconds)
    halt_after_seconds: 900        # T2, for every alert; must exceed every T1
    lookback_seconds: 3600
    alerts_file: /var/log/assure/alerts.jsonl   # default: <runs base>/../alerts.jsonl
    webhook: https://hooks.example/assure
    components:
      - {name: driver,   heartbeat_path: .health/driver.json, stale_after_seconds: 60}
      - {name: verifier, heartbeat_path: "{run}/control/verifier.json", stale_after_seconds: 30}
      - {name: gateway,  heartbeat_path: "{run}/attempts/{attempt}/gateway/heartbeat.json", stale_after_seconds: 300}
      - {name: monitor,  heartbeat_path: .health/monitor.json, stale_after_seconds: 60, ack_window_seconds: 120}
    anomalies: {max_tool_calls_per_minute: 300, max_changes_per_minute: 120,
                max_duplicate_ratio: 0.5, min_calls_for_ratio: 20, near_limit_ratio: 0.9, silent_after_seconds: 300}
"""  # noqa: E501 -- a table and a YAML example, one row a line

from __future__ import annotations

import json
import math
import os
import socket
import time
from dataclasses import dataclass, fields
from pathlib import Path, PurePosixPath
from typing import Any

from assure.core import atomic
from assure.errors import AssureError, unreadable
from assure.records import layout

HEALTH_DIR = ".health"
RUN = "{run}"
ATTEMPT = "{attempt}"
DRIVER, VERIFIER, GATEWAY, MONITOR = "driver", "verifier", "gateway", "monitor"

# --- every limit, once ------------------------------------------------------------------
DRIVER_STALE_SECONDS = (
    60.0  # the driver beats at least once per phase and every 100 ms while an agent runs
)
# a driver beat this soon after the last one of the same process is skipped (`beat_driver`):
# its ~20 writes per attempt cost more CPU than the staleness they save against 60 s
DRIVER_BEAT_SECONDS = 1.0
VERIFIER_STALE_SECONDS = 30.0  # the attempt loop beats every 100 ms; 30 s covers the collect phase
GATEWAY_STALE_SECONDS = (
    300.0  # the gateway beats on successful calls: an agent may think this long between calls
)
MONITOR_STALE_SECONDS = (
    60.0  # the monitor beats every pass (INTERVAL_SECONDS); older means it was not running
)
INTERVAL_SECONDS = 5.0  # one monitor pass every this many seconds
ACK_WINDOW_SECONDS = 300.0  # T1: an alert pending this long dials its run down to `propose`
HALT_AFTER_SECONDS = 900.0  # T2: an alert pending this long halts its run
LOOKBACK_SECONDS = 3600.0  # runs no longer running are still checked for anomalies this long
MAX_CLOCK_SKEW_SECONDS = 5.0  # a heartbeat further in the future than this is garbage
MAX_TOOL_CALLS_PER_MINUTE = 300  # rate_of_change: tool calls in any 60 s window of an attempt
MAX_CHANGES_PER_MINUTE = (
    120  # rate_of_change: journaled effects (file writes/deletes, SQL, HTTP) in any 60 s window
)
MAX_DUPLICATE_RATIO = (
    0.5  # duplication_ratio: share of tool calls repeating an earlier (tool, args_digest)
)
MIN_CALLS_FOR_RATIO = 20  # duplication_ratio: fewer calls than this are never judged
NEAR_LIMIT_RATIO = 0.9  # resource_saturation: a counter at this share of its limit
SILENT_AFTER_SECONDS = (
    300.0  # silent_component: a running run whose events and journal have not grown this long
)


def beat(path: Path, component: str, *, now: float | None = None, **detail: Any) -> dict[str, Any]:
    """Publish `component`'s `last_success_at` (now) at `path`, atomically; return the record."""
    record = {
        "component": component,
        "last_success_at": time.time() if now is None else now,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "detail": detail,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_json(path, record, sync=False)  # a heartbeat lost in a crash is stale: the truth
    return record


_driver_beats: dict[Path, float] = {}  # heartbeat path -> when this process last wrote it


def beat_driver(path: Path, **detail: Any) -> None:
    """The driver's `beat` at `path`, unless this process wrote it less than
    DRIVER_BEAT_SECONDS ago (two threads racing past the check only write it twice)."""
    now = time.monotonic()
    if now - _driver_beats.get(path, -DRIVER_BEAT_SECONDS) < DRIVER_BEAT_SECONDS:
        return
    _driver_beats[path] = now
    beat(path, DRIVER, **detail)


def last_success(data: Any, now: float) -> tuple[float | None, str | None]:
    """`last_success_at` of a parsed heartbeat, or None and why it is unusable."""
    if not isinstance(data, dict):
        return None, "not a JSON object"
    value = data.get("last_success_at")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None, "no numeric last_success_at"
    if value > now + MAX_CLOCK_SKEW_SECONDS:
        return None, f"last_success_at is {value - now:.0f} s in the future"
    return float(value), None


@dataclass(frozen=True)
class Component:
    """A component that must publish `last_success_at` at `heartbeat_path` at least every
    `stale_after_seconds`; a stale alert about it escalates after `ack_window_seconds` (T1)."""

    name: str
    heartbeat_path: str
    stale_after_seconds: float
    ack_window_seconds: float = ACK_WINDOW_SECONDS

    @property
    def per_run(self) -> bool:
        return self.heartbeat_path.startswith(RUN + "/")

    def path(
        self, runs_base: Path, run_dir: Path | None = None, attempt: int | None = None
    ) -> Path:
        """The heartbeat file: under the runs base, or under `run_dir` for a `{run}/` path."""
        if not self.per_run:
            return runs_base / self.heartbeat_path
        if run_dir is None:
            raise ValueError(f"{self.name}: a {RUN}/ heartbeat needs a run directory")
        relative = self.heartbeat_path[len(RUN) + 1 :]
        if ATTEMPT in relative:
            if attempt is None:
                raise ValueError(f"{self.name}: an {ATTEMPT} heartbeat needs an attempt number")
            relative = relative.replace(ATTEMPT, str(attempt))
        return run_dir / relative

    def relative(self, attempt: int | None = None) -> str:
        """The path below the runs base or the run directory (what the monitor opens)."""
        rel = self.heartbeat_path[len(RUN) + 1 :] if self.per_run else self.heartbeat_path
        return rel.replace(ATTEMPT, str(attempt)) if attempt is not None else rel


DEFAULT_COMPONENTS = (
    Component(DRIVER, f"{HEALTH_DIR}/driver.json", DRIVER_STALE_SECONDS),
    Component(
        VERIFIER, f"{RUN}/{layout.CONTROL}/{layout.VERIFIER_HEARTBEAT}", VERIFIER_STALE_SECONDS
    ),
    Component(
        GATEWAY, f"{RUN}/{layout.ATTEMPTS}/{ATTEMPT}/{layout.HEARTBEAT}", GATEWAY_STALE_SECONDS
    ),
    Component(MONITOR, f"{HEALTH_DIR}/monitor.json", MONITOR_STALE_SECONDS),
)


def default_path(
    name: str, runs_base: Path, run_dir: Path | None = None, attempt: int | None = None
) -> Path:
    """Where the default manifest expects `name` (driver, verifier, gateway, monitor) to beat."""
    return next(c for c in DEFAULT_COMPONENTS if c.name == name).path(runs_base, run_dir, attempt)


@dataclass(frozen=True)
class Thresholds:
    """The limits of the registered anomaly classes (see `anomalies.ANOMALIES`)."""

    max_tool_calls_per_minute: int = MAX_TOOL_CALLS_PER_MINUTE
    max_changes_per_minute: int = MAX_CHANGES_PER_MINUTE
    max_duplicate_ratio: float = MAX_DUPLICATE_RATIO
    min_calls_for_ratio: int = MIN_CALLS_FOR_RATIO
    near_limit_ratio: float = NEAR_LIMIT_RATIO
    silent_after_seconds: float = SILENT_AFTER_SECONDS


@dataclass(frozen=True)
class Manifest:
    """What the monitor watches and when it escalates. `Manifest()` is the default manifest."""

    components: tuple[Component, ...] = DEFAULT_COMPONENTS
    anomalies: Thresholds = Thresholds()
    interval_seconds: float = INTERVAL_SECONDS
    ack_window_seconds: float = ACK_WINDOW_SECONDS  # T1 for alerts that are not about a component
    halt_after_seconds: float = HALT_AFTER_SECONDS  # T2 for every alert
    lookback_seconds: float = LOOKBACK_SECONDS
    alerts_file: str | None = None  # JSON-lines sink; default `<runs base>/../alerts.jsonl`
    webhook: str | None = None

    def component(self, name: str) -> Component | None:
        return next((c for c in self.components if c.name == name), None)

    def ack_window(self, component: str | None) -> float:
        found = self.component(component) if component else None
        return found.ack_window_seconds if found else self.ack_window_seconds

    @classmethod
    def load(cls, path: Path | None) -> Manifest:
        """Read a JSON or YAML (`.yaml`/`.yml`) manifest; None gives the defaults."""
        if path is None:
            return cls()
        try:
            text = path.read_text(encoding="utf-8")
            if path.suffix in (".yaml", ".yml"):
                import yaml

                data = yaml.safe_load(text)
            else:
                data = json.loads(text)
        except (OSError, UnicodeDecodeError) as exc:
            raise AssureError(
                f"unreadable manifest: {unreadable(exc)}",
                where=str(path),
                fix="pass the path of a JSON or YAML manifest",
            ) from None
        except ValueError as exc:
            raise AssureError(f"unreadable manifest: {exc}", where=str(path)) from None
        except Exception as exc:  # yaml.YAMLError
            raise AssureError(
                f"unreadable manifest: {type(exc).__name__}: {exc}", where=str(path)
            ) from None
        try:
            return cls.from_data(data)
        except AssureError as exc:
            raise AssureError(exc.message, where=str(path), fix=exc.fix) from None

    @classmethod
    def from_data(cls, data: Any) -> Manifest:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise _invalid("", "the manifest must be a mapping")
        scalars = {
            "interval_seconds",
            "ack_window_seconds",
            "halt_after_seconds",
            "lookback_seconds",
        }
        _no_unknown(data, scalars | {"components", "anomalies", "alerts_file", "webhook"}, "")
        values: dict[str, Any] = {
            name: _positive(data[name], name) for name in scalars if name in data
        }
        ack_window = values.get("ack_window_seconds", ACK_WINDOW_SECONDS)
        if "components" in data:
            values["components"] = _components(data["components"], ack_window)
        elif "ack_window_seconds" in data:
            values["components"] = tuple(
                Component(c.name, c.heartbeat_path, c.stale_after_seconds, ack_window)
                for c in DEFAULT_COMPONENTS
            )
        if "anomalies" in data:
            values["anomalies"] = _thresholds(data["anomalies"])
        for name in ("alerts_file", "webhook"):
            if data.get(name) is not None:
                if not isinstance(data[name], str) or not data[name]:
                    raise _invalid(name, "must be a non-empty string")
                values[name] = data[name]
        manifest = cls(**values)
        for c in manifest.components:
            if c.ack_window_seconds >= manifest.halt_after_seconds:
                raise _invalid(
                    f"components.{c.name}.ack_window_seconds",
                    f"must be less than halt_after_seconds ({manifest.halt_after_seconds})",
                )
        if manifest.ack_window_seconds >= manifest.halt_after_seconds:
            raise _invalid(
                "ack_window_seconds",
                f"must be less than halt_after_seconds ({manifest.halt_after_seconds})",
            )
        return manifest

    def to_json(self) -> dict[str, Any]:
        return {
            "interval_seconds": self.interval_seconds,
            "ack_window_seconds": self.ack_window_seconds,
            "halt_after_seconds": self.halt_after_seconds,
            "lookback_seconds": self.lookback_seconds,
            "alerts_file": self.alerts_file,
            "webhook": self.webhook,
            "components": [
                {
                    "name": c.name,
                    "heartbeat_path": c.heartbeat_path,
                    "stale_after_seconds": c.stale_after_seconds,
                    "ack_window_seconds": c.ack_window_seconds,
                }
                for c in self.components
            ],
            "anomalies": {f.name: getattr(self.anomalies, f.name) for f in fields(Thresholds)},
        }


def _invalid(where: str, message: str) -> AssureError:
    return AssureError(
        f"{where}: {message}" if where else message,
        fix="see the manifest format in assure/health.py and the README",
    )


def _no_unknown(data: dict[str, Any], known: set[str], prefix: str) -> None:
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        raise _invalid(prefix + unknown[0], f"unknown field (known: {', '.join(sorted(known))})")


def _positive(value: Any, where: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise _invalid(where, "must be a positive number")
    return float(value)


def _components(value: Any, ack_window: float) -> tuple[Component, ...]:
    """The listed components replace the defaults; a field left out of an entry named like a
    default component takes that default's value."""
    if not isinstance(value, list) or not value:
        raise _invalid("components", "must be a non-empty list")
    defaults = {c.name: c for c in DEFAULT_COMPONENTS}
    out: list[Component] = []
    for n, entry in enumerate(value):
        where = f"components[{n}]"
        if not isinstance(entry, dict):
            raise _invalid(where, "must be a mapping")
        _no_unknown(
            entry,
            {"name", "heartbeat_path", "stale_after_seconds", "ack_window_seconds"},
            where + ".",
        )
        name = entry.get("name")
        if (
            not isinstance(name, str)
            or not name
            or not all(ch.isalnum() or ch in "-_" for ch in name)
        ):
            raise _invalid(where + ".name", "must be a non-empty name of letters, digits, - and _")
        if name in (c.name for c in out):
            raise _invalid(where + ".name", f"{name!r} is listed twice")
        base = defaults.get(name)
        path = entry.get("heartbeat_path", base.heartbeat_path if base else None)
        if "stale_after_seconds" in entry:
            stale = _positive(entry["stale_after_seconds"], where + ".stale_after_seconds")
        elif base:
            stale = base.stale_after_seconds
        else:
            raise _invalid(
                where + ".stale_after_seconds", "is required for a component without a default"
            )
        ack = (
            _positive(entry["ack_window_seconds"], where + ".ack_window_seconds")
            if "ack_window_seconds" in entry
            else ack_window
        )
        out.append(Component(name, _heartbeat_path(path, where + ".heartbeat_path"), stale, ack))
    return tuple(out)


def _heartbeat_path(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise _invalid(where, "must be a relative path")
    rel = value[len(RUN) + 1 :] if value.startswith(RUN + "/") else value
    parts = PurePosixPath(rel).parts
    if (
        rel.startswith("/")
        or not parts
        or any(p in ("..", ".") for p in parts)
        or RUN in rel
        or "\\" in rel
    ):
        raise _invalid(
            where, f"must be a relative path without '..' (optionally starting with {RUN}/)"
        )
    if ATTEMPT in rel and not value.startswith(RUN + "/"):
        raise _invalid(where, f"{ATTEMPT} is only allowed in a {RUN}/ path")
    return value


def _thresholds(value: Any) -> Thresholds:
    if not isinstance(value, dict):
        raise _invalid("anomalies", "must be a mapping")
    known = {f.name: f for f in fields(Thresholds)}
    _no_unknown(value, set(known), "anomalies.")
    checked: dict[str, Any] = {}
    for name, item in value.items():
        number = _positive(item, f"anomalies.{name}")
        if name in ("max_duplicate_ratio", "near_limit_ratio") and number > 1:
            raise _invalid(f"anomalies.{name}", "must be a share between 0 and 1")
        if name in ("max_tool_calls_per_minute", "max_changes_per_minute", "min_calls_for_ratio"):
            if number != int(number):
                raise _invalid(f"anomalies.{name}", "must be a whole number")
            number = int(number)
        checked[name] = number
    return Thresholds(**checked)
