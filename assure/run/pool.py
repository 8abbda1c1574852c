"""A warm pool: gateway and agent pairs created, started and booted ahead of need, per shape.

Why: an attempt's start is two container creates and starts and the gateway's Python boot,
about half a second before the agent's first call (issue 14). A claimed pair has done all of it.

How a never-used pair becomes one attempt's, and only that one's:
- A pair is a folder laid out as an attempt's (`AttemptPaths`: its workspace filesystem mounted
  and empty, empty gateway state and config folders) with an empty control folder, run-state
  folder, agent-files folder and claim folder. Its containers were started on those folders:
  the gateway waits for its config (`assure.gateway --wait`, its socket bound and its
  idempotency store opened in the pair's own folders), the agent behind its gate for its claim
  (the stock image's after a warm-up of its client: `warm_up`), both blocked on a FIFO (`WAKE`,
  in the config and claim folders: an idle pair uses no CPU), with nothing of its own running.
  The pair is free only once both FIFOs have a reader (`has_reader`): a claim never waits
  behind a boot or a warm-up.
- A claim renames the control and run-state folders onto the run's own, which must still be
  empty (a fresh run's first attempt; a retry or a resumed run starts cold), then the pair's
  folder to `attempts/<n>`: the running containers keep the same directories under new names.
- The attempt then fills the workspace, copies the agent's files, writes the agent's command
  and environment into the claim folder, takes PRE, and writes the gateway's config last, each
  followed by its FIFO's wake-up (then the FIFOs are removed). Only then does the agent's gate
  exec its command, and the gateway open the journal and accept calls (the agent's first one
  waits in the socket's backlog meanwhile): the agent sees the workspace PRE describes, and its
  first call journals.
- A pair runs as a uid of its own (`uids.lease`), held from its boot until it is removed; a
  claimed pair's lease is its attempt's, released when the attempt ends.
- A pair is claimed once and removed with its attempt; a pair idle past `idle_seconds`, and
  every free pair on `close()` (exit, Ctrl-C), is removed; `assure gc` removes those of a pool
  whose process died (labels name it; its folder's lock is free).

Only specs whose containers are the same for every attempt of a shape are pooled: runc, the
stock agent image, no egress, no live database, no model credentials mounted. Any other starts
cold (`ineligible` says why).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

from assure.core import atomic
from assure.errors import AssureError, SandboxError
from assure.records import layout, store
from assure.records.layout import AttemptPaths
from assure.run import modelaccess, suite
from assure.sandbox import hardening, install, runtimes, uids, workspace_fs
from assure.sandbox.backend import (
    LABEL_HOST,
    LABEL_OWNER,
    LABEL_PID,
    LABEL_UID,
    OWNER,
    Mount,
    SandboxBackend,
)
from assure.sandbox.docker.images import ImageSet
from assure.spec import AGENT_IMAGE_ALIAS, Spec

log = logging.getLogger(__name__)

LABEL_POOL = "assure.pool"
CONTROL, RUN_STATE, AGENT_FILES, CLAIM = ".run-control", ".run-state", "agent-files", "agent-claim"
WAKE = (  # a FIFO in the claim and gateway config folders: the waiting gate and gateway block on it
    "wake"
)
WAIT_MARGIN_SECONDS = (
    60  # a pair's containers wait this much longer than its idle lifetime, then exit
)
REFILL_POLL_SECONDS = 0.5
# Pairs made at once: making one mostly waits on the engine (creates, starts, the gateway's
# boot), so on this 2-core machine 3 at once kept -j 2 fed where 1 left its attempts waiting.
REFILL_THREADS = max(1, min(4, (os.cpu_count() or 1) + 1))
CLAIM_WAIT_SECONDS = (
    2.0  # a claim waits this long for a pair being made for it, rather than start cold
)
# A pair is free once both its FIFOs have a reader: its gateway has booted and its agent has
# run its warm-up (`ContainerRequest.warm_up`), each now blocked on its FIFO; looked at this
# often, for at most this long (a pair not ready by then is removed, as a failed one).
READY_POLL_SECONDS = 0.005
READY_SECONDS = 60.0
# The stock agent image's warm-up: the client `assure-tool` runs, its sh, python3 and modules
# read once into the container's page cache. Another image's own code never runs before its
# claim: something it left running could change the workspace between its fill and PRE.
STOCK_WARM_UP = ("assure-tool", "--help")
MAX_FAILURES = 3  # pairs failed in a row: the pool stops refilling
DEFAULT_IDLE_SECONDS = 300.0
MAX_SIZE = 64  # free pairs per shape
CLOSE_WORKERS = (
    4  # free pairs removed side by side on close(): each removal mostly waits on the engine
)
MOUNTED_MODEL_MODES = (
    "anthropic",
    "openai",
    "replay",
)  # modelaccess.ModelAccess.mounts: a per-attempt gateway mount
# Variables bash sets, resets or keeps read-only itself. A claimed agent's environment is
# exported by its gate's bash (sandbox/docker/gate.py GATE_CLAIM), a cold one's imported by the
# same bash at its start, and bash treats these two ways differently: the agent would get
# another value (PWD, IFS, SECONDS...), or none, or not start at all (UID, EUID, PPID and
# SHELLOPTS are read-only: the export fails). A spec that sets one starts cold.
BASH_OWN = frozenset(
    {
        "DIRSTACK",
        "EPOCHREALTIME",
        "EPOCHSECONDS",
        "EUID",
        "FUNCNAME",
        "GROUPS",
        "HISTCMD",
        "IFS",
        "OLDPWD",
        "OPTERR",
        "OPTIND",
        "PIPESTATUS",
        "PPID",
        "PS1",
        "PWD",
        "RANDOM",
        "SECONDS",
        "SHELLOPTS",
        "SRANDOM",
        "UID",
    }
)


@dataclass(frozen=True)
class Settings:
    """`size` free pairs kept per shape; a pair idle longer than `idle_seconds` is replaced."""

    size: int
    idle_seconds: float = DEFAULT_IDLE_SECONDS

    def __post_init__(self) -> None:
        if not 0 <= self.size <= MAX_SIZE or not self.idle_seconds > 0:
            raise AssureError(
                f"a pool of {self.size} pairs idle at most {self.idle_seconds} s",
                where="pool",
                fix=f"give a size from 0 to {MAX_SIZE} and an idle lifetime above 0 seconds",
            )


@dataclass(frozen=True)
class Shape:
    """Everything a pair's containers and filesystem are made with; the rest arrives at claim."""

    user: str
    read_only_root: bool
    memory_bytes: int
    pids: int
    cpus: float
    tmpfs_bytes: int
    nofile: int
    disk_bytes: int
    inodes: int
    image: str  # the agent's image: assure's, or its derived image with the spec's agent.install

    @classmethod
    def of(cls, spec: Spec, images: ImageSet) -> Shape:
        s, lim = spec.sandbox, spec.limits
        return cls(
            s.user,
            s.read_only_root,
            lim.memory_bytes,
            lim.pids,
            lim.cpus,
            lim.tmpfs_bytes,
            lim.nofile,
            lim.disk_bytes,
            lim.inodes,
            install.agent_image(spec, images),
        )


