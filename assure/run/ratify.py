"""`assure contract hash`: the digests a spec's contract must carry to be ratified as the spec
stands, which terms changed since the ones it carries, and writing them into the spec file;
`assure contract ratify`: the same, signed by the ratifier (`run/ratifiers`).

The gate recomputes the same digests (`gate.contract_terms` over `policy.pinned`), so what
this prints is exactly what an attempt of the spec will accept.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import yaml

from assure.core import atomic, gate
from assure.errors import SpecError
from assure.run import policy, ratifiers
from assure.spec import Contract, Spec, load

if TYPE_CHECKING:  # cryptography is imported where a key is used (records/keys.py)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


@dataclasses.dataclass(frozen=True)
class Ratification:
    at: tuple[
        Any, ...
    ]  # where the contract block is in the document: ("contract",) or ("tasks", i, "contract")
    terms: dict[str, str]
    hash: str
    carried: (
        dict[str, str] | None
    )  # the term digests the spec carries now (None: none, or an older format)
    carried_hash: str | None

    def changed(self) -> list[str] | None:
        """The terms whose digest differs from what the spec carries; None if it carries none."""
        return None if self.carried is None else gate.changed_terms(self.carried, self.terms)

    def fields(self) -> dict[str, Any]:
        return {"terms": self.terms, "hash": self.hash}

    def to_yaml(self) -> str:
        """The contract block's `terms` and `hash` lines, to paste in."""
        return _yaml(self.fields())


def _yaml(fields: dict[str, Any]) -> str:
    return yaml.safe_dump(fields, sort_keys=False, width=1000)


def compute(spec: Spec, task_id: str | None = None) -> Ratification:
    """For the spec's contract, or with `task_id` the contract governing that task."""
    data = yaml.safe_load(spec.path.read_text(encoding="utf-8"))
    at: tuple[Any, ...] = ("contract",)
    contract = spec.contract
    if task_id is not None:
        index = next((i for i, t in enumerate(spec.tasks) if t.id == task_id), None)
        if index is None:
            raise SpecError(
                [f"{spec.path}: no task {task_id!r}"],
                fix="pass one of: " + ", ".join(repr(t.id) for t in spec.tasks),
            )
        contract = spec.tasks[index].contract
        if "contract" in (data.get("tasks") or [{}])[index]:
            at = ("tasks", index, "contract")
    if contract is None:
        raise SpecError(
            [
                f"{spec.path}: {'task ' + repr(task_id) if task_id else 'the spec'} has no contract"
                " block"
            ],
            fix="add one (see the contract section of README.md)"
            + ("" if task_id else ", or pass --task for a task's own"),
        )
    terms = gate.contract_terms(
        policy.contract(spec, contract),
        **policy.pinned(dataclasses.replace(spec, contract=contract)),
    )
    return Ratification(
        at,
        terms,
        gate.contract_hash(terms),
        dict(contract.terms) if contract.terms else None,
        contract.hash,
    )


def sign(spec: Spec, r: Ratification, name: str, key: Ed25519PrivateKey) -> dict[str, str]:
    """`assure contract ratify`: write the terms and hash as they stand, `ratified_by: name`
    and `name`'s signature over them into the spec file; the signature."""
    contract_id = spec_contract(spec, r.at).id
    signature = ratifiers.sign(spec.name, contract_id, r.hash, name, key)
    write(spec, r, {"ratified_by": name, **r.fields(), "signature": signature})
    return signature


def write(spec: Spec, r: Ratification, fields: dict[str, Any] | None = None) -> None:
    """Replace the contract block's `terms` and `hash` lines (or `fields`) in the spec file,
    keeping the rest (comments included) as written; then check the file now carries them."""
    fields = fields or r.fields()
    text = spec.path.read_text(encoding="utf-8")
    node: Any = yaml.compose(text, Loader=yaml.SafeLoader)  # yaml's nodes: values untyped
    for step in r.at:
        node = (
            node.value[step]
            if isinstance(step, int)
            else next(v for k, v in node.value if k.value == step)
        )
    if not isinstance(node, yaml.MappingNode) or node.flow_style or not node.value:
        raise SpecError(
            [f"{spec.path}: the contract block is not a block mapping"],
            fix="paste the printed lines into it by hand",
        )
    lines = text.splitlines(keepends=True)
    indent = " " * node.value[0][0].start_mark.column
    held = {k.value: (k.start_mark.line, _last_line(v)) for k, v in node.value if k.value in fields}
    # each field held is replaced where it stands; the others go after the last one held
    end = max((last for _, last in held.values()), default=_last_line(node.value[-1][1])) + 1
    if end and not lines[end - 1].endswith("\n"):
        lines[end - 1] += "\n"
    edits = [(first, last, {k: fields[k]}) for k, (first, last) in held.items()]
    edits.append((end, end - 1, {k: v for k, v in fields.items() if k not in held}))
    for first, last, part in sorted(edits, key=lambda e: e[0], reverse=True):
        new = [indent + line + "\n" for line in _yaml(part).splitlines()] if part else []
        lines[first : last + 1] = new
    atomic.write_bytes(spec.path, "".join(lines).encode("utf-8"))
    again = compute(load(spec.path), None if r.at == ("contract",) else spec.tasks[r.at[1]].id)
    written = spec_contract(load(spec.path), r.at)
    if (again.carried, again.carried_hash) != (r.terms, r.hash) or any(
        getattr(written, k) != v for k, v in fields.items() if k not in ("terms", "hash")
    ):
        raise SpecError(
            [f"{spec.path}: the rewritten contract block does not carry the new digests"],
            fix="paste the printed lines by hand",
        )


def spec_contract(spec: Spec, at: tuple[Any, ...]) -> Contract:
    found = spec.contract if at == ("contract",) else spec.tasks[at[1]].contract
    if found is None:  # `compute` refused it already
        raise SpecError([f"{spec.path}: no contract at {'.'.join(map(str, at))}"])
    return found


def _last_line(node: yaml.Node) -> int:
    """The 0-based line of a value's last character (a block collection ends with its last
    child)."""
    if (
        isinstance(node, (yaml.MappingNode, yaml.SequenceNode))
        and not node.flow_style
        and node.value
    ):
        last = node.value[-1]
        return _last_line(last[1] if isinstance(node, yaml.MappingNode) else last)
    end = node.end_mark
    return end.line - 1 if end.column == 0 and end.line > node.start_mark.line else end.line
