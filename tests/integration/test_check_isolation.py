"""Hostile checks: each case and command is a program that tries to reach another one. The
checks phase may share containers between them (run/checks.py); these hold whatever it does,
and held on the one-container-per-check design before it. Each case says what it found: the
only right answer is that it found nothing.

- a case's (or command's) writes, in the workspace, /tmp or any writable folder, SysV shared
  memory and POSIX message queues, must not reach a later case;
- a process left running (double-forked, setsid, ignoring SIGTERM) must not outlive its case;
- the agent's code (the workspace holds it: the checks run it) must not find any other case's
  arguments, or any case's expected output, anywhere it can read;
- the harness's own processes in a check container must not be stopped or killed by a case.
"""

from __future__ import annotations

import base64

import pytest

from assure.records.store import read_json

MARK = "PLANT-4b7"  # what the planting checks write; the lookers search for it
SECRET_ARG = "SECRET-ARG-7c1"  # only in the last case's arguments
SECRET_OUT = "SECRET-OUT-9d2"  # only in the last case's expected stdout
# Python helpers the hostile programs share (the agent image has python3).
IPC = (
    "import ctypes, os, sys; libc = ctypes.CDLL(None, use_errno=True);"
    " libc.mq_open.restype = ctypes.c_int;"
)
# The command plants a message queue, the first case a shared memory segment: each is caught.
PLANT_IPC = (
    f"python3 -c \"{IPC} libc.shmget(0x5eed, 4096, 0o1666) if sys.argv[1] != 'cmd' else"
    " libc.mq_open(b'/plant-4b7', os.O_CREAT | os.O_RDWR, 0o666, None)\" $1"
)
LOOK_IPC = (
    f"python3 -c \"{IPC} shm = libc.shmget(0x5eed, 0, 0); mq = libc.mq_open(b'/plant-4b7',"
    ' os.O_RDONLY, 0, None); sys.exit(0 if shm < 0 and mq < 0 else 1)" || echo ipc'
)
# Writes MARK wherever this user can write (the workspace, /tmp, any writable folder), and
# leaves processes behind that keep writing it: a double fork, a setsid one ignoring SIGTERM.
PLANT = (
    f"echo {MARK} > /workspace/planted-$1; echo {MARK} > /tmp/planted-$1;"
    " for d in $(find / -xdev -writable -type d 2>/dev/null | grep -v '^/proc'); do"
    f"  echo {MARK} > $d/planted-$1-x 2>/dev/null; done;"
    f" {PLANT_IPC};"
    f' (sh -c \'trap "" TERM HUP; while :; do echo {MARK} > /tmp/late-$1; echo {MARK} >'
    " /workspace/late-$1; sleep 0.05; done' </dev/null >/dev/null 2>&1 &);"
    " setsid sh -c 'trap \"\" TERM HUP; exec sleep 1000' </dev/null >/dev/null 2>&1 &"
    " echo planted"
)
# What a later case finds of any of it: names of what it found, or `clean`. Any process it
# may signal, but itself and pid 1 (docker-init, its user's when the check is a container of
# its own), is one a check before it left (the loop runs no process of its own).
LOOK = (
    "sleep 0.3; found=; for p in /proc/[0-9]*; do p=${p#/proc/};"
    ' [ "$p" = $$ ] || [ "$p" = 1 ] && continue; kill -0 "$p" 2> /dev/null &&'
    ' found="$found pid:$p"; done;'
    " for f in /workspace/planted-* /workspace/late-* /workspace/seen /tmp/planted-* /tmp/late-*"
    ' /tmp/seen; do [ -e "$f" ] && found="$found $f"; done;'
    " for f in $(find / -xdev -name 'planted-*-x' 2>/dev/null); do found=\"$found $f\"; done;"
    f" grep -lsa '{MARK[:-1]}[{MARK[-1]}]' /proc/[0-9]*/cmdline > /dev/null && found=\"$found"
    ' process";'
    f' ipc=$({LOOK_IPC}); found="$found$ipc"; echo "${{found:-clean}}"'
)
# The agent's code under test (it wrote it into the workspace): it searches everything it can
# read for the hidden cases, and leaves a watcher for the cases after it.
SPY = f"""#!/bin/sh
found=
for pat in '{SECRET_ARG[:-1]}[{SECRET_ARG[-1]}]' '{SECRET_OUT[:-1]}[{SECRET_OUT[-1]}]'; do
  grep -rlsa "$pat" /proc/[0-9]*/cmdline /proc/[0-9]*/environ /workspace /tmp /opt /etc /run \\
    /var /home /root /srv /dev /sys/fs 2>/dev/null | grep -v '^/proc/self' | head -3 > /tmp/hit
  [ -s /tmp/hit ] && found="$found $(tr '\\n' ' ' < /tmp/hit)"
done
(sh -c 'trap "" TERM HUP; i=0; while [ $i -lt 100 ]; do
   grep -lsa "{SECRET_ARG[:-1]}[{SECRET_ARG[-1]}]" /proc/[0-9]*/cmdline >> /tmp/seen 2>/dev/null
   cp /tmp/seen /workspace/seen 2>/dev/null; i=$((i + 1)); sleep 0.03; done' \\
   </dev/null >/dev/null 2>&1 &)
echo "${{found:-clean}}"
"""
# Stops and kills every process it may signal but its own: pid 1, the harness's, the engine's.
KILLER = (
    'for p in /proc/[0-9]*; do case "${p#/proc/}" in "$$" | "$PPID") continue ;; esac;'
    ' kill -STOP "${p#/proc/}" 2>/dev/null; kill -KILL "${p#/proc/}" 2>/dev/null; done; echo'
    " done"
)
AGENT = "mkdir -p out && cat > out/spy.sh <<'EOF'\n" + SPY + "EOF\n"


