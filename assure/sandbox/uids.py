"""Each attempt its own user: a uid (and a gid of the same number) leased host-wide per attempt.

Why: the kernel counts some limits per uid across the whole host, whatever the container:
inotify instances, pipe buffer pages (fs.pipe-user-pages-soft), POSIX message queue bytes
(RLIMIT_MSGQUEUE), RLIMIT_NPROC. Sandboxes sharing one uid share those budgets: one run's
agent holding them made another run's honest agent fail (issue 21), and could read from its
own budget what another run uses.

How: one lock file per uid in `LOCK_DIR`; a lease is an `flock` on it held by an open
descriptor, released on `release()` and by the kernel when the holder dies (kill -9), so a
crashed holder's uid comes back. Every process on the host leases from the same folder (runs,
suite -j workers, the warm pool, Ray workers): no two leases ever hold one uid. A uid whose
lock is free but which a process on the host still runs as (a killed driver's containers not
yet reaped; under a userns remap, as its subordinate uid) is skipped, as is any uid or gid the
host's user database knows (a real user). An attempt whose cleanup could not remove a container
keeps its lease (run/attempt.py) until its process exits.

The range, `IDS`, 60600-61099: above the regular users (login.defs' UID_MAX 60000) and
systemd-homed's 60001-60513, below systemd's DynamicUser 61184-65519 and nobody (65534);
outside every subordinate range (/etc/subuid starts at 100000) and apart from 10001 (the
images' own USER, and the one user of specs with a live database: `hardening.fixed_user`);
inside 16 bits, so a userns-remap's 65536 subordinate ids still map each one.
"""

from __future__ import annotations

import fcntl
import grp
import os
import pwd
import stat
from dataclasses import dataclass, field
from pathlib import Path

from assure.errors import SandboxError
from assure.sandbox.hardening import fixed_user
from assure.spec import Spec

IDS = range(60600, 61100)
LOCK_DIR = Path("/run/assure-uids")


@dataclass
class Lease:
    """A uid (gid the same) for one attempt's sandboxes; `fd` holds its lock (None: a fixed
    user, the spec's own or ours, which is never leased)."""

    uid: int
    gid: int
    fd: int | None = field(default=None, repr=False)

    @property
    def ids(self) -> tuple[int, int]:
        return self.uid, self.gid

    def release(self) -> None:
        """Give the uid back (once its containers are gone); twice is harmless."""
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


def lease_for(spec: Spec) -> Lease:
    """The user one attempt of `spec` runs as: its fixed user (`hardening.fixed_user`), or a leased
    one."""
    fixed = fixed_user(spec)
    return Lease(*fixed) if fixed is not None else lease()


def lease(folder: Path = LOCK_DIR, ids: range = IDS) -> Lease:
    """The lowest uid of `ids` no one holds, runs as, or has in the host's user database."""
    _own_folder(folder)
    busy = running_uids()
    for uid in ids:
        if uid in busy or _known(uid):
            continue
        fd = os.open(
            folder / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if (
            uid in running_uids()
        ):  # a holder that died between our scan and its lock: its containers may still run
            os.close(fd)
            continue
        return Lease(uid, uid, fd)
    raise SandboxError(
        f"every sandbox uid of {ids.start}-{ids.stop - 1} is in use on this host (leased in"
        f" {folder}, or running)",
        fix="wait for other runs to finish, or run `assure gc` to remove what killed runs left",
    )


def _own_folder(folder: Path) -> None:
    """The lock folder: ours alone (a folder another user could write would let it take or hold
    uids)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise SandboxError(
            f"{folder} is not a folder of this user's alone (owner {st.st_uid}, mode"
            f" {stat.filemode(st.st_mode)})",
            fix=f"remove {folder}: assure makes it again",
        )


def _known(uid: int) -> bool:
    """A uid or gid of the host's user database (a real user or group, local or directory)."""
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
            return True
        except KeyError:
            pass
    return False


REMAP_USER = "dockremap"  # the user of Docker's `userns-remap: default`
SUBUID = Path("/etc/subuid")


def remapped(host_uids: set[int], subuid: Path | None = None) -> set[int]:
    """The container uids behind `host_uids` under a userns remap (`REMAP_USER`'s ranges in
    `subuid`): a remapped sandbox's processes run on the host as the range's start plus its uid."""
    try:
        lines = (subuid or SUBUID).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:  # no such file: no remap
        return set()
    found: set[int] = set()
    for line in lines:
        fields = line.strip().split(":")
        if (
            len(fields) != 3
            or fields[0] != REMAP_USER
            or not (fields[1].isdigit() and fields[2].isdigit())
        ):
            continue
        start, count = int(fields[1]), int(fields[2])
        found.update(uid - start for uid in host_uids if start <= uid < start + count)
    return found


def running_uids() -> set[int]:
    """Real, effective, saved and filesystem uids of every process on the host (/proc's status,
    which a process cannot hide by making itself non-dumpable), and the container uids they are
    under a userns remap (`remapped`)."""
    found: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as fh:
                for line in fh:
                    if line.startswith(b"Uid:"):
                        found.update(int(v) for v in line.split()[1:])
                        break
        except (OSError, ValueError):  # gone meanwhile
            continue
    return found | remapped(found)
