"""The gate Docker's agent runs behind (`ContainerRequest.gate` and `claim`), as bash: the
command waits for the gateway's socket, and a pooled agent for its claim, before it runs.
The fake backend interprets the same request itself (sandbox/fake.py)."""

from __future__ import annotations

from assure.errors import SandboxError
from assure.sandbox.backend import ContainerRequest

GATE_EXIT = 125  # a gated command whose socket never appeared: it did not run


# `ContainerRequest.gate` as the container's entry: wait for the socket ($1) for at most $2
# seconds, polled `per_second` times a second without a fork (bash's `read -t` on a pipe that
# never speaks), then exec the command in its place: same pid, no fd or process left over. The
# loop's variables are a function's locals: an agent variable of the same name (`n`, `limit`),
# imported from the container's environment, reaches the command as the spec gave it.
def _gate_script(per_second: int) -> str:
    return (
        "exec 3<> <(:); __assure_gate() { local n=0"
        f' limit=$(($2 * {per_second})); while [ ! -S "$1" ]; do n=$((n + 1)); if [ "$n" -gt'
        ' "$limit" ]; then echo "assure: no gateway socket at $1 after $2 s: the agent was not'
        f' started" >&2; exit {GATE_EXIT}; fi; read -t {1 / per_second:g} -u 3; done; }};'
        ' __assure_gate "$@"; unset -f __assure_gate; exec 3<&-; shift 2; '
    )


# A cold agent waits through the gateway's boot (~0.1 s and more): 10 ms polls.
GATE_SCRIPT = _gate_script(100)
# A claimed agent's gateway bound its socket before the claim (gateway --listen): the test
# passes at once, and the first call waits in the socket's backlog until the journal is open.
# Without it the wait is the gateway's few milliseconds to bind: 2 ms polls.
CLAIMED_GATE_SCRIPT = _gate_script(500)
GATE_EXEC = 'exec "$@"'
# A pooled agent (`ContainerRequest.claim`, $3) first waits for its claim blocked on the FIFO
# `wake` in the claim folder (an idle agent costs no CPU; the 10 ms socket poll below cost
# ~24 ms of CPU a second, its root's FUSE daemon included), which the claim writes a line to
# once the command and environment are in place (opened before they are looked for: no
# wake-up is missed; the claim removes it, and the socket's wait follows).
GATE_WAKE = (
    '{ exec 4<> "$3/wake"; } 2> /dev/null; [ -s "$3/argv" ] || read -t "$2" -u 4 2> /dev/null; exec'
    " 4<&-; "
)
# A pooled agent's warm-up (`ContainerRequest.warm_up`, $4 on) runs first, and only then is the
# FIFO opened: the pool counts the pair free once its FIFOs have readers (run/pool.py), so a
# claim never waits behind the warm-up. `set --` drops it from the positional parameters.
GATE_WARM_UP = '"${@:4}" < /dev/null > /dev/null 2>&1; set -- "$1" "$2" "$3"; '
# A claimed pair's agent (`ContainerRequest.claim`, $3): its command and environment from the
# claim, written before the gateway could bind. Both become the positional parameters, the
# environment first up to a `--` (no entry is `--`: each has a `=`), and the two arrays are
# unset before any entry is exported: no shell variable of the gate's own is left in the
# agent's environment or can take the place of one of the spec's (`argv`, `kv`...).
GATE_CLAIM = (
    'mapfile -d "" -t __assure_env < "$1/env" && mapfile -d "" -t __assure_argv < "$1/argv" && ['
    ' "${#__assure_argv[@]}" -gt 0 ] || { echo "assure: no claim at $1: the agent was not'
    f' started" >&2; exit {GATE_EXIT}; }}; set -- "${{__assure_env[@]}}" --'
    ' "${__assure_argv[@]}"; unset __assure_env __assure_argv; while [ "$1" != -- ]; do export'
    f' "$1" || exit {GATE_EXIT}; shift; done; shift; exec "$@"'
)


def command(request: ContainerRequest) -> list[str] | None:
    """The request's command, behind its gate if it has one (`GATE_SCRIPT`)."""
    if request.gate is None:
        return None if request.command is None else list(request.command)
    gate = [request.gate, str(max(1, int(request.gate_seconds)))]
    if request.claim is not None:
        return [
            "/bin/bash",
            "-c",
            (GATE_WARM_UP if request.warm_up else "")
            + GATE_WAKE
            + CLAIMED_GATE_SCRIPT
            + GATE_CLAIM,
            "assure-gate",
            *gate,
            request.claim,
            *request.warm_up,
        ]
    if not request.command:
        raise SandboxError(
            f"create container {request.name}: a gated container needs a command",
            fix="give the agent a command",
        )
    return ["/bin/bash", "-c", GATE_SCRIPT + GATE_EXEC, "assure-gate", *gate, *request.command]
