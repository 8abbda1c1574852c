"""The spec's assertions, checked against ground truth: the POST snapshot, the files, the
container's exit code and the gateway journal. Never against what the agent claims."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Protocol

from assure.core import confined
from assure.spec import Case, Cases, schema
from assure.verify.findings import Finding, Kind
from assure.verify.snapshot import Snapshot


class ResultPaths(Protocol):
    """Where a check container's results are (records.layout.AttemptPaths; verify reads the
    run directory through it and imports nothing from records)."""

    @property
    def commands(self) -> Path: ...
    @property
    def cases(self) -> Path: ...


MAX_CONTAINS_BYTES = 16 * 2**20


def _read_confined(root: Path, rel: str) -> bytes | None:
    """A workspace file's content, never through a symlink; None if not a plain file (or too
    big)."""
    try:
        return confined.read_file(root, rel, MAX_CONTAINS_BYTES)
    except OSError:
        return None


def _journal_matches(record: dict[str, Any], want: dict[str, str]) -> bool:
    """An intent says a call was allowed to start, not that it happened: it matches only an
    assertion that names `event: intent`."""
    if record.get("event") == "intent" and want.get("event") != "intent":
        return False
    effect = e if isinstance(e := record.get("effect"), dict) else {}
    for key, value in want.items():
        got = record.get(key) if key != "path" else (record.get("path") or effect.get("path"))
        if got != value:
            return False
    return True


class Where(StrEnum):
    """Where an assertion's evidence is made: read on the host from what the attempt
    collected, or run in a fresh check container (run/checks.py), its results in the record."""

    HOST = "host"
    CHECK = "check container"


@dataclass(frozen=True)
class Evidence:
    """Ground truth an assertion is judged on. `result`: the recorded run of a check-container
    kind (commands.json, cases.json), for exactly the POST snapshot `post_digest` names."""

    post: Snapshot
    workspace: Path
    exit_code: int | None
    journal: Iterable[dict[str, Any]]
    unexplained: list[str]
    result: dict[str, Any] | None = None
    post_digest: str | None = None


class AssertionKind:
    """One kind of assertion (`- <name>: <argument>` in a spec): its schema fragment, where
    it runs and how it is judged. Registered in `KINDS`; a check-container kind also has a
    runner in run/checks.py (`RUNNERS`) and a results file (`results`)."""

    name: ClassVar[str]
    where: ClassVar[Where] = Where.HOST

    @property
    def schema(self) -> dict[str, Any]:
        """The argument's JSON schema, as specs/spec.schema.json gives it (validated at load)."""
        return dict(schema()["$defs"]["assertion"]["properties"][self.name])

    def subject(self, arg: Any) -> str:
        if isinstance(arg, dict):
            return f"{self.name}: " + ", ".join(f"{k}={_written(v)}" for k, v in arg.items())
        return f"{self.name}: {_written(arg)}"

    def judge(self, arg: Any, ev: Evidence) -> tuple[bool, str, dict[str, Any] | None]:
        raise NotImplementedError

    def results(self, paths: ResultPaths) -> Path:
        """The record's file of a check-container kind's results."""
        raise NotImplementedError(f"{self.name} runs on the host: it has no results file")


class FileExists(AssertionKind):
    name = "file_exists"

    def judge(self, arg: Any, ev: Evidence) -> tuple[bool, str, dict[str, Any] | None]:
        return arg in ev.post.entries, "present" if arg in ev.post.entries else "missing", None


class FileAbsent(AssertionKind):
    name = "file_absent"

    def judge(self, arg: Any, ev: Evidence) -> tuple[bool, str, dict[str, Any] | None]:
        absent = arg not in ev.post.entries
        return absent, "absent" if absent else "present", None


class FileSha256(AssertionKind):
    name = "file_sha256"

    def judge(self, arg: Any, ev: Evidence) -> tuple[bool, str, dict[str, Any] | None]:
        entry = ev.post.entries.get(arg["path"])
        got = entry.sha256 if entry else None
        return got == arg["sha256"], f"sha256 {got or 'unavailable'}", None


