"""assure's seccomp profile: Docker's default, with the syscalls that recent kernel exploits
start from denied outright, whatever capabilities or kernel the profile would allow them for.

The base, `seccomp-docker-default.json`, is moby's profiles/seccomp/default.json (Apache-2.0,
Copyright Docker, Inc.) exactly as Debian's golang-github-docker-docker-dev 20.10.24 ships it:
the profile this engine applies when a container names none. Upstream moby has since dropped
io_uring from it (present in 20.10, which is why io_uring_setup was reachable here).

Denied (each is refused with EPERM; none is needed by a coding agent's toolchain):
- io_uring_*: a second syscall interface that bypasses per-syscall filtering and was the
  entry of many kernel exploits (CVE-2022-29582, CVE-2023-2598, CVE-2024-0582); ChromeOS,
  Android and GKE disable it for that reason. Programs fall back to ordinary I/O.
- userfaultfd: the race-widening primitive of many heap exploits (CVE-2021-22555's class).
- unshare, setns: a user namespace gives CAP_NET_ADMIN/CAP_SYS_ADMIN inside it, which is how
  nf_tables (CVE-2024-1086, CVE-2023-32233) and fsconfig (CVE-2022-0185) bugs are reached.
  (Namespace flags of clone/clone3 are already refused by the base profile without
  CAP_SYS_ADMIN: clone by an argument filter, clone3 with ENOSYS so glibc falls back.)
- keyctl, add_key, request_key: keyring bugs (CVE-2016-0728) and key payloads as heap sprays.
- bpf, perf_event_open: verifier and perf bugs (CVE-2021-3490, CVE-2022-23222, CVE-2023-2235).
- the new mount API (fsopen, fsconfig, fsmount, fspick, move_mount, open_tree, mount_setattr)
  and mount/umount: nothing in a sealed container mounts anything.
Not denied: splice/vmsplice/pipe (Dirty Pipe's) and msgsnd (msg_msg sprays) are used by
ordinary programs (cp, shells, Python's multiprocessing); the kernel fix is the remedy there.
"""

from __future__ import annotations

import copy
import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

BASE = Path(__file__).with_name("seccomp-docker-default.json")
DENIED = (
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "userfaultfd",
    "unshare", "setns",
    "keyctl", "add_key", "request_key",
    "bpf", "perf_event_open",
    "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr", "mount", "umount", "umount2",
)
EPERM = 1


def build(base: dict[str, Any]) -> dict[str, Any]:
    """The base profile with every DENIED name taken out of every rule, then one rule that
    refuses them all (a rule of their own, so no include/exclude condition can bring one back)."""
    profile = copy.deepcopy(base)
    rules = []
    for rule in profile["syscalls"]:
        names = [n for n in rule["names"] if n not in DENIED]
        if names:
            rules.append({**rule, "names": names})
    rules.append({"names": list(DENIED), "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM, "args": [],
                  "comment": "assure: syscalls recent kernel exploits start from", "includes": {}, "excludes": {}})
    profile["syscalls"] = rules
    return profile


@cache
def profile_text() -> str:
    """The profile as the engine receives it (`security_opt: seccomp=<text>`), in one fixed form."""
    return json.dumps(build(json.loads(BASE.read_text())), sort_keys=True, separators=(",", ":"))


def security_opt() -> str:
    return f"seccomp={profile_text()}"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
