"""Who on the host may read or change what assure keeps: the one place that decides it.

Only the invoking user. The folders assure keeps for itself (`.assure/`, the runs base, each
run and suite directory, the key folder) are made FOLDER_MODE whatever the umask, and the
files it writes there (the run's records, the alert sink, the private key) FILE_MODE.
Nothing below a run directory is reachable by another local user, since every path into it
crosses that 0700 folder. What an attempt's containers read or write through a bind mount
keeps the mode (and owner) they need: the gateway's config and the control record
(SHARED_FILE_MODE), the gateway's journal and blobs (the sandbox user's: a replay mounts a
recorded attempt's into a new gateway); that mount is the only way in. The process umask is
left alone for that reason: it would narrow those too.

The workspace an attempt leaves is the agent's: its copy in the run directory is given
`copy_mode` (no group or other access, no setuid, setgid or sticky bit, only the owner's
execute bit kept), and a promoted file `promoted_mode` (git's two modes).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

FOLDER_MODE = 0o700
FILE_MODE = 0o600
SHARED_FILE_MODE = 0o644  # a host-written file an attempt's container reads through its bind mount


def make_folder(path: Path, *, exist_ok: bool = False) -> None:
    """`path` and any missing parent, made FOLDER_MODE whatever the umask. A folder that is
    already there is left as it is (`--runs-dir /tmp` must not close /tmp)."""
    made = []
    for p in (path, *path.parents):
        if os.path.lexists(p):
            break
        made.append(p)
    path.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=exist_ok)
    for p in made:
        os.chmod(p, FOLDER_MODE)  # made just now, by us: a folder


def executable(mode: int) -> bool:
    """The one permission bit of the agent's that survives: the owner's execute bit."""
    return bool(mode & stat.S_IXUSR)


# how a copy report says its copy was made with copy_mode (older copies kept the agent's)
COPY_MODES = "owner-only"


def copy_mode(mode: int, folder: bool) -> int:
    """The mode of an entry of the workspace copy, from the mode the agent left it with."""
    return FOLDER_MODE if folder else (0o700 if executable(mode) else FILE_MODE)


def promoted_mode(mode: int) -> int:
    """The mode of a file promote writes into the target (0755 or 0644, as git records them)."""
    return 0o755 if executable(mode) else 0o644
