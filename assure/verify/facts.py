"""`container.json` as the judge reads it: how an attempt ran, as the harness and the engine
reported it (here, below the judge, so that it needs nothing from records)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from assure.sandbox.backend import Observed
from assure.verify.stopped import Stopped


@dataclass(frozen=True)
class ContainerFacts:
    """`container.json`: how the attempt ran, as the harness and the engine reported it.
    Every key may be missing (a phase that failed records nothing)."""

    data: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "data", MappingProxyType(dict(self.data)))
        self.stopped  # noqa: B018 (a malformed stop makes the record unreadable, never guessed)

    @property
    def harness_errors(self) -> list[str]:
        return list(self.data.get("harness_errors", []))

    @property
    def exit_code(self) -> int | None:
        return self.data.get("exit_code")

    @property
    def timed_out(self) -> bool | None:
        return self.data.get("timed_out")

    @property
    def stopped(self) -> Stopped | None:
        """Why the harness stopped the agent (`reason`: deadline, operator_halt, budget), if it
        did."""
        stop = self.data.get("stopped")
        return None if stop is None else Stopped.from_json(stop)

    @property
    def timings(self) -> dict[str, float]:
        return self.data.get("timings", {})

    @property
    def journal_head(self) -> dict[str, Any] | None:
        """The journal's last line when it was collected."""
        return self.data.get("journal_head")

    @property
    def gateway(self) -> dict[str, Any] | None:
        """How the gateway container ended (exit code, OOM)."""
        return self.data.get("gateway")

    @property
    def agent_started(self) -> bool:
        """Whether the engine ever started the agent's container: false only when the harness
        recorded, after a failed start, that the engine never did (`Attempt._agent_ever_started`).
        """
        return self.data.get("agent_started") is not False

    @property
    def observed(self) -> Observed | None:
        """How the engine reported the agent's container; None if it never started. A record
        made before `Observed` holds Docker's inspect instead (`inspect`), read as Docker's."""
        if self.data.get("observed") is not None:
            return Observed.from_json(self.data["observed"])
        if self.data.get("inspect") is not None:
            from assure.sandbox.docker.observe import observed  # no docker-py: a pure reading

            return observed(self.data["inspect"])
        return None

    @property
    def has_observed(self) -> bool:
        return self.data.get("observed") is not None or self.data.get("inspect") is not None

    @property
    def image(self) -> str | None:
        """The image the engine ran the agent's container from, by id where the engine gives one."""
        return self.data.get("image")

    @property
    def engine_security(self) -> Any:
        return self.data.get("engine_security")

    @property
    def fs_changes(self) -> list[dict[str, Any]]:
        """The agent's own writes as collected (container.json JSON: path, kind, type, sha256,
        target, note)."""
        return self.data.get("fs_changes", [])

    @property
    def workspace_copy(self) -> dict[str, Any] | None:
        return self.data.get("workspace_copy")

    @property
    def workspace_fs(self) -> dict[str, Any] | None:
        return self.data.get("workspace_fs")

    def to_json(self) -> dict[str, Any]:
        return dict(self.data)
