"""Command assertions: the acceptance tests run in their own fresh container, never the agent's.

The command sees a throwaway copy of the POST workspace (made by `confined.copy_tree`: links
recreated, never followed; FIFOs, sockets and devices left out; sparse files kept sparse) in
which every protected path is put back as the fixture has it, so tests the agent edited are never the tests that judge
it. The container has no network, a read-only root and its own limits. Results go to
`commands.json` with the digest of the POST snapshot they ran on; the verifier accepts a
result only for that exact snapshot.
"""

from __future__ import annotations

import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

from . import confined, globs
from .chain import canonical, sha256_hex
from .sandbox import hardening
from .sandbox.docker import DockerBackend
from .spec import AGENT_IMAGE_ALIAS, Spec
from .textsafe import display

OUTPUT_TAIL_BYTES = 8192
COPY_MAX_BYTES = confined.COPY_MAX_BYTES  # a check copy holding more data is not run


def command_assertions(spec_data: dict[str, Any]) -> list[dict[str, Any]]:
    return [a["command"] for a in spec_data["assertions"] if "command" in a]


def snapshot_digest(post_json: dict[str, Any]) -> str:
    return sha256_hex(canonical(post_json))


def restore_protected(copy: Path, fixture: Path, protected: tuple[str, ...]) -> None:
    """Make every protected path in `copy` exactly what the fixture has (added ones removed).
    `copy` is the host's own tree, so whatever stands in the way (a symlink where the fixture
    has a directory, say) is removed, never followed."""
    def is_protected(rel: str) -> bool:
        return globs.match_any(protected, rel)

    added = [rel for rel, _ in confined.walk(copy) if is_protected(rel) and confined.lstat(fixture, rel) is None]
    for rel in reversed(added):
        confined.remove(copy, rel)
    for rel, st in confined.walk(fixture):
        if not is_protected(rel):
            continue
        if stat.S_ISDIR(st.st_mode):
            confined.make_dirs(copy, rel, clear_way=True)
        elif stat.S_ISREG(st.st_mode):
            confined.copy_file(fixture, rel, copy, rel, max_bytes=COPY_MAX_BYTES, clear_way=True)
        elif stat.S_ISLNK(st.st_mode):
            confined.symlink(copy, rel, os.readlink(fixture / rel), clear_way=True)


def check_workspace(workspace: Path, fixture: Path, protected: tuple[str, ...], copy: Path) -> confined.CopyReport:
    """The tree a command runs on: a confined copy of the POST workspace without its protected
    paths, which are then put back from the fixture. Special files are left out (reported);
    a file over the copy's byte bound is refused, and the caller must not run on the copy."""
    report = confined.copy_tree(workspace, copy, max_bytes=COPY_MAX_BYTES, include=lambda rel: not globs.match_any(protected, rel))
    restore_protected(copy, fixture, protected)
    return report


def run_commands(spec: Spec, workspace: Path, post_json: dict[str, Any], backend: DockerBackend, agent_image: str, labels: dict[str, str], name: str) -> list[dict[str, Any]]:
    results = []
    for n, cmd in enumerate(command_assertions(spec.to_json())):
        with tempfile.TemporaryDirectory(prefix="assure-check-") as tmp:
            copy = Path(tmp) / "workspace"
            report = check_workspace(workspace, spec.workspace.fixture, spec.workspace.protected, copy)
            if report.refused:
                result: dict[str, Any] = {"exit_code": None, "timed_out": False, "seconds": 0.0, "output_tail": "",
                                          "not_run": f"{len(report.refused)} files hold more than the check copy's {COPY_MAX_BYTES} data bytes allow: "
                                                     + ", ".join(display(r) for r in report.refused[:5])}
            else:
                uid, gid = hardening.sandbox_user(spec)
                hardening.chown_tree(copy, uid, gid)
                result = _run_one(spec, cmd, copy, backend, agent_image, labels, f"{name}-check{n}")
            result["copy"] = {"skipped": [[display(p), why] for p, why in report.skipped[:20]], "skipped_count": report.skipped_count, "data_bytes": report.data_bytes}
            results.append(result)
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
        return {"exit_code": exit_code, "timed_out": timed_out, "seconds": round(time.monotonic() - started, 3), "output_tail": output}
    finally:
        backend.remove_container(cid)
