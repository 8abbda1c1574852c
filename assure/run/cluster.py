"""Suites on a Ray cluster: each spec runs as a Ray task on a node that advertises the `docker`
resource, on that node's own engine, through the same driver and attempt pipeline as a local
run. Ray places and runs the tasks; nothing here schedules.

The node is not trusted with the verdict. Its run directory comes back as a bounded tar in the
object store, is checked as it is unpacked (sizes, member count, files and folders only but
for the agent's own links inside the workspace copies, kept as data and never followed; names
kept as data), and every attempt is judged again here against the caller's own spec (never the
spec files the node sent) by the code `assure verify` uses; that report replaces the node's,
which is kept beside it, and the receipts are signed here with the caller's key.

A cluster never lowers a verdict. The node's verdict and findings travel apart from the bulk
(`NodeMessage`: small, bounded, checked on its own, inlined in Ray's reply so it arrives even
when the bulk is lost), and each attempt's breach is claimed with the caller (`Claims`, an
actor beside it) as soon as the node judged it, before the task goes on or its node is lost.
`decide` then takes the worst of what was judged here and what the node claimed: a breach
claimed by a node stands (lying toward breach gains nothing), and any other verdict that
cannot be judged here, or differs from the one judged here, is `error`, with a finding.

What re-judging cannot catch is a node that fabricates consistent evidence (snapshots, journal,
inspect), and Ray itself trusts every node (a result is unpickled where it arrives): the nodes
of a cluster must be machines you would run `assure run` on.

Every node task starts a watchdog of its own (`watch`), which outlives the task's worker: when the
worker is gone without ending it, or outlives the spec's whole budget, the sandbox it made is
removed on its node as `assure gc` would, so no agent runs on when the driver that enforces its
deadline is gone. A node lost mid-run (its raylet killed, the machine gone) loses the attempt it
ran: the spec
is submitted again, to any node, and its run continues with the next attempt number; a breach
its node claimed before it was lost stands whatever the next node finds. A task
that outlives its spec's whole budget (every task's attempts at the wall deadline, plus
`GRACE_SECONDS`), counted from its start on the node (the node tells the caller's `Claims`;
time in Ray's queue is not the spec's), is cancelled and counted as lost the same way. The suite
run's `state.json`
is write-ahead as for a local suite, so a caller killed with kill -9 continues with the same
command; Ray ends the tasks of a driver that died, so every spec that was in flight runs again,
one attempt number on.

Specs with effects outside the sandbox are refused here: a live database or an HTTP upstream
(the idempotency store that keeps a retried effect from repeating lives with the run on its
node, and a retry on another node would not see it), and a promote target (a folder on the node).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from assure import spec as spec_mod
from assure.core.chain import canonical, sha256_hex, utc_now
from assure.errors import AssureError, SpecError, describe
from assure.records import store, summary
from assure.records.layout import ATTEMPTS, AttemptPaths, RunPaths
from assure.run import gcs_probe
from assure.run.suite import Outcome, SuiteRun
from assure.run.suite import _raise_in as raise_in
from assure.textsafe import display
from assure.verify.findings import SEVERITY, Kind, Verdict

RESOURCE = "docker"  # what a node advertises to take specs: `ray start --resources '{"docker": 2}'`
MAX_ARCHIVE_BYTES = (
    256 << 20
)  # the files of a run directory larger than this are not sent (its node's message goes alone)
MAX_MEMBERS = 50_000  # files, folders and links in one arriving run directory
MAX_MESSAGE_BYTES = (
    32 << 10
)  # a node's message or claim: under Ray's 100 KiB inlining, so it travels in the task's reply
MAX_MESSAGE_FINDINGS = 40  # findings a message carries, heaviest first (the summary lists 50)
MAX_TEXT = 500  # characters of each string of a message's finding
MAX_CLAIMS = 64  # breach claims kept per run: more are the node's noise
HERE_POLL_SECONDS = 0.5  # how often the caller looks for a spec it runs here that has finished
CLAIMS_POLL_SECONDS = (
    5  # how often the caller writes the claims of the tasks in flight into the suite run's state
)
BULK_FETCH_SECONDS = 600  # to fetch a run directory from a node that has already sent its message
MAX_LOST = (
    3  # submissions of one spec lost with their node (or cancelled) before its verdict is error
)
QUEUED = float("inf")  # the deadline of a task its node has not started yet
# beyond a spec's whole budget before its task is cancelled (an image built on first use, a busy
# node)
GRACE_SECONDS = 600
ARRIVING = ".arriving-"  # prefix of the staging folder an arriving run directory is unpacked into
# prefix of a task's scratch folder in its node's temp folder, locked while the task lives
SCRATCH = "assure-node-"
# for the cluster's address to answer Ray's first call as its GCS does, before Ray is asked to join
PROBE_SECONDS = 3
JOIN_SECONDS = 20  # for Ray to join a cluster whose address answered


class ArrivalError(AssureError):
    """A run directory from a node that is refused as it arrives."""


BREACH = Verdict.BREACH.value
_VERDICTS = {v.value for v in Verdict}


def _finding(f: Any) -> dict[str, str]:
    """One finding as a message carries it: a known kind, its severity derived here (never the
    node's), subject and message cut to `MAX_TEXT`."""
    if not (
        isinstance(f, dict)
        and isinstance(f.get("subject"), str)
        and isinstance(f.get("message"), str)
    ):
        raise ArrivalError("a finding in the node's message is not a finding")
    try:
        kind = Kind(f.get("kind"))
    except ValueError:
        raise ArrivalError(
            "a finding in the node's message has an unknown kind:"
            f" {display(str(f.get('kind')))[:80]}"
        ) from None
    return {
        "kind": kind.value,
        "severity": SEVERITY[kind].value,
        "subject": f["subject"][:MAX_TEXT],
        "message": f["message"][:MAX_TEXT],
    }


_HEAVIEST = {"breach": 0, "error": 1, "fail": 2, "info": 3}


@dataclass(frozen=True)
class NodeMessage:
    """What a node says apart from its run directory: small, bounded, checked on its own. The
    run's verdict (or one attempt's, for a claim), the findings it follows from, and `unsent`:
    why the node kept its run directory (past a bound), None when it sent it."""

    node_id: str
    verdict: str
    findings: tuple[dict[str, str], ...] = ()
    attempt: int | None = None  # a claim: the attempt judged; None: the run's message
    unsent: str | None = None

    def encode(self) -> bytes:
        """As JSON, within `MAX_MESSAGE_BYTES`: the heaviest findings first, as many as fit."""
        findings = sorted(
            (f for f in map(_finding, self.findings) if f["severity"] != "info"),
            key=lambda f: _HEAVIEST[f["severity"]],
        )
        findings = findings[:MAX_MESSAGE_FINDINGS]
        while True:
            data = json.dumps(
                {
                    "node": self.node_id,
                    "verdict": self.verdict,
                    "attempt": self.attempt,
                    "unsent": (self.unsent or "")[:MAX_TEXT] or None,
                    "findings": findings,
                }
            ).encode()
            if len(data) <= MAX_MESSAGE_BYTES:
                return data
            findings = findings[:-1]

    @classmethod
    def decode(cls, data: Any) -> NodeMessage:
        """A message from a node, checked: bounded bytes, a known verdict, findings of known
        kinds."""
        if not isinstance(data, bytes) or len(data) > MAX_MESSAGE_BYTES:
            raise ArrivalError(f"its message is not at most {MAX_MESSAGE_BYTES} bytes")
        try:
            doc = json.loads(data)
        except ValueError:
            raise ArrivalError("its message is not JSON") from None
        if not (
            isinstance(doc, dict)
            and doc.get("verdict") in _VERDICTS
            and isinstance(doc.get("node"), str)
            and isinstance(doc.get("findings"), list)
            and len(doc["findings"]) <= MAX_MESSAGE_FINDINGS
            and (doc.get("attempt") is None or (type(doc["attempt"]) is int and doc["attempt"] > 0))
            and (doc.get("unsent") is None or isinstance(doc["unsent"], str))
        ):
            raise ArrivalError("its message is not a node's message")
        findings = tuple(f for f in map(_finding, doc["findings"]) if f["severity"] != "info")
        return cls(
            doc["node"][:MAX_TEXT],
            doc["verdict"],
            findings,
            doc.get("attempt"),
            doc["unsent"][:MAX_TEXT] if doc.get("unsent") else None,
        )


class Claims:
    """A Ray actor on the caller's node: each attempt's verdict of breach, claimed by the node
    that judged it before its task goes on (`NodeDriver`). The caller takes them as they come
    and writes them ahead into the suite run's state, so a node lost after a breach (or a task
    cancelled as hung) cannot take the breach with it. At most `MAX_CLAIMS` per run."""

    def __init__(self) -> None:
        self.waiting: list[tuple[str, bytes]] = []
        self.counts: dict[str, int] = {}
        self.starts: list[tuple[str, int, str, float]] = []

    def start(self, run_id: str, attempt: int, node_id: str) -> None:
        """A task began on its node: when, by this (the caller's) machine's clock, never the
        node's."""
        if len(self.starts) < MAX_CLAIMS:
            self.starts.append(
                (str(run_id)[:MAX_TEXT], int(attempt), str(node_id)[:MAX_TEXT], time.time())
            )

    def take_starts(self) -> list[tuple[str, int, str, float]]:
        taken, self.starts = self.starts, []
        return taken

    def add(self, run_id: str, message: bytes) -> None:
        if self.counts.get(run_id, 0) < MAX_CLAIMS:
            self.counts[run_id] = self.counts.get(run_id, 0) + 1
            self.waiting.append((run_id, message))

    def take(self) -> list[tuple[str, bytes]]:
        taken, self.waiting = self.waiting, []
        return taken


@dataclass(frozen=True)
class Arrival:
    verdict: str  # the spec's verdict: see `decide`
    node_finding: str | None


def decide(judged: str | None, claimed: Sequence[str | None], why: str | None = None) -> Arrival:
    """The spec's verdict from what was judged here (None: nothing could be, and `why`) and what
    its node claimed (its verdict as sent, as recorded in its report). A breach on either side
    stands: the node gains nothing by lying toward breach. Otherwise the verdict judged here,
    when every claim agrees with it; anything else is `error`, with a finding that says why."""
    said = ", recorded ".join(display(str(c)) for c in claimed)
    if judged is None:
        because = why or "nothing could be judged here"
        if BREACH in claimed:
            return Arrival(
                BREACH, f"{because}; the node's verdict, breach, stands (not judged here)"
            )
        return Arrival("error", f"{because}; the node's verdict ({said}) cannot be checked here")
    if all(c == judged for c in claimed):
        return Arrival(judged, None)
    differs = f"the node's verdict ({said}) differs from the verdict judged here ({judged})"
    if BREACH in (judged, *claimed):
        return Arrival(
            BREACH, differs + ("" if judged == BREACH else "; a breach claimed by a node stands")
        )
    return Arrival("error", differs)


def with_claims(verdict: str, finding: str | None, claims: Sequence[dict[str, Any]]) -> Arrival:
    """A spec's verdict once the breaches its nodes claimed attempt by attempt are counted: never
    milder than breach when there is one, whatever a later attempt (on another node) found."""
    if not claims or verdict == BREACH:
        return Arrival(verdict, finding)
    first = claims[0]
    claimed = (
        f"attempt {first['attempt']} was judged breach by its node {str(first['node'])[:12]}, and"
        " that breach stands"
    )
    return Arrival(BREACH, f"{finding}; {claimed}" if finding else claimed)


def spec_digest(spec: spec_mod.Spec) -> str:
    return sha256_hex(canonical(spec.to_json()))


def outside_effects(spec: spec_mod.Spec) -> list[str]:
    """What of `spec` a retry on another node could repeat: why cluster mode runs it here, on the
    caller."""
    why = [f"live database {db.name}" for db in spec.databases if db.mode == "live"]
    if spec.egress is not None and spec.egress.allow:
        why.append("an HTTP upstream (egress.allow)")
    if spec.promote is not None:
        why.append(f"a promote target ({spec.promote.target}, a folder on the node)")
    return why


def refuse_outside_effects(specs: tuple[spec_mod.Spec, ...]) -> None:
    """Raise a `SpecError` naming each spec whose effects a retry on another node could repeat."""
    problems = [
        f"{s.path}: {', '.join(why)}: in cluster mode a spec is retried on another node when its"
        " node is lost, and the idempotency store that keeps an effect from repeating stays with"
        " the lost node"
        for s in specs
        if (why := outside_effects(s))
    ]
    if problems:
        raise SpecError(
            problems,
            fix="run these specs locally (without --cluster), or leave them out of the suite",
        )


def _budget_seconds(spec: spec_mod.Spec) -> float:
    return spec.limits.wall_seconds * spec.max_attempts * len(spec.tasks) + GRACE_SECONDS


def overdue(in_flight: Mapping[Any, tuple[Any, ...]], now: float) -> Any | None:
    """Of the tasks in flight (ref -> (spec index, monotonic deadline, ...)), the one whose deadline
    passed first, to be cancelled as hung; None while every task is within its spec's budget."""
    ref = min(in_flight, key=lambda r: in_flight[r][1])
    return ref if in_flight[ref][1] <= now else None


LOSS_CAUSES = {
    "node": "lost with their node",
    "hung": "cancelled as hung",
    "caller": "stopped with the caller",
}  # cause -> how a line says it


def record_loss(
    entry: dict[str, Any], node: str | None, error: str, cause: str = "node"
) -> str | None:
    """Count a lost submission in its spec's suite-run entry (`cause`: see `LOSS_CAUSES`): the
    attempt it ran is lost and the next submission runs the one after. None when the spec may be
    submitted again; otherwise why its verdict is `error` (lost `MAX_LOST` times)."""
    attempt = entry.get("next_attempt", 1)
    entry["lost"] = [
        *entry.get("lost", []),
        {"node": node, "attempt": attempt, "error": error, "cause": cause, "at": utc_now()},
    ]
    entry["next_attempt"] = attempt + 1
    return (
        f"lost with its node {len(entry['lost'])} times" if len(entry["lost"]) >= MAX_LOST else None
    )


def losses(lost: Sequence[dict[str, Any]]) -> str:
    """A spec's lost submissions in words, by cause: "1 lost with their node, 1 stopped with the
    caller"."""
    counts: dict[str, int] = {}
    for loss in lost:
        cause = summary.loss_cause(loss)
        counts[cause] = counts.get(cause, 0) + 1
    return ", ".join(f"{n} {LOSS_CAUSES.get(cause, cause)}" for cause, n in counts.items())


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


def claim(claims: Any, run_id: str, message: NodeMessage, say: Callable[[str], None]) -> None:
    """Claim an attempt's breach with the caller, and wait until it holds it. A claim that fails
    (timed out, the caller's actor gone) is logged, never raised: the run goes on, and its final
    message carries the breach all the same (an exception here would end the run as `error`)."""
    import ray

    try:
        ray.get(claims.add.remote(run_id, message.encode()), timeout=60)
    except Exception as exc:
        say(
            f"attempt {message.attempt}'s breach could not be claimed with the caller"
            f" ({type(exc).__name__}: {display(str(exc))[:500]}); the run goes on and its final"
            " message carries it"
        )


def run_on_node(
    spec_path: str, digest: str, run_id: str, first_attempt: int, claims: Any
) -> tuple[bytes, bytes]:
    """A Ray task (two returns): drive one spec on this node's engine in a scratch folder; return
    its message (`NodeMessage`) and its run directory (empty when it is past a bound: the
    message says why)."""
    import ray

    from assure.run.driver import Driver
    from assure.sandbox import install

    class NodeDriver(Driver):
        def _escalate(self, record: Any) -> None:
            super()._escalate(record)
            if (
                record.judgement.verdict is Verdict.BREACH
            ):  # claimed before the next attempt starts, or the task ends
                findings = tuple(f.to_json() for f in record.judgement.findings)
                claim(
                    claims,
                    run_id,
                    NodeMessage(node_id, BREACH, findings, attempt=record.number),
                    say,
                )

    node_id = ray.get_runtime_context().get_node_id()
    ray.get(
        claims.start.remote(run_id, first_attempt, node_id), timeout=60
    )  # its deadline counts from here, not from its submission
    spec = spec_mod.load(spec_path)
    if spec_digest(spec) != digest:
        raise AssureError(
            "the spec on this node differs from the caller's",
            where=f"{node_id}: {spec_path}",
            fix="deploy the same suite and spec files, at the same paths, to every node",
        )
    say = lambda message: print(f"assure node {node_id}: {message}", file=sys.stderr, flush=True)  # noqa: E731  (in the node's Ray worker log)
    backend, images = node_engine(say)
    install.ensure(spec, backend, images, say)  # and the spec's derived image, by the same digest
    alive, held = (
        os.pipe()
    )  # `held` (not inherited) is open while this worker lives: its end is the watchdog's sign
    subprocess.run(
        [
            sys.executable,
            "-m",
            "assure.ops.watchdog",
            str(alive),
            str(os.getpid()),
            str(_budget_seconds(spec)),
        ],
        pass_fds=(alive,),
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    os.close(alive)
    with contextlib.ExitStack() as stack:

        def release_watchdog() -> None:  # this task ended as it should: its watchdog goes
            os.write(held, b".")
            os.close(held)

        stack.callback(release_watchdog)
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix=SCRATCH))
        stack.enter_context(store.exclusive(Path(scratch), "node task"))
        run = store.RunDir.create(Path(scratch), run_id, spec.path, spec.to_json())
        result = NodeDriver(
            spec, run, backend, images, lambda phase, info: None, first_attempt=first_attempt
        ).drive()
        findings = tuple(f.to_json() for a in result.view.attempts for f in a.findings)
        try:
            archive, unsent = pack(run.path), None
        except AssureError as exc:  # past a bound: the verdict goes without it
            archive, unsent = b"", exc.message
        return NodeMessage(node_id, result.verdict, findings, unsent=unsent).encode(), archive