def warm_up(shape: Shape, images: ImageSet) -> tuple[str, ...]:
    """The pair's agent warm-up (`STOCK_WARM_UP`): the stock image's only."""
    return STOCK_WARM_UP if shape.image == images.agent else ()


def ineligible(spec: Spec) -> str | None:
    """Why the spec's attempts cannot use a pooled pair (None: they can)."""
    if runtimes.socket_on_host(spec.sandbox.runtime):
        return f"runtime {spec.sandbox.runtime}"
    if spec.agent.image != AGENT_IMAGE_ALIAS:
        return f"agent image {spec.agent.image}"
    if modelaccess.egress(spec):
        return "egress"
    if any(db.mode == "live" for db in spec.databases):
        return "a live database"
    if spec.model is not None and spec.model.mode in MOUNTED_MODEL_MODES:
        return f"model mode {spec.model.mode} (its key or recording is mounted into the gateway)"
    if any(
        "\0" in part for part in [*spec.agent.command, *spec.agent.env, *spec.agent.env.values()]
    ):
        return "a NUL in the agent's command or environment"
    if own := sorted(
        name for name in spec.agent.env if name in BASH_OWN or name.startswith("BASH")
    ):
        return f"the agent's environment sets {own[0]}, which bash keeps itself"
    return None


