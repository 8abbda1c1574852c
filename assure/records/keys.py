"""The Ed25519 key files that sign receipts, and the signature object made with them: kept apart
from receipts so that `assure keys` and the verifier need nothing else."""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from assure.core import private
from assure.errors import AssureError, unreadable

# cryptography is imported where a key is made, read or used: a keyless run (and the CLI's start
# before its first spec) has no use for it (issue 25)
if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

ALG = "Ed25519"
PRIVATE_NAME, PUBLIC_NAME = "aar-ed25519.pem", "aar-ed25519.pub.pem"


class KeyFileError(AssureError):
    """A key file is missing, unreadable, of the wrong kind, or would be overwritten."""


def default_key_dir() -> Path:
    """Outside any project tree, so a key is never exported or committed with a run."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "assure" / "keys"


def generate_keypair(directory: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write a new Ed25519 key pair as PEM (private file mode 0600); never overwrite a file."""
    directory = Path(directory)
    private_path, public_path = directory / PRIVATE_NAME, directory / PUBLIC_NAME
    for path in (private_path, public_path):
        if path.exists() or path.is_symlink():
            raise KeyFileError(
                "a key file is already there; refusing to overwrite it",
                where=str(path),
                fix="use another --dir, or move the old key away yourself",
            )
    if directory.exists() and not directory.is_dir():
        raise KeyFileError(
            "--dir is not a folder",
            where=str(directory),
            fix="pass --dir a folder (made if missing) for the key pair",
        )
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    try:
        private.make_folder(directory, exist_ok=True)
        _create(private_path, private_pem, private.FILE_MODE)
        try:
            _create(public_path, public_pem, 0o644)
        except BaseException:
            private_path.unlink()
            raise
    except FileExistsError as exc:
        raise KeyFileError(
            "a key file appeared while writing; refusing to overwrite it", where=str(exc.filename)
        ) from exc
    except OSError as exc:
        raise KeyFileError(
            f"cannot write the key pair: {exc.strerror}", where=str(directory)
        ) from exc
    return private_path, public_path


def _create(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def load_private(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    """Load a PEM Ed25519 private key that only its owner can read."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = Path(path)
    data = _read_key(path)
    if os.stat(path).st_mode & 0o077:
        raise KeyFileError(
            "private key is readable by others", where=str(path), fix=f"chmod 600 {path}"
        )
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"not an unencrypted PEM private key ({exc})", where=str(path)) from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(
            f"not an Ed25519 key ({type(key).__name__})",
            where=str(path),
            fix="make one with `assure keys generate`",
        )
    return key


def load_public(path: str | os.PathLike[str]) -> Ed25519PublicKey:
    """Load a PEM (SubjectPublicKeyInfo) Ed25519 public key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    path = Path(path)
    data = _read_key(path)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"not a PEM public key ({exc})", where=str(path)) from exc
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(f"not an Ed25519 key ({type(key).__name__})", where=str(path))
    return key


def _read_key(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise KeyFileError(
            "no such key file", where=str(path), fix="make one with `assure keys generate`"
        ) from exc
    except OSError as exc:
        raise KeyFileError(
            f"unreadable key file: {unreadable(exc)}",
            where=str(path),
            fix="pass the path of a PEM key file",
        ) from exc


def key_id(public_key: Ed25519PublicKey) -> str:
    """`ed25519:` and the first 16 hex digits of the SHA-256 of the raw 32-byte public key."""
    from cryptography.hazmat.primitives import serialization

    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]


def signature_problem(
    sig: dict[str, str], message: bytes, public_key: Ed25519PublicKey
) -> str | None:
    """Why `sig` (as `signature` made it) is not `public_key`'s signature of `message`; None if it
    is."""
    from cryptography.exceptions import InvalidSignature

    expected = key_id(public_key)
    if sig["key_id"] != expected:
        return f"signed by key {sig['key_id']}, not by {expected} (the public key given)"
    try:
        value = base64.b64decode(sig["value"], validate=True)
    except (binascii.Error, ValueError):
        return "signature.value is not base64"
    try:
        public_key.verify(value, message)
    except InvalidSignature:
        return f"signature by {expected} does not match the content (changed after signing)"
    return None


def signature(message: bytes, private_key: Ed25519PrivateKey) -> dict[str, str]:
    """`{alg, key_id, value}`: the signature of `message`, as receipts and the seal file carry
    it."""
    value = base64.b64encode(private_key.sign(message)).decode("ascii")
    return {"alg": ALG, "key_id": key_id(private_key.public_key()), "value": value}