_ENGINE: list[tuple[Any, Any]] = []  # this Ray worker's engine client and images, once found


def node_engine(say: Callable[[str], None]) -> tuple[Any, Any]:
    """This node's engine client and images (built here on first use, from the same recipe: the
    same tags), found once per Ray worker: a worker serves one driver, so once per suite run on
    each worker, as a local suite finds them once per run."""
    if not _ENGINE:
        from assure.sandbox import registry
        from assure.sandbox.docker.images import Images

        backend = registry.create()
        finder = Images(backend, say)
        _ENGINE.append((backend, finder.resolve() or finder.ensure()))
    return _ENGINE[0]


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
        if not (
            stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and stat.S_ISREG(lock.st_mode)
        ):
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
    return (len(parts) > 1 and parts[0] == base) or (
        len(parts) > 3 and parts[0] == ATTEMPTS and parts[2] == workspace
    )


def pack(run_dir: Path) -> bytes:
    """The run directory as an uncompressed tar: files, folders, and the agent's links where its
    tree is kept (each as a link, never followed), bounded."""
    buf, total, members = io.BytesIO(), 0, 0
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for root, dirs, files in os.walk(run_dir):  # os.walk never descends into a link
            dirs.sort()
            for name in sorted(dirs + files):
                path = Path(root) / name
                # a file with other links is sent whole, never as a hard link; `inodes` is
                # TarFile's own table of them, not in its stubs: no public switch turns it off
                tar.inodes.clear()  # type: ignore[attr-defined]
                info = tar.gettarinfo(path, arcname=str(path.relative_to(run_dir)))
                if not (
                    info.isfile() or info.isdir() or (info.issym() and _agents_tree(info.name))
                ):
                    raise AssureError(
                        f"{display(info.name)} in the run directory is neither a file nor a folder",
                        where=str(run_dir),
                    )
                members += 1
                if members > MAX_MEMBERS:
                    raise AssureError(
                        f"the run directory has more than {MAX_MEMBERS} members (at"
                        f" {display(info.name)})",
                        where=str(run_dir),
                    )
                total += info.size
                if total > MAX_ARCHIVE_BYTES:
                    raise AssureError(
                        f"the run directory is larger than {MAX_ARCHIVE_BYTES >> 20} MiB "
                        f"(at {display(info.name)}, {info.size} bytes)",
                        where=str(run_dir),
                    )
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
        raise ArrivalError(
            f"{display(member.name)}: only files, folders and the agent's links may arrive, not a"
            " hard link or special file"
        )
    return tarfile.data_filter(member, dest).replace(mode=member.mode & 0o777, deep=False)