@dataclass
class Pair:
    """A free pair: its folder (an attempt's layout) and what the engine made for it."""

    root: Path
    shape: Shape
    gateway: str
    agent: str
    volume: str
    created_at: float  # time.time()
    pool_id: str
    lease: uids.Lease  # the uid its containers run as: the claiming attempt's from the claim

    def describe(self) -> dict[str, object]:
        """What the attempt records (container.json `pool`): the verifier expects its mounts."""
        return {
            "pool": self.pool_id,
            "pair": self.root.name,
            "created_at": self.created_at,
            "workspace": str(workspace_fs.WorkspaceFs(self.root, 0, 0).workspace),
            "agent_files": str(self.root / AGENT_FILES),
            "gateway": self.gateway,
            "agent": self.agent,
            "volume": self.volume,
        }


def fresh(run: store.RunDir) -> bool:
    """Whether the run's control and run-state folders are still empty, as a pair's replace
    them: a fresh run's first attempt (a retry, a resumed run, a halt recorded: no)."""
    return not any(run.control_dir.iterdir()) and not any(run.state_dir.iterdir())


def take(pair: Pair, run: store.RunDir, attempt_root: Path) -> None:
    """Make the pair the attempt's: its control and run-state folders become the run's (each
    must still be an empty folder: rename refuses a full one), then its folder `attempt_root`.
    Raises OSError if a step is refused (a folder filled since `fresh`): nothing of the pair's
    is then in the attempt, and the run's folders are still empty ones."""
    os.rename(pair.root / CONTROL, run.control_dir)
    os.rename(pair.root / RUN_STATE, run.state_dir)
    if attempt_root.exists():
        raise FileExistsError(f"{attempt_root} exists")
    os.rename(pair.root, attempt_root)


def write_claim(folder: Path, command: Iterable[str], env: dict[str, str]) -> None:
    """The agent's command and environment for its gate (`ContainerRequest.claim`)."""
    atomic.write_bytes(
        folder / "env", _nul_separated(f"{k}={v}" for k, v in env.items()), sync=False
    )
    atomic.write_bytes(folder / "argv", _nul_separated(command), sync=False)


def wake(folder: Path) -> None:
    """Wake what waits on the folder's FIFO (the claim's gate, or the gateway; its file is in
    place), then remove the FIFO: the attempt's record holds regular files only. Nobody on it
    yet is fine: a waiter opens it before it looks for its file."""
    fifo = folder / WAKE
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # ENXIO: no reader yet; ENOENT: already woken
        pass
    else:
        try:
            os.write(fd, b"\n")
        except OSError:
            pass
        finally:
            os.close(fd)
    fifo.unlink(missing_ok=True)


def remove_wakes(root: Path) -> None:
    """A claimed pair's FIFOs, wherever the claim stopped (its attempt's cleanup, a resumed run's
    reap)."""
    for folder in (AttemptPaths(root).gateway_config, root / CLAIM):
        (folder / WAKE).unlink(missing_ok=True)


