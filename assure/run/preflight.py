"""Why a spec that matches its schema still cannot work, found before anything runs
(`assure validate`, and `run`/`suite`/`resume` before any container starts): each problem
with the command that fixes it, judged by the functions the gate and the driver use
(`policy.contract_denial` is the gate's own contract rule). A mistyped image or script is
the user's mistake, told before the start, never an attempt judged on what it left.
"""

from __future__ import annotations

import posixpath
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from assure import presets
from assure.core import confined, globs
from assure.errors import AssureError, SpecError
from assure.run import policy, ratifiers
from assure.sandbox import runtimes
from assure.sandbox.hardening import AGENT_FILES
from assure.spec import AGENT_IMAGE_ALIAS, Spec, document_of, line_of, read_document, schema

# What fixes each contract denial (gate rule -> fix); {hash} is the `assure contract hash` command.
CONTRACT_FIXES = {
    "contract.unratified": (
        "have someone other than the proposer review the terms and put their name in `ratified_by`"
    ),
    "contract.self_ratified": (
        "have someone other than the proposer review the terms and put their name in `ratified_by`"
    ),
    "contract.hash": (
        "after review, `{hash} --write` puts the term digests and hash in the spec; then have them"
        " ratified"
    ),
    "contract.old_format": (
        "after review, `{hash} --write` puts the term digests in the spec; then have them"
        " re-ratified"
    ),
    "contract.terms_changed": (
        "after review, `{hash} --write` puts the new digests in the spec; then have them"
        " re-ratified"
    ),
    "contract.signature": (
        "have a trusted ratifier review the terms and sign them: `assure contract ratify {spec}"
        " --as NAME` (their key in the keyring, ASSURE_RATIFIERS)"
    ),
    "contract.revoked": "propose a new contract (a new `id`) and have it ratified",
    "contract.expired": (
        "move `expires_at` forward (a changed term: re-ratify it, `{hash} --write`)"
    ),
}


@dataclass(frozen=True)
class Problem:
    """One reason the spec cannot work, where it is (`file:line: field`), and its fix."""

    where: str
    message: str
    fix: str
    # False: a note (no contract, or a hostile spec's: it runs, and every mutation is denied)
    fatal: bool = True
    # False: `run` goes ahead all the same (a contract the gate denies: the run shows the denial)
    stops_run: bool = True

    def lines(self) -> list[str]:
        return [f"{self.where}: {self.message}", f"  fix: {self.fix}"]


def problems(spec: Spec) -> list[Problem]:
    """Every problem of a loaded spec: its contracts as the gate judges them now, and an agent
    command that names a script the spec does not ship to the agent."""
    _, lines = document_of(spec)
    return [
        *_contracts(spec, lines),
        *_agent_command(spec, lines),
        *_install(spec, lines),
        *_scopes(spec, lines),
        *_script(spec, lines),
    ]


def _contracts(spec: Spec, lines: dict[tuple[Any, ...], int]) -> list[Problem]:
    found: list[Problem] = []
    seen: set[int] = set()
    for i, task in enumerate(spec.tasks):
        own = task.contract is not spec.contract  # the task's own block (or its `contract: null`)
        at = ("tasks", i, "contract") if own else ("contract",)
        key = id(task.contract) if own else -1
        if key in seen:
            continue
        seen.add(key)
        decision = policy.contract_denial(spec, task, time.time())
        if decision is None:
            continue
        field = f"tasks[{i}].contract" if own else "contract"
        where = (
            f"{spec.path}:{line_of(at, lines)}: {field}" if at in lines else f"{spec.path}: {field}"
        )
        if decision.rule == "contract.missing":
            found.append(
                Problem(
                    where,
                    "no contract: the gate will deny every mutation (contract.missing); fine for a"
                    " hostile spec",
                    "add a contract block (see the contract section of README.md) and have it"
                    " ratified",
                    fatal=False,
                    stops_run=False,
                )
            )
            continue
        command = f"assure contract hash {spec.path}" + (f" --task {task.id}" if own else "")
        fix = CONTRACT_FIXES.get(decision.rule, "see the contract section of README.md").format(
            hash=command, spec=spec.path
        )
        expected = "; expected of a hostile spec" if spec.hostile else ""
        # a ratifier this host's keyring does not hold is the host's set-up, not the spec: told
        # before the start (other denials run, and the run shows the gate denying)
        untrusted = (
            decision.rule == "contract.signature"
            and not spec.hostile
            and _unknown_ratifier(task.contract)
        )
        if untrusted and (published := _published_keyring(spec, task.contract)):
            fix = (
                f"it is signed with this checkout's published example key: `export"
                f" ASSURE_RATIFIERS={published}` (`make demo` sets it), or sign it with a key"
                f" you trust: `assure contract ratify {spec.path} --as NAME`"
            )
        found.append(
            Problem(
                where,
                f"{decision.reason} ({decision.rule}): the gate will deny every mutation{expected}",
                fix,
                fatal=not spec.hostile,
                stops_run=untrusted,
            )
        )
    return found