def _checked(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """Every member, read header by header: refused at the first one past a bound or out of
    place."""
    members, size = [], 0
    for m in tar:
        members.append(m)
        size += m.size
        if len(members) > MAX_MEMBERS:
            raise ArrivalError(f"more than {MAX_MEMBERS} members")
        if size > MAX_ARCHIVE_BYTES:
            raise ArrivalError(f"more than {MAX_ARCHIVE_BYTES} bytes of files")
        if m.name.startswith("/") or any(
            part in ("", ".", "..") for part in PurePosixPath(m.name).parts
        ):
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
            raise ArrivalError(
                f"it has no {paths.state.name} or {paths.spec_json.name}: not a run directory"
            )
        os.rename(staging, final)
    except (tarfile.TarError, OSError) as exc:
        raise ArrivalError(f"the archive cannot be unpacked: {display(str(exc))}") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return store.RunDir.open(final)


def settle(
    run: store.RunDir,
    spec: spec_mod.Spec,
    node_verdict: str | None,  # None: the node sent none
    key: Path | None,
    claims: Sequence[dict[str, Any]] = (),
) -> Arrival:
    """Judge the arrived run again, against the caller's spec, from its folder alone; keep the
    node's report beside the one judged here; compare; sign the receipts here. When the spec's
    verdict is not the one judged here (a breach its node claimed, `claims`, a verdict that
    differs), every receipt is issued rejected: no run directory vouches for what its spec's
    verdict denies."""
    from assure.records.attempt_record import Records
    from assure.run.driver import issue_receipts, rejudge

    ran = spec_mod.Spec.from_json(store.read_json(run.paths.spec_json))
    if spec_digest(ran) != spec_digest(spec):
        return decide(
            None,
            [node_verdict],
            "the run directory it sent is of another spec than the one it was given",
        )
    if (
        run.paths.report.is_file() and not run.paths.node_report.is_file()
    ):  # once: a settle cut short is done again
        os.replace(run.paths.report, run.paths.node_report)
    recorded = (
        store.read_json(run.paths.node_report).get("verdict")
        if run.paths.node_report.is_file()
        else None
    )
    recomputed, judged = rejudge(run.path, spec)
    store.write_json(run.paths.report, recomputed.view.to_json())
    records = Records(run.paths)
    for record in judged.values():
        records.keep(record)
    arrival = decide(recomputed.verdict, [node_verdict, recorded])
    standing = with_claims(arrival.verdict, arrival.node_finding, claims)
    overruled = (
        f"the spec's verdict is {standing.verdict}: {standing.node_finding}"[:MAX_TEXT]
        if standing.verdict != recomputed.verdict
        else None
    )
    issue_receipts(
        run, spec, store.read_json(run.paths.state), key, records, judged, overruled=overruled
    )
    return arrival


# --- the caller -----------------------------------------------------------------------------------

_JOIN_FIX = (
    "give --cluster the head's address as `ray start --head` printed it (host:port, port 6379 by"
    " default), or start the head there"
)


def probe(address: str, timeout: float = PROBE_SECONDS) -> None:
    """Fail fast, with the address, unless a Ray GCS answers at `address` (host:port) the first
    call Ray's client makes (`gcs_probe`): Ray itself would retry a wrong address for minutes.
    `auto` is left to Ray's discovery."""
    if address == "auto":
        return
    host, _, port = address.rpartition(":")
    if not (host and port.isdigit()):
        raise AssureError(
            f"--cluster {display(address)} is not host:port", where="--cluster", fix=_JOIN_FIX
        )
    authorization = ray_authorization()
    try:
        gcs_probe.check(host.strip("[]"), int(port), timeout, authorization)
    except gcs_probe.StatusOnly as exc:
        said = (
            "refused this caller's Ray token"
            if authorization
            else "wants a Ray token (a head started with RAY_AUTH_MODE=token), and this caller has"
            " none"
        )
        raise AssureError(
            f"what answers at {display(address)} {said}, or is not a Ray GCS: {exc}",
            where="--cluster",
            fix="give the caller the head's token as Ray reads it (RAY_AUTH_MODE=token and"
            " RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token); or " + _JOIN_FIX,
        ) from None
    except gcs_probe.NotGcs as exc:
        raise AssureError(
            f"what answers at {display(address)} is not a Ray GCS (a head's address): {exc}",
            where="--cluster",
            fix=_JOIN_FIX,
        ) from None
    except OSError as exc:
        raise AssureError(
            f"nothing answers at the Ray cluster address {display(address)}: {display(str(exc))}",
            where="--cluster",
            fix=_JOIN_FIX,
        ) from None


def ray_authorization() -> str | None:
    """The `authorization` header Ray's own client sends with token authentication (its token
    found where Ray finds it), None without: the probe's call carries it, as Ray's join would."""
    try:
        from ray import _raylet
    except ImportError:  # no Ray
        return None
    loader = getattr(_raylet, "AuthenticationTokenLoader", None)  # a Ray without token auth
    if loader is None:
        return None
    header = loader.instance().get_token_for_http_header().get("authorization")
    return str(header) if header is not None else None


def connect(address: str) -> Any:
    """Join an existing cluster (`auto`: Ray's own discovery), within `JOIN_SECONDS`. On a
    loopback address the caller binds to loopback too, so that nothing of a local cluster
    leaves 127.0.0.1. Joined once per process: a second call returns the same."""
    try:
        import ray
    except ImportError:
        raise AssureError("Ray is not installed", fix="pip install 'assure[ray]'") from None
    if ray.is_initialized():
        return ray
    probe(address)
    extra: dict[str, Any] = (
        {"_node_ip_address": "127.0.0.1"} if loopback(address, os.environ) else {}
    )
    from ray._private import worker as ray_worker

    # Ray prints the cluster's errors ("A worker died ...") on stdout, whatever log_to_driver says
    to_stdout = ray_worker.print_to_stdstream
    ray_worker.print_to_stdstream = lambda data, ignore_prefix: to_stdout(
        {**data, "is_err": True}, ignore_prefix
    )  # stderr: stdout is --json's
    failed: list[BaseException] = []

    def join() -> None:
        try:
            ray.init(
                address=address,
                logging_level=logging.WARNING,
                log_to_driver=False,
                configure_logging=False,
                **extra,
            )
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)

    joining = threading.Thread(target=join, name="assure-ray-join", daemon=True)
    with _without_noise():
        joining.start()
        joining.join(JOIN_SECONDS)
    if joining.is_alive():
        raise AssureError(
            f"cannot join the Ray cluster at {display(address)}: no answer within {JOIN_SECONDS} s",
            where="--cluster",
            fix=_JOIN_FIX,
        )
    if failed:
        raise AssureError(
            f"cannot join the Ray cluster at {display(address)}: {display(str(failed[0]))}",
            where="--cluster",
            fix=_JOIN_FIX,
        ) from None
    # ray.cluster_resources carries no annotations
    if not ray.cluster_resources().get(RESOURCE):  # type: ignore[no-untyped-call]
        raise AssureError(
            f"no node of the cluster at {address} advertises the {RESOURCE!s} resource",
            fix=f"""start the nodes that have Docker and the images with `ray start ... --resources '{{"{RESOURCE}": 1}}'`""",  # noqa: E501 -- an f-string's expression (splittable only from Python 3.12)
        )
    return ray


