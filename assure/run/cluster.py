"""Suites on a Ray cluster: each spec runs as a Ray task on a node that advertises the `docker`
resource, on that node's own engine, through the same driver and attempt pipeline as a local
run. Ray places and runs the tasks; nothing here schedules.

The node is not trusted with the verdict. Its run directory comes back as a bounded tar in the
object store, is checked as it is unpacked (sizes, member count, files and folders only but
for the agent's own links inside the workspace copies, kept as data and never followed; names
kept as data), and every attempt is judged again here against the caller's own spec (never the
spec files the node sent) by the code `assure verify` uses; that report replaces the node's,
which is kept beside it, and the receipts are signed here with the caller's key. A node whose
verdict differs gets a finding, and the spec's verdict is `error`.

What re-judging cannot catch is a node that fabricates consistent evidence (snapshots, journal,
inspect), and Ray itself trusts every node (a result is unpickled where it arrives): the nodes
of a cluster must be machines you would run `assure run` on.

A node lost mid-run (its raylet killed, the machine gone) loses the attempt it ran: the spec
is submitted again, to any node, and its run continues with the next attempt number. A task
that outlives its spec's whole budget (every task's attempts at the wall deadline, plus
`GRACE_SECONDS`) is cancelled and counted as lost the same way. The suite run's `state.json`
is write-ahead as for a local suite, so a caller killed with kill -9 continues with the same
command; Ray ends the tasks of a driver that died, so every spec that was in flight runs again,
one attempt number on.

Specs with effects outside the sandbox are refused here: a live database or an HTTP upstream
(the idempotency store that keeps a retried effect from repeating lives with the run on its
node, and a retry on another node would not see it), and a promote target (a folder on the node).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import stat
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from assure import spec as spec_mod
from assure.core.chain import canonical, sha256_hex, utc_now
from assure.errors import AssureError, SpecError, describe
from assure.records import store
from assure.records.layout import ATTEMPTS, AttemptPaths, RunPaths
from assure.run.suite import Outcome, SuiteRun
from assure.textsafe import display

RESOURCE = "docker"  # what a node advertises to take specs: `ray start --resources '{"docker": 2}'`
MAX_ARCHIVE_BYTES = 256 << 20  # the files of a run directory larger than this are not sent (the spec's verdict is error)
MAX_MEMBERS = 50_000  # files, folders and links in one arriving run directory
MAX_LOST = 3  # submissions of one spec lost with their node (or cancelled) before its verdict is error
GRACE_SECONDS = 600  # beyond a spec's whole budget before its task is cancelled (an image built on first use, a busy node)
ARRIVING = ".arriving-"  # prefix of the staging folder an arriving run directory is unpacked into
SCRATCH = "assure-node-"  # prefix of a task's scratch folder in its node's temp folder, locked while the task lives


class ArrivalError(AssureError):
    """A run directory from a node that is refused as it arrives."""


@dataclass(frozen=True)
class NodeResult:
    node_id: str
    verdict: str
    archive: bytes


def spec_digest(spec: spec_mod.Spec) -> str:
    return sha256_hex(canonical(spec.to_json()))


def refuse_outside_effects(specs: tuple[spec_mod.Spec, ...]) -> None:
    """Raise a `SpecError` naming each spec whose effects a retry on another node could repeat."""
    problems = []
    for s in specs:
        why = [f"live database {db.name}" for db in s.databases if db.mode == "live"]
        if s.egress is not None and s.egress.allow:
            why.append("an HTTP upstream (egress.allow)")
        if s.promote is not None:
            why.append(f"a promote target ({s.promote.target}, a folder on the node)")
        if why:
            problems.append(f"{s.path}: {', '.join(why)}: in cluster mode a spec is retried on another node when its node is lost, "
                            "and the idempotency store that keeps an effect from repeating stays with the lost node")
    if problems:
        raise SpecError(problems, fix="run these specs locally (without --cluster), or leave them out of the suite")


def _budget_seconds(spec: spec_mod.Spec) -> float:
    return spec.limits.wall_seconds * spec.max_attempts * len(spec.tasks) + GRACE_SECONDS


def overdue(in_flight: dict[Any, tuple[int, float]], now: float) -> Any | None:
    """Of the tasks in flight (ref -> (spec index, monotonic deadline)), the one whose deadline
    passed first, to be cancelled as hung; None while every task is within its spec's budget."""
    ref = min(in_flight, key=lambda r: in_flight[r][1])
    return ref if in_flight[ref][1] <= now else None