# the checkout's published example keyring (specs/ratifiers.yaml; it proves nothing about a
# spec of yours): named in the fix when it is what would verify the signature
PUBLISHED_KEYRING = Path(__file__).resolve().parents[2] / "specs" / "ratifiers.yaml"


def _unknown_ratifier(contract: Any) -> bool:
    """The contract names a ratifier that no keyring in force holds (or the keyring is
    unusable): no signature of theirs could be checked here."""
    try:
        return contract.ratified_by not in ratifiers.load().keys
    except ratifiers.KeyringError:
        return True


def _published_keyring(spec: Spec, contract: Any) -> Path | None:
    """The published example keyring, when its key verifies `contract`."""
    if contract is None or not PUBLISHED_KEYRING.is_file():
        return None
    try:
        keyring = ratifiers.load([PUBLISHED_KEYRING])
    except ratifiers.KeyringError:
        return None
    ok = ratifiers.check(spec.name, contract, keyring).key_id is not None
    return PUBLISHED_KEYRING if ok else None


def ratified(spec: Spec) -> list[str]:
    """Who ratified each contract the gate accepts, with which key: `validate`'s notes."""
    found, seen = [], set()
    for task in spec.tasks:
        c = task.contract
        if c is None or id(c) in seen:
            continue
        seen.add(id(c))
        judged = policy.contract(spec, c)
        if judged and judged.key_id and not policy.contract_denial(spec, task, time.time()):
            found.append(
                f"{spec.path}: contract {c.id!r}: ratified by {c.ratified_by} "
                f"with key {judged.key_id} (a trusted ratifier)"
            )
    return found


def missing_agent_script(spec: Spec) -> tuple[int, str] | None:
    """(index, path) of the first agent command argument that names a file under the agent
    files' mount (`/opt/agent/...`) which the spec's `agent.files` folder does not hold as a
    regular file; None when every such argument is there (or none names one)."""
    prefix = AGENT_FILES + "/"
    for index, arg in enumerate(spec.agent.command):
        if not arg.startswith(prefix) or any(c.isspace() for c in arg):
            continue
        rel = posixpath.normpath(arg[len(prefix) :])
        if spec.agent.files is None or rel.startswith("..") or not _regular(spec.agent.files, rel):
            return index, arg
    return None


def _regular(folder: Path, rel: str) -> bool:
    """A regular file at `rel` beneath `folder`, no link followed (the agent sees the folder as it
    is)."""
    try:
        st = confined.lstat(folder, rel)
    except OSError:
        return False
    return st is not None and stat.S_ISREG(st.st_mode)


def _agent_command(spec: Spec, lines: dict[tuple[Any, ...], int]) -> list[Problem]:
    missing = missing_agent_script(spec)
    if missing is None:
        return []
    index, arg = missing
    where = f"{spec.path}:{line_of(('agent', 'command', index), lines)}: agent.command[{index}]"
    if spec.agent.files is None:
        return [
            Problem(
                where,
                f"{arg} is under {AGENT_FILES}, but the spec ships no agent files (no agent.files)",
                f"set agent.files to the folder that holds {arg[len(AGENT_FILES) + 1 :]}",
            )
        ]
    return [
        Problem(
            where,
            f"{arg} is not among the agent files ({spec.agent.files}): the agent would exit 127,"
            " command not found",
            f"put {arg[len(AGENT_FILES) + 1 :]} in {spec.agent.files}, or fix the path in"
            " agent.command",
        )
    ]


