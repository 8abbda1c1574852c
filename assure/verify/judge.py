"""The verdict of one attempt, from its record alone (live and offline alike).

Inputs, an `AttemptRecord` (what the attempt collected, held in memory live and loaded from
the attempt folder by `assure verify`): the PRE and POST workspace snapshots, the container
facts (what the engine reported: exit code, hardening, filesystem changes), the check
containers' results (each bound to the POST snapshot's digest) and, read from the attempt
folder, the gateway's hash-chained journal, the database captures and `workspace/`; and the
resolved spec. The agent's own claim (`task.report`) is carried along as narrative and never
read by any rule.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from assure.core import confined, private
from assure.core.chain import ChainError, ChainFile, canonical, sha256_hex
from assure.errors import describe, read_json
from assure.sandbox.backend import Observed
from assure.spec import Spec
from assure.verify import assertions, attribution, completeness, container, sqlite
from assure.verify.diff import Change, diff
from assure.verify.facts import ContainerFacts
from assure.verify.findings import Finding, Kind, Verdict, unexplained_subjects, verdict
from assure.verify.snapshot import Snapshot, take


class AttemptPaths(Protocol):
    """The files of one attempt the judge reads (records.layout.AttemptPaths)."""

    @property
    def root(self) -> Path: ...
    @property
    def journal(self) -> Path: ...
    @property
    def container(self) -> Path: ...
    @property
    def workspace(self) -> Path: ...
    @property
    def post(self) -> Path: ...
    @property
    def commands(self) -> Path: ...
    @property
    def cases(self) -> Path: ...
    def db_capture(self, side: str, name: str) -> Path: ...
    def db_error(self, side: str, name: str) -> Path: ...


class AttemptRecord(Protocol):
    """What one attempt collected, as the judge reads it (records.attempt_record.AttemptRecord):
    a protocol, so that verify needs nothing from records, which stands above it."""

    @property
    def paths(self) -> AttemptPaths: ...
    @property
    def facts(self) -> ContainerFacts: ...
    @property
    def pre(self) -> Snapshot | None: ...
    @property
    def post(self) -> Snapshot | None: ...
    @property
    def checks(self) -> Mapping[str, list[Any]]: ...
    @property
    def unreadable(self) -> Mapping[str, Exception]: ...


SNAPSHOTS = "snapshot"  # a record's `unreadable` key for pre.json and post.json, loaded together


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    findings: tuple[Finding, ...]
    changes: tuple[Change, ...]
    claim: dict[str, Any] | None
    journal_head: dict[str, Any] | None
    containment: dict[str, list[str]] | None = (
        None  # what the container check covered, and what failed
    )

    def to_json(self) -> dict[str, Any]:
        return {
            "containment": self.containment,
            "verdict": self.verdict.value,
            "findings": [f.to_json() for f in self.findings],
            "changes": [c.to_json() for c in self.changes],
            "claim": self.claim,
            "journal_head": self.journal_head,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Judgement:
        """Inverse of `to_json` (a `verdict.json`)."""
        return cls(
            Verdict(data["verdict"]),
            tuple(Finding.from_json(f) for f in data["findings"]),
            tuple(Change.from_json(c) for c in data["changes"]),
            data.get("claim"),
            data.get("journal_head"),
            data.get("containment"),
        )

    def with_finding(self, finding: Finding, *, hostile: bool) -> Judgement:
        """The judgement with one more finding (a failure after judging), its verdict
        recomputed by the same rule: a breach stays a breach."""
        found = (*self.findings, finding)
        return replace(self, findings=found, verdict=verdict(list(found), hostile=hostile))


def _journal(
    path: Path, findings: list[Finding], gateway: dict[str, Any] | None, agent_started: bool
) -> tuple[Iterable[dict[str, Any]], dict[str, Any] | None, Any]:
    """The verified journal, streamed again by each reader (never loaded whole), its head and
    the agent's last claim. The first pass also checks it is a complete account (completeness.py)
    and picks up the claim on its way."""
    if not path.is_file():
        findings.append(
            Finding(Kind.HARNESS_ERROR, "journal", "no gateway journal: the gateway never ran")
        )
        return (), None, None
    journal = ChainFile(path)
    claims = []

    def noting_claims(records: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
        for r in records:
            if (
                r.get("event") == "tool_call"
                and r.get("tool") == "task.report"
                and r.get("decision") == "allow"
            ):
                claims.append(r.get("claim"))
            yield r

    try:
        head, incomplete = completeness.account(noting_claims(journal), gateway, agent_started)
    except (ChainError, OSError, UnicodeDecodeError) as exc:
        findings.append(
            Finding(Kind.HARNESS_ERROR, "journal", f"the gateway journal does not verify: {exc}")
        )
        return (), None, None
    findings += incomplete
    return journal, head, claims[-1] if claims else None


def _database_findings(
    paths: AttemptPaths, name: str, journal: Iterable[dict[str, Any]]
) -> list[Finding]:
    """Rows, schema and header of one database: PRE vs POST, explained by the journaled
    changesets."""
    pre, post = paths.db_capture("pre", name), paths.db_capture("post", name)
    for side, path in (("pre", pre), ("post", post)):
        if not path.is_file():
            error = paths.db_error(side, name)
            message = read_json(error).get("message", "?") if error.is_file() else "no capture"
            exc = sqlite.DatabaseError(str(message))
            return [sqlite.error_finding(name, exc, side=side)]
    return sqlite.attribute(name, pre, post, sqlite.db_effects(journal, name))


CARRIED_KINDS = ("file", "dir", "symlink")


COPY_SCOPE = "changes and file assertions"  # what `copied_out` names, as container.json says


def copied_out(
    spec: Spec, pre: Snapshot, post: Snapshot, changes: Iterable[str] | None
) -> frozenset[str]:
    """The paths of POST the run directory's `workspace/` holds (run/attempt.py `_copy_out`):
    what its readers open there, with the folders on their way. `changes`: the changed paths
    copied (None: every change, for promote, proposals and receipts), and always the paths
    `file_contains` reads. The checks and the live judge read the attempt's own filesystem,
    and everything else is judged from POST."""
    wanted = (
        {c.path for c in diff(pre, post) if c.after is not None}
        if changes is None
        else {rel for rel in changes if rel in post.entries}
    )
    wanted |= {a["file_contains"]["path"] for a in spec.assertions if "file_contains" in a}
    return frozenset(wanted).union(*(confined.parents(rel) for rel in wanted))


def _workspace_moved(
    post: Snapshot,
    now: Snapshot,
    copy: dict[str, Any] | None,
    scope: frozenset[str] | None = None,
) -> bool:
    """Whether `workspace/` differs from what the run left. POST was taken on the attempt's
    own filesystem; `workspace/` is its confined copy (`copy` is the copy's report) of the
    paths `scope` names (`copied_out`; None: a copy of the whole tree, from before), which
    carries files, folders and symlinks with their content, link text and the modes
    `private.copy_mode` makes of the agent's (the agent's own in a copy from before), and
    nothing else (no owners, xattrs, hard links or special files, nor what it skipped).
    Without a copy report (the workspace was the bind mount itself) the trees must be equal."""
    if copy is None:
        return bool(diff(post, now))
    if scope is not None and not now.entries.keys() <= scope:
        return True  # what the copy-out never writes
    skipped = {rel for rel, _ in copy.get("skipped", [])}

    def carried(snap: Snapshot) -> dict[str, Any]:
        out = {}
        for path, e in snap.entries.items():
            if (
                e.kind in CARRIED_KINDS
                and (scope is None or path in scope)
                and skipped.isdisjoint([path, *confined.parents(path)])
            ):
                out[path] = e
        return out

    def copied(
        e: Any,
    ) -> int:  # the mode the copy-out gave it: copy_mode, or (a run from before) the agent's
        return (
            private.copy_mode(e.mode, e.kind == "dir")
            if copy.get("modes") == private.COPY_MODES
            else e.mode & 0o777
        )

    before, after = carried(post), carried(now)
    if before.keys() != after.keys():
        return True
    for path, a in before.items():
        b = after[path]
        same_content = (
            a.sha256 == b.sha256
            if a.sha256 is not None and b.sha256 is not None
            else a.size == b.size
        )
        if (
            (a.kind, a.target) != (b.kind, b.target)
            or (a.kind != "symlink" and copied(a) != b.mode)
            or (a.kind == "file" and not same_content)
        ):
            return True
    return False


def _paths(value: Any) -> list[str] | None:
    """container.json's list of copied-out changes (None: all), its type checked."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("workspace_copy.changes is not a list of paths")
    return value