def record_loss(entry: dict[str, Any], node: str | None, error: str) -> str | None:
    """Count a lost submission in its spec's suite-run entry: the attempt it ran is lost and the
    next submission runs the one after. None when the spec may be submitted again; otherwise why
    its verdict is `error` (lost `MAX_LOST` times)."""
    attempt = entry.get("next_attempt", 1)
    entry["lost"] = [*entry.get("lost", []), {"node": node, "attempt": attempt, "error": error, "at": utc_now()}]
    entry["next_attempt"] = attempt + 1
    return f"lost with its node {len(entry['lost'])} times" if len(entry["lost"]) >= MAX_LOST else None


_NODE_ID = re.compile(r"\bnode ID: ([0-9a-f]{56})\b", re.IGNORECASE)


def lost_node(exc: BaseException, known: Iterable[str]) -> str | None:
    """The node a lost task ran on, if Ray's error names exactly one node of the cluster (`known`:
    every node Ray has seen, dead ones included). A `NodeDiedError` carries it in its message
    only ("... node ID: <56 hex>. ..."); a node id attribute, should Ray add one, comes first."""
    named = getattr(exc, "node_id", None)
    candidates = {str(named)} if named else {m.lower() for m in _NODE_ID.findall(str(exc))}
    found = candidates & set(known)
    return found.pop() if len(found) == 1 else None


# --- on the node ------------------------------------------------------------------------------

def run_on_node(spec_path: str, digest: str, run_id: str, first_attempt: int) -> NodeResult:
    """A Ray task: drive one spec on this node's engine in a scratch folder; return its run directory."""
    import ray

    from assure.run.driver import Driver
    from assure.sandbox.docker import DockerBackend
    from assure.sandbox.images import Images

    node_id = ray.get_runtime_context().get_node_id()
    spec = spec_mod.load(spec_path)
    if spec_digest(spec) != digest:
        raise AssureError("the spec on this node differs from the caller's", where=f"{node_id}: {spec_path}",
                          fix="deploy the same suite and spec files, at the same paths, to every node")
    backend = DockerBackend()
    finder = Images(backend, lambda message: print(f"assure node {node_id}: {message}", file=sys.stderr, flush=True))  # in the node's Ray worker log
    images = finder.resolve() or finder.ensure()  # built here on first use, from the same recipe: same tags
    with tempfile.TemporaryDirectory(prefix=SCRATCH) as scratch, store.exclusive(Path(scratch), "node task"):
        run = store.RunDir.create(Path(scratch), run_id, spec.path, spec.to_json())
        result = Driver(spec, run, backend, images, lambda phase, info: None, first_attempt=first_attempt).drive()
        return NodeResult(node_id, result.verdict, pack(run.path))


def release_orphan_scratch(base: Path | None = None, *, dry_run: bool = False) -> list[Path]:
    """Remove the scratch folders (in `base`, default the temp folder) of node tasks whose process
    is gone: a node lost mid-run, or a task Ray ended with its driver, leaves its run directory
    there. Only a real folder of ours whose lock no live process holds and under which nothing is
    mounted (`assure gc` releases the workspaces first); anything else is left alone."""
    from assure.records.layout import LOCK
    from assure.sandbox import workspace_fs

    removed = []
    for folder in sorted(Path(base or tempfile.gettempdir()).glob(SCRATCH + "*")):
        try:
            st, lock = folder.lstat(), (folder / LOCK).lstat()
        except OSError:
            continue
        if not (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and stat.S_ISREG(lock.st_mode)):
            continue
        if store.is_locked(folder) or workspace_fs.mounted_under(folder):
            continue
        if not dry_run:  # `assure gc --dry-run`: only named
            shutil.rmtree(folder)
        removed.append(folder)
    return removed


def _agents_tree(name: str) -> bool:
    """Whether `name` (relative to the run directory) is inside a copy of the agent's tree (the
    base a task starts from, an attempt's POST workspace): where its links are kept as data."""
    parts = PurePosixPath(name).parts
    base, workspace = RunPaths(Path()).base.name, AttemptPaths(Path("1")).workspace.name
    return (len(parts) > 1 and parts[0] == base) or (len(parts) > 3 and parts[0] == ATTEMPTS and parts[2] == workspace)