def has_reader(fifo: Path) -> bool:
    """Whether something holds the FIFO open to read (an open for writing that would not block
    succeeds): the waiter behind it is in place. Nothing is written: it is not woken. Anything
    but a FIFO (a regular file opens for writing at once) has none."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # ENXIO: no reader yet
        return False
    try:
        return stat.S_ISFIFO(os.fstat(fd).st_mode)
    finally:
        os.close(fd)


def _nul_separated(parts: Iterable[str]) -> bytes:
    return b"".join(part.encode() + b"\0" for part in parts)


class WarmPool:
    """Free pairs per shape, made by a few background threads; one pool per process.

    The pool makes no pair that no attempt will claim: `want` announces the claims to come,
    and a shape never has more free and in-the-making pairs than claims still to come (a pair
    made for nobody costs as much as an attempt on a busy machine, and more at the end)."""

    def __init__(
        self,
        backend: SandboxBackend,
        images: ImageSet,
        runs_dir: Path,
        settings: Settings,
        say: Callable[[str], None] = lambda _: None,
        makers: int = REFILL_THREADS,
    ):
        self.backend, self.images, self.settings, self.say = backend, images, settings, say
        self._stack = ExitStack()
        self.dir = store.new_dir(
            runs_dir.resolve() / layout.POOL, "pool"
        )  # the engine binds absolute paths
        self._stack.enter_context(
            store.exclusive(self.dir, "pool")
        )  # gc: a pool whose lock is free is an orphan
        self.pool_id = self.dir.name
        self.labels = {
            LABEL_OWNER: OWNER,
            LABEL_POOL: self.pool_id,
            LABEL_PID: str(os.getpid()),
            LABEL_HOST: socket.gethostname(),
            LABEL_UID: str(os.getuid()),
        }
        self._free: dict[Shape, list[Pair]] = {}
        self._making: dict[Shape, int] = {}
        self._to_come: dict[Shape, int] = {}  # claims announced by `want` and not yet asked for
        self._doomed: list[
            Pair
        ] = []  # given back by attempts: removed by a refill thread (the backend is the pool's)
        self._handed: list[
            Pair
        ] = []  # claimed: an attempt's once `take` moved its folder out of the pool's
        self._specs: dict[Shape, Spec] = {}
        self._made = self._failures = 0
        self._starts = {"hits": 0, "misses": 0, "cold_starts": 0}  # `stats`
        self._cv = threading.Condition()
        self._closed = self._gave_up = False
        self._threads = [
            threading.Thread(target=self._refill, name=f"assure-pool-{i}", daemon=True)
            for i in range(max(1, makers))
        ]
        for thread in self._threads:
            thread.start()

    # --- use ---------------------------------------------------------------------------
    def want(self, specs: Iterable[Spec]) -> None:
        """One claim to come for each of these specs (the eligible ones): pairs of their shapes
        are made from now on, never more than the claims still to come."""
        with self._cv:
            for spec in specs:
                if ineligible(spec) is None:
                    shape = Shape.of(spec, self.images)
                    self._specs.setdefault(shape, spec)
                    self._free.setdefault(shape, [])
                    self._making.setdefault(shape, 0)
                    self._to_come[shape] = self._to_come.get(shape, 0) + 1
            self._cv.notify_all()

    def claim(self, spec: Spec, wait: float = CLAIM_WAIT_SECONDS) -> Pair | None:
        """A never-used, booted pair for the spec, or None: ineligible, never wanted, or none
        free within `wait` seconds while one is being made for it (the attempt then starts
        cold). Each call uses up one claim announced by `want`."""
        if ineligible(spec) is not None:
            self.started_cold()
            return None
        shape = Shape.of(spec, self.images)
        deadline = time.monotonic() + wait
        with self._cv:
            if shape not in self._to_come:
                self._starts["cold_starts"] += 1
                return None
            self._to_come[shape] = max(0, self._to_come[shape] - 1)
            self._cv.notify_all()
            while True:
                free = [
                    p
                    for p in self._free[shape]
                    if time.time() - p.created_at < self.settings.idle_seconds
                ]
                if self._closed:
                    self._starts["cold_starts"] += 1
                    return None
                if free:  # an expired pair is a refill thread's to remove
                    pair = free[-1]  # the newest: the furthest from its idle lifetime
                    self._free[shape].remove(pair)
                    self._handed.append(pair)
                    self._starts["hits"] += 1
                    self._cv.notify_all()
                    return pair
                left = deadline - time.monotonic()
                if not self._making.get(shape) or self._gave_up or left <= 0:
                    self._starts["misses"] += 1
                    self._starts["cold_starts"] += 1
                    return None  # nothing on its way: waiting would only delay a cold start
                self._cv.wait(left)

    def started_cold(self) -> None:
        """An attempt the pool does not serve (a spec it cannot pool, a retry, a resumed run)
        started cold: counted in `stats`."""
        with self._cv:
            self._starts["cold_starts"] += 1

    def stats(self) -> dict[str, int]:
        """Attempts started on a pooled pair (hits), those the pool serves that found none in
        time (misses), and every attempt started cold (the misses included)."""
        with self._cv:
            return dict(self._starts)

    def give_back(self, pair: Pair) -> None:
        """A claimed pair the attempt could not take: removed, never claimed again."""
        with self._cv:
            self._handed.remove(pair)
            self._doomed.append(pair)
            self._starts["hits"] -= 1  # its attempt starts cold after all
            self._starts["cold_starts"] += 1
            self._cv.notify_all()

    def wait_full(self, timeout: float) -> bool:
        """Until every wanted shape has as many free pairs as it will get (`size`, or fewer
        claims to come): the benchmark's and the tests' warm start."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while any(len(self._free[s]) < self._target(s) for s in self._free):
                left = deadline - time.monotonic()
                if left <= 0 or self._closed or self._gave_up:
                    return False
                self._cv.wait(left)
        return True

    def close(self) -> None:
        """Stop refilling and remove every free pair and the pool's folder (claimed pairs are
        their attempts' to remove, once taken). Called once the attempts are over."""
        with self._cv:
            if self._closed:  # once is enough
                return
            self._closed = True
            self._cv.notify_all()
        for thread in self._threads:
            thread.join(timeout=120)
        # a claimed pair whose folder is still here never became an attempt's (Ctrl-C just after the
        # claim)
        with self._cv:
            pairs = (
                [p for free in self._free.values() for p in free]
                + self._doomed
                + [p for p in self._handed if p.root.exists()]
            )
            self._free.clear()
            self._doomed, self._handed = [], []
        # side by side, as an attempt's cleanup removes its containers: on exit, each is wall time
        if pairs:
            with ThreadPoolExecutor(max_workers=min(len(pairs), CLOSE_WORKERS)) as workers:
                list(workers.map(self.discard, pairs))
        _release_folders(
            self.backend, self.dir
        )  # a pair claimed by an attempt interrupted before it took the pair
        self._stack.close()

    # --- refill ------------------------------------------------------------------------
    def _target(self, shape: Shape) -> int:
        """Free pairs to keep for the shape: `size`, but never more than the claims to come."""
        return min(self.settings.size, self._to_come.get(shape, 0))

    def _refill(self) -> None:
        """Each refill thread makes one pair at a time, for the shape furthest below its target;
        idle pairs past their lifetime and pairs given back are removed first."""
        while True:
            with self._cv:
                if self._closed:
                    return
                expired, self._doomed = self._expired() + self._doomed, []
            for pair in expired:
                self.discard(pair)
            with self._cv:
                short = {
                    s: len(f) + self._making[s] - self._target(s) for s, f in self._free.items()
                }
                short = {s: gap for s, gap in short.items() if gap < 0}
                if not short:
                    self._cv.wait(REFILL_POLL_SECONDS)
                    continue
                shape = min(short, key=lambda s: short[s])
                spec = self._specs[shape]
                if not _room_for(
                    spec, also=sum(self._making.values())
                ):  # the attempts come first: wait for memory to be freed
                    self._cv.wait(REFILL_POLL_SECONDS)
                    continue
                self._making[shape] += 1
                self._made += 1
                number = self._made
            try:
                pair = self._make(spec, shape, number)
            except (
                Exception
            ) as exc:  # the engine may answer later: retried after a pause, a few times
                with self._cv:
                    self._making[shape] -= 1
                    self._failures += 1
                    give_up = self._failures >= MAX_FAILURES and not self._gave_up
                    self._gave_up = self._gave_up or give_up
                    self._cv.notify_all()
                self.say(
                    f"pool: cannot make a pair: {exc}"
                    + ("; no more tries: attempts start cold" if give_up else "")
                )
                with self._cv:
                    if self._gave_up:
                        return
                    self._cv.wait(REFILL_POLL_SECONDS * 4)
                continue
            with self._cv:
                self._making[shape] -= 1
                self._failures = 0
                keep = not self._closed
                if keep:
                    self._free[shape].append(pair)
                self._cv.notify_all()
            if not keep:
                self.discard(pair)

    def _expired(self) -> list[Pair]:
        """Take the pairs idle past their lifetime out of the free lists (the caller removes
        them)."""
        now, old = time.time(), []
        for free in self._free.values():
            old += [p for p in free if now - p.created_at >= self.settings.idle_seconds]
            free[:] = [p for p in free if p not in old]
        return old

    def _make(self, spec: Spec, shape: Shape, number: int) -> Pair:
        """Pair `number`: its folder, filesystem, socket volume and both containers, started;
        on any failure, whatever was made is removed."""
        root = self.dir / f"pair-{number}"
        paths = AttemptPaths(root)
        lease = uids.lease_for(spec)
        uid, gid = lease.ids
        made: dict[str, str] = {}
        fs = None
        try:
            root.mkdir()
            fs = workspace_fs.WorkspaceFs.create(root, size=shape.disk_bytes, inodes=shape.inodes)
            fs.workspace.mkdir()
            for folder in (
                paths.gateway_state,
                paths.gateway_config,
                root / CONTROL,
                root / RUN_STATE,
                root / AGENT_FILES,
                root / CLAIM,
            ):
                folder.mkdir()
            for folder in (fs.workspace, paths.gateway_state, root / RUN_STATE):
                hardening.chown_tree(folder, uid, gid)
            for folder in (
                paths.gateway_config,
                root / CLAIM,
            ):  # the containers' own: opened read-write to block on
                os.mkfifo(folder / WAKE, 0o600)
                os.chown(folder / WAKE, uid, gid)
            prefix = f"assure-{self.pool_id[-12:]}-{number}"
            made["volume"] = self.backend.create_volume(
                f"{prefix}-sock", self.labels, hardening.socket_volume_options(lease.ids)
            )
            mounts = hardening.Mounts(
                fs.workspace,
                made["volume"],
                paths.gateway_state,
                paths.gateway_config,
                root / AGENT_FILES,
                root / CONTROL,
                root / RUN_STATE,
            )
            wait = self.settings.idle_seconds + WAIT_MARGIN_SECONDS
            gateway = hardening.gateway_request(
                spec,
                image=self.images.gateway,
                name=f"{prefix}-gateway",
                mounts=mounts,
                labels=self.labels,
                user=lease.ids,
            )
            assert gateway.command is not None  # gateway_request always names its command
            # its socket and idempotency store opened before the claim, at the places the
            # attempt's config names (attempt.gateway_config): see assure/gateway/__main__
            store = f"{hardening.GATEWAY_RUN_STATE}/{layout.IDEMPOTENCY_DB}"
            gateway = replace(
                gateway,
                command=(
                    *gateway.command,
                    *("--wait", str(wait), "--listen", hardening.SOCKET_PATH, "--store", store),
                ),
            )
            made["gateway"] = self.backend.start_container(gateway)
            agent = hardening.agent_request(
                spec,
                image=shape.image,
                name=f"{prefix}-agent",
                mounts=mounts,
                labels=self.labels,
                env={},
                user=lease.ids,
                gate_seconds=wait,
            )
            agent = replace(
                agent,
                command=None,
                claim=hardening.AGENT_CLAIM,
                warm_up=warm_up(shape, self.images),
                env=hardening.agent_base_env(),
                mounts=(
                    *agent.mounts,
                    Mount(str(root / CLAIM), hardening.AGENT_CLAIM, read_only=True),
                ),
            )
            made["agent"] = self.backend.start_container(agent)
            _await_readers((paths.gateway_config / WAKE, root / CLAIM / WAKE), READY_SECONDS)
        except BaseException:
            for key in ("agent", "gateway"):
                if key in made:
                    _quietly(self.backend.remove_container, made[key])
            if "volume" in made:
                _quietly(self.backend.remove_volume, made["volume"])
            if fs is not None:
                fs.release()
            shutil.rmtree(root, ignore_errors=True)
            lease.release()
            raise
        return Pair(
            root,
            shape,
            made["gateway"],
            made["agent"],
            made["volume"],
            time.time(),
            self.pool_id,
            lease,
        )

    def discard(self, pair: Pair) -> None:
        """Remove a pair never claimed (or given back unused): containers, volume, filesystem,
        folder; then its uid goes back."""
        try:
            release(self.backend, pair.root, [pair.agent, pair.gateway], [pair.volume])
        finally:
            pair.lease.release()


