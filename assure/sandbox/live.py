"""Live databases, checked before a run starts: each sits in a folder of its own, and the
sandbox user can write it.

The gateway mounts a live database's folder, not the file: SQLite writes its -journal (or
-wal and -shm) beside the database, and a journal left anywhere else is not found after a
crash. So the folder is what the gateway gets, read-write, and it must hold nothing but the
database and those files: never the user's home or project folder with it.
"""

from __future__ import annotations

import os
import stat

from assure.errors import SpecError
from assure.sandbox.hardening import fixed_user
from assure.spec import Spec

COMPANIONS = ("-journal", "-wal", "-shm")


def check(spec: Spec) -> None:
    """Raise a `SpecError` naming each live database that cannot be used, and the fix."""
    user = fixed_user(spec)  # never leased per attempt when the spec has a live database
    problems = []
    for i, db in enumerate(spec.databases):
        if db.mode != "live":
            continue
        assert user is not None
        uid, gid = user
        where = f"{spec.path}: databases[{i}].fixture ({db.name})"
        path = db.fixture.absolute()
        folder = path.parent
        allowed = {path.name, *(path.name + c for c in COMPANIONS)}
        others = sorted(n for n in os.listdir(folder) if n not in allowed)
        if others:
            shown = ", ".join(repr(n) for n in others[:5]) + (
                f" and {len(others) - 5} more" if len(others) > 5 else ""
            )
            problems.append(
                f"{where}: {folder} holds more than the database ({shown}); the gateway mounts the"
                " database's folder, so a live database needs a folder of its own. fix: move"
                f" {path.name} (with any {path.name}-wal/-shm/-journal) into a new folder that"
                " holds nothing else, and point the fixture there"
            )
            continue
        for target in [
            path,
            *(folder / n for n in sorted(allowed - {path.name}) if (folder / n).exists()),
            folder,
        ]:
            st = os.stat(target, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode) or not _writable(st, uid, gid, folder=target == folder):
                kind = (
                    "a symlink"
                    if stat.S_ISLNK(st.st_mode)
                    else f"owned by {_owner(st)}, mode {stat.filemode(st.st_mode)}"
                )
                problems.append(
                    f"{where}: the sandbox user {uid}:{gid} cannot write {target} ({kind}): SQLite"
                    " needs to write the database and create its journal beside it. fix: `chown"
                    f" {uid}:{gid} {folder} {folder}/{path.name}*` (or set sandbox.user to the"
                    " owner's uid:gid)"
                )
                break
    if problems:
        raise SpecError(problems)


def _writable(st: os.stat_result, uid: int, gid: int, *, folder: bool) -> bool:
    """By the mode bits, as the kernel checks them for a non-root user (ACLs are not read)."""
    need = (stat.S_IWUSR | stat.S_IXUSR) if folder else stat.S_IWUSR
    if not (stat.S_ISDIR(st.st_mode) if folder else stat.S_ISREG(st.st_mode)):
        return False
    if st.st_uid == uid:
        return st.st_mode & need == need
    if st.st_gid == gid:
        return st.st_mode & (need >> 3) == need >> 3
    return st.st_mode & (need >> 6) == need >> 6


def _owner(st: os.stat_result) -> str:
    import grp
    import pwd

    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"{user}:{group} ({st.st_uid}:{st.st_gid})"
