"""The run directory's file names: the one place that spells them (a contract, see README).

`.assure/runs/<run_id>/`: `state.json`, `events.jsonl`, `spec.yaml` + `spec.json`,
`control/`, `gateway-state/`, `base/`, `attempts/<n>/`, `proposals/`, `promotions/`,
`receipts/`, `alerts/` and `report.json`. Each attempt folder holds what the attempt
collected (`pre.json`, `post.json`, `container.json`, `commands.json`, `cases.json`,
`db-pre/`, `db-post/`, `gateway/journal.jsonl`, ...) and its `verdict.json`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from assure.core import control

EVENTS_LOG = "events.jsonl"
OPERATOR_LOG = f"control/{control.OPERATOR_LOG}"
ATTEMPTS = "attempts"
JOURNAL = "gateway/journal.jsonl"  # relative to an attempt folder
BREACH = "gateway/breach.json"
CONTAINER = "container.json"
STATE = "state.json"
RECEIPTS = "receipts"
SEAL = "seal.json"


SLUG_MAX = 40  # characters of a task id kept, after encoding, in its file names
DIGEST_CHARS = 12  # hex digits of the task id's SHA-256 that make its file names unique


def task_slug(task_id: str) -> str:
    """`<readable slug>-<sha256(task id)[:12]>`: a task's name in `receipts/`, `proposals/` and
    `promotions/` (task ids are hostile input): unique per id, never a path, never hidden."""
    readable = re.sub(r"[^a-z0-9]+", "-", task_id.lower()).strip("-")[:SLUG_MAX] or "task"
    return f"{readable}-{hashlib.sha256(task_id.encode('utf-8', 'surrogatepass')).hexdigest()[:DIGEST_CHARS]}"


def receipt_filename(task_id: str) -> str:
    """A task's receipt in `receipts/`, as a commit's `receipt:` trailer names it."""
    return task_slug(task_id) + ".json"


def journal_log(attempt: str) -> str:
    """An attempt's gateway journal, relative to the run folder (as the seal names it)."""
    return f"{ATTEMPTS}/{attempt}/{JOURNAL}"


@dataclass(frozen=True)
class AttemptPaths:
    """One attempt's folder, `attempts/<n>/`."""

    root: Path

    @property
    def number(self) -> int:
        return int(self.root.name)

    @property
    def workspace(self) -> Path:
        """The POST tree, copied out of the attempt's filesystem after the run: what the
        verifier's file assertions, the checks, promote and proposals read."""
        return self.root / "workspace"

    @property
    def gateway_state(self) -> Path:
        return self.root / "gateway"

    @property
    def gateway_config(self) -> Path:
        return self.root / "gateway-config"

    @property
    def socket_folder(self) -> Path:
        """The gateway's socket on the host, when the agent's runtime is not runc."""
        return self.root / "socket"

    @property
    def journal(self) -> Path:
        return self.root / JOURNAL

    @property
    def breach(self) -> Path:
        """Written by the gateway when a budget counter runs out."""
        return self.root / BREACH

    @property
    def ready(self) -> Path:
        return self.gateway_state / "ready"

    @property
    def blobs(self) -> Path:
        return self.gateway_state / "blobs"

    def sandbox_db(self, name: str) -> Path:
        """A `mode: sandbox` database, the gateway's own copy."""
        return self.gateway_state / "db" / f"{name}.sqlite"

    def db_capture(self, side: str, name: str) -> Path:
        """The verifier's copy of a database, `side` "pre" or "post"."""
        return self.root / f"db-{side}" / f"{name}.sqlite"

    def db_error(self, side: str, name: str) -> Path:
        """Why a capture failed, in place of the capture."""
        return self.root / f"db-{side}" / f"{name}.error.json"

    @property
    def pre(self) -> Path:
        return self.root / "pre.json"

    @property
    def post(self) -> Path:
        return self.root / "post.json"

    @property
    def container(self) -> Path:
        return self.root / CONTAINER

    @property
    def commands(self) -> Path:
        return self.root / "commands.json"

    @property
    def cases(self) -> Path:
        return self.root / "cases.json"

    @property
    def verdict(self) -> Path:
        return self.root / "verdict.json"

    @property
    def reverify(self) -> Path:
        """`assure verify`'s recomputed verdict, beside the live one."""
        return self.root / "reverify.json"

    @property
    def task(self) -> Path:
        """The task and the resolved spec the attempt ran."""
        return self.root / "task.json"

    @property
    def agent_log(self) -> Path:
        return self.root / "agent.log"

    @property
    def gateway_log(self) -> Path:
        return self.root / "gateway.log"

    @property
    def egress_config(self) -> Path:
        return self.root / "egress-config"

    @property
    def egress_log(self) -> Path:
        return self.root / "egress"


@dataclass(frozen=True)
class RunPaths:
    """One run's folder, `.assure/runs/<run_id>/`."""

    root: Path

    @property
    def state(self) -> Path:
        return self.root / STATE

    @property
    def events(self) -> Path:
        return self.root / EVENTS_LOG

    @property
    def spec_yaml(self) -> Path:
        return self.root / "spec.yaml"

    @property
    def spec_json(self) -> Path:
        return self.root / "spec.json"

    @property
    def report(self) -> Path:
        return self.root / "report.json"

    @property
    def control(self) -> Path:
        """Operator overrides (`assure halt|dial`); read-only to the gateway."""
        return self.root / "control"

    @property
    def operator_log(self) -> Path:
        return self.root / OPERATOR_LOG

    @property
    def gateway_state(self) -> Path:
        """Run-level gateway state that outlives attempts (the idempotency store)."""
        return self.root / "gateway-state"

    @property
    def base(self) -> Path:
        """What a task starts from: the fixture, plus every task committed so far."""
        return self.root / "base"

    @property
    def attempts(self) -> Path:
        return self.root / ATTEMPTS

    def attempt(self, n: int | str) -> AttemptPaths:
        return AttemptPaths(self.attempts / str(n))

    @property
    def proposals(self) -> Path:
        return self.root / "proposals"

    @property
    def promotions(self) -> Path:
        return self.root / "promotions"

    @property
    def receipts(self) -> Path:
        return self.root / RECEIPTS

    @property
    def seal(self) -> Path:
        return self.receipts / SEAL

    @property
    def alerts(self) -> Path:
        return self.root / "alerts"
