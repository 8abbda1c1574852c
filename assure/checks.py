"""Command assertions: the acceptance tests run in their own fresh container, never the agent's.

The command sees a throwaway copy of the POST workspace in which every protected path is
put back as the fixture has it, so tests the agent edited are never the tests that judge
it. The container has no network, a read-only root and its own limits. Results go to
`commands.json` with the digest of the POST snapshot they ran on; the verifier accepts a
result only for that exact snapshot.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from . import globs
from .chain import canonical, sha256_hex
from .sandbox import hardening
from .sandbox.docker import DockerBackend
from .spec import AGENT_IMAGE_ALIAS, Spec

OUTPUT_TAIL_BYTES = 8192


def command_assertions(spec_data: dict[str, Any]) -> list[dict[str, Any]]:
    return [a["command"] for a in spec_data["assertions"] if "command" in a]


def snapshot_digest(post_json: dict[str, Any]) -> str:
    return sha256_hex(canonical(post_json))


def restore_protected(copy: Path, fixture: Path, protected: tuple[str, ...]) -> None:
    """Make every protected path in `copy` exactly what the fixture has (added ones removed)."""
    for root in (copy, fixture):
        for path in sorted(root.rglob("*"), reverse=True):
            rel = path.relative_to(root).as_posix()
            if not globs.match_any(protected, rel):
                continue
            target, source = copy / rel, fixture / rel
            if root is copy and not (source.exists() or source.is_symlink()):
                _remove(target)
            elif root is fixture and not path.is_dir():
                _remove(target)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target, follow_symlinks=False)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def run_commands(spec: Spec, workspace: Path, post_json: dict[str, Any], backend: DockerBackend, agent_image: str, labels: dict[str, str], name: str) -> list[dict[str, Any]]:
    results = []
    for n, cmd in enumerate(command_assertions(spec.to_json())):
        with tempfile.TemporaryDirectory(prefix="assure-check-") as tmp:
            copy = Path(tmp) / "workspace"
            shutil.copytree(workspace, copy, symlinks=True)
            restore_protected(copy, spec.workspace.fixture, spec.workspace.protected)
            uid, gid = hardening.sandbox_user(spec)
            hardening.chown_tree(copy, uid, gid)
            results.append(_run_one(spec, cmd, copy, backend, agent_image, labels, f"{name}-check{n}"))
        results[-1].update(index=n, run=cmd["run"], post_digest=snapshot_digest(post_json))
    return results


def _run_one(spec: Spec, cmd: dict[str, Any], copy: Path, backend: DockerBackend, agent_image: str, labels: dict[str, str], name: str) -> dict[str, Any]:
    image = agent_image if cmd["image"] == AGENT_IMAGE_ALIAS else cmd["image"]
    kwargs = {
        **hardening.common_kwargs(spec, {**labels, "assure.role": "check"}, spec.limits.memory, spec.limits.pids),
        "image": image, "name": name, "command": cmd["run"], "working_dir": hardening.WORKSPACE,
        "environment": {**cmd.get("env", {}), "HOME": "/tmp"}, "read_only": True,
        "volumes": {str(copy): {"bind": hardening.WORKSPACE, "mode": "rw"}},
    }
    cid = backend.start_container(kwargs)
    try:
        started = time.monotonic()
        exit_code = backend.wait(cid, cmd["timeout_seconds"])
        timed_out = exit_code is None
        if timed_out:
            backend.stop(cid, hardening.STOP_GRACE_SECONDS)
        output = backend.logs(cid, OUTPUT_TAIL_BYTES).decode("utf-8", errors="replace")
        runtime = (backend.inspect(cid).get("HostConfig") or {}).get("Runtime")  # as the engine ran it
        return {"exit_code": exit_code, "timed_out": timed_out, "seconds": round(time.monotonic() - started, 3), "output_tail": output,
                "runtime": runtime}
    finally:
        backend.remove_container(cid)
