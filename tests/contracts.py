"""Test specs carry contracts that are ratified as written: the helper that writes a spec
calls `ratify_in_place`, which fills in each contract block's term digests and hash with the
same code as `assure contract hash --write`, and signs them as `ratified_by` with the
checkout's published example key (`assure contract ratify`), which tests/conftest.py trusts."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization

from assure import spec as spec_mod
from assure.run import ratify

ROOT = Path(__file__).resolve().parents[1]
KEYRING = ROOT / "specs" / "ratifiers.yaml"
KEY = (
    ROOT / "tests" / "ratifier.pem"
)  # git keeps no 0600, so it is read here, not by keys.load_private


def example_key():
    return serialization.load_pem_private_key(KEY.read_bytes(), password=None)


def ratify_in_place(path: Path) -> Path:
    """Give every contract block in the spec file at `path` that has no `hash` its digests,
    signed by its `ratified_by` when it names one."""
    spec = spec_mod.load(path)
    if spec.contract is not None and spec.contract.hash is None:
        _ratify(spec, ratify.compute(spec))
    for task in spec.tasks:
        spec = spec_mod.load(path)
        found = ratify.compute(spec, task.id) if task.contract is not None else None
        if found is not None and found.at != ("contract",) and found.carried_hash is None:
            _ratify(spec, found)
    return path


def _ratify(spec: spec_mod.Spec, found: ratify.Ratification) -> None:
    name = ratify.spec_contract(spec, found.at).ratified_by
    if name:
        ratify.sign(spec, found, name, example_key())
    else:
        ratify.write(spec, found)