def release(backend: SandboxBackend, root: Path, containers: list[str], volumes: list[str]) -> None:
    """Containers first (they hold the filesystem and the volume), then the filesystem, then
    the folder: never removed while something is mounted in it."""
    for cid in containers:
        _quietly(backend.remove_container, cid)
    for volume in volumes:
        _quietly(backend.remove_volume, volume)
    try:
        workspace_fs.WorkspaceFs(root, 0, 0).release()
    except AssureError as exc:
        log.warning("pool: %s", exc.message)
        return
    if not workspace_fs.mounted_under(root):
        shutil.rmtree(root, ignore_errors=True)


def _await_readers(fifos: Iterable[Path], seconds: float) -> None:
    """Until every FIFO has a reader (`has_reader`); a SandboxError after `seconds`."""
    waiting, deadline = list(fifos), time.monotonic() + seconds
    while waiting := [f for f in waiting if not has_reader(f)]:
        if time.monotonic() > deadline:
            raise SandboxError(
                f"a pooled pair was not ready after {seconds:g} s: nothing waits on {waiting[0]}",
                fix="see the pair's container logs; the pool retries",
            )
        time.sleep(READY_POLL_SECONDS)


def _room_for(spec: Spec, also: int = 0) -> bool:
    """Whether the memory available now holds one more pair at its limits (agent and gateway),
    as -j's default reckons a run's footprint, beside `also` more pairs being made."""
    return suite.memory_available() >= suite.spec_footprint(spec)[1] * (1 + also)


def _quietly(remove: Callable[[str], None], what: str) -> None:
    try:
        remove(what)
    except AssureError as exc:
        log.warning("pool: %s", exc.message)


def release_orphans(
    runs_dir: Path, backend: SandboxBackend, everything: bool = False
) -> list[Path]:
    """`assure gc`: every pool folder whose process is gone (its lock is free), after gc removed
    their containers by label: filesystems released, folders removed."""
    base = runs_dir / layout.POOL
    if not base.is_dir():
        return []
    return [
        folder
        for folder in sorted(base.iterdir())
        if folder.is_dir()
        and (everything or not store.is_locked(folder))
        and _release_folders(backend, folder)
    ]


def _release_folders(backend: SandboxBackend, folder: Path) -> bool:
    """Release every pair folder left in a pool's folder, then remove it; False if something
    stays mounted there (it is then kept: never delete through a mount)."""
    for pair in folder.iterdir():
        if pair.is_dir():
            release(backend, pair, [], [])
    if workspace_fs.mounted_under(folder):
        return False
    shutil.rmtree(folder, ignore_errors=True)
    return True
