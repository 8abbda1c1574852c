"""The spec's assertions, checked against ground truth: the POST snapshot, the files, the
container's exit code and the gateway journal. Never against what the agent claims."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from assure.core import confined
from assure.spec import Case, Cases
from assure.verify.findings import Finding, Kind
from assure.verify.snapshot import Snapshot

MAX_CONTAINS_BYTES = 16 * 2**20


def _read_confined(root: Path, rel: str) -> bytes | None:
    """A workspace file's content, never through a symlink; None if not a plain file (or too big)."""
    try:
        return confined.read_file(root, rel, MAX_CONTAINS_BYTES)
    except OSError:
        return None


def _journal_matches(record: dict[str, Any], want: dict[str, str]) -> bool:
    """An intent says a call was allowed to start, not that it happened: it matches only an
    assertion that names `event: intent`."""
    if record.get("event") == "intent" and want.get("event") != "intent":
        return False
    effect = record.get("effect") if isinstance(record.get("effect"), dict) else {}
    for key, value in want.items():
        got = record.get(key) if key != "path" else (record.get("path") or effect.get("path"))
        if got != value:
            return False
    return True


def check(
    assertion: dict[str, Any],
    *,
    post: Snapshot,
    workspace: Path,
    exit_code: int | None,
    journal: Iterable[dict[str, Any]],
    unexplained: list[str],
    command_result: dict[str, Any] | None = None,
    post_digest: str | None = None,
) -> Finding:
    """`command_result`: the recorded run of a `command` or `cases` assertion (commands.json, cases.json)."""
    ((kind, arg),) = assertion.items()
    if kind == "cases":
        ok, why, detail = cases(Cases.from_json(arg), command_result, post_digest)
        return Finding(
            Kind.ASSERTION_PASSED if ok else Kind.ASSERTION_FAILED,
            "cases: " + " ".join(arg["run"]),
            why,
            detail=detail,
        )
    if kind == "command":
        ok, why = _command(command_result, post_digest)
        return Finding(
            Kind.ASSERTION_PASSED if ok else Kind.ASSERTION_FAILED,
            "command: " + " ".join(arg["run"]),
            why,
            detail={"output_tail": (command_result or {}).get("output_tail", "")[-2000:]},
        )
    subject = (
        f"{kind}: {_written(arg)}"
        if not isinstance(arg, dict)
        else f"{kind}: " + ", ".join(f"{k}={_written(v)}" for k, v in arg.items())
    )
    ok, why = _evaluate(kind, arg, post, workspace, exit_code, journal, unexplained)
    return Finding(Kind.ASSERTION_PASSED if ok else Kind.ASSERTION_FAILED, subject, why)


def _command(result: dict[str, Any] | None, post_digest: str | None) -> tuple[bool, str]:
    """A recorded run of the command, on exactly this POST snapshot, that exited 0."""
    if result is None:
        return False, "the command was not run"
    if result.get("post_digest") != post_digest:
        return False, "the recorded result is for another workspace state"
    if result.get("not_run"):
        return False, f"not run: {result['not_run']}"
    if result.get("timed_out"):
        return False, f"timed out after {result.get('seconds')} s"
    return result.get("exit_code") == 0, f"exit code {result.get('exit_code')} in a fresh container"


def cases(
    spec_cases: Cases, result: dict[str, Any] | None, post_digest: str | None
) -> tuple[bool, str, dict[str, Any]]:
    """Every case's recorded stdout byte for byte, and its exit code, against the spec's: here,
    on the host, in a process that never imports or runs the agent's code."""
    if result is None:
        return False, "the cases were not run", {}
    if result.get("post_digest") != post_digest:
        return False, "the recorded results are for another workspace state", {}
    runs = result.get("results")
    each = spec_cases.each
    if (
        not isinstance(runs, list)
        or len(runs) != len(each)
        or any(not isinstance(r, dict) or r.get("case") != i for i, r in enumerate(runs))
    ):
        return False, f"the recorded results do not match the spec's {len(each)} cases", {}
    for i, (case, got) in enumerate(zip(each, runs)):
        why = _case_mismatch(case, got)
        if why:
            where = f"case {i + 1} of {len(runs)} (args {' '.join(case.args) or 'none'})"
            return (
                False,
                f"{where}: {why}",
                {"output_tail": str(got.get("output_tail", ""))[-2000:]},
            )
    return (
        True,
        f"{len(runs)} of {len(runs)} cases: stdout and exit code as expected, each in a fresh container",
        {},
    )


def _case_mismatch(case: Case, got: dict[str, Any]) -> str | None:
    """Why one case failed, or None. Exit code first: a program killed at the deadline or for
    printing past what was expected has none."""
    if got.get("not_run"):
        return f"not run: {got['not_run']}"
    if got.get("timed_out"):
        return f"timed out after {got.get('seconds')} s"
    if got.get("stdout_over"):
        return "stdout is longer than expected"
    if got.get("exit_code") != case.exit_code:
        return f"exit code {got.get('exit_code')}, expected {case.exit_code}"
    try:
        stdout = base64.b64decode(str(got.get("stdout_b64", "")), validate=True)
    except ValueError:
        return "the recorded stdout is not base64"
    if stdout != case.stdout.encode():
        return f"stdout differs: expected {_show(case.stdout.encode())}, got {_show(stdout)}"
    return None


def _show(data: bytes, limit: int = 80) -> str:
    """The bytes as quoted text, raw: every renderer escapes a reason once (textsafe.display),
    so a repr here showed `'6\\n'` twice escaped. An undecodable byte reads U+FFFD (a lone
    surrogate would make the receipt's canonical JSON fail)."""
    return f"'{data[:limit].decode('utf-8', 'replace')}'" + ("..." if len(data) > limit else "")


def _evaluate(
    kind: str,
    arg: Any,
    post: Snapshot,
    workspace: Path,
    exit_code: int | None,
    journal: Iterable[dict[str, Any]],
    unexplained: list[str],
) -> tuple[bool, str]:
    if kind == "file_exists":
        return (arg in post.entries, "present" if arg in post.entries else "missing")
    if kind == "file_absent":
        return (arg not in post.entries, "absent" if arg not in post.entries else "present")
    if kind == "file_sha256":
        entry = post.entries.get(arg["path"])
        got = entry.sha256 if entry else None
        return (got == arg["sha256"], f"sha256 {got or 'unavailable'}")
    if kind == "file_contains":
        entry = post.entries.get(arg["path"])
        if entry is None or entry.kind != "file":
            return False, "not a regular file"
        data = _read_confined(workspace, arg["path"])
        if data is None:
            return False, "could not read the file"
        found = arg["text"].encode() in data
        return found, "text found" if found else "text not found"
    if kind == "exit_code":
        return (
            exit_code == arg,
            f"agent exit code {exit_code}"
            if exit_code is not None
            else "no exit code: the agent never ran to an end",
        )
    if kind in ("journal_has", "journal_lacks"):
        hits = sum(1 for r in journal if _journal_matches(r, arg))
        return ((hits > 0) == (kind == "journal_has"), f"{hits} matching journal entries")
    if kind == "no_unattributed_changes":
        return (
            not unexplained,
            f"{len(unexplained)} unexplained changes"
            + (f": {', '.join(unexplained[:5])}" if unexplained else ""),
        )
    return False, f"unknown assertion {kind!r}"  # the schema forbids this; fail closed


def _written(value: Any) -> str:
    """An argument as the spec's YAML writes it (`true`, `[a, b]`), never a Python repr (`True`)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