def leave() -> None:
    """Leave the cluster once a command is done with it. Ray's own shutdown at interpreter exit
    first sleeps 0.5 s so that its workers' logs finish printing, which a caller never prints
    (`log_to_driver=False`); called here, the same shutdown skips that wait."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


NOISE = (
    b"SIGTERM handler is not set",  # it is joined from a thread on purpose (JOIN_SECONDS)
    b"Failed to determine local IP via external connectivity",
)  # its C++ probe of 8.8.8.8, before its log level is read


@contextlib.contextmanager
def _without_noise(limit: int = 1 << 20) -> Iterator[None]:
    """What Ray prints on stderr while it joins, less its known noise: its C++ core writes to
    the file descriptor, before any log level of ours applies, so fd 2 goes to a file meanwhile
    (the caller's thread waits; it prints nothing) and the rest is printed after."""
    with tempfile.TemporaryFile() as held:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [
                line
                for line in held.read(limit).splitlines(keepends=True)
                if not any(n in line for n in NOISE)
            ]
            os.write(2, b"".join(kept))


@dataclass(frozen=True)
class Capacity:
    """What one node of the cluster offers a spec's task."""

    node_id: str
    cpus: float
    memory: int  # bytes
    docker: float

    def holds(self, spec: spec_mod.Spec) -> bool:
        return (
            self.docker >= 1
            and self.cpus >= spec.limits.cpus
            and self.memory >= spec.limits.memory_bytes
        )

    def __str__(self) -> str:
        return (
            f"node {self.node_id[:12]}: {self.cpus:g} CPU, {self.memory / 2**30:.2f} GiB memory,"
            f" {self.docker:g} {RESOURCE}"
        )


def capacities(nodes: Iterable[dict[str, Any]]) -> list[Capacity]:
    """Every live node's total resources (Ray's `ray.nodes()`), the largest first."""
    found = [
        Capacity(
            str(n["NodeID"]),
            float(n["Resources"].get("CPU", 0)),
            int(n["Resources"].get("memory", 0)),
            float(n["Resources"].get(RESOURCE, 0)),
        )
        for n in nodes
        if n.get("Alive")
    ]
    return sorted(found, key=lambda c: (c.docker >= 1, c.cpus, c.memory), reverse=True)


def refuse_infeasible(specs: Iterable[spec_mod.Spec], nodes: Sequence[Capacity]) -> None:
    """Raise a `SpecError` naming each spec no node can hold (its CPUs, its memory and one
    `docker`), and the largest node: Ray would queue its task for ever, and say so only in a log."""
    largest = nodes[0] if nodes else None
    problems = [
        f"{s.path}: limits.cpus {s.limits.cpus:g} and limits.memory {s.limits.memory} with 1"
        f" {RESOURCE}: no node of the cluster holds it (the largest: {largest or 'none'})"
        for s in specs
        if not any(n.holds(s) for n in nodes)
    ]
    if problems:
        raise SpecError(
            problems,
            fix=(
                "lower the spec's limits, or add a node that has them (`ray start --num-cpus N"
                " --memory BYTES`)"
            ),
        )


def join(address: str, specs: Sequence[spec_mod.Spec]) -> Any:
    """Everything a suite needs of the cluster, checked before any suite run is written: the
    cluster joined, and a node that can hold each spec it will run (those with effects outside
    the sandbox run here, on the caller: `outside_effects`)."""
    ray = connect(address)
    refuse_infeasible([s for s in specs if not outside_effects(s)], capacities(ray.nodes()))
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
    return tuple(
        getattr(ex, name)
        for name in (
            "NodeDiedError",
            "WorkerCrashedError",
            "ObjectLostError",
            "OwnerDiedError",
            "ObjectFetchTimedOutError",
            "RaySystemError",
        )
        if hasattr(ex, name)
    )


def record_claims(entries: list[dict[str, Any]], taken: Iterable[tuple[str, Any]]) -> None:
    """Keep, in the suite-run entry of the run they name, the breach claims the nodes made (a
    claim of anything but a breach, of a run not of this suite, or past `MAX_CLAIMS`, or that is
    no message, is left out: only a breach may raise a verdict)."""
    by_run = {e["run_id"]: e for e in entries if e.get("run_id") and e.get("verdict") is None}
    for run_id, data in taken:
        entry = by_run.get(run_id) if isinstance(run_id, str) else None
        if entry is None or len(entry.get("claims", [])) >= MAX_CLAIMS:
            continue
        try:
            message = NodeMessage.decode(data)
        except ArrivalError:
            continue
        if message.verdict == BREACH and message.attempt is not None:
            entry.setdefault("claims", []).append(
                {
                    "attempt": message.attempt,
                    "node": message.node_id,
                    "findings": list(message.findings),
                    "at": utc_now(),
                }
            )


def drive_suite(
    record: SuiteRun,
    runs_dir: Path,
    address: str,
    jobs: int | None,
    key: Path | None,
    finished: Callable[[int, spec_mod.Spec, Outcome, dict[str, Any]], None],
    run_here: Callable[[spec_mod.Spec, store.RunDir], str] | None = None,
    progress: Callable[[int, str], None] | None = None,
) -> list[Outcome]:
    """Run every spec of the suite run that has no verdict yet on the cluster, at most `jobs` at
    a time (default: as many as the cluster's `docker` resource allows). The specs with effects
    outside the sandbox run here beside them, one at a time, through `run_here` (the local
    suite's driver); without it they are refused. `progress` hears each spec queued, and started
    on its node.
    """
    suite = record.suite
    here_only = {i for i, s in enumerate(suite.specs) if outside_effects(s)}
    if run_here is None:
        refuse_outside_effects(tuple(suite.specs[i] for i in sorted(here_only)))
    ray = join(address, suite.specs)
    lost_errors = _lost_errors(ray)
    remote = ray.remote(run_on_node)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    on_caller = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    claims = ray.remote(Claims).options(num_cpus=0, scheduling_strategy=on_caller).remote()
    cap = jobs or max(1, int(ray.cluster_resources()[RESOURCE]))
    runs_dir.mkdir(parents=True, exist_ok=True)
    entries = record.state["runs"]
    in_flight: dict[
        Any, tuple[int, float, Any]
    ] = {}  # message ref -> (spec index, monotonic deadline, run directory ref)
    submitted: dict[
        int, float
    ] = {}  # spec index -> when its task was submitted, until its node starts it

    def take_claims() -> None:
        taken, starts = ray.get([claims.take.remote(), claims.take_starts.remote()], timeout=120)
        if taken:
            record_claims(entries, taken)
        by_run = {
            (e["run_id"], e.get("next_attempt")): i
            for i, e in enumerate(entries)
            if i in submitted and e["verdict"] is None
        }
        for run_id, attempt, node, at in starts:
            if (i := by_run.get((run_id, attempt))) is None:
                continue  # a submission lost since, or not of this suite
            entries[i]["queued_seconds"] = round(max(0.0, at - submitted.pop(i)), 1)
            entries[i].update(
                node=node,
                node_address=address_of(node),
                node_started_at=time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at))
                + f".{int(at % 1 * 1e6):06d}Z",  # as utc_now writes it, by the caller's clock
            )
            for ref, (n, _, bulk) in list(in_flight.items()):
                if n == i:  # its deadline from its start on the node
                    in_flight[ref] = (
                        i,
                        time.monotonic()
                        - max(0.0, time.time() - at)
                        + _budget_seconds(suite.specs[i]),
                        bulk,
                    )
            if progress is not None:
                progress(i, f"on {node[:12]}, queued {entries[i]['queued_seconds']:g} s")
        if taken or starts:
            record.save()

    addresses: dict[str, str] = {}

    def address_of(node: str) -> str | None:
        """A node's address as Ray knows it (asked again only for a node not seen yet)."""
        if node not in addresses:
            addresses.update(
                {str(n["NodeID"]): str(n.get("NodeManagerAddress")) for n in ray.nodes()}
            )
        return addresses.get(node)

    def submit(i: int) -> None:
        spec, entry = suite.specs[i], entries[i]
        if entry["run_id"] is None:
            entry["run_id"] = store.new_run_id(spec.name)
        entry["started_at"] = entry.get("started_at") or utc_now()  # kept across a resubmission
        entry.setdefault("next_attempt", 1)
        entry.setdefault("lost", [])
        # write-ahead: a caller killed from here on continues this spec one attempt on
        record.save()
        opts = {
            "resources": {RESOURCE: 1},
            "num_cpus": spec.limits.cpus,
            "memory": spec.limits.memory_bytes,
            "max_retries": 0,
            "num_returns": 2,
        }
        submitted[i] = time.time()
        message, bulk = remote.options(**opts).remote(
            str(spec.path), spec_digest(spec), entry["run_id"], entry["next_attempt"], claims
        )
        in_flight[message] = (
            i,
            QUEUED,
            bulk,
        )  # no deadline until its node starts it: time in Ray's queue is not the spec's
        if progress is not None:
            progress(i, "queued")

    def conclude(i: int, verdict: str, **fields: Any) -> None:
        """Every verdict goes through here: the breaches the spec's nodes claimed count first."""
        take_claims()
        claimed = entries[i].get("claims", [])
        arrival = with_claims(verdict, fields.pop("node_finding", None), claimed)
        if arrival.verdict != verdict:  # raised by a claim: the findings it carried are the spec's
            fields["node_findings"] = [f for c in claimed for f in c["findings"]][
                :MAX_MESSAGE_FINDINGS
            ]
        entries[i].update(
            verdict=arrival.verdict,
            finished_at=utc_now(),
            **fields,
            **({"node_finding": arrival.node_finding} if arrival.node_finding else {}),
        )
        record.save()
        write_placement(runs_dir, entries[i])
        outcome = Outcome(
            suite.specs[i].name, entries[i]["run_id"], arrival.verdict, suite.specs[i].expect
        )
        finished(i, suite.specs[i], outcome, entries[i])

    def lose(i: int, node: str | None, error: str, cause: str = "node") -> bool:
        """Count a lost submission; True when the spec may be submitted again."""
        take_claims()
        given_up = record_loss(entries[i], node, error, cause)
        if given_up:
            conclude(i, "error", reason=given_up)
            return False
        record.save()
        return True

    def stopped() -> bool:
        return suite.stop_on_unexpected and any(
            e["verdict"] is not None and e["verdict"] != s.expect
            for e, s in zip(entries, suite.specs, strict=False)
        )

    def without_bulk(i: int, verdict: str | None, why: str) -> None:
        """The node's message arrived and its run directory did not (refused, never sent, lost): see
        `decide`."""
        arrival = decide(None, [verdict], why)
        conclude(i, arrival.verdict, node_finding=arrival.node_finding)

    here_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="suite-here")
    here_flight: dict[Future[str], int] = {}
    here_threads: dict[int, int] = {}  # spec index -> the thread driving it here

    def start_here(i: int) -> None:
        """A spec cluster mode cannot run: driven here (resumed, when it had started), its state
        kept by this thread."""
        spec, entry = suite.specs[i], entries[i]
        if entry["run_id"] is None:
            entry["run_id"] = store.RunDir.new(
                runs_dir, spec.name, spec.path, spec.to_json()
            ).run_id
        entry.update(
            started_at=entry.get("started_at") or utc_now(),
            where="here",
            here_because=outside_effects(spec),
        )
        record.save()  # before the run starts: a caller killed from here on resumes this run
        if progress is not None:
            progress(i, "here")
        here_flight[
            here_pool.submit(here, i, spec, store.RunDir.open(runs_dir / entry["run_id"]))
        ] = i

    def here(i: int, spec: spec_mod.Spec, run: store.RunDir) -> str:
        here_threads[i] = threading.get_ident()
        assert run_here is not None  # a spec runs here only with one: refused above otherwise
        try:
            return run_here(spec, run)
        finally:
            here_threads.pop(i, None)

    def take_here() -> None:
        for future in [f for f in here_flight if f.done()]:
            i = here_flight.pop(future)
            try:
                verdict = future.result()
            except AssureError as exc:
                conclude(i, "error", reason=describe(exc))
            else:
                conclude(i, verdict)

    # not waited for here: the actor starts while the first tasks do (each task's first call
    # on it waits until it is up), about half a second of a suite's start (issue 26 item 7)
    with store.exclusive(record.path, "suite run"), here_pool:
        waiting, here_waiting = [], []
        for i, entry in enumerate(entries):
            if entry["verdict"] is not None:
                continue
            if i in here_only:
                here_waiting.append(i)
                continue
            if entry["run_id"] is not None:
                for stale in runs_dir.glob(
                    f"{ARRIVING}{entry['run_id']}-*"
                ):  # an unpack the caller's death cut short
                    shutil.rmtree(stale, ignore_errors=True)
                if (runs_dir / entry["run_id"]).is_dir():
                    _settle_arrived(
                        i, entry, suite.specs[i], runs_dir, key, conclude
                    )  # arrived before the caller died
                    continue
                if (
                    entry.get("node_verdict") == BREACH
                ):  # its message came, and the caller died before the run directory did
                    without_bulk(i, BREACH, "the caller stopped before its run directory arrived")
                    continue
                if not lose(
                    i, None, "the caller stopped", "caller"
                ):  # in flight when the caller died: Ray ended it with its driver
                    continue
            waiting.append(i)
        try:
            stop = False

            def fill() -> None:
                """Give every free slot the next waiting spec."""
                while waiting and not stop and len(in_flight) < cap:
                    submit(waiting.pop(0))

            while ((waiting or here_waiting) and not stop) or in_flight or here_flight:
                take_here()
                if here_waiting and not stop and not here_flight:
                    start_here(here_waiting.pop(0))
                fill()
                if not in_flight:
                    time.sleep(HERE_POLL_SECONDS if here_flight else 0)
                    stop = stopped()
                    continue
                timeout = max(
                    0.0, min(deadline for _, deadline, _ in in_flight.values()) - time.monotonic()
                )
                ready, _ = ray.wait(
                    list(in_flight),
                    num_returns=1,
                    timeout=min(timeout, HERE_POLL_SECONDS if here_flight else CLAIMS_POLL_SECONDS),
                )
                if not ready:
                    take_claims()  # written ahead: a caller killed later keeps them
                    ref = overdue(in_flight, time.monotonic())
                    if ref is None:  # every task within its spec's budget
                        continue
                    i, _, _ = in_flight.pop(
                        ref
                    )  # the nearest task outlived its spec's whole budget: a hung node
                    ray.cancel(ref, force=True)
                    if lose(
                        i, None, f"cancelled after {_budget_seconds(suite.specs[i]):.0f} s", "hung"
                    ):
                        waiting.insert(0, i)
                    continue
                (ref,) = ready
                i, _, bulk = in_flight.pop(ref)
                if not suite.stop_on_unexpected:  # its slot takes the next spec now: the node
                    fill()  # need not wait while the caller fetches and judges this one again
                entry, spec = entries[i], suite.specs[i]
                try:
                    data = ray.get(ref)
                except lost_errors as exc:
                    if lose(
                        i, lost_node(exc, (n["NodeID"] for n in ray.nodes())), type(exc).__name__
                    ):
                        waiting.insert(0, i)
                    continue
                except ray.exceptions.RayTaskError as exc:
                    cause = (
                        exc.cause if isinstance(getattr(exc, "cause", None), AssureError) else None
                    )
                    conclude(
                        i,
                        "error",
                        reason=describe(cause) if cause else f"{type(exc).__name__} on the node",
                    )
                except (
                    ray.exceptions.RayError
                ) as exc:  # out of memory, cancelled, a runtime env that failed: no retry
                    conclude(
                        i,
                        "error",
                        reason=f"{type(exc).__name__} on the node: {display(str(exc))}"[:2000],
                    )
                else:
                    try:
                        message = NodeMessage.decode(data)
                    except ArrivalError as exc:
                        conclude(
                            i,
                            "error",
                            node_finding=f"its message was refused on arrival: {exc.explain()}",
                        )
                        continue
                    entry.update(
                        node=message.node_id,
                        node_verdict=message.verdict,
                        node_findings=list(message.findings),
                    )
                    record.save()  # write-ahead: what the node said, before the arrival is judged
                    if message.unsent:
                        without_bulk(
                            i,
                            message.verdict,
                            f"its node did not send its run directory: {message.unsent}",
                        )
                        continue
                    try:
                        archive = ray.get(bulk, timeout=BULK_FETCH_SECONDS)
                    except (
                        ray.exceptions.RayError
                    ) as exc:  # the node's gone since it replied, the fetch timed out, ...
                        if message.verdict == BREACH:
                            without_bulk(
                                i,
                                BREACH,
                                f"its run directory was lost on the way ({type(exc).__name__})",
                            )
                        elif lose(
                            i,
                            lost_node(exc, (n["NodeID"] for n in ray.nodes())),
                            type(exc).__name__,
                        ):
                            waiting.insert(0, i)
                        continue
                    try:
                        unpack(archive, runs_dir, entry["run_id"])
                    except ArrivalError as exc:
                        without_bulk(
                            i,
                            message.verdict,
                            f"its run directory was refused on arrival: {exc.explain()}",
                        )
                    else:
                        take_claims()  # every claim made so far counts in its receipts
                        _settle_arrived(i, entry, spec, runs_dir, key, conclude)
                stop = stopped()
        except (
            BaseException
        ):  # Ctrl-C: the driver running a spec here gets it too, and cleans up as it would alone
            for tid in list(here_threads.values()):
                raise_in(tid, KeyboardInterrupt)
            raise
        record.finish()
    return [
        Outcome(s.name, e["run_id"], e["verdict"], s.expect)
        for s, e in zip(suite.specs, entries, strict=False)
        if e["verdict"] is not None
    ]