class FileContains(AssertionKind):
    name = "file_contains"

    def judge(self, arg: Any, ev: Evidence) -> tuple[bool, str, dict[str, Any] | None]:
        entry = ev.post.entries.get(arg["path"])
        if entry is None or entry.kind != "file":
            return False, "not a regular file", None
        data = _read_confined(ev.workspace, arg["path"])
        if data is None:
            return False, "could not read the file", None
        found = arg["text"].encode() in data
        return found, "text found" if found else "text not found", None


class ExitCode(AssertionKind):
    name = "exit_code"

    def judge(self, arg: Any, ev: Evidence) -> tuple[bool, str, dict[str, Any] | None]:
        if ev.exit_code is None:
            return False, "no exit code: the agent never ran to an end", None
        return ev.exit_code == arg, f"agent exit code {ev.exit_code}", None


class JournalHas(AssertionKind):
    name = "journal_has"
    wanted = True  # at least one matching entry (JournalLacks: none)

    def judge(self, arg: Any, ev: Evidence) -> tuple[bool, str, dict[str, Any] | None]:
        hits = sum(1 for r in ev.journal if _journal_matches(r, arg))
        return (hits > 0) == self.wanted, f"{hits} matching journal entries", None


class JournalLacks(JournalHas):
    name = "journal_lacks"
    wanted = False


class NoUnattributedChanges(AssertionKind):
    name = "no_unattributed_changes"

    def judge(self, arg: Any, ev: Evidence) -> tuple[bool, str, dict[str, Any] | None]:
        shown = f": {', '.join(ev.unexplained[:5])}" if ev.unexplained else ""
        return not ev.unexplained, f"{len(ev.unexplained)} unexplained changes{shown}", None


class CommandKind(AssertionKind):
    name = "command"
    where = Where.CHECK

    def subject(self, arg: Any) -> str:
        return "command: " + " ".join(arg["run"])

    def judge(self, arg: Any, ev: Evidence) -> tuple[bool, str, dict[str, Any] | None]:
        ok, why = _command(ev.result, ev.post_digest)
        return ok, why, {"output_tail": (ev.result or {}).get("output_tail", "")[-2000:]}

    def results(self, paths: ResultPaths) -> Path:
        return paths.commands


class CasesKind(AssertionKind):
    name = "cases"
    where = Where.CHECK

    def subject(self, arg: Any) -> str:
        return "cases: " + " ".join(arg["run"])

    def judge(self, arg: Any, ev: Evidence) -> tuple[bool, str, dict[str, Any] | None]:
        return cases(Cases.from_json(arg), ev.result, ev.post_digest)

    def results(self, paths: ResultPaths) -> Path:
        return paths.cases


KINDS: Mapping[str, AssertionKind] = {
    k.name: k
    for k in (
        FileExists(),
        FileAbsent(),
        FileSha256(),
        FileContains(),
        ExitCode(),
        JournalHas(),
        JournalLacks(),
        NoUnattributedChanges(),
        CommandKind(),
        CasesKind(),
    )
}
CHECK_KINDS = tuple(
    name for name, k in KINDS.items() if k.where is Where.CHECK
)  # their results are in the record, the nth assertion of a kind at index n


def check(assertion: dict[str, Any], ev: Evidence) -> Finding:
    """One assertion judged on `ev`; a kind the registry does not know fails (the schema
    forbids it)."""
    ((name, arg),) = assertion.items()
    kind = KINDS.get(name)
    if kind is None:
        return Finding(
            Kind.ASSERTION_FAILED, f"{name}: {_written(arg)}", f"unknown assertion {name!r}"
        )
    ok, why, detail = kind.judge(arg, ev)
    return Finding(
        Kind.ASSERTION_PASSED if ok else Kind.ASSERTION_FAILED,
        kind.subject(arg),
        why,
        detail=detail or {},
    )


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
    for i, (case, got) in enumerate(zip(each, runs, strict=False)):
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
        (
            f"{len(runs)} of {len(runs)} cases: stdout and exit code as expected, each in a fresh"
            " container"
        ),
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


def _written(value: Any) -> str:
    """An argument as the spec's YAML writes it (`true`, `[a, b]`), never a Python repr (`True`)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