def _not_carried(copy: dict[str, Any] | None) -> list[Finding]:
    """What the copy-out left out of `workspace/` (it is in POST, and judged there)."""
    if not copy or not copy.get("skipped_count"):
        return []
    return [
        Finding(Kind.NOT_CHECKED, rel, f"not copied to the run directory's workspace/: {reason}")
        for rel, reason in copy.get("skipped", [])
    ] + (
        [
            Finding(
                Kind.NOT_CHECKED,
                "(workspace)",
                f"{copy['skipped_count'] - len(copy['skipped'])} more entries not copied to"
                " workspace/",
            )
        ]
        if copy["skipped_count"] > len(copy.get("skipped", []))
        else []
    )


def _disk_limit(usage: dict[str, Any] | None) -> list[Finding]:
    """The workspace filesystem's own counters at the end of the run (recorded in
    container.json)."""
    if not usage or not (usage.get("bytes_full") or usage.get("inodes_full")):
        return []
    which = [
        name
        for name, full in (("bytes", usage.get("bytes_full")), ("inodes", usage.get("inodes_full")))
        if full
    ]
    return [
        Finding(
            Kind.DISK_LIMIT,
            "(workspace)",
            f"disk limit reached: {usage['bytes_used']} of {usage['bytes_total']} bytes /"
            f" {usage['inodes_used']} of {usage['inodes_total']} inodes used ({' and '.join(which)}"
            f" exhausted; limits.disk {usage['limit_bytes']}, limits.inodes"
            f" {usage['limit_inodes']})",
            detail={
                k: usage.get(k)
                for k in (
                    "bytes_used",
                    "bytes_total",
                    "inodes_used",
                    "inodes_total",
                    "limit_bytes",
                    "limit_inodes",
                )
            },
        )
    ]


