"""Compare a PRE and a POST snapshot of one workspace: every path added, deleted or modified.

What counts is the end state: a change reverted before POST is no change, and a rename is a
deletion plus an addition. Content is judged by hash, never by mtime, which the agent can set.
It fails closed: a file that could not be hashed on either side, or a directory that could not
be listed, is reported as possibly changed (see `_content_may_differ`).
`diff` compares only what both snapshots list; if either is `truncated`, the caller must not
take an empty diff as proof that nothing changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from assure.verify.snapshot import Entry, Snapshot

ChangeKind = Literal["added", "deleted", "modified"]


@dataclass(frozen=True, slots=True)
class Change:
    """One path whose entry differs between PRE (`before`) and POST (`after`).

    `fields` is empty for added and deleted paths; for a modified one it names what changed,
    in this order: kind, content, mode, owner, target, xattrs, link (see `_changed_fields`).
    """

    path: str
    kind: ChangeKind
    fields: tuple[str, ...]
    before: Entry | None
    after: Entry | None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values; dump with ensure_ascii=True so surrogate escapes survive."""
        return {
            "path": self.path,
            "kind": self.kind,
            "fields": list(self.fields),
            "before": None if self.before is None else self.before.to_json(),
            "after": None if self.after is None else self.after.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Change:
        """Inverse of `to_json`."""
        before, after = data["before"], data["after"]
        return cls(
            path=data["path"],
            kind=data["kind"],
            fields=tuple(data["fields"]),
            before=None if before is None else Entry.from_json(before),
            after=None if after is None else Entry.from_json(after),
        )


def diff(pre: Snapshot, post: Snapshot) -> list[Change]:
    """Every path that differs between `pre` and `post`, sorted by path."""
    changes = []
    same = pre.entries.keys() == post.entries.keys()  # the usual case: no union to build
    for path in sorted(pre.entries if same else pre.entries.keys() | post.entries.keys()):
        before, after = pre.entries.get(path), post.entries.get(path)
        if before is None:
            changes.append(Change(path, "added", (), None, after))
        elif after is None:
            changes.append(Change(path, "deleted", (), before, None))
        elif before.note is not None or (before is not after and before != after):
            # Equal entries without a note have no changed field (see `_changed_fields`), and
            # most entries are equal: reuse even hands on the very object.
            fields = _changed_fields(before, after)
            if fields:
                changes.append(Change(path, "modified", fields, before, after))
    return changes


def _changed_fields(before: Entry, after: Entry) -> tuple[str, ...]:
    """What differs between two entries of the same path.

    - kind: the type of node changed (a file became a directory...); nothing else is compared.
    - content: see `_content_may_differ`.
    - mode: permission bits including setuid, setgid and sticky.
    - owner: uid or gid.
    - target: a symlink's text, or a device node's numbers.
    - xattrs: any extended attribute added, removed or given another value.
    - link: for anything but a directory, the hard-link count or the link group (a directory's
      link count follows its subdirectories, which are reported themselves).
    """
    if before.kind != after.kind:
        return ("kind",)
    differs = (
        ("content", _content_may_differ(before, after)),
        ("mode", before.mode != after.mode),
        ("owner", (before.uid, before.gid) != (after.uid, after.gid)),
        ("target", before.target != after.target),
        ("xattrs", before.xattrs != after.xattrs),
        (
            "link",
            before.kind != "dir"
            and (before.nlink, before.link_group) != (after.nlink, after.link_group),
        ),
    )
    return tuple(name for name, changed in differs if changed)


def _content_may_differ(before: Entry, after: Entry) -> bool:
    """Fail-closed content rule for two entries of the same kind.

    - Files hashed both times: the hashes differ. Size and mtime play no part.
    - Files left unhashed on one side or both (too large, unreadable, changed while reading,
      hash budget used up): the sizes differ, or either side carries a note. Every file the walk
      did not hash carries a note saying why, so such a file is always reported, as possibly
      changed: what we could not read we cannot vouch for. The caller can tell "possibly"
      from "certainly" by the missing `sha256`.
    - Directories: either side carries a note (it could not be listed or was cut off by the
      depth limit, so anything below it may have changed unseen).
    - Other nodes (symlinks, FIFOs, sockets, devices) have no content of their own; their
      notes say what was not opened, so a note that differs means the check went otherwise.
    """
    if before.kind == "file":
        if before.sha256 is not None and after.sha256 is not None:
            return before.sha256 != after.sha256
        return before.size != after.size or before.note is not None or after.note is not None
    if before.kind == "dir":
        return before.note is not None or after.note is not None
    return before.note != after.note
