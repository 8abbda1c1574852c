"""Who ratified a contract: the ratifier's Ed25519 signature over the terms, checked against a
keyring of trusted ratifiers that the operator keeps apart from every spec.

A spec's `ratified_by` is only a name; whoever edits the spec can write any name. The signature
binds that name to the spec's name, the contract's id and its hash (the digest of every term),
and the keyring says which key speaks for which name. The gate accepts a contract only when the
host found such a signature (`gate.Contract.signed`), so editing the terms, or copying another
spec's signature, needs a trusted ratifier's private key.

The keyring is YAML, `NAME: ed25519:BASE64` (the raw 32-byte public key), read from
`ratifiers.yaml` beside the user's keys and from each file in `ASSURE_RATIFIERS`
(os.pathsep-separated); a name two files give different keys fails closed.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from assure.core import atomic
from assure.core.chain import canonical
from assure.errors import AssureError, unreadable
from assure.records import keys

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

    from assure.spec import Contract

ENV = "ASSURE_RATIFIERS"
PREFIX = "ed25519:"


class KeyringError(AssureError):
    """A keyring file is unreadable, malformed, or names one ratifier with two keys."""


def own() -> Path:
    """The user's own keyring: where `--trust` (and `assure init`) add a ratifier."""
    return keys.default_key_dir().parent / "ratifiers.yaml"


def paths() -> list[Path]:
    """The keyring files in force: the user's own, then each in ASSURE_RATIFIERS."""
    return [own(), *(Path(p) for p in os.environ.get(ENV, "").split(os.pathsep) if p)]


@dataclass(frozen=True)
class Keyring:
    keys: dict[str, Ed25519PublicKey]
    sources: tuple[Path, ...]

    def where(self) -> str:
        return ", ".join(str(p) for p in self.sources) or "(no keyring file)"


def load(files: list[Path] | None = None) -> Keyring:
    """Every trusted ratifier in `files` (default: `paths()`); a missing file holds none."""
    found: dict[str, Ed25519PublicKey] = {}
    files = paths() if files is None else files
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            raise KeyringError(f"unreadable keyring: {unreadable(exc)}", where=str(path)) from exc
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise KeyringError(f"not YAML ({exc})", where=str(path)) from exc
        if not isinstance(data, dict):
            raise KeyringError(
                "a keyring is a mapping of ratifier name to ed25519:BASE64", where=str(path)
            )
        for name, value in data.items():
            key = _public(value, f"{path}: {name}")
            if name in found and public_text(found[name]) != public_text(key):
                raise KeyringError(
                    f"ratifier {name!r} has two different keys in the keyrings", where=str(path)
                )
            found[str(name)] = key
    return Keyring(found, tuple(files))


def _public(value: object, where: str) -> Ed25519PublicKey:
    if not isinstance(value, str) or not value.startswith(PREFIX):
        raise KeyringError("expected ed25519:BASE64 (a raw 32-byte public key)", where=where)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        raw = base64.b64decode(value[len(PREFIX) :], validate=True)
        return Ed25519PublicKey.from_public_bytes(raw)
    except (binascii.Error, ValueError) as exc:
        raise KeyringError(f"not an Ed25519 public key ({exc})", where=where) from exc


def public_text(key: Ed25519PublicKey) -> str:
    """A public key as a keyring holds it."""
    from cryptography.hazmat.primitives import serialization

    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return PREFIX + base64.b64encode(raw).decode("ascii")


def message(spec_name: str, contract_id: str, contract_hash: str, ratified_by: str) -> bytes:
    """What a ratifier signs: these terms (by their hash), for this spec, by this name."""
    return canonical(
        {
            "assure": "ratification/1",
            "spec": spec_name,
            "contract": contract_id,
            "hash": contract_hash,
            "ratified_by": ratified_by,
        }
    )


def sign(
    spec_name: str, contract_id: str, contract_hash: str, name: str, key: Ed25519PrivateKey
) -> dict[str, str]:
    return keys.signature(message(spec_name, contract_id, contract_hash, name), key)


@dataclass(frozen=True)
class Check:
    """`key_id` of the trusted key whose signature covers the contract's hash, or a `problem`."""

    key_id: str | None = None
    problem: str | None = None


def check(spec_name: str, contract: Contract, keyring: Keyring | None = None) -> Check:
    """Whether `contract` (a spec's Contract) carries its ratifier's trusted signature over the
    hash it carries; the gate then checks that hash against the terms as they run."""
    name = contract.ratified_by
    if not name:
        return Check(problem="nobody ratified it")
    sig = contract.signature
    if not sig or not contract.hash:
        return Check(problem=f"{name!r} did not sign it: `assure contract ratify SPEC --as {name}`")
    try:
        keyring = load() if keyring is None else keyring
    except KeyringError as exc:
        return Check(problem=f"the trusted-ratifiers keyring is unusable: {exc.explain()}")
    key = keyring.keys.get(name)
    if key is None:
        return Check(
            problem=f"{name!r} is not a trusted ratifier (keyring: {keyring.where()}; {ENV})"
        )
    problem = keys.signature_problem(sig, message(spec_name, contract.id, contract.hash, name), key)
    if problem:
        return Check(problem=f"the signature is not {name!r}'s over these terms: {problem}")
    return Check(key_id=keys.key_id(key))


def trust(path: Path, name: str, key: Ed25519PublicKey) -> bool:
    """Add `name: key` to the keyring file at `path` (its other lines kept as written); False
    if it holds it already. A name it holds with another key is refused: replacing a
    ratifier's key is the operator's own edit."""
    held = load([path]).keys.get(name)
    if held is not None:
        if public_text(held) == public_text(key):
            return False
        raise KeyringError(
            f"the keyring holds another key for {name!r}",
            where=str(path),
            fix="ratify with that key (--key), or edit the keyring yourself",
        )
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    line = yaml.safe_dump({name: public_text(key)}, width=1000)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_bytes(
        path, (text + ("\n" if text and not text.endswith("\n") else "") + line).encode()
    )
    return True
