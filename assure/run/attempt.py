"""One attempt: fresh workspace, gateway + agent containers, collect, verify. Always cleaned up.

prepare -> start -> run -> stop -> collect -> verify. Whatever happens (agent failure,
deadline, Docker error, Ctrl-C), every container and volume of the attempt is removed
before this returns or raises. What the attempt collected is written to its folder and
kept in memory as an `AttemptRecord`, which goes to `verify.judge`: the same function
`assure verify` runs offline on the record loaded from the folder.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import socket
import sqlite3
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from assure.core import confined, control, private
from assure.core.chain import ChainError, chain_head, utc_now
from assure.errors import AssureError, SandboxError, describe
from assure.gateway import config as gwconfig
from assure.records import health, html_report, store
from assure.records.attempt_record import AttemptRecord
from assure.records.layout import AttemptPaths, RunPaths
from assure.run import appear, checks, failpoints, modelaccess, policy
from assure.run import pool as warm
from assure.run.stop import INTERRUPTED
from assure.sandbox import backend as sandbox
from assure.sandbox import hardening, install, runtimes, uids, workspace_fs
from assure.sandbox.backend import SandboxBackend
from assure.sandbox.docker.images import ImageSet
from assure.spec import AGENT_IMAGE_ALIAS, Egress, Spec
from assure.textsafe import display
from assure.verify import assertions, judge
from assure.verify import sqlite as sqlite_verify
from assure.verify.container import EXPECTED_PATHS, layer_changes
from assure.verify.facts import ContainerFacts
from assure.verify.findings import Finding, Kind, Verdict, verdict
from assure.verify.snapshot import Snapshot, take
from assure.verify.stopped import Stopped, StopReason

GATEWAY_READY_SECONDS = 20.0
RUN_POLL_SECONDS = 0.1
POLL_SECONDS = 0.05
GATEWAY_ALIVE_SECONDS = 0.25  # how often a gateway not yet ready is asked whether it exited
LOG_LIMIT_BYTES = 1 * 2**20
CONTAINER_FILE_LIMIT = 16 * 2**20
MAX_CONTAINER_CHANGES = 1000

Progress = Callable[[str, dict[str, Any]], None]
PROMOTABLE = (Verdict.PASS, Verdict.CONTAINED)  # the verdicts the driver promotes (or proposes)


def _copy_database(source: Path, target: Path) -> None:
    """A fresh database from a `.sql` script, or a consistent copy through SQLite's backup
    API (commits still in the WAL come along). SQLite opens a private copy of the file and
    its -wal and -journal, never the fixture: even a read-only connection to a WAL database
    leaves -wal and -shm files beside it."""
    if source.suffix == ".sql":
        db = sqlite3.connect(target)
        try:
            db.executescript(source.read_text(encoding="utf-8"))
        finally:
            db.close()
        return
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fixture-") as folder:
        private = Path(folder) / "fixture.db"
        shutil.copyfile(source, private)
        for suffix in ("-wal", "-journal"):
            if Path(f"{source}{suffix}").is_file():
                shutil.copyfile(f"{source}{suffix}", f"{private}{suffix}")
        src = sqlite3.connect(private)
        try:
            dst = sqlite3.connect(target)
            try:
                src.backup(dst)
            finally:
                dst.close()
        finally:
            src.close()


def fresh_copy(
    source: Path, target: Path, *, into: bool = False, what: str = "the fixture"
) -> None:
    """A workspace (or base) from a fixture, or a pooled agent's files: a confined copy (sparse
    files stay sparse, links stay links); one that would leave anything out fails the attempt
    before it starts. `into`: `target` exists (a pooled pair's folder, which its containers
    mount): the copy is made beside it on the same filesystem and its entries renamed in."""
    if into:
        staging = target.parent / f".{target.name}.copy"
        try:
            fresh_copy(source, staging, what=what)
            for entry in os.listdir(staging):
                os.rename(staging / entry, target / entry)
            os.chmod(target, stat.S_IMODE(os.lstat(staging).st_mode))
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return
    report = confined.copy_tree(source, target, max_bytes=confined.COPY_MAX_BYTES)
    if not report.complete:
        shown = "; ".join(f"{display(path)}: {why}" for path, why in report.skipped[:5])
        raise SandboxError(
            f"{what} {source} cannot be copied whole ({report.skipped_count} entries): {shown}",
            fix=f"keep only folders, regular files and symlinks in {what}, within the copy bound",
        )


def _harness_error(phase: str, exc: Exception) -> str:
    """What a failed phase leaves for the verdict."""
    return f"{phase}: {describe(exc)}"


def _bounded(changes: list[dict[str, Any]], total: int | None = None) -> list[dict[str, Any]]:
    """At most MAX_CONTAINER_CHANGES entries, plus one that says how many more there were."""
    total = len(changes) if total is None else total
    if total <= MAX_CONTAINER_CHANGES:
        return changes
    return changes[:MAX_CONTAINER_CHANGES] + [
        {
            "path": "(more)",
            "kind": "added",
            "note": f"{total - MAX_CONTAINER_CHANGES} more changes not listed",
        }
    ]


class Attempt:
    def __init__(
        self,
        spec: Spec,
        run: store.RunDir,
        number: int,
        backend: SandboxBackend,
        images: ImageSet,
        progress: Progress,
        pool: warm.WarmPool | None = None,
    ):
        self.spec, self.run, self.number = spec, run, number
        self.pool = pool
        self._pair: warm.Pair | None = None  # the pooled pair this attempt claimed, if any
        self.backend, self.images, self.progress = backend, images, progress
        self.paths = run.attempt(number)
        self.labels = sandbox.labels(run.run_id, number, os.getpid(), socket.gethostname())
        self.prefix = f"assure-{hashlib.sha256(run.run_id.encode()).hexdigest()[:10]}-{number}"
        self.timings: dict[str, float] = {}
        self._containers: list[str] = []
        self._volume: str | None = None
        self._network: str | None = None
        self._started = False  # `_start` returned: every resource it made is recorded
        self._agent_started_at: float | None = None  # the engine started the agent's container
        self._fs: workspace_fs.WorkspaceFs | None = None
        self._journal_read = self._tool_calls = 0
        self.egress = modelaccess.egress(spec)
        self.lease: uids.Lease | None = (
            # the attempt's user: leased in prepare (or the claimed pair's), released at the end
            None
        )
        # cleanup could not remove (or list) a container of the attempt: its user is not given back
        self._stranded = False
        self.model = modelaccess.ModelAccess(
            spec.model, spec.path.parent, self.paths.gateway_config, -1, -1
        )  # its ids: the lease's

    def execute(self) -> AttemptRecord:
        """Every phase is total: an exception in one (any Exception, not only ours) becomes a
        harness error naming the phase, and the attempt is judged on what was collected.
        KeyboardInterrupt and SystemExit still propagate, after the cleanup."""
        facts: dict[str, Any] = {"harness_errors": [], "started_at": time.time()}
        self._pre: Snapshot | None = None
        self._post: Snapshot | None = None
        self._checks: dict[str, list[Any] | None] = dict.fromkeys(assertions.CHECK_KINDS)
        self._shared = ExitStack()  # the check phase's `SharedChecks`, from `_checks_ahead`
        self._shared_checks: checks.SharedChecks | None = None
        self._checks_ahead_done = False
        try:
            return self._execute(facts)
        # every container of the attempt, checks included, is gone: its user goes back. A container
        # cleanup
        finally:
            # could not remove may still run as that uid (and /proc does not show a remapped one):
            # the lease's lock
            # stays held, by this process, until it exits (the kernel drops the flock then); `assure
            # gc` removes the container
            if self.lease is not None and not self._stranded:
                self.lease.release()

    def _execute(self, facts: dict[str, Any]) -> AttemptRecord:
        snapshotted = prepared = False
        try:
            try:
                prepared = self._total("prepare", self._prepare, facts)
                started = prepared and self._total("start", lambda: self._start(facts), facts)
                if prepared and not started:
                    facts["agent_started"] = self._agent_ever_started()
                if started and self._total("run", lambda: self._run(facts), facts):
                    self._total("collect", lambda: self._collect(facts), facts)
            finally:
                if (
                    prepared or self._containers
                ):  # a pooled pair's containers exist from its claim, in prepare
                    self._total("cleanup", self._cleanup, facts)
            if prepared:
                snapshotted = self._total("snapshot", lambda: self._snapshot_post(facts), facts)
            if snapshotted and (self.spec.commands() or self.spec.cases()):
                self._total("checks", self._run_checks, facts)
            self._shared.close()  # what no check phase took (the attempt ended before it)
            self.progress("verify", {})
            failpoints.hit("verify")
            # judged on the sealed filesystem itself; then only what readers of this verdict need
            # is copied out of it (`_copy_out`)
            sealed = self._fs.workspace if snapshotted and self._fs else None
            record, judgement = self._judged(facts, sealed)
            settled = len(facts["harness_errors"])
            if snapshotted:
                self._total("copy out", lambda: self._copy_out(facts, judgement), facts)
        finally:  # the workspace filesystem goes on every path: errors, Ctrl-C, SIGTERM
            self._shared.close()  # the checks' views over it first
            self._release_workspace(facts)
        copy = facts.get("workspace_copy") or {}
        if len(facts["harness_errors"]) > settled or copy.get("skipped_count"):
            # what the judge reads changed (a harness error, entries the copy-out left out):
            # judged again, as `assure verify` judges the run directory
            record, judgement = self._judged(facts, None)
        else:
            record = self._collected(facts)
            if len(facts["harness_errors"]) > settled:  # container.json not written again
                failed = Finding(Kind.HARNESS_ERROR, "harness", facts["harness_errors"][-1])
                judgement = judgement.with_finding(failed, hostile=self.spec.hostile)
        record = record.judged(judgement, utc_now())
        if not self._total(
            "record verdict",
            lambda: store.write_json(self.paths.verdict, record.verdict_json()),
            facts,
        ):
            # no verdict.json: the run directory cannot show this judgement, so nothing may act on
            # it
            failed = Finding(Kind.HARNESS_ERROR, "harness", facts["harness_errors"][-1])
            record = record.judged(
                judgement.with_finding(failed, hostile=self.spec.hostile), record.judged_at
            )
        return record

    def _collected(self, facts: dict[str, Any]) -> AttemptRecord:
        """container.json written with every fact and timing so far (the `record` phase, then
        again, unannounced, with the copy-out's and the unmount's), and the record."""
        facts["timings"] = self.timings
        written = {**facts, "timings": dict(self.timings)}  # as container.json holds them
        if "record" not in self.timings:
            self._total("record", lambda: store.write_json(self.paths.container, written), facts)
        else:
            try:
                store.write_json(self.paths.container, written)
            except Exception as exc:
                facts["harness_errors"].append(_harness_error("record", exc))
        # a failure to write container.json is in the record's harness errors: never judged as a
        # pass
        return AttemptRecord.collected(
            self.paths,
            ContainerFacts({**written, "harness_errors": list(facts["harness_errors"])}),
            pre=self._pre,
            post=self._post,
            checks=self._checks,
        )

    def _judged(
        self, facts: dict[str, Any], workspace: Path | None
    ) -> tuple[AttemptRecord, judge.Judgement]:
        """The record, and its judgement (`workspace`: where file assertions read, when not
        the run directory's `workspace/`)."""
        record = self._collected(facts)
        try:
            return record, judge.judge(record, self.spec, workspace=workspace)
        except (
            Exception
        ) as exc:  # judge() guards its rules; this is what is left (an unwritable run dir, say)
            errors = [*record.facts.harness_errors, _harness_error("judge", exc)]
            found = tuple(Finding(Kind.HARNESS_ERROR, "harness", e) for e in errors)
            return record, judge.Judgement(
                verdict(list(found), hostile=self.spec.hostile), found, (), None, None
            )

    def _total(self, name: str, fn: Callable[[], None], facts: dict[str, Any]) -> bool:
        """Run one phase; False (and a harness error recorded) if it raised."""
        try:
            self._phase(name, fn)
            return True
        except Exception as exc:
            facts["harness_errors"].append(_harness_error(name, exc))
            return False

    def _phase(self, name: str, fn: Callable[[], None]) -> None:
        health.beat_driver(
            health.default_path(health.DRIVER, self.run.path.parent),
            run_id=self.run.run_id,
            attempt=self.number,
            phase=name,
        )
        self.progress(name, {})
        start = time.monotonic()
        try:
            fn()
        finally:
            self.timings[name] = round(time.monotonic() - start, 4)

    @contextmanager
    def _timed(self, name: str) -> Iterator[None]:
        """A step inside a phase, timed on its own (`prepare.copy`, `start.ready`...): the
        benchmark's breakdown of where an attempt's time goes."""
        start = time.monotonic()
        try:
            yield
        finally:
            self.timings[name] = round(time.monotonic() - start, 4)

    def _snapshot_post(self, facts: dict[str, Any]) -> None:
        """The attempt's own filesystem sealed read-only (the agent's containers are gone), its
        counters, then POST on it (everything the agent left, special files and links
        included). The checks and the judge read it there; `_copy_out` follows the verdict."""
        assert self._fs is not None
        facts["workspace_fs"] = self._fs.usage().to_json()
        self._fs.seal()
        post = take(self._fs.workspace, reuse=self._pre)
        store.write_json(self.paths.post, post.to_json())
        self._post = post
        self._capture_databases("post")

    def _copy_out(self, facts: dict[str, Any], judgement: judge.Judgement) -> None:
        """Copy to the plain `workspace/` only what the run directory's readers of this
        verdict open (`judge.copied_out`): every change of an attempt promote may apply (and
        proposals and receipts show), or else the changes the HTML page shows in detail; and
        the files a file assertion reads. The confined copy (never follows, keeps sparse files
        sparse, skips and reports special files), bounded by limits.disk, into a temporary
        name renamed into place. It is the host's: owned by the invoking user, each mode
        `private.copy_mode` (POST holds the agent's modes and each file's digest, which
        promote checks it against)."""
        assert self._fs is not None and self._pre is not None and self._post is not None
        start = time.monotonic()
        shown = (
            None
            if judgement.verdict in PROMOTABLE
            else html_report.detailed(
                [c.path for c in judgement.changes],
                [(str(f.subject), f.kind.value) for f in judgement.findings],
            )
        )
        wanted = judge.copied_out(self.spec, self._pre, self._post, shown)
        tmp = self.paths.workspace_staging
        report = confined.copy_tree(
            self._fs.workspace,
            tmp,
            max_bytes=self.spec.limits.disk_bytes,
            modes=private.copy_mode,
            include=wanted.__contains__,
        )
        os.replace(tmp, self.paths.workspace)
        facts["workspace_copy"] = {
            **report.to_json(),
            "modes": private.COPY_MODES,
            "scope": judge.COPY_SCOPE,
            "changes": shown,
        }
        self.timings["copy_out"] = round(time.monotonic() - start, 4)

    def _release_workspace(self, facts: dict[str, Any]) -> None:
        """Unmount and delete the attempt's filesystem, on every path (a failure is recorded)."""
        if self._fs is None:
            return
        start = time.monotonic()
        try:
            self._fs.release()
        except (
            Exception
        ) as exc:  # recorded, like any phase's failure; `assure gc` releases what is left
            facts["harness_errors"].append(_harness_error("unmount", exc))
        self._fs = None
        self.timings["unmount"] = round(time.monotonic() - start, 4)

    def _capture_databases(self, side: str) -> None:
        """Self-contained copies of every database (WAL and journal included) for the verifier;
        a capture that fails is recorded for it, never skipped."""
        for db in self.spec.databases:
            source = self.paths.sandbox_db(db.name) if db.mode == "sandbox" else db.fixture
            target = self.paths.db_capture(side, db.name).parent
            target.mkdir(exist_ok=True)
            try:
                sqlite_verify.capture(source, target, db.name)
            except sqlite_verify.DatabaseError as exc:
                store.write_json(
                    self.paths.db_error(side, db.name),
                    {"error": type(exc).__name__, "message": exc.message},
                )

    def _checks_ahead(self) -> None:
        """The check phase's shared containers, the first one started now (`SharedChecks.warm`),
        once the agent has stopped: it gets ready while the attempt collects, cleans up and
        takes POST, not during the check phase. It holds no view and runs nothing until then,
        and nothing of the attempt's user runs in it before the agent's containers are gone."""
        if self._checks_ahead_done or not (self.spec.commands() or self.spec.cases()):
            return
        first = next((c.image for c in [*self.spec.commands(), *self.spec.cases()]), None)
        warm = (self.spec, self.images.agent) if first == AGENT_IMAGE_ALIAS else None
        assert self.lease is not None
        phase = checks.shared_checks(
            self.backend,
            self.paths.root,
            self.labels,
            self.prefix,
            self.lease.ids,
            warm,
            checks.views_of(self.spec),
        )
        self._shared_checks = self._shared.enter_context(phase)
        self._checks_ahead_done = True

    def _run_checks(self) -> None:
        assert self._post is not None and self._fs is not None
        args = (
            self.spec,
            self._fs.workspace,  # sealed: each check has a copy-on-write view of it
            self._post.to_json(),
            self.backend,
            self.images.agent,
            self.labels,
            self.prefix,
        )
        # as the attempt's own user: its containers are removed by now, with every process, pipe,
        # inotify instance and queue of that uid, and the lease keeps every other run off it
        assert self.lease is not None
        with self._shared:
            self._checks_ahead()  # unless the agent's end started it
            for kind in assertions.CHECK_KINDS:
                results = checks.RUNNERS[kind](
                    *args,
                    scratch=self.paths.root,
                    user=self.lease.ids,
                    shared=self._shared_checks,
                )
                store.write_json(assertions.KINDS[kind].results(self.paths), results)
                self._checks[kind] = results

    # --- prepare ------------------------------------------------------------------------
    def _prepare(self) -> None:
        p = self.paths
        workspace_fs.require()
        size, inodes = self.spec.limits.disk_bytes, self.spec.limits.inodes
        with self._timed("prepare.fs"):
            if self._claim():
                self._fs = workspace_fs.WorkspaceFs(
                    p.root, size, inodes
                )  # the pair's, mounted, now at attempts/<n>
            else:
                self.lease = uids.lease_for(self.spec)
                p.root.mkdir(parents=True)
                self._fs = workspace_fs.WorkspaceFs.create(p.root, size=size, inodes=inodes)
        assert self.lease is not None
        uid, gid = self.lease.ids
        self.model.uid, self.model.gid = (
            uid,
            gid,
        )  # a model key the gateway reads is handed to this user
        live = self._fs.workspace
        try:
            with self._timed("prepare.copy"):
                fresh_copy(self.spec.workspace.fixture, live, into=self._pair is not None)
        except SandboxError as exc:
            if (
                os.strerror(errno.ENOSPC) in exc.message
            ):  # the copy's report names the error of each entry
                raise SandboxError(
                    f"the fixture {self.spec.workspace.fixture} does not fit in the workspace"
                    f" filesystem ({self.spec.limits.disk}, {self.spec.limits.inodes} inodes):"
                    f" {exc.message}",
                    where="limits.disk",
                    fix="raise limits.disk or limits.inodes in the spec",
                ) from exc
            raise
        p.gateway_state.mkdir(exist_ok=self._pair is not None)
        p.blobs.mkdir()
        p.gateway_config.mkdir(exist_ok=self._pair is not None)
        for db in self.spec.databases:
            if db.mode == "sandbox":
                p.sandbox_db(db.name).parent.mkdir(exist_ok=True)
                _copy_database(db.fixture, p.sandbox_db(db.name))
        self._capture_databases("pre")
        hardening.chown_tree(live, uid, gid)
        hardening.chown_tree(p.gateway_state, uid, gid)
        hardening.chown_tree(
            self.run.state_dir, uid, gid
        )  # the run's, and this attempt's user is not the last one's
        config = gateway_config(
            self.spec,
            self.run.run_id,
            p,
            self.run.paths,
            f"{self.prefix}-egress:{hardening.EGRESS_PORT}" if self.egress else None,
            self.egress,
            self.model.gateway_config(),
        )
        with self._timed("prepare.pre"):
            pre = take(live)
        store.write_json(p.pre, pre.to_json())
        self._pre = pre
        if self._pair is not None:
            if self.spec.agent.files:
                fresh_copy(
                    self.spec.agent.files,
                    p.root / warm.AGENT_FILES,
                    into=True,
                    what="the agent files",
                )
            # what a cold agent's container is given (hardening.agent_request): assure's own HOME
            # and
            # socket over the spec's, exported again over the pooled container's same base values
            warm.write_claim(
                p.root / warm.CLAIM,
                self.spec.agent.command,
                {**self._agent_env(), **hardening.agent_base_env()},
            )
            warm.wake(p.root / warm.CLAIM)
            # its gate opens now: the socket is bound (its first call waits in the backlog until
            # the gateway, woken below, has opened the journal)
            self._agent_started_at = time.time()
        # last: a pooled gateway starts its journal on it, and only then accepts the agent's calls
        store.write_json(
            p.gateway_config / "gateway.json", config.to_json(), mode=private.SHARED_FILE_MODE
        )  # the gateway reads it
        if self._pair is not None:
            warm.wake(p.gateway_config)

    def _agent_env(self) -> dict[str, str]:
        return {
            **self.spec.agent.env,
            "ASSURE_RUN_ID": self.run.run_id,
            "ASSURE_ATTEMPT": str(self.number),
        }

    def _claim(self) -> bool:
        """Take a pooled pair (run/pool.py) if the pool has one for this spec and the run's
        folders can still take it; the containers are then this attempt's to remove."""
        if self.pool is None:
            return False
        if not warm.fresh(self.run):
            self.pool.started_cold()
            return False
        pair = self.pool.claim(self.spec)
        if pair is None:
            return False
        self._containers, self._volume = (
            [pair.gateway, pair.agent],
            pair.volume,
        )  # ours from here: removed on every path
        try:
            warm.take(pair, self.run, self.paths.root)
        except (
            OSError
        ):  # a retry, a resumed run or a halt already recorded: cold, and the pair goes
            self._containers, self._volume = [], None
            self.pool.give_back(pair)
            return False
        self._pair, self.lease = (
            pair,
            pair.lease,
        )  # the uid the pair's containers run as, held since its boot
        self._gateway, self._agent = pair.gateway, pair.agent
        store.write_json(
            self.paths.pool_claim, pair.describe()
        )  # a resumed driver reaps by it (no run label)
        return True

    # --- start --------------------------------------------------------------------------
    def _start(self, facts: dict[str, Any]) -> None:
        if self._pair is not None:
            facts["pool"] = self._pair.describe()
            with self._timed("start.ready"):
                self._await_gateway(self._gateway)
            facts["agent_started_at"] = self._agent_started_at  # its claim's wake-up
            self._started = True
            failpoints.hit("start")
            return
        assert self.lease is not None  # leased as the attempt was prepared
        if runtimes.socket_on_host(self.spec.sandbox.runtime):
            hardening.make_socket_folder(self.paths.socket_folder, self.lease.ids)
            socket_source = str(self.paths.socket_folder.resolve())
        else:
            with self._timed("start.volume"):
                self._volume = socket_source = self.backend.create_volume(
                    f"{self.prefix}-sock",
                    self.labels,
                    hardening.socket_volume_options(self.lease.ids),
                )
        assert self._fs is not None
        mounts = hardening.Mounts(
            self._fs.workspace,
            socket_source,
            self.paths.gateway_state,
            self.paths.gateway_config,
            self.spec.agent.files,
            self.run.control_dir,
            self.run.state_dir,
        )
        network = self._start_egress()
        image = install.agent_image(
            self.spec, self.images
        )  # assure's agent image, with the spec's agent.install if any
        # The stock agent image (a /bin/bash, no entrypoint) under runc starts while the gateway
        # boots, its command gated on the gateway's socket, which is bound only once the journal
        # is open. Another image or runtime is created meanwhile and started once the gateway is
        # ready.
        gated = self.spec.agent.image == AGENT_IMAGE_ALIAS and not runtimes.socket_on_host(
            self.spec.sandbox.runtime
        )
        agent = hardening.agent_request(
            self.spec,
            image=image,
            name=f"{self.prefix}-agent",
            mounts=mounts,
            labels=self.labels,
            env=self._agent_env(),
            user=self.lease.ids,
            gate_seconds=GATEWAY_READY_SECONDS if gated else None,
        )
        with ThreadPoolExecutor(max_workers=1) as pool:
            preparing = pool.submit(
                self._start_agent if gated else self.backend.create_container, agent
            )
            try:
                with self._timed("start.gateway"):
                    gateway = self.backend.start_container(
                        hardening.gateway_request(
                            self.spec,
                            image=self.images.gateway,
                            name=f"{self.prefix}-gateway",
                            mounts=mounts,
                            labels=self.labels,
                            user=self.lease.ids,
                            network=network,
                            extra_mounts=self.model.mounts(),
                        )
                    )
                self._containers.append(gateway)
                self._gateway = gateway
                with self._timed("start.ready"):
                    self._await_gateway(gateway)
            finally:
                self._agent = preparing.result()
                self._containers.append(self._agent)
        failpoints.hit("start")
        if not gated:
            with self._timed("start.agent"):
                self.backend.start(self._agent)
            self._agent_started_at = time.time()
        facts["agent_started_at"] = self._agent_started_at
        self._started = True

    def _agent_ever_started(self) -> bool:
        """After a start that failed, before its cleanup: whether the engine ever started this
        attempt's agent container. No id came back: the create (or the start, whose container
        `start_container` removes) failed, and nothing started it. An id: as the engine
        inspects it (a pooled agent was started by the pool; an engine that cannot answer is
        believed to have started it). Only the harness and the engine decide this, never the agent.
        """
        if self._pair is not None or self._agent_started_at is not None:
            return True
        agent = getattr(self, "_agent", None)
        if agent is None:
            return False
        try:
            return self.backend.observe(agent).status != "created"
        except Exception:
            return True

    def _start_agent(self, request: sandbox.ContainerRequest) -> str:
        with self._timed("start.agent"):
            cid = self.backend.start_container(request)
        self._agent_started_at = time.time()
        return cid

    def _start_egress(self) -> str | None:
        """Only when the spec allowlists hosts: an internal network shared by the gateway and
        the proxy; the proxy alone is also connected to the upstream network."""
        egress = self.egress
        if not egress:
            return None
        assert self.lease is not None  # leased as the attempt was prepared
        self._network = self.backend.create_network(
            f"{self.prefix}-egress", self.labels, internal=True
        )
        cfg_dir, log_dir = self.paths.egress_config, self.paths.egress_log
        cfg_dir.mkdir()
        log_dir.mkdir()
        if os.geteuid() == 0:
            os.chown(log_dir, *self.lease.ids)
        store.write_json(
            cfg_dir / "config.json",
            {
                "listen": f"0.0.0.0:{hardening.EGRESS_PORT}",
                "allow": egress.allow,
                "log": "/var/log/egress/requests.jsonl",
                "allow_private": egress.allow_private,
                "timeout_seconds": modelaccess.PROXY_TIMEOUT_SECONDS,
                "max_duration_seconds": modelaccess.PROXY_TIMEOUT_SECONDS,
            },
        )
        os.chmod(cfg_dir / "config.json", 0o644)
        proxy = self.backend.create_container(
            hardening.egress_request(
                self.spec,
                image=self.images.egress,
                name=f"{self.prefix}-egress",
                config_dir=cfg_dir,
                log_dir=log_dir,
                labels=self.labels,
                network=self._network,
                user=self.lease.ids,
            )
        )
        self._containers.append(proxy)
        if egress.upstream != "none":
            self.backend.connect(egress.upstream, proxy)
        self.backend.start(proxy)
        return self._network

    def _await_gateway(self, cid: str) -> None:
        """The ready file is a local stat, looked at whenever an entry appears in its folder (it
        gates the agent's deadline and the start phase: `appear`); whether the gateway died
        instead is an engine round trip, asked less often."""
        now = time.monotonic()
        deadline, alive_until = now + GATEWAY_READY_SECONDS, now + GATEWAY_ALIVE_SECONDS
        ready = self.paths.ready
        with appear.Appearance(ready.parent) as arrival:  # watched before the first look
            while not ready.exists():
                now = time.monotonic()
                exited = now >= alive_until and self.backend.wait(cid, POLL_SECONDS) is not None
                if now > deadline or exited:
                    logs = self.backend.logs(cid, 4000).decode(errors="replace")
                    raise SandboxError(f"the gateway did not become ready:\n{logs}")
                if now >= alive_until:
                    alive_until = time.monotonic() + GATEWAY_ALIVE_SECONDS
                else:
                    arrival.wait(alive_until - now)

    # --- run ----------------------------------------------------------------------------
    def _run(self, facts: dict[str, Any]) -> None:
        """Wait for the agent; stop it at the deadline, on an operator halt or a budget breach."""
        deadline = time.monotonic() + self.spec.limits.wall_seconds
        exit_code: int | None = None
        stop: Stopped | None = None  # why the harness stops the agent, once it does
        while exit_code is None and stop is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                stop = Stopped.deadline(time.time())
                break
            if INTERRUPTED.is_set():  # a signal whose KeyboardInterrupt was lost (stop.INTERRUPTED)
                raise KeyboardInterrupt
            self._heartbeat()
            exit_code = self.backend.wait(self._agent, min(RUN_POLL_SECONDS, remaining))
            if exit_code is None:
                stop = self._halt_requested() or self._budget_breached()
                calls = self._count_tool_calls()
                self.progress("run", {"tool_calls": calls})
                if calls:
                    failpoints.hit("run")
        if exit_code is None:
            assert stop is not None  # the loop ends with an exit code or a reason to stop
            self.backend.stop(self._agent, hardening.STOP_GRACE_SECONDS)
            exit_code = self.backend.wait(self._agent, hardening.STOP_GRACE_SECONDS + 5)
            stop = stop.halted(time.time())
        facts["stopped"] = stop.to_json() if stop else None
        facts["timed_out"] = bool(stop and stop.reason is StopReason.DEADLINE)
        facts["exit_code"] = exit_code

    def _heartbeat(self) -> None:
        """Publish the verifier's `last_success_at` (the gateway trusts it only while fresh) and
        the driver's, for the monitor."""
        health.beat(self.run.paths.verifier_heartbeat, health.VERIFIER, attempt=self.number)
        health.beat_driver(
            health.default_path(health.DRIVER, self.run.path.parent),
            run_id=self.run.run_id,
            attempt=self.number,
        )

    def _halt_requested(self) -> Stopped | None:
        override = control.read(self.run.control_dir)
        if not override.halted:
            return None
        return Stopped.operator_halt(override.request_id, override.actor, override.requested_at)

    def _budget_breached(self) -> Stopped | None:
        """The gateway writes `breach.json` when a budget counter runs out (its content is the
        gateway's)."""
        try:
            data = json.loads(self.paths.breach.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            data = {}
        counter = data.get("counter") if isinstance(data, dict) else None
        breach_at = data.get("breach_at") if isinstance(data, dict) else None
        return Stopped.budget(
            str(counter or "unknown"),
            float(breach_at) if isinstance(breach_at, (int, float)) else time.time(),
        )

    def _count_tool_calls(self) -> int:
        """Tool calls journaled so far, for the progress line: reads only what was appended
        since the last poll (complete lines only), not the whole journal every 100 ms."""
        try:
            with open(self.paths.journal, "rb") as fh:
                fh.seek(self._journal_read)
                chunk = fh.read()
        except OSError:
            return self._tool_calls
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._journal_read += len(complete)
        self._tool_calls += complete.count(b'"event":"tool_call"')
        return self._tool_calls

    # --- collect ------------------------------------------------------------------------
    def _collect(self, facts: dict[str, Any]) -> None:
        """Stop the gateway (it seals its journal) while the agent container is read out, and
        record how it ended: a gateway that did not exit 0 (killed at the stop grace, OOM) may
        have left effects without their outcome, which the verifier reports."""
        try:  # the agent has stopped: the check container gets ready meanwhile
            self._checks_ahead()
        except Exception:  # only a head start: the check phase tries again, and reports it
            pass
        with ThreadPoolExecutor(max_workers=1) as pool:
            stopping = pool.submit(self.backend.stop, self._gateway, hardening.STOP_GRACE_SECONDS)
            self._read_agent(facts)
            stopping.result()
        gateway = self.backend.observe(self._gateway)
        facts["gateway"] = {"exit_code": gateway.exit_code, "oom_killed": gateway.oom_killed}
        self.paths.gateway_log.write_bytes(self.backend.logs(self._gateway, LOG_LIMIT_BYTES))
        try:
            _, last = chain_head(self.paths.journal)
            facts["journal_head"] = {"seq": last["seq"], "hash": last["hash"]} if last else None
        except (ChainError, OSError, UnicodeDecodeError):
            pass  # judge() reports the broken journal

    def _read_agent(self, facts: dict[str, Any]) -> None:
        observed = self.backend.observe(self._agent)
        assert self.lease is not None
        facts["user"] = "{}:{}".format(
            *self.lease.ids
        )  # the verifier expects the agent to have run as it
        facts["observed"] = observed.to_json()
        facts["image"] = observed.image  # the id it ran from: the agent's identity
        facts["engine_security"] = self.backend.security_options()
        facts["oom_killed"] = observed.oom_killed
        layer = self.backend.writable_layer(self._agent)
        if layer is not None:
            facts["fs_changes_source"] = "writable layer"
            facts["fs_changes"] = _bounded(layer_changes(take(layer)))
        else:
            facts["fs_changes_source"] = "docker diff"
            facts["fs_changes"] = self._container_changes()
        self.paths.agent_log.write_bytes(self.backend.logs(self._agent, LOG_LIMIT_BYTES))

    def _container_changes(self) -> list[dict[str, Any]]:
        out = []
        changes = self.backend.fs_changes(self._agent)
        for change in changes[:MAX_CONTAINER_CHANGES]:
            path, kind = change.path, change.kind
            entry: dict[str, Any] = {"path": path, "kind": str(kind)}
            if kind is not sandbox.ChangeKind.DELETED and path not in EXPECTED_PATHS:
                ftype, content, target = self.backend.read_file(
                    self._agent, path, CONTAINER_FILE_LIMIT
                )
                entry.update(type=ftype, target=target)
                if content is not None:
                    entry["sha256"] = hashlib.sha256(content).hexdigest()
                elif ftype == "file":
                    entry["note"] = f"larger than {CONTAINER_FILE_LIMIT} bytes: not hashed"
            out.append(entry)
        return _bounded(out, total=len(changes))

    # --- cleanup ------------------------------------------------------------------------
    def _remove_container(self, cid: str) -> str | None:
        try:
            self.backend.remove_container(cid)
        except AssureError as exc:
            return exc.message
        return None

    def _unrecorded(self) -> dict[str, list[str]]:
        """What the engine holds with this attempt's labels beyond what it recorded: a create
        cut short (Ctrl-C, SIGTERM, an error while the call was in flight) may have made what
        it never returned the id of. Only after a start that did not finish: one more round trip."""
        mine = {
            k: self.labels[k]
            for k in (sandbox.LABEL_ATTEMPT, sandbox.LABEL_PID, sandbox.LABEL_HOST)
        }
        recorded = {*self._containers, self._volume, self._network}
        return {
            kind: [
                item["id"]
                for item in items
                if item["id"] not in recorded and all(item.get(k) == v for k, v in mine.items())
            ]
            for kind, items in self.backend.owned(self.run.run_id).items()
        }

    def _cleanup(self) -> None:
        """The containers side by side (each removal is the engine's round trip and unmount),
        then what they used: the socket volume, the network. After a start that did not finish,
        also what the engine lists as this attempt's own (`_unrecorded`), before the volume a
        container it never recorded would still hold."""
        errors = []
        self._stranded = (
            True  # until every container is known gone (an exception out of here leaves it so)
        )
        with ThreadPoolExecutor(max_workers=max(1, len(self._containers))) as pool:
            errors += [e for e in pool.map(self._remove_container, reversed(self._containers)) if e]
        stray: dict[str, list[str]] = {}
        if not self._started:
            try:
                stray = self._unrecorded()
            except AssureError as exc:
                errors.append(exc.message)
        errors += [e for e in map(self._remove_container, stray.get("containers", [])) if e]
        self._stranded = bool(errors)
        for remove, items in (
            (self.backend.remove_volume, [self._volume, *stray.get("volumes", [])]),
            (self.backend.remove_network, [self._network, *stray.get("networks", [])]),
        ):
            for item in filter(None, items):
                try:
                    remove(item)
                except AssureError as exc:
                    errors.append(exc.message)
        if (
            self._pair is not None
        ):  # a claim that failed before its wake-ups: no FIFO stays in the record
            warm.remove_wakes(self.paths.root)
        try:  # the gateway's socket folder (gVisor): nothing to keep
            confined.remove(self.paths.root, self.paths.socket_folder.name)
        except OSError as exc:
            errors.append(f"remove {self.paths.socket_folder}: {exc}")
        self.model.cleanup()
        if errors:
            raise SandboxError("cleanup failed: " + "; ".join(errors), fix="run `assure gc`")


def gateway_config(
    spec: Spec,
    run_id: str,
    paths: AttemptPaths,
    run_paths: RunPaths,
    egress_proxy: str | None,
    egress: Egress | None,
    model: gwconfig.Model | None,
) -> gwconfig.Config:
    """The attempt's gateway config, as the gateway's container sees its places: built once
    here, written once (`Config.to_json`), read back by the gateway (`gateway/config.parse`)."""
    return gwconfig.Config(
        run_id=run_id,
        attempt=paths.number,
        socket=hardening.SOCKET_PATH,
        workspace=hardening.WORKSPACE,
        journal=f"{hardening.GATEWAY_STATE}/{paths.journal.name}",
        ready_file=f"{hardening.GATEWAY_STATE}/{paths.ready.name}",
        protected=tuple(spec.workspace.protected),
        # the gateway's own defaults rule the rest
        limits=gwconfig.Limits(
            tool_calls=spec.limits.tool_calls, wall_seconds=spec.limits.wall_seconds
        ),
        goal_id=spec.name,
        policy=policy.gateway_policy(spec),
        control_dir=hardening.GATEWAY_CONTROL,
        breach_file=f"{hardening.GATEWAY_STATE}/{paths.breach.name}",
        idempotency_db=f"{hardening.GATEWAY_RUN_STATE}/{run_paths.idempotency_db.name}",
        heartbeat_file=f"{hardening.GATEWAY_STATE}/{paths.heartbeat.name}",
        databases=tuple(
            gwconfig.Database(db.name, hardening.database_path(db), db.mode)
            for db in spec.databases
        ),
        egress=gwconfig.egress(egress_proxy, egress.allow) if egress and egress_proxy else None,
        model=model,
    )
