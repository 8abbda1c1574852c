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
- socket/socketpair of AF_VSOCK (40): network namespaces do not isolate vsock, so a listener
  would be reachable from the VM host and, by vsock loopback, from another run's agent
  (suites/containment/network--vsock.yaml); refused with EAFNOSUPPORT.
- socket(AF_NETLINK, *, NETLINK_KOBJECT_UEVENT=15): uevents reach every network namespace of
  the initial user namespace, so it would show the host's devices (another run's loop device:
  network--netlink-route.yaml); refused with EPROTONOSUPPORT. NETLINK_ROUTE stays (ip needs it).
  Both compare only an argument's low 32 bits (the kernel reads them as an int, so
  0x1_0000_0028 is AF_VSOCK too), and these refusals come before the rule that allows `socket`
  otherwise: where rules for one syscall overlap, libseccomp 2.5 (runc) takes the one added
  first, and gVisor's --oci-seccomp holds the same order (tests/integration/test_container.py).
Not denied: splice/vmsplice/pipe (Dirty Pipe's) and msgsnd (msg_msg sprays) are used by
ordinary programs (cp, shells, Python's multiprocessing); the kernel fix is the remedy there.

The profile depends on the runtime. Under gVisor (runsc) clone3 is allowed: runsc 20221219
answers every refusal with EPERM whatever its errnoRet (google/gvisor#14688), so the base
profile's clone3 ENOSYS, which makes glibc fall back to clone, became EPERM and no thread could
start. Let through, clone3 reaches gVisor's own kernel (the sentry), which answers ENOSYS in
this version; any namespace it made would be the sentry's, and unshare/setns stay refused.
"""

from __future__ import annotations

import copy
import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

from assure.sandbox import runtimes

BASE = Path(__file__).with_name("seccomp-docker-default.json")
DENIED = (
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "userfaultfd",
    "unshare",
    "setns",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "mount",
    "umount",
    "umount2",
)
EPERM = 1
EAFNOSUPPORT, EPROTONOSUPPORT = 97, 93
AF_NETLINK, AF_VSOCK, NETLINK_KOBJECT_UEVENT = 16, 40, 15
SOCKETS = ("socket", "socketpair")


def _low32(index: int, value: int) -> dict[str, Any]:
    return {"index": index, "value": 0xFFFFFFFF, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"}


def _rule(
    names: list[str],
    action: str,
    args: list[dict[str, Any]],
    comment: str,
    errno: int | None = None,
) -> dict[str, Any]:
    return {
        "names": names,
        "action": action,
        "args": args,
        "comment": f"assure: {comment}",
        "includes": {},
        "excludes": {},
        **({"errnoRet": errno} if errno is not None else {}),
    }


# first in the profile (see the docstring: the first of overlapping rules wins)
SOCKET_REFUSALS = (
    _rule(list(SOCKETS), "SCMP_ACT_ERRNO", [_low32(0, AF_VSOCK)], "AF_VSOCK", EAFNOSUPPORT),
    _rule(
        ["socket"],
        "SCMP_ACT_ERRNO",
        [_low32(0, AF_NETLINK), _low32(2, NETLINK_KOBJECT_UEVENT)],
        "NETLINK_KOBJECT_UEVENT",
        EPROTONOSUPPORT,
    ),
)
# last: every other socket. It needs a condition: runc refuses an unconditional rule beside
# conditional ones ("file exists"), and libseccomp ignores refusals added after one.
SOCKET_ALLOW = _rule(
    list(SOCKETS),
    "SCMP_ACT_ALLOW",
    [{"index": 0, "value": AF_VSOCK, "op": "SCMP_CMP_NE"}],
    "sockets but the refused",
)


def build(base: dict[str, Any], runtime: str) -> dict[str, Any]:
    """The base profile with every DENIED name, the socket calls and (under gVisor) clone3 taken
    out of every rule; then one rule that refuses DENIED (a rule of its own, so no include/exclude
    condition can bring one back), the socket rules and, under gVisor, one that allows clone3."""
    gvisor = runtimes.is_gvisor(runtime)
    taken = {*DENIED, *SOCKETS, *(("clone3",) if gvisor else ())}
    profile = copy.deepcopy(base)
    rules = [*copy.deepcopy(SOCKET_REFUSALS)]
    for rule in profile["syscalls"]:
        names = [n for n in rule["names"] if n not in taken]
        if names:
            rules.append({**rule, "names": names})
    rules.append(
        _rule(
            list(DENIED), "SCMP_ACT_ERRNO", [], "syscalls recent kernel exploits start from", EPERM
        )
    )
    if gvisor:
        rules.append(
            _rule(
                ["clone3"],
                "SCMP_ACT_ALLOW",
                [],
                "gVisor's sentry answers clone3 (ENOSYS), its refusal would be EPERM",
            )
        )
    rules.append(copy.deepcopy(SOCKET_ALLOW))
    profile["syscalls"] = rules
    return profile


@cache
def profile_text(runtime: str) -> str:
    """The profile for containers of `runtime` as the engine receives it (`security_opt:
    seccomp=<text>`), in one fixed form."""
    return json.dumps(
        build(json.loads(BASE.read_text()), runtime), sort_keys=True, separators=(",", ":")
    )


def security_opt(runtime: str) -> str:
    return f"seccomp={profile_text(runtime)}"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