def _install(spec: Spec, lines: dict[tuple[Any, ...], int]) -> list[Problem]:
    """An `agent.install` that could not be built (sandbox/install.py says what), or that
    names an image other than assure's, which the derived image is built on."""
    if spec.agent.install is None:
        return []
    from assure.sandbox import install

    def where(at: tuple[Any, ...]) -> str:
        field = "agent.install" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in at)
        return f"{spec.path}:{line_of(('agent', 'install', *at), lines)}: {field}"

    found = [
        Problem(where(at), message, fix)
        for at, message, fix in install.problems(spec.agent.install)
    ]
    if spec.agent.image != AGENT_IMAGE_ALIAS:
        found.append(
            Problem(
                where(()),
                "an install is built on assure's agent image, but agent.image is"
                f" {spec.agent.image!r}",
                f"drop agent.image (the install goes into `{AGENT_IMAGE_ALIAS}`), or bake the"
                " software into your own image and drop agent.install",
            )
        )
    return found


def _scopes(spec: Spec, lines: dict[tuple[Any, ...], int]) -> list[Problem]:
    """Notes where `workspace.writable` and a contract's `fs:` scope disagree: a writable path
    no `fs:` scope covers can change but never be promoted (the task is propose-only there);
    an `fs:` scope no writable glob covers takes only the gateway's fs.write, so a stock agent
    (a preset whose agent edits files itself) leaves unattributed changes there (a breach)."""
    found: list[Problem] = []
    writable = spec.workspace.writable
    edits = spec.agent.preset is not None and presets.PRESETS[spec.agent.preset]["edits_files"]
    for contract in {
        id(t.contract): t.contract for t in spec.tasks if t.contract is not None
    }.values():
        fs = [s[3:] for s in contract.scope if s.startswith("fs:")]
        where = f"{spec.path}:{line_of(('contract', 'scope'), lines)}: contract {contract.id} scope"
        if outside := [w for w in writable if not globs.match_any(fs, w)]:
            found.append(
                Problem(
                    where,
                    f"workspace.writable {', '.join(outside)} is outside the contract's fs: scope:"
                    " the agent may change it, but no change there can be promoted (propose-only)",
                    f"add {', '.join(f'fs:{w}' for w in outside)} to the contract's scope (and"
                    " re-ratify), or narrow workspace.writable",
                    fatal=False,
                    stops_run=False,
                )
            )
        if edits and (direct := [f for f in fs if not globs.match_any(writable, f)]):
            found.append(
                Problem(
                    where,
                    f"fs:{', fs:'.join(direct)} is not in workspace.writable: there, only writes"
                    " through the gateway's fs.write are attributed, and an agent that edits files"
                    " itself is judged on unattributed changes",
                    f"add {', '.join(direct)} to workspace.writable: the preset's agent edits files"
                    " itself",
                    fatal=False,
                    stops_run=False,
                )
            )
    return found


SCRIPT_FIX = (
    'see `$defs.model_script` in specs/spec.schema.json, and README.md: "Scripted answers, in order'
    ' and by request"'
)


def _script(spec: Spec, lines: dict[tuple[Any, ...], int]) -> list[Problem]:
    """A `model.script` that the gateway would refuse to start with: missing, off its schema
    (`$defs.model_script`: every problem, each at its line), or with a matcher the gateway
    cannot use (a bad regex): the gateway's own parser says so (gateway/modelsources.Script)."""
    if spec.model is None or spec.model.mode != "scripted" or not spec.model.script:
        return []
    from assure.gateway.modelsources import Script
    from assure.gateway.modelwire import ModelError

    where = f"{spec.path}:{line_of(('model', 'script'), lines)}: model.script"
    path = (spec.path.parent / spec.model.script).resolve()
    if not path.is_file():
        return [
            Problem(
                where,
                f"no such file: {path}",
                "point model.script at a JSON file of answers, relative to the spec",
            )
        ]
    root = schema()
    found: list[Problem] = []
    try:
        read_document(
            path, {"$defs": root["$defs"], **root["$defs"]["model_script"]}, "model script"
        )
    except SpecError as exc:
        found += [
            Problem(f"{where}: {problem}", "off the script's schema", SCRIPT_FIX)
            for problem in exc.problems
        ]
    try:
        Script(str(path))
    except ModelError as exc:  # the field the gateway stops at, in its words
        found.append(Problem(where, str(exc), SCRIPT_FIX))
    return found


class Engine(Protocol):
    """What `engine_problems` asks of the Docker engine (`DockerBackend`)."""

    def image_exists(self, tag: str) -> bool: ...

    def runtimes(self) -> dict[str, Any]: ...


