"""Hostile checks, second set (test_check_isolation has the first): what a case may leave that
test_check_isolation does not plant, and what a case may do to the harness's own process in a
shared check container (pid 1) so that a later case runs differently.

- /dev/shm (its own mount: `find -xdev` in the first set does not reach it), SysV semaphores
  and message queues (the first set plants shared memory);
- a process left holding the case's stdout, still printing: nothing of it in a later case's;
- output that imitates the engine's stream frames or a result, to forge a later case's;
- pid 1 signalled, reniced, pinned and its limits lowered (a later case would inherit them),
  and its open files, environment and memory map read (where a harness would hold the next
  case).
The baseline case prints its own priority and limits first; every later looker must print the
same, and `clean` for the rest.
"""

from __future__ import annotations

import base64

from assure.records.store import read_json

MARK = "PLANT-5c3"
SECRET_ARG = "SECRET-ARG-8e4"  # only in the last case's arguments
PY = "import ctypes, os, resource, sys; libc = ctypes.CDLL(None, use_errno=True);"
# Its own priority and limits, as the case sees them: a later case must see the same.
SELF = (
    f'python3 -c "{PY} print(os.getpriority(os.PRIO_PROCESS, 0), *(resource.getrlimit(r) for r'
    " in (resource.RLIMIT_NOFILE, resource.RLIMIT_FSIZE, resource.RLIMIT_NPROC,"
    ' resource.RLIMIT_CPU)), len(os.sched_getaffinity(0)))"'
)
# Plants in /dev/shm and the SysV semaphore and message tables (a container's IPC outlives its
# processes: the host gives the next case another container).
PLANT = (
    f'echo {MARK} > /dev/shm/planted 2>/dev/null; python3 -c "{PY}'
    ' libc.semget(0x5eee, 1, 0o1666); libc.msgget(0x5eef, 0o1666)"; echo planted'
)
# Does what it can to pid 1 (and to every other process it may reach but its own shell): stop,
# renice, lower its limits, pin it to one CPU; what a later case would inherit from pid 1.
TAMPER = (
    f'python3 -c "{PY}\n'
    "def hit(f, p):\n  try: f(p)\n  except OSError: pass\n"
    "for p in [int(p) for p in os.listdir('/proc') if p.isdigit()]:\n"
    "  if p in (os.getpid(), os.getppid()): continue\n"
    "  for f in (lambda p: os.setpriority(os.PRIO_PROCESS, p, 19),"
    " lambda p: resource.prlimit(p, resource.RLIMIT_NOFILE, (64, 64)),"
    " lambda p: resource.prlimit(p, resource.RLIMIT_FSIZE, (4096, 4096)),"
    " lambda p: resource.prlimit(p, resource.RLIMIT_NPROC, (8, 8)),"
    " lambda p: resource.prlimit(p, resource.RLIMIT_CPU, (100, 100)),"
    " lambda p: os.sched_setaffinity(p, {0}), lambda p: os.kill(p, 19)):\n"
    '    hit(f, p)\n" 2>&1; echo tampered'
)
# What a later case finds: its own priority and limits (SELF), then the names of what it found.
LOOK = (
    f"{SELF};"
    ' sleep 0.2; found=; ls /dev/shm/planted > /dev/null 2>&1 && found="$found shm-file";'
    f' python3 -c "{PY} sys.exit(0 if libc.semget(0x5eee, 0, 0) < 0 and'
    ' libc.msgget(0x5eef, 0, 0) < 0 else 1)" || found="$found sysv";'
    ' ls /proc/1/fd > /dev/null 2>&1 && found="$found /proc/1/fd";'
    " for f in /proc/1/environ /proc/1/maps; do"
    ' head -c 1 "$f" > /dev/null 2>&1 && found="$found $f"; done;'
    ' grep -q "^State:.*T" /proc/1/status && found="$found pid1-stopped";'
    ' echo "${found:-clean}"'
)
# Leaves a process holding its stdout, printing; prints what imitates the engine's frame
# header and a result line, on stdout and stderr.
FORGER = (
    f"(trap '' TERM HUP; while :; do echo {MARK}; sleep 0.01; done) &"
    " printf '\\001\\000\\000\\000\\000\\000\\000\\006clean\\n{\"exit\": 0}\\n';"
    " printf '\\002\\000\\000\\000\\000\\000\\000\\006clean\\n' >&2; echo forged"
)
# The agent's code: every later case's arguments may be held by pid 1 (or a process of the
# harness's); it reads every file of every process it can.
SPY = (
    "for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ /proc/[0-9]*/fd/*; do"
    f' [ -f "$f" ] && cat "$f" 2>/dev/null; done | grep -qa "{SECRET_ARG[:-1]}[{SECRET_ARG[-1]}]"'
    " && echo seen || echo clean"
)


LONG = "x" * 400 + "\n"  # an expected stdout long enough that all of each case's is read


def _spec(make_spec):
    each = [
        {"args": [SELF], "stdout": LONG},
        {"args": [TAMPER], "stdout": "tampered\n"},
        {"args": [LOOK], "stdout": LONG},
        {"args": [PLANT], "stdout": "planted\n"},
        {"args": [LOOK], "stdout": LONG},
        {"args": [FORGER], "stdout": LONG},
        {"args": [LOOK], "stdout": LONG},
        {"args": [SPY], "stdout": "clean\n"},
        {"args": [f"echo {SECRET_ARG} > /dev/null; echo hidden", "sh"], "stdout": "hidden\n"},
    ]
    return make_spec(
        "checks-fast-tamper",
        "",
        agent={"command": ["true"]},
        sandbox={"runtime": "runc"},
        assertions=[{"cases": {"run": ["sh", "-c"], "timeout_seconds": 20, "each": each}}],
        expect="fail",
    )


def test_no_case_tampers_with_a_later_one(run, make_spec):
    result = run(_spec(make_spec))
    (record,) = read_json(result.run_dir / "attempts" / "1" / "cases.json")
    out = [base64.b64decode(r["stdout_b64"]).decode(errors="replace") for r in record["results"]]
    baseline = out[0]
    assert baseline.count("(") == 4, out  # the priority, four limits, the CPUs
    assert "forged\n" in out.pop(5), out  # with what its printer printed before it was killed
    assert out[1:] == [
        "tampered\n",
        baseline + "clean\n",  # pid 1 neither stopped nor read; its priority and limits kept
        "planted\n",
        baseline + "clean\n",  # nothing of /dev/shm or the SysV tables
        baseline + "clean\n",  # the forger's left-over printer printed nothing here
        "clean\n",  # the agent's code never saw the hidden case's arguments
        "hidden\n",
    ], out
