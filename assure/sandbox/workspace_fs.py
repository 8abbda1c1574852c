"""A per-attempt filesystem for the workspace, so the kernel bounds what an agent can write.

Each attempt's workspace lives on its own ext4 filesystem in a sparse image file exactly
`limits.disk` bytes long, with exactly `limits.inodes` inodes, loop-mounted `nosuid,nodev`.
A write past either bound fails with ENOSPC inside the container; the host never allocates
more than the image's length, whatever the agent does (nothing polls). The workspace is a
folder in it (`workspace`: its root and mkfs's lost+found stay root's, out of the agent's
sight); the agent and the gateway both see the workspace through that one folder.

Why a loop-mounted image: an xfs project quota needs the host's filesystem to be xfs mounted
with `prjquota` (not true of an ext4 root); a tmpfs capped in size and nr_inodes would hold
the workspace in memory, and its pages are charged to the memory cgroup of whoever writes
them, so the agent's `limits.memory` would bound its disk too and a full workspace would be
an OOM kill instead of ENOSPC. mkfs + mount + umount cost ~15 ms per attempt.

After the agent stops, the filesystem is sealed read-only (`seal`, the superblock itself):
POST is taken on it, the checks each see it through a copy-on-write view (`overlay`: the kernel
copies up what a check writes into the check's own filesystem, so no check writes the
workspace or another check's view), and only what the run directory's readers need is copied
out of it (run/attempt.py). No copy of the whole tree is ever made.

Mounting needs root and a loop device: without them `require()` refuses before a run starts.
The mount is released (umount, the loop device freed by the kernel's autoclear, the image
deleted) on every path by its owner, and `release_orphans` finds the mounts of drivers that
died (kill -9) in /proc/self/mountinfo, for `assure gc` and `assure resume`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from assure.errors import SandboxError

IMAGE = "workspace.img"  # in the attempt directory, beside the mount point
MOUNT_POINT = "workspace.fs"  # in the attempt directory, while the attempt runs
# the names of a check's filesystem (check.img, check.fs), beside the workspace's: a shared
# check phase alternates the two, the next check's copy made while the last one's is in use
CHECK, CHECK_AHEAD = "check", "check-ahead"
# a shared check container's views (run/checks.py `SharedChecks`): a shared mount of an empty
# folder (no image), with the folders the views are mounted on for each check
CHECK_VIEWS, VIEW_FOLDERS = "check-views", ("workspace", "tmp")
WORKSPACE = (  # in the filesystem: the live workspace (its root, and lost+found, stay root's)
    "workspace"
)
MOUNT_OPTIONS = "loop,nosuid,nodev"
BLOCK_SIZE = 4096
FULL_FRACTION = (
    0.01  # less than this share of bytes (or inodes) left after the run: the limit was reached
)
FULL_MIN_BYTES = 2**20
FULL_MIN_INODES = 16
TOOLS = ("mkfs.ext4", "mount", "losetup")
SYSTEM_PATH = (
    "/usr/sbin",
    "/sbin",
    "/usr/bin",
    "/bin",
)  # where root's tools are when a shell's PATH lacks the sbin folders (a user's, sudo's)
COMMAND_SECONDS = 30
FIX = (
    "run assure as root on a host with loop devices (`modprobe loop`; in a container: --privileged"
    " or --device /dev/loop-control plus /dev/loopN) and util-linux + e2fsprogs installed"
)


def require() -> None:
    """Refuse, before any run starts, a host where the workspace cannot be bounded."""
    missing = [tool for tool in TOOLS if _tool(tool) is None]
    if os.geteuid() != 0:
        problem = f"assure runs as uid {os.geteuid()}, and mounting it needs root"
    elif not os.path.exists("/dev/loop-control"):
        problem = "this host has no /dev/loop-control (no loop devices)"
    elif missing:
        problem = f"{', '.join(missing)} not found on PATH or in {', '.join(SYSTEM_PATH)}"
    else:
        return
    raise SandboxError(
        "the workspace must be a loop-mounted filesystem bounded by limits.disk and limits.inodes,"
        f" but {problem}",
        where="limits.disk",
        fix=FIX,
    )


@dataclass(frozen=True)
class Usage:
    """The filesystem's own counters (statvfs) at the end of the run; `*_free` is what the
    sandbox user could still have used; `host_bytes` is what the image holds on the host."""

    bytes_total: int
    bytes_free: int
    inodes_total: int
    inodes_free: int
    limit_bytes: int
    limit_inodes: int
    host_bytes: int

    @property
    def bytes_full(self) -> bool:
        return self.bytes_free < max(FULL_MIN_BYTES, int(self.bytes_total * FULL_FRACTION))

    @property
    def inodes_full(self) -> bool:
        return self.inodes_free < max(FULL_MIN_INODES, int(self.inodes_total * FULL_FRACTION))

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "bytes_used": self.bytes_total - self.bytes_free,
            "inodes_used": self.inodes_total - self.inodes_free,
            "bytes_full": self.bytes_full,
            "inodes_full": self.inodes_full,
        }


def _tool(name: str) -> str | None:
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), *SYSTEM_PATH]))


def _command(args: list[str], what: str) -> None:
    try:
        done = subprocess.run(
            [_tool(args[0]) or args[0], *args[1:]],
            capture_output=True,
            text=True,
            timeout=COMMAND_SECONDS,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxError(f"{what}: {exc}", fix=FIX) from exc
    if done.returncode != 0:
        raise SandboxError(
            f"{what}: `{' '.join(args)}` exited {done.returncode}:"
            f" {(done.stderr or done.stdout).strip()[-500:]}",
            fix=FIX,
        )


class WorkspaceFs:
    """One attempt's workspace filesystem. `release()` is idempotent and works from the
    paths alone (mountinfo says whether it is mounted), so gc can release another's."""

    def __init__(self, attempt_dir: Path, size: int, inodes: int, name: str = "workspace"):
        self.image = attempt_dir / f"{name}.img"
        self.mount_point = attempt_dir / f"{name}.fs"
        self.workspace = (
            self.mount_point / WORKSPACE
        )  # created by the caller's copy; what the containers mount
        self.size, self.inodes = size, inodes

    @classmethod
    def create(
        cls, attempt_dir: Path, *, size: int, inodes: int, name: str = "workspace"
    ) -> WorkspaceFs:
        """A fresh, empty filesystem mounted at attempt_dir/<name>.fs.
        On any failure nothing is left behind (no mount, no loop device, no image)."""
        fs = cls(attempt_dir, size, inodes, name)  # sizes the spec accepts (spec.MIN_DISK and up)
        try:
            with open(fs.image, "xb") as fh:
                fh.truncate(fs.size)  # sparse: the host allocates only what is written
            _command(
                [
                    "mkfs.ext4",
                    "-q",
                    "-F",
                    "-b",
                    str(BLOCK_SIZE),
                    "-N",
                    str(inodes),
                    "-m",
                    "0",
                    "-O",
                    "^has_journal",
                    "-E",
                    "lazy_itable_init=1,lazy_journal_init=1",
                    str(fs.image),
                ],
                "cannot make the workspace filesystem",
            )
            fs.mount_point.mkdir()
            _command(
                ["mount", "-t", "ext4", "-o", MOUNT_OPTIONS, str(fs.image), str(fs.mount_point)],
                "cannot mount the workspace filesystem",
            )
        except BaseException:
            fs.release()
            raise
        return fs

    def usage(self) -> Usage:
        """The counters once the filesystem is synced, so the image holds every block it will."""
        _syncfs(self.mount_point)
        st = os.statvfs(self.mount_point)
        return Usage(
            bytes_total=st.f_blocks * st.f_frsize,
            bytes_free=st.f_bavail * st.f_frsize,
            inodes_total=st.f_files,
            inodes_free=st.f_favail,
            limit_bytes=self.size,
            limit_inodes=self.inodes,
            host_bytes=os.stat(self.image).st_blocks * 512,
        )

    def seal(self) -> None:
        """Read-only from here, for every mount of it (a remount of the superblock, keeping
        nosuid and nodev): POST, the checks' views and the copy-out read the one tree the agent
        left. Refused (SandboxError) while anything still holds a file open for writing."""
        mount_call("none", self.mount_point, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        if not os.statvfs(self.mount_point).f_flag & os.ST_RDONLY:
            raise SandboxError(f"{self.mount_point} is still writable after its remount", fix=FIX)

    def overlay(self, lower: Path, owner: tuple[int, int]) -> None:
        """Mount at `self.workspace` a copy-on-write view of `lower` (a sealed workspace):
        reads come from lower, and every write (a copy-up, a new file, a whiteout) lands in
        this filesystem's `upper`, bounded by its size. The view's root is `owner`'s, with
        lower's permission bits. Overlayfs reads only `trusted.overlay.*` xattrs (no
        `userxattr`), which nobody without CAP_SYS_ADMIN can set in lower. The layers are
        named by descriptor (/proc/self/fd), so no path is parsed as mount options."""
        upper, work = self.mount_point / "upper", self.mount_point / "work"
        mode = stat.S_IMODE(os.lstat(lower).st_mode) & 0o777
        for folder in (upper, work, self.workspace):
            folder.mkdir(mode=0o700)
        os.chown(upper, *owner)
        os.chmod(upper, mode)
        flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        fds = [os.open(folder, flags) for folder in (lower, upper, work)]
        try:
            lo, up, wo = (f"/proc/self/fd/{fd}" for fd in fds)
            mount_call(
                "overlay",
                self.workspace,
                "overlay",
                MS_NOSUID | MS_NODEV,
                f"lowerdir={lo},upperdir={up},workdir={wo}",
            )
        finally:
            for fd in fds:
                os.close(fd)

    def release(self) -> None:
        """Unmount what is mounted inside it (a check's view), then it (the loop device goes
        with it), then delete the image and the mount point. By umount2(2), not the `umount`
        program: a phase of checks releases a view per check."""
        top = self.mount_point.resolve()
        for inner in sorted(
            (p for p in _mount_points() if top in p.parents), key=lambda p: -len(p.parts)
        ):
            unmount_call(inner)
        if _is_mount_point(self.mount_point):
            unmount_call(self.mount_point)  # its loop device goes with it (autoclear)
        detach_loops(self.image)
        self.image.unlink(missing_ok=True)
        for folder in VIEW_FOLDERS if self.mount_point.name == f"{CHECK_VIEWS}.fs" else ():
            with contextlib.suppress(FileNotFoundError):
                (self.mount_point / folder).rmdir()
        try:
            self.mount_point.rmdir()
        except FileNotFoundError:
            pass


def _syncfs(path: Path) -> None:
    """syncfs(2) on one filesystem (os.sync would flush every filesystem of the host)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if ctypes.CDLL(None, use_errno=True).syncfs(fd) != 0:
            raise SandboxError(
                f"cannot sync the workspace filesystem: {os.strerror(ctypes.get_errno())}",
                where=str(path),
            )
    finally:
        os.close(fd)


MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_SHARED = 4096, 16384, 1 << 20
MNT_DETACH = 2


def mount_call(source: str, target: Path, fstype: str | None, flags: int, data: str = "") -> None:
    """mount(2) itself: a bind, a tmpfs or a propagation change costs microseconds, where
    `mount` the program costs a fork and an exec (run/checks.py does several per check)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    if (
        libc.mount(
            source.encode(),
            os.fsencode(target),
            (fstype or "").encode() or None,
            flags,
            data.encode() or None,
        )
        != 0
    ):
        err = ctypes.get_errno()
        raise SandboxError(f"cannot mount {source} at {target}: {os.strerror(err)}", fix=FIX)


def unmount_call(target: Path) -> None:
    """umount2(2); when something still holds it, detached lazily (the kernel frees it, and
    its loop device, when the last user goes)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(os.fsencode(target), 0) == 0:
        return
    if libc.umount2(os.fsencode(target), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise SandboxError(f"cannot unmount {target}: {os.strerror(err)}", fix=FIX)


def detach_loops(image: Path) -> None:
    """Free any loop device still backed by `image` (one a killed mount set up and never used).
    Right after an umount the kernel may still be freeing the mount's own device (autoclear):
    listed here, then gone before `losetup -d` (ENXIO). A refused detach fails only if the
    device is still backed by the image."""
    for dev in _loops_backed_by(image):
        try:
            _command(["losetup", "-d", dev], "cannot free the workspace's loop device")
        except SandboxError:
            if dev in _loops_backed_by(image):
                raise


def _loops_backed_by(image: Path) -> list[str]:
    out = []
    wanted = {str(image), f"{image} (deleted)"}
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            if backing.read_text().rstrip("\n") in wanted:
                out.append(f"/dev/{backing.parent.parent.name}")
        except OSError:
            continue
    return out


_OCTAL = re.compile(r"\\([0-7]{3})")


def _mount_points() -> list[Path]:
    """Every mount point in this mount namespace (mountinfo escapes space, tab, newline,
    backslash)."""
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
        for line in fh:
            fields = line.split(" ")
            if len(fields) > 4:
                points.append(Path(_OCTAL.sub(lambda m: chr(int(m.group(1), 8)), fields[4])))
    return points


def _is_mount_point(path: Path) -> bool:
    return path.resolve() in _mount_points()


def mounted_under(folder: Path) -> bool:
    """Whether anything is mounted at or below `folder`: never delete a folder while it is."""
    top = folder.resolve()
    return any(p == top or top in p.parents for p in _mount_points())


Owner = Callable[[Path, tuple[str, ...]], Path | None]


def workspace_mounts(owner: Owner) -> list[tuple[Path, Path]]:
    """(mount point, the folder whose lock says whether someone owns it) of the workspaces
    mounted now; `owner` (records.layout.mount_owner: the run directory's names are spelled
    there) names that folder, given a mount point and the names a mount point may have."""
    names = (MOUNT_POINT, f"{CHECK}.fs", f"{CHECK_AHEAD}.fs", f"{CHECK_VIEWS}.fs")
    return [(p, folder) for p in _mount_points() if (folder := owner(p, names)) is not None]


def release_orphans(orphaned: Callable[[Path], bool], owner: Owner) -> list[Path]:
    """Release every workspace whose run directory (or pool) `orphaned(folder)` says nobody
    drives any more; returns their mount points."""
    released = []
    # a workspace last: the checks' views over it hold it until they go
    mounts = sorted(workspace_mounts(owner), key=lambda m: m[0].name == MOUNT_POINT)
    for point, run_dir in mounts:
        if orphaned(run_dir):
            WorkspaceFs(point.parent, 0, 0, point.name.removesuffix(".fs")).release()
            released.append(point)
    return released