def _present(observed: Observed | None) -> Observed:
    if observed is None:  # has_observed said there is one
        raise ValueError("the record's observed container is empty")
    return observed


def _guarded(findings: list[Finding], subject: str, rule: Callable[[], Any], default: Any) -> Any:
    """One rule of the judgement; an exception in it is a harness_error finding and the other
    rules still run, so what they find (a breach above all) still counts."""
    try:
        return rule()
    except Exception as exc:
        findings.append(
            Finding(Kind.HARNESS_ERROR, subject, f"the verifier failed here: {describe(exc)}")
        )
        return default


def _unreadable(findings: list[Finding], record: AttemptRecord, name: str) -> None:
    """A part of the record that did not load, reported as its rule would have."""
    if name in record.unreadable:
        findings.append(
            Finding(
                Kind.HARNESS_ERROR,
                name,
                f"the verifier failed here: {describe(record.unreadable[name])}",
            )
        )


def _head_words(head: Any) -> str:
    """A journal head ({"seq", "hash"} or None) in words, not a Python repr."""
    if not isinstance(head, dict):
        return "no record"
    return f"record {head.get('seq')}, hash {str(head.get('hash'))[:16]}"


def judge(
    record: AttemptRecord,
    spec: Spec,
    *,
    recheck_workspace: bool = False,
    workspace: Path | None = None,
) -> Judgement:
    """`workspace`: where file assertions read the agent's files (the attempt's own sealed
    filesystem, live), if not the run directory's `workspace/`."""
    paths, facts = record.paths, record.facts
    findings: list[Finding] = []
    _unreadable(findings, record, paths.container.name)
    findings += [Finding(Kind.HARNESS_ERROR, "harness", str(e)) for e in facts.harness_errors]
    journal, head, claim = _guarded(
        findings,
        "journal",
        lambda: _journal(paths.journal, findings, facts.gateway, facts.agent_started),
        ((), None, None),
    )
    recorded = facts.journal_head
    if recorded is not None and recorded != head:
        findings.append(
            Finding(
                Kind.HARNESS_ERROR,
                "journal",
                f"the journal's head ({_head_words(head)}) differs from the head recorded at"
                f" collection ({_head_words(recorded)})",
            )
        )
    checked = None
    if facts.has_observed:
        failed = _guarded(
            findings,
            "containment",
            lambda: container.containment(
                _present(facts.observed),
                spec,
                facts.engine_security,
                f"{paths.root.parent.name}/{paths.root.name}",  # attempts/<n>, as found
                facts.data.get("pool"),
                facts.data.get("user"),
            ),
            [],
        )
        checked = {
            "checked": container.containment_checked(spec),
            "failed": [f.subject for f in failed],
        }
        findings += failed
    findings += _guarded(
        findings, "container filesystem", lambda: container.filesystem_changes(facts.fs_changes), []
    )
    pre, post = record.pre, record.post
    if pre is None or post is None:  # a missing or unreadable snapshot: cannot judge, never pass
        findings.append(
            Finding(
                Kind.HARNESS_ERROR,
                "snapshot",
                f"snapshot unavailable: {record.unreadable.get(SNAPSHOTS, 'not collected')}",
            )
        )
        return Judgement(
            verdict(findings, hostile=spec.hostile), tuple(findings), (), None, head, checked
        )
    if recheck_workspace and _guarded(
        findings,
        "workspace",
        lambda: _workspace_moved(
            post,
            take(paths.workspace),
            facts.workspace_copy,
            copied_out(spec, pre, post, _paths((facts.workspace_copy or {}).get("changes")))
            if (facts.workspace_copy or {}).get("scope") == COPY_SCOPE
            else None,
        ),
        False,
    ):
        findings.append(
            Finding(
                Kind.HARNESS_ERROR,
                "workspace",
                f"the run directory's workspace no longer matches {paths.post.name}",
            )
        )
    findings += _guarded(findings, "workspace copy", lambda: _not_carried(facts.workspace_copy), [])
    if pre.truncated:
        findings.append(
            Finding(
                Kind.HARNESS_ERROR,
                "workspace",
                "the fixture exceeds the verifier's limits: " + "; ".join(pre.notes),
            )
        )
    if post.truncated:
        findings.append(
            Finding(
                Kind.UNATTRIBUTED,
                "(workspace)",
                "the agent left more than the verifier's limits allow: " + "; ".join(post.notes),
            )
        )
    findings += _guarded(findings, "disk limit", lambda: _disk_limit(facts.workspace_fs), [])
    changes = _guarded(findings, "diff", lambda: diff(pre, post), [])
    ws = spec.workspace
    findings += _guarded(
        findings,
        "attribution",
        lambda: attribution.attribute(
            changes, journal, writable=ws.writable, protected=ws.protected
        ),
        [],
    )
    findings += [Finding(Kind.NOT_CHECKED, e.path, e.note) for e in post.entries.values() if e.note]
    for db in spec.databases:
        findings += _guarded(
            findings,
            f"db:{db.name}",
            functools.partial(_database_findings, paths, db.name, journal),
            [],
        )
    unexplained = unexplained_subjects(findings)
    for kind in assertions.CHECK_KINDS:
        _unreadable(findings, record, assertions.KINDS[kind].results(paths).name)
    post_digest = sha256_hex(canonical(post.to_json()))
    counts = dict.fromkeys(assertions.CHECK_KINDS, 0)
    for a in spec.assertions:
        result = None
        for kind in a.keys() & set(
            assertions.CHECK_KINDS
        ):  # the nth assertion of a kind has index n in its results
            result = next(
                (
                    c
                    for c in record.checks.get(kind, [])
                    if isinstance(c, dict) and c.get("index") == counts[kind]
                ),
                None,
            )
            counts[kind] += 1

        def check(a: dict[str, Any] = a, result: dict[str, Any] | None = result) -> Finding:
            return assertions.check(
                a,
                assertions.Evidence(
                    post,
                    workspace or paths.workspace,
                    facts.exit_code,
                    journal,
                    unexplained,
                    result,
                    post_digest,
                ),
            )

        finding = _guarded(findings, f"assertion {next(iter(a))}", check, None)
        if finding is not None:
            findings.append(finding)
    return Judgement(
        verdict(findings, hostile=spec.hostile),
        tuple(findings),
        tuple(changes),
        claim,
        head,
        checked,
    )