def _spec(make_spec, runtime: str):
    each = [
        {"args": [PLANT, "sh", "case0"], "stdout": "planted\n"},
        {"args": [LOOK], "stdout": "clean\n"},
        {"args": ["sh out/spy.sh"], "stdout": "clean\n"},
        {"args": [LOOK], "stdout": "clean\n"},
        {
            "args": [
                f"sleep 0.5; cat /tmp/seen /workspace/seen 2>/dev/null; echo {SECRET_OUT}",
                "sh",
                SECRET_ARG,
            ],
            "stdout": f"{SECRET_OUT}\n",
        },
        {"args": [KILLER], "stdout": "done\n"},
        {"args": [LOOK], "stdout": "clean\n"},
    ]
    return make_spec(
        f"check-isolation-{runtime}",
        "",
        agent={"command": ["sh", "-c", AGENT]},
        sandbox={"runtime": runtime},
        assertions=[
            {"command": {"run": ["sh", "-c", PLANT, "sh", "cmd"]}},
            {"cases": {"run": ["sh", "-c"], "timeout_seconds": 20, "each": each}},
            {"command": {"run": ["sh", "-c", LOOK + '; [ -z "$found" ]']}},
        ],
        expect="pass",
    )


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_no_check_reaches_another_or_the_hidden_cases(run, make_spec, runtime):
    result = run(_spec(make_spec, runtime))
    attempt = result.run_dir / "attempts" / "1"
    (record,) = read_json(attempt / "cases.json")
    got = [
        (r["exit_code"], base64.b64decode(r["stdout_b64"]).decode(errors="replace"))
        for r in record["results"]
    ]
    del got[5]  # the killer: under gVisor it may end its own case (pid 1 is not immune there)
    assert got == [
        (0, "planted\n"),
        (0, "clean\n"),  # nothing of case 0's (or the first command's) writes or processes
        (0, "clean\n"),  # the agent's code found no hidden case
        (0, "clean\n"),  # nor anything of the spy's watcher
        (0, f"{SECRET_OUT}\n"),  # the watcher never saw this case's arguments
        (0, "clean\n"),  # and the killer harmed no later check
    ], got
    commands = read_json(attempt / "commands.json")
    assert [c["exit_code"] for c in commands] == [0, 0], commands  # the last one found nothing
    assert result.verdict in ("pass", "fail"), result.report  # the killer's case may fail


# The agent plants what it can outside the workspace (POST holds what is in it): in /tmp,
# /dev/shm and every other folder it may write, SysV shared memory and a message queue, and
# processes left behind that keep writing and ignore SIGTERM. The check container starts as
# soon as the agent stops (run/attempt.py `_checks_ahead`), while the agent's own container
# and the gateway are still being collected and removed.
AGENT_PLANTS = (
    f"echo {MARK} > /tmp/planted-agent; echo {MARK} > /dev/shm/planted-agent;"
    " for d in $(find / -xdev -writable -type d 2>/dev/null | grep -v '^/proc\\|^/workspace');"
    f" do echo {MARK} > $d/planted-agent-x 2>/dev/null; done;"
    f" set -- agent; {PLANT_IPC}; set -- cmd; {PLANT_IPC};"
    f" (sh -c 'trap \"\" TERM HUP; while :; do echo {MARK} > /tmp/late-agent; sleep 0.05; done'"
    " </dev/null >/dev/null 2>&1 &);"
    " setsid sh -c 'trap \"\" TERM HUP; exec sleep 1000' </dev/null >/dev/null 2>&1 &"
    " echo planted"
)
LOOK_SHM = LOOK.replace("/tmp/seen;", "/tmp/seen /dev/shm/planted-agent;")


def test_nothing_the_agent_leaves_reaches_the_first_check(run, make_spec):
    """The first check runs in the container started at the agent's stop: it finds nothing of
    the agent's but POST, and neither do the cases after it."""
    assert LOOK_SHM != LOOK
    spec = make_spec(
        "check-isolation-agent",
        "",
        agent={"command": ["sh", "-c", AGENT_PLANTS]},
        assertions=[
            {"command": {"run": ["sh", "-c", LOOK_SHM + '; [ -z "$found" ]']}},
            {
                "cases": {
                    "run": ["sh", "-c"],
                    "each": [{"args": [LOOK_SHM], "stdout": "clean\n"}] * 2,
                }
            },
        ],
        expect="pass",
    )
    result = run(spec)
    attempt = result.run_dir / "attempts" / "1"
    commands = read_json(attempt / "commands.json")
    assert [c["exit_code"] for c in commands] == [0], commands
    assert commands[0]["runtime"] == "runc", commands
    (record,) = read_json(attempt / "cases.json")
    got = [base64.b64decode(r["stdout_b64"]).decode(errors="replace") for r in record["results"]]
    assert got == ["clean\n", "clean\n"], got
    assert result.verdict == "pass", result.report