def write_placement(runs_dir: Path, entry: dict[str, Any]) -> None:
    """Where a spec ran and what of it was lost, into its run folder (when one arrived or ran
    here), written by the caller over anything of that name the node sent."""
    folder = runs_dir / str(entry.get("run_id"))
    placed = summary.placement(entry)
    if placed is not None and entry.get("run_id") and folder.is_dir():
        store.write_json(RunPaths(folder).placement, placed)


def _settle_arrived(
    i: int,
    entry: dict[str, Any],
    spec: spec_mod.Spec,
    runs_dir: Path,
    key: Path | None,
    conclude: Callable[..., None],
) -> None:
    """Judge an arrived run directory; anything it holds that cannot be judged is the node's doing:
    see `decide`."""
    try:
        arrival = settle(
            store.RunDir.open(runs_dir / entry["run_id"]),
            spec,
            entry.get("node_verdict"),
            key,
            entry.get("claims", []),
        )
    # node-shaped data (a state of the wrong shape, a missing file): never a crash of the caller
    except Exception as exc:
        arrival = decide(
            None,
            [entry.get("node_verdict")],
            f"its run directory cannot be judged here: {describe(exc)}",
        )
    conclude(
        i,
        arrival.verdict,
        **({"node_finding": arrival.node_finding} if arrival.node_finding else {}),
    )
