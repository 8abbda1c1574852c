"""Suites on a Ray cluster: each spec runs as a Ray task on a node that advertises the `docker`
resource, on that node's own engine, through the same driver and attempt pipeline as a local
run. Ray places and runs the tasks; nothing here schedules.

The node is not trusted with the verdict. Its run directory comes back as a bounded tar in the
object store, is checked as it is unpacked (sizes, member count, files and folders only, names
kept as data), and is judged again here by the code `assure verify` uses; the receipts are
signed here, with the caller's key. A node whose verdict differs from the caller's gets a
finding, and the spec's verdict is `error`.

A node lost mid-run (its raylet killed, the machine gone) loses the attempt it ran: the spec
is submitted again, to any node, and its run continues with the next attempt number. The
suite run's `state.json` is write-ahead as for a local suite, so a caller killed with kill -9
continues with the same command; Ray ends the tasks of a driver that died, so every spec that
was in flight runs again, one attempt number on.

Specs with effects outside the sandbox are refused here: a live database or an HTTP upstream
(the idempotency store that keeps a retried effect from repeating lives with the run on its
node, and a retry on another node would not see it), and a promote target (a folder on the node).
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from assure import spec as spec_mod
from assure.core.chain import canonical, sha256_hex, utc_now
from assure.errors import AssureError, SpecError
from assure.records import store
from assure.records.layout import RunPaths
from assure.run.suite import Outcome, SuiteRun
from assure.textsafe import display

RESOURCE = "docker"  # what a node advertises to take specs: `ray start --resources '{"docker": 2}'`
MAX_ARCHIVE_BYTES = 256 << 20  # a run directory larger than this is not sent (the spec's verdict is error)
MAX_MEMBERS = 50_000  # files and folders in one arriving run directory
MAX_LOST = 3  # submissions of one spec lost with their node before its verdict is error
ARRIVING = ".arriving-"  # prefix of the staging folder an arriving run directory is unpacked into


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


# --- on the node ------------------------------------------------------------------------------

def run_on_node(spec_path: str, digest: str, run_id: str, first_attempt: int) -> NodeResult:
    """A Ray task: drive one spec on this node's engine in a scratch folder; return its run directory."""
    import ray

    from assure.run.driver import Driver
    from assure.sandbox.docker import DockerBackend
    from assure.sandbox.images import Images

    spec = spec_mod.load(spec_path)
    if spec_digest(spec) != digest:
        raise AssureError("the spec on this node differs from the caller's", where=f"{ray.get_runtime_context().get_node_id()}: {spec_path}",
                          fix="deploy the same suite and spec files, at the same paths, to every node")
    backend = DockerBackend()
    finder = Images(backend)
    images = finder.resolve() or finder.ensure()  # built here on first use, from the same recipe: same tags
    with tempfile.TemporaryDirectory(prefix="assure-node-") as scratch:
        run = store.RunDir.create(Path(scratch), run_id, spec.path, spec.to_json())
        result = Driver(spec, run, backend, images, lambda phase, info: None, first_attempt=first_attempt).drive()
        return NodeResult(ray.get_runtime_context().get_node_id(), result.verdict, pack(run.path))


def pack(run_dir: Path) -> bytes:
    """The run directory as an uncompressed tar: files and folders only, bounded."""
    buf, total = io.BytesIO(), 0
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for root, dirs, files in os.walk(run_dir):
            dirs.sort()
            for name in sorted(dirs + files):
                path = Path(root) / name
                info = tar.gettarinfo(path, arcname=str(path.relative_to(run_dir)))
                if not (info.isfile() or info.isdir()):
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

