"""The run directory's file names: the one place that spells them (a contract, see README).

`.assure/runs/<run_id>/`: `state.json`, `events.jsonl`, `spec.yaml` + `spec.json`,
`control/`, `gateway-state/`, `base/`, `attempts/<n>/`, `proposals/`, `promotions/`,
`receipts/`, `alerts/` and `report.json`. Each attempt folder holds what the attempt
collected (`pre.json`, `post.json`, `container.json`, `commands.json`, `cases.json`,
`db-pre/`, `db-post/`, `gateway/journal.jsonl`, ...) and its `verdict.json`. Beside the runs
folder: `suites/<suite_run_id>/state.json` and the default `alerts.jsonl` sink.

The gateway cannot import this module: the names it must know reach it in its config file
(journal, ready, heartbeat, idempotency store), or are spelled in `gateway/` and checked
against these by tests/unit/test_layout.py.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from assure.core import control

RUNS_DIR = Path(".assure") / "runs"  # the runs base when none is given
SUITES = "suites"  # suite runs, beside the runs base
# warm pools (run/pool.py), in the runs base: a claimed pair is renamed into a run, on one
# filesystem
POOL = ".pool"
ALERTS_SINK = "alerts.jsonl"  # the default JSON-lines alert sink, beside the runs base

EVENTS_LOG = "events.jsonl"
CONTROL = "control"
OPERATOR_LOG = f"{CONTROL}/{control.OPERATOR_LOG}"
ATTEMPTS = "attempts"
JOURNAL = "gateway/journal.jsonl"  # relative to an attempt folder
BREACH = "gateway/breach.json"
CONTAINER = "container.json"
HEARTBEAT = "gateway/heartbeat.json"  # relative to an attempt folder
VERDICT = "verdict.json"
POST = "post.json"  # an attempt's POST snapshot: every file's digest as the verifier hashed it
STATE = "state.json"  # a run's, and a suite run's
LOCK = "lock"  # held by the one process driving a run, or a suite run
VERIFIER_HEARTBEAT = (  # in control/, where the gateway reads it (gateway.dispatch.VERIFIER_FILE)
    "verifier.json"
)
GATEWAY_RUN_STATE = "gateway-state"
IDEMPOTENCY_DB = "idempotency.sqlite"  # in gateway-state/
RECEIPTS = "receipts"
SEAL = "seal.json"
ALERTS = "alerts"
PLACEMENT = "placement.json"  # a cluster run's: where it ran, and each lost attempt
TRUST_RECORDED = "trust-recorded.json"  # the attempts this run put in the trust ledger
TRUST = "trust"  # beside the runs: the trust ledger (records/trust) and its checkpoint

SLUG_MAX = 40  # characters of a task id kept, after encoding, in its file names
DIGEST_CHARS = 12  # hex digits of the task id's SHA-256 that make its file names unique


def mount_owner(point: Path, names: tuple[str, ...]) -> Path | None:
    """The folder whose lock says whether someone owns the workspace mounted at `point`: the
    run of `<run>/attempts/<n>/<name>` (an attempt's workspace or check copy), the pair of
    `<runs>/.pool/<pool>/<pair>/<names[0]>` (a warm pool's); None for any other mount."""
    if point.name in names and point.parent.parent.name == ATTEMPTS:
        return point.parent.parent.parent
    if point.name == names[0] and point.parent.parent.parent.name == POOL:
        return point.parent.parent
    return None


def task_slug(task_id: str) -> str:
    """`<readable slug>-<sha256(task id)[:12]>`: a task's name in `receipts/`, `proposals/` and
    `promotions/` (task ids are hostile input): unique per id, never a path, never hidden."""
    readable = re.sub(r"[^a-z0-9]+", "-", task_id.lower()).strip("-")[:SLUG_MAX] or "task"
    return f"{readable}-{hashlib.sha256(task_id.encode('utf-8', 'surrogatepass')).hexdigest()[:DIGEST_CHARS]}"  # noqa: E501 -- an f-string's expression (splittable only from Python 3.12)


def receipt_filename(task_id: str) -> str:
    """A task's receipt in `receipts/`, as a commit's `receipt:` trailer names it."""
    return task_slug(task_id) + ".json"


def journal_log(attempt: str) -> str:
    """An attempt's gateway journal, relative to the run folder (as the seal names it)."""
    return f"{ATTEMPTS}/{attempt}/{JOURNAL}"


def suites_base(runs_dir: Path) -> Path:
    """Suite runs live beside the runs folder: `.assure/suites` for `.assure/runs`."""
    return runs_dir.parent / SUITES


def suite_runs_dir(suite_run: Path, runs_dir: Path) -> Path:
    """Where a suite run's runs are: `runs_dir` if its suites folder holds this suite run, else
    the conventional runs folder beside the suite run's own suites folder."""
    if suites_base(runs_dir).resolve() == suite_run.resolve().parent:
        return runs_dir
    return suite_run.resolve().parent.parent / RUNS_DIR.name


def alerts_sink(runs_dir: Path) -> Path:
    """The JSON-lines alert sink when the spec or the manifest names none."""
    return runs_dir.parent / ALERTS_SINK


@dataclass(frozen=True)
class SuitePaths:
    """One suite run's folder, `suites/<suite_run_id>/`."""

    root: Path

    @property
    def state(self) -> Path:
        return self.root / STATE


@dataclass(frozen=True)
class ProposalPaths:
    """A task's reviewable bundle, `proposals/<task slug>/`."""

    root: Path

    @property
    def manifest(self) -> Path:
        """The task, the attempt and the changes."""
        return self.root / "proposal.json"

    @property
    def patch(self) -> Path:
        return self.root / "patch.diff"

    @property
    def changesets(self) -> Path:
        """The SQL the gateway allowed, from the journal."""
        return self.root / "changesets.json"

    @property
    def verdict(self) -> Path:
        return self.root / VERDICT


@dataclass(frozen=True)
class PromotionPaths:
    """A task's commit record, `promotions/<task slug>/`."""

    root: Path

    @property
    def committed(self) -> Path:
        """Written last: a commit that has it is finished (promote is idempotent)."""
        return self.root / "committed.json"

    @property
    def backup(self) -> Path:
        """What the commit replaced in the target."""
        return self.root / "backup"

    @property
    def staged(self) -> Path:
        """The files being committed, as hashed and checked against POST (removed once
        committed)."""
        return self.root / "staged"


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
    def workspace_staging(self) -> Path:
        """The copy under way, renamed to `workspace` once complete."""
        return self.root / ".workspace.copy"

    @property
    def gateway_state(self) -> Path:
        return self.root / "gateway"

    @property
    def gateway_config(self) -> Path:
        return self.root / "gateway-config"

    @property
    def pool_claim(self) -> Path:
        """The pooled pair an attempt claimed (run/pool.py): its containers carry no run label."""
        return self.root / "pool.json"

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
    def heartbeat(self) -> Path:
        """The gateway's `last_success_at`, for the monitor."""
        return self.root / HEARTBEAT

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
        return self.root / POST

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
        return self.root / VERDICT

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
    def node_report(self) -> Path:
        """In cluster mode, the report the node wrote; `report` is the one judged where it
        arrived."""
        return self.root / "node-report.json"

    @property
    def report(self) -> Path:
        return self.root / "report.json"

    @property
    def placement(self) -> Path:
        """In cluster mode, written by the caller: the node it ran on (or here), when it started
        there, and each lost attempt (records/summary.placement's shape)."""
        return self.root / PLACEMENT

    @property
    def control(self) -> Path:
        """Operator overrides (`assure halt|dial`); read-only to the gateway."""
        return self.root / CONTROL

    @property
    def operator_log(self) -> Path:
        return self.root / OPERATOR_LOG

    @property
    def verifier_heartbeat(self) -> Path:
        """The host's attempt loop beats here while an attempt runs; the gateway reads it."""
        return self.control / VERIFIER_HEARTBEAT

    @property
    def gateway_state(self) -> Path:
        """Run-level gateway state that outlives attempts (the idempotency store)."""
        return self.root / GATEWAY_RUN_STATE

    @property
    def idempotency_db(self) -> Path:
        return self.gateway_state / IDEMPOTENCY_DB

    @property
    def base(self) -> Path:
        """What a task starts from: the fixture, plus every task committed so far."""
        return self.root / "base"

    @property
    def base_staging(self) -> Path:
        """The fixture's copy under way, renamed to `base` once complete."""
        return self.root / ".base.tmp"

    @property
    def attempts(self) -> Path:
        return self.root / ATTEMPTS

    def attempt(self, n: int | str) -> AttemptPaths:
        return AttemptPaths(self.attempts / str(n))

    @property
    def proposals(self) -> Path:
        return self.root / "proposals"

    def proposal(self, task_id: str) -> ProposalPaths:
        return ProposalPaths(self.proposals / task_slug(task_id))

    @property
    def promotions(self) -> Path:
        return self.root / "promotions"

    def promotion(self, task_id: str) -> PromotionPaths:
        return PromotionPaths(self.promotions / task_slug(task_id))

    @property
    def receipts(self) -> Path:
        return self.root / RECEIPTS

    def receipt(self, task_id: str) -> Path:
        return self.receipts / receipt_filename(task_id)

    @property
    def seal(self) -> Path:
        return self.receipts / SEAL

    @property
    def trust_recorded(self) -> Path:
        return self.root / TRUST_RECORDED

    @property
    def alerts(self) -> Path:
        return self.root / ALERTS

    def alert(self, alert_id: str) -> Path:
        return self.alerts / f"{alert_id}.json"


@dataclass(frozen=True)
class RelativeRun:
    """One run's names relative to the runs base, as `/`-joined strings, for the readers of an
    untrusted tree (ops/monitor, ops/health_probe) that resolve each step themselves, confined.
    `run` is a run id (or `.health`, which has alerts too)."""

    run: str

    @property
    def attempts(self) -> str:
        return f"{self.run}/{ATTEMPTS}"

    def attempt(self, n: int | str) -> str:
        return f"{self.attempts}/{n}"

    @property
    def alerts(self) -> str:
        return f"{self.run}/{ALERTS}"

    def alert(self, name: str) -> str:
        """An entry of `alerts/` by its file name, as listed."""
        return f"{self.alerts}/{name}"

    @property
    def control(self) -> str:
        return f"{self.run}/{CONTROL}"


def journals_glob(attempt: int | str = "*") -> str:
    """Every run's gateway journals of attempt `attempt`, as a glob under a runs base."""
    return f"*/{ATTEMPTS}/{attempt}/{JOURNAL}"


EVENTS_GLOB = f"*/{EVENTS_LOG}"  # every run's events log, as a glob under a runs base