def pack(run_dir: Path) -> bytes:
    """The run directory as an uncompressed tar: files, folders, and the agent's links where its
    tree is kept (each as a link, never followed), bounded."""
    buf, total = io.BytesIO(), 0
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for root, dirs, files in os.walk(run_dir):  # os.walk never descends into a link
            dirs.sort()
            for name in sorted(dirs + files):
                path = Path(root) / name
                tar.inodes.clear()  # a file with other links is sent whole, never as a hard link
                info = tar.gettarinfo(path, arcname=str(path.relative_to(run_dir)))
                if not (info.isfile() or info.isdir() or (info.issym() and _agents_tree(info.name))):
                    raise AssureError(f"{display(info.name)} in the run directory is neither a file nor a folder", where=str(run_dir))
                total += info.size
                if total > MAX_ARCHIVE_BYTES:
                    raise AssureError(f"the run directory is larger than {MAX_ARCHIVE_BYTES >> 20} MiB "
                                      f"(at {display(info.name)}, {info.size} bytes)", where=str(run_dir))
                if info.isfile():
                    with open(path, "rb") as fh:
                        tar.addfile(info, fh)
                else:
                    tar.addfile(info)
    return buf.getvalue()


# --- where it arrives ----------------------------------------------------------------------------

def _files_and_folders(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's `data` filter (no absolute name, no `..`, nothing outside, no setuid), with the
    permission bits kept (the verifier compares them with POST); links are made afterwards."""
    if member.issym():
        return None
    if not (member.isfile() or member.isdir()):
        raise ArrivalError(f"{display(member.name)}: only files, folders and the agent's links may arrive, not a hard link or special file")
    return tarfile.data_filter(member, dest).replace(mode=member.mode & 0o777, deep=False)


def _checked(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """Every member, read header by header: refused at the first one past a bound or out of place."""
    members, size = [], 0
    for m in tar:
        members.append(m)
        size += m.size
        if len(members) > MAX_MEMBERS:
            raise ArrivalError(f"more than {MAX_MEMBERS} members")
        if size > MAX_ARCHIVE_BYTES:
            raise ArrivalError(f"more than {MAX_ARCHIVE_BYTES} bytes of files")
        if m.name.startswith("/") or any(part in ("", ".", "..") for part in PurePosixPath(m.name).parts):
            raise ArrivalError(f"{display(m.name)}: a name that leaves its folder")
        if m.issym() and not _agents_tree(m.name):
            raise ArrivalError(f"{display(m.name)}: a link outside the agent's tree")
    return members


def unpack(archive: bytes, runs_dir: Path, run_id: str) -> store.RunDir:
    """Check and unpack an arriving run directory into `runs_dir/run_id` (which must not exist)."""
    final = runs_dir / run_id
    if os.path.lexists(final):
        raise ArrivalError(f"{final} exists already: a run directory is never written over")
    staging = Path(tempfile.mkdtemp(prefix=ARRIVING + run_id + "-", dir=runs_dir))
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
            members = _checked(tar)
            tar.extractall(staging, members=members, filter=_files_and_folders)
        for m in (m for m in members if m.issym()):  # last: no file was written through a link
            parts = PurePosixPath(m.name).parts
            if any((staging.joinpath(*parts[:i])).is_symlink() for i in range(1, len(parts))):
                raise ArrivalError(f"{display(m.name)}: a link inside a link")
            os.symlink(m.linkname, staging.joinpath(*parts))
        paths = RunPaths(staging)
        if not (paths.state.is_file() and paths.spec_json.is_file()):
            raise ArrivalError(f"it has no {paths.state.name} or {paths.spec_json.name}: not a run directory")
        os.rename(staging, final)
    except (tarfile.TarError, OSError) as exc:
        raise ArrivalError(f"the archive cannot be unpacked: {display(str(exc))}") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return store.RunDir.open(final)


@dataclass(frozen=True)
class Arrival:
    verdict: str  # the spec's verdict: the caller's, or error when the node's differs
    node_finding: str | None


def settle(run: store.RunDir, spec: spec_mod.Spec, node_verdict: str, key: Path | None) -> Arrival:
    """Judge the arrived run again, against the caller's spec, from its folder alone; keep the
    node's report beside the one judged here; compare; sign the receipts here."""
    from assure.records.attempt_record import Records
    from assure.run.driver import issue_receipts, rejudge

    ran = spec_mod.Spec.from_json(store.read_json(run.paths.spec_json))
    if spec_digest(ran) != spec_digest(spec):
        return Arrival("error", "the run directory it sent is of another spec than the one it was given")
    if run.paths.report.is_file() and not run.paths.node_report.is_file():  # once: a settle cut short is done again
        os.replace(run.paths.report, run.paths.node_report)
    recorded = store.read_json(run.paths.node_report).get("verdict") if run.paths.node_report.is_file() else None
    recomputed, judged = rejudge(run.path, spec)
    store.write_json(run.paths.report, recomputed.report)
    records = Records(run.paths)
    for record in judged.values():
        records.keep(record)
    issue_receipts(run, spec, store.read_json(run.paths.state), key, records, judged)
    if node_verdict == recomputed.verdict == recorded:
        return Arrival(recomputed.verdict, None)
    return Arrival("error", f"the node's verdict ({display(str(node_verdict))}, recorded {display(str(recorded))}) "
                            f"differs from the verdict judged here ({recomputed.verdict})")


# --- the caller -----------------------------------------------------------------------------------

def connect(address: str) -> Any:
    """Join an existing cluster (`auto`: Ray's own discovery). On a loopback address the caller
    binds to loopback too, so that nothing of a local cluster leaves 127.0.0.1."""
    try:
        import ray
    except ImportError:
        raise AssureError("Ray is not installed", fix="pip install 'assure[ray]'") from None
    extra = {"_node_ip_address": "127.0.0.1"} if loopback(address, os.environ) else {}
    try:
        ray.init(address=address, logging_level="WARNING", log_to_driver=False, configure_logging=False, **extra)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise AssureError(f"cannot join the Ray cluster at {address}: {display(str(exc))}",
                          fix="start it with `ray start --head`, or give its address (host:port) to --cluster") from None
    if not ray.cluster_resources().get(RESOURCE):
        raise AssureError(f"no node of the cluster at {address} advertises the {RESOURCE!s} resource",
                          fix=f"""start the nodes that have Docker and the images with `ray start ... --resources '{{"{RESOURCE}": 1}}'`""")
    return ray


def loopback(address: str, environ: Any) -> bool:
    """Whether the cluster is on this machine's loopback: `address`, or for `auto` the
    RAY_ADDRESS that Ray's discovery takes first."""
    if address == "auto":
        address = environ.get("RAY_ADDRESS") or ""
    host = address.rsplit(":", 1)[0] if ":" in address else address
    return host.startswith("127.") or host == "localhost"


def _lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """What Ray raises when a task's node or worker, not the task's code, failed: worth a retry."""
    ex = ray.exceptions
    return tuple(getattr(ex, name) for name in ("NodeDiedError", "WorkerCrashedError", "ObjectLostError", "OwnerDiedError",
                                                 "ObjectFetchTimedOutError", "RaySystemError")
                 if hasattr(ex, name))


def drive_suite(record: SuiteRun, runs_dir: Path, address: str, jobs: int | None, key: Path | None,
                finished: Callable[[int, spec_mod.Spec, Outcome, dict[str, Any]], None]) -> list[Outcome]:
    """Run every spec of the suite run that has no verdict yet on the cluster, at most `jobs` at
    a time (default: as many as the cluster's `docker` resource allows)."""
    suite = record.suite
    refuse_outside_effects(suite.specs)
    ray = connect(address)
    lost_errors = _lost_errors(ray)
    remote = ray.remote(run_on_node)
    cap = jobs or max(1, int(ray.cluster_resources()[RESOURCE]))
    runs_dir.mkdir(parents=True, exist_ok=True)
    entries = record.state["runs"]
    in_flight: dict[Any, tuple[int, float]] = {}  # ref -> (spec index, monotonic deadline)

    def submit(i: int) -> None:
        spec, entry = suite.specs[i], entries[i]
        if entry["run_id"] is None:
            entry["run_id"] = store.new_run_id(spec.name)
        entry["started_at"] = entry.get("started_at") or utc_now()  # kept across a resubmission
        entry.setdefault("next_attempt", 1)
        entry.setdefault("lost", [])
        record.save()  # write-ahead: a caller killed from here on continues this spec one attempt on
        opts = {"resources": {RESOURCE: 1}, "num_cpus": spec.limits.cpus, "memory": spec_mod.parse_size(spec.limits.memory), "max_retries": 0}
        ref = remote.options(**opts).remote(str(spec.path), spec_digest(spec), entry["run_id"], entry["next_attempt"])
        in_flight[ref] = (i, time.monotonic() + _budget_seconds(spec))

    def conclude(i: int, verdict: str, **fields: Any) -> None:
        entries[i].update(verdict=verdict, finished_at=utc_now(), **fields)
        record.save()
        outcome = Outcome(suite.specs[i].name, entries[i]["run_id"], verdict, suite.specs[i].expect)
        finished(i, suite.specs[i], outcome, entries[i])

    def lose(i: int, node: str | None, error: str) -> bool:
        """Count a lost submission; True when the spec may be submitted again."""
        given_up = record_loss(entries[i], node, error)
        if given_up:
            conclude(i, "error", reason=given_up)
            return False
        record.save()
        return True

    with store.exclusive(record.path, "suite run"):
        waiting = []
        for i, entry in enumerate(entries):
            if entry["verdict"] is not None:
                continue
            if entry["run_id"] is not None:
                for stale in runs_dir.glob(f"{ARRIVING}{entry['run_id']}-*"):  # an unpack the caller's death cut short
                    shutil.rmtree(stale, ignore_errors=True)
                if (runs_dir / entry["run_id"]).is_dir():
                    _settle_arrived(i, entry, suite.specs[i], runs_dir, key, conclude)  # arrived before the caller died
                    continue
                if not lose(i, None, "the caller stopped"):  # in flight when the caller died: Ray ended it with its driver
                    continue
            waiting.append(i)
        stop = False
        while (waiting and not stop) or in_flight:
            while waiting and not stop and len(in_flight) < cap:
                submit(waiting.pop(0))
            timeout = max(0.0, min(deadline for _, deadline in in_flight.values()) - time.monotonic())
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=timeout)
            if not ready:  # the nearest task outlived its spec's whole budget: a hung node
                ref = overdue(in_flight, time.monotonic())
                if ref is None:  # woken a moment early
                    continue
                i, _ = in_flight.pop(ref)
                ray.cancel(ref, force=True)
                if lose(i, None, f"cancelled after {_budget_seconds(suite.specs[i]):.0f} s"):
                    waiting.insert(0, i)
                continue
            (ref,) = ready
            i, _ = in_flight.pop(ref)
            entry, spec = entries[i], suite.specs[i]
            try:
                result: NodeResult = ray.get(ref)
            except lost_errors as exc:
                if lose(i, lost_node(exc, (n["NodeID"] for n in ray.nodes())), type(exc).__name__):
                    waiting.insert(0, i)
                continue
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause if isinstance(getattr(exc, "cause", None), AssureError) else None
                conclude(i, "error", reason=describe(cause) if cause else f"{type(exc).__name__} on the node")
            except ray.exceptions.RayError as exc:  # out of memory, cancelled, a runtime env that failed: no retry
                conclude(i, "error", reason=f"{type(exc).__name__} on the node: {display(str(exc))}"[:2000])
            else:
                entry.update(node=result.node_id, node_verdict=result.verdict)
                record.save()  # write-ahead: what the node said, before the arrival is judged
                try:
                    unpack(result.archive, runs_dir, entry["run_id"])
                except ArrivalError as exc:
                    conclude(i, "error", node_finding=f"its run directory was refused on arrival: {exc.explain()}")
                else:
                    _settle_arrived(i, entry, spec, runs_dir, key, conclude)
            stop = suite.stop_on_unexpected and any(e["verdict"] is not None and e["verdict"] != s.expect for e, s in zip(entries, suite.specs))
        record.finish()
    return [Outcome(s.name, e["run_id"], e["verdict"], s.expect) for s, e in zip(suite.specs, entries) if e["verdict"] is not None]


def _settle_arrived(i: int, entry: dict[str, Any], spec: spec_mod.Spec, runs_dir: Path, key: Path | None,
                    conclude: Callable[..., None]) -> None:
    """Judge an arrived run directory; anything it holds that cannot be judged is the node's doing: `error`."""
    try:
        arrival = settle(store.RunDir.open(runs_dir / entry["run_id"]), spec, entry.get("node_verdict"), key)
    except Exception as exc:  # node-shaped data (a state of the wrong shape, a missing file): never a crash of the caller
        conclude(i, "error", node_finding=f"its run directory cannot be judged here: {describe(exc)}")
        return
    conclude(i, arrival.verdict, **({"node_finding": arrival.node_finding} if arrival.node_finding else {}))