def _only_files(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    """tarfile's `data` filter (no absolute names, no `..`, no device, safe modes), and no links at all."""
    if not (member.isfile() or member.isdir()):
        raise ArrivalError(f"{display(member.name)}: only files and folders may arrive, not a link or special file")
    return tarfile.data_filter(member, dest)


def unpack(archive: bytes, runs_dir: Path, run_id: str) -> store.RunDir:
    """Check and unpack an arriving run directory into `runs_dir/run_id` (which must not exist)."""
    if len(archive) > MAX_ARCHIVE_BYTES + (64 << 20):
        raise ArrivalError(f"the archive is {len(archive)} bytes, above the {MAX_ARCHIVE_BYTES >> 20} MiB bound")
    final = runs_dir / run_id
    staging = Path(tempfile.mkdtemp(prefix=ARRIVING + run_id + "-", dir=runs_dir))
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
            members = tar.getmembers()
            if len(members) > MAX_MEMBERS:
                raise ArrivalError(f"{len(members)} members, above the bound of {MAX_MEMBERS}")
            size = sum(m.size for m in members)
            if size > MAX_ARCHIVE_BYTES:
                raise ArrivalError(f"{size} bytes of files, above the {MAX_ARCHIVE_BYTES >> 20} MiB bound")
            for m in members:
                if m.name.startswith("/") or any(part in ("", ".", "..") for part in PurePosixPath(m.name).parts):
                    raise ArrivalError(f"{display(m.name)}: a name that leaves its folder")
            tar.extractall(staging, filter=_only_files)
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
    """Judge the arrived run again from its folder alone, compare with the node, sign its receipts here."""
    from assure.records.attempt_record import Records
    from assure.run.driver import issue_receipts, rejudge

    recomputed, judged = rejudge(run.path)
    records = Records(run.paths)
    for record in judged.values():
        records.keep(record)
    state = store.read_json(run.paths.state)
    issue_receipts(run, spec, state, key, records, judged)
    recorded = store.read_json(run.paths.report).get("verdict")
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
    host = address.rsplit(":", 1)[0] if address != "auto" else ""
    extra = {"_node_ip_address": "127.0.0.1"} if host.startswith("127.") or host == "localhost" else {}
    try:
        ray.init(address=address, logging_level="WARNING", log_to_driver=False, configure_logging=False, **extra)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise AssureError(f"cannot join the Ray cluster at {address}: {display(str(exc))}",
                          fix="start it with `ray start --head`, or give its address (host:port) to --cluster") from None
    if not ray.cluster_resources().get(RESOURCE):
        raise AssureError(f"no node of the cluster at {address} advertises the {RESOURCE!s} resource",
                          fix=f"""start the nodes that have Docker and the images with `ray start ... --resources '{{"{RESOURCE}": 1}}'`""")
    return ray


def _lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """What Ray raises when a task's node or worker, not the task's code, failed."""
    ex = ray.exceptions
    return tuple(getattr(ex, name) for name in ("NodeDiedError", "WorkerCrashedError", "ObjectLostError", "OwnerDiedError",
                                                 "ObjectFetchTimedOutError", "TaskUnschedulableError", "RaySystemError")
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
    in_flight: dict[Any, int] = {}

    def submit(i: int) -> None:
        spec, entry = suite.specs[i], entries[i]
        if entry["run_id"] is None:
            entry["run_id"] = store.new_run_id(spec.name)
        entry["started_at"] = entry.get("started_at") or utc_now()  # a suite run's entries start with it null
        entry.setdefault("next_attempt", 1)
        entry.setdefault("lost", [])
        record.save()  # write-ahead: a caller killed from here on continues this spec one attempt on
        opts = {"resources": {RESOURCE: 1}, "num_cpus": spec.limits.cpus, "memory": spec_mod.parse_size(spec.limits.memory), "max_retries": 0}
        ref = remote.options(**opts).remote(str(spec.path), spec_digest(spec), entry["run_id"], entry["next_attempt"])
        in_flight[ref] = i

    def conclude(i: int, verdict: str, **fields: Any) -> None:
        entries[i].update(verdict=verdict, finished_at=utc_now(), **fields)
        record.save()
        outcome = Outcome(suite.specs[i].name, entries[i]["run_id"], verdict, suite.specs[i].expect)
        finished(i, suite.specs[i], outcome, entries[i])

    with store.exclusive(record.path, "suite run"):
        waiting = []
        for i, entry in enumerate(entries):
            if entry["verdict"] is not None:
                continue
            if entry["run_id"] is not None and (runs_dir / entry["run_id"]).is_dir():
                _settle_arrived(i, entry, suite.specs[i], runs_dir, key, conclude)  # arrived before the caller died
                continue
            if entry["run_id"] is not None:  # in flight when the caller died: Ray ended it with its driver
                entry["lost"] = [*entry.get("lost", []), {"node": None, "attempt": entry.get("next_attempt", 1), "error": "the caller stopped", "at": utc_now()}]
                entry["next_attempt"] = entry.get("next_attempt", 1) + 1
            waiting.append(i)
        stop = False
        while (waiting and not stop) or in_flight:
            while waiting and not stop and len(in_flight) < cap:
                submit(waiting.pop(0))
            (ref,), _ = ray.wait(list(in_flight), num_returns=1)
            i = in_flight.pop(ref)
            entry, spec = entries[i], suite.specs[i]
            try:
                result: NodeResult = ray.get(ref)
            except lost_errors as exc:
                entry["lost"].append({"node": getattr(exc, "node_id", None), "attempt": entry["next_attempt"], "error": type(exc).__name__, "at": utc_now()})
                entry["next_attempt"] += 1
                if len(entry["lost"]) >= MAX_LOST:
                    conclude(i, "error", reason=f"lost with its node {len(entry['lost'])} times")
                else:
                    record.save()
                    waiting.insert(0, i)
                continue
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause if isinstance(getattr(exc, "cause", None), AssureError) else None
                conclude(i, "error", reason=display(cause.explain() if cause else f"{type(exc).__name__} on the node")[:2000])
            else:
                entry["node"] = result.node_id
                try:
                    unpack(result.archive, runs_dir, entry["run_id"])
                except ArrivalError as exc:
                    conclude(i, "error", node_finding=f"its run directory was refused on arrival: {exc.explain()}")
                else:
                    _settle_arrived(i, entry, spec, runs_dir, key, conclude, node_verdict=result.verdict)
            stop = suite.stop_on_unexpected and any(e["verdict"] is not None and e["verdict"] != s.expect for e, s in zip(entries, suite.specs))
    return [Outcome(s.name, e["run_id"], e["verdict"], s.expect) for s, e in zip(suite.specs, entries) if e["verdict"] is not None]


def _settle_arrived(i: int, entry: dict[str, Any], spec: spec_mod.Spec, runs_dir: Path, key: Path | None,
                    conclude: Callable[..., None], node_verdict: str | None = None) -> None:
    run = store.RunDir.open(runs_dir / entry["run_id"])
    if node_verdict is None:  # arrived before the caller was killed: the node's verdict is the one it wrote
        node_verdict = store.read_json(run.paths.report).get("verdict")
    try:
        arrival = settle(run, spec, node_verdict, key)
    except AssureError as exc:
        conclude(i, "error", node_finding=f"its run directory cannot be judged here: {exc.explain()}")
        return
    conclude(i, arrival.verdict, **({"node_finding": arrival.node_finding} if arrival.node_finding else {}))