def needs_engine(spec: Spec) -> bool:
    """Whether `engine_problems` has anything to ask: an image other than assure's own (built
    when missing), or a runtime other than runc (every engine has it)."""
    return spec.sandbox.runtime != runtimes.RUNC or any(
        image != AGENT_IMAGE_ALIAS for _, image, _ in _images(spec)
    )


def engine_problems(spec: Spec, engine: Engine) -> list[Problem]:
    """What the engine lacks for the spec's containers to start: its `sandbox.runtime` (and
    that runtime's program), the agent's image, each command and cases check's image.
    `assure-agent` is assure's own image, which `run` builds when it is missing."""
    _, lines = document_of(spec)
    found: list[Problem] = []

    def where(at: tuple[Any, ...]) -> str:
        field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in at).lstrip(".")
        return f"{spec.path}:{line_of(at, lines)}: {field}"

    runtime = spec.sandbox.runtime
    problem = runtimes.problem(runtime, engine.runtimes())
    if problem:
        found.append(Problem(where(("sandbox", "runtime")), problem, runtimes.fix(runtime)))
    known: dict[str, str | None] = {}  # image -> why it cannot be used (None: it is there)
    for at, image, what in _images(spec):
        if image == AGENT_IMAGE_ALIAS:
            continue
        if image not in known:
            try:
                known[image] = None if engine.image_exists(image) else "is not in the Docker engine"
            except AssureError as exc:
                known[image] = f"cannot be looked up ({exc.message})"
        if known[image] is not None:
            found.append(
                Problem(
                    where(at),
                    f"image {image!r} {known[image]}: {what} could not start",
                    "correct the name (`docker images` lists the engine's), or `docker pull"
                    f" {image}` or build it first; `{AGENT_IMAGE_ALIAS}` (the default) is assure's"
                    " own image",
                )
            )
    return found


def _images(spec: Spec) -> list[tuple[tuple[Any, ...], str, str]]:
    """(where in the document, image, whose) of every container image the spec names: the
    agent's, and each command and cases check's (top-level and per task)."""
    data, _ = document_of(spec)
    found: list[tuple[tuple[Any, ...], str, str]] = [
        (("agent", "image"), spec.agent.image, "the agent")
    ]
    lists = [(("assertions",), data["assertions"])] + [
        (("tasks", t, "assertions"), task["assertions"])
        for t, task in enumerate(data.get("tasks", []))
        if "assertions" in task
    ]
    for at, items in lists:
        for n, assertion in enumerate(items):
            for kind in ("command", "cases"):
                if kind in assertion:
                    found.append(
                        (at + (n, kind, "image"), assertion[kind]["image"], f"the {kind} check")
                    )
    return found


def refuse(specs: list[Spec], engine: Engine | None) -> None:
    """Raise a `SpecError` listing every problem of every spec that stops a run (its agent's
    script, and with an `engine` its images and runtime), each with its fix; nothing when
    there is none. Called before any run directory or container is made."""
    found = [
        p
        for s in specs
        for p in [*problems(s), *(engine_problems(s, engine) if engine is not None else [])]
        if p.fatal and p.stops_run
    ]
    if found:
        raise SpecError(
            [line for p in found for line in p.lines()],
            fix=(
                "fix each problem above; `assure validate FILE` checks a spec without running"
                " anything"
            ),
        )


def engine(specs: list[Spec], say: Callable[[str], None]) -> tuple[Any, Any]:
    """The engine (a `DockerBackend`) and this checkout's images (an `ImageSet`), building
    whatever is missing (`say` tells of it), once every spec passed `refuse`: what `validate`
    refuses, and each image and runtime the engine lacks, every problem of every spec listed
    before anything starts."""
    from assure.sandbox import install, live, registry, workspace_fs
    from assure.sandbox.docker.images import Images

    workspace_fs.require()  # the workspace cannot be bounded here: refuse before any run starts
    for s in specs:
        live.check(s)
    try:
        backend = registry.create(registry.chosen(s.sandbox.backend for s in specs))
    except AssureError:
        refuse(specs, None)  # what needs no engine is told even when there is none
        raise
    refuse(specs, backend)
    images = Images(backend, say)
    found = images.resolve() or images.ensure()
    for s in specs:  # each agent.install's derived image: a no-op when the engine has it
        install.ensure(s, backend, found, say)
    return backend, found
