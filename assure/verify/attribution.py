"""Attribution: explain every change by an allowed journal entry or a writable scope, or flag it.

Rules, in order, for each workspace change:
1. the path is protected (acceptance tests)  -> `protected_changed`, whoever made it;
2. the final state is what an allowed gateway action left there -> attributed to that action
   (a write whose post-hash and mode match, a delete whose path is gone, a folder a write created);
3. the path is inside a writable glob -> attributed to that scope (a direct edit the spec allows);
4. anything else -> `unattributed`. A file written through the gateway and then edited
   directly outside the writable globs is therefore unattributed: its hash no longer matches.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from typing import Any

from assure.core import globs
from assure.core.effects import Op
from assure.verify.diff import Change
from assure.verify.findings import Finding, Kind


def gateway_effects(
    journal: Iterable[dict[str, Any]],
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The last allowed effect per path, and the folders that writes created (path -> action_id)."""
    last: dict[str, dict[str, Any]] = {}
    folders: dict[str, str] = {}
    for record in journal:
        effect = record.get("effect")
        if (
            record.get("event") != "tool_call"
            or record.get("decision") != "allow"
            or not isinstance(effect, dict)
        ):
            continue
        path = effect.get("path")
        if not isinstance(path, str):
            continue
        last[path] = {**effect, "action_id": record.get("action_id")}
        parent = posixpath.dirname(path)
        while parent:
            folders.setdefault(parent, str(record.get("action_id")))
            parent = posixpath.dirname(parent)
    return last, folders


def _explained_by(
    change: Change, effects: dict[str, dict[str, Any]], folders: dict[str, str]
) -> str | None:
    after = change.after
    effect = effects.get(change.path)
    if effect is not None:
        if (
            effect.get("op") == Op.WRITE
            and after is not None
            and after.kind == "file"
            and after.sha256 == effect.get("sha256")
            and after.mode == effect.get("mode")
        ):
            return str(effect["action_id"])
        if effect.get("op") == Op.DELETE and after is None:
            return str(effect["action_id"])
        return None
    if (
        change.kind == "added"
        and after is not None
        and after.kind == "dir"
        and change.path in folders
    ):
        return folders[change.path]
    return None


def describe(change: Change) -> str:
    """`modified (content, mode)`, `added symlink -> /etc/shadow`, `deleted file`."""
    entry = change.after or change.before
    if change.kind == "modified":
        what = f"modified ({', '.join(change.fields)})"
    else:
        what = f"{change.kind} {entry.kind if entry else ''}".rstrip()
    if change.after is not None and change.after.kind == "symlink":
        what += f" -> {change.after.target}"
    return what


def _writable_scope(change: Change, writable: tuple[str, ...]) -> str | None:
    """The writable glob a direct change falls in. A glob `D/**` also covers the folder D itself
    (added, deleted or changed as a folder): no file under D can be written without it; and a
    folder a glob's leading segments name may be created (`out/sub/**` needs `out`,
    `globs.names_folder`). Only folders: a file or a link at such a path is not covered."""
    if (scope := next((g for g in writable if globs.match(g, change.path)), None)) is not None:
        return scope
    if all(entry is None or entry.kind == "dir" for entry in (change.before, change.after)):
        whole = next(
            (g for g in writable if g.endswith("/**") and globs.match(g[:-3], change.path)), None
        )
        if whole is not None or change.kind != "added":
            return whole
        return next((g for g in writable if globs.names_folder(g, change.path)), None)
    return None


def attribute(
    changes: Iterable[Change],
    journal: Iterable[dict[str, Any]],
    *,
    writable: Iterable[str],
    protected: Iterable[str],
) -> list[Finding]:
    effects, folders = gateway_effects(journal)
    writable, protected = tuple(writable), tuple(protected)
    findings = []
    for change in changes:
        detail = {"change": change.kind, "fields": list(change.fields)}
        if globs.match_any(protected, change.path):
            findings.append(
                Finding(
                    Kind.PROTECTED_CHANGED,
                    change.path,
                    f"protected path {describe(change)}",
                    None,
                    detail,
                )
            )
        elif (action := _explained_by(change, effects, folders)) is not None:
            findings.append(
                Finding(
                    Kind.ATTRIBUTED,
                    change.path,
                    f"{describe(change)} through the gateway",
                    f"gateway:{action}",
                    detail,
                )
            )
        elif (scope := _writable_scope(change, writable)) is not None:
            findings.append(
                Finding(
                    Kind.ATTRIBUTED,
                    change.path,
                    f"{describe(change)} directly, inside a writable glob",
                    f"writable:{scope}",
                    detail,
                )
            )
        else:
            findings.append(
                Finding(
                    Kind.UNATTRIBUTED,
                    change.path,
                    f"{describe(change)}: no allowed action or writable scope explains it",
                    None,
                    detail,
                )
            )
    return findings
