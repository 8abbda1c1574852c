"""Earned autonomy: the gate's verifier-trust term from a signed ledger of receipted history.

The ledger (`<runs>/trust/ledger.jsonl`) is append-only and hash-chained; each entry is signed
by the run's key and carries one whole signed receipt, so `verify_ledger` recomputes every
level from the receipts alone, offline. An entry counts for one (agent identity, scope): the
digest of the agent's image id, files, command and preset, and the contract's id and hash
(which pins its acceptance tests and this policy), so history on one contract or one agent
never lends trust to another. A breach, a quarantine or a receipt that fails verification
drops trust to propose at once and forgets the passes before it; passes older than the window
stop counting.

A lookup must not re-verify the whole ledger: `checkpoint.json` (signed) holds the state after
its last entry, its length and head; a lookup checks it, that the ledger still ends where it
says (a truncated or rewritten ledger fails), and applies only the entries after it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import stat
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assure.core import atomic, gate, private
from assure.errors import AssureError
from assure.records import keys, layout
from assure.records.receipt_format import ReceiptError, canonical, check_receipt

if TYPE_CHECKING:  # cryptography is imported where a key is used (keys.py)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

LEDGER, CHECKPOINT, LOCK = "ledger.jsonl", "checkpoint.json", "ledger.lock"
FALLS = ("breach", "quarantine", "unverified")  # each drops trust to propose at once
SKEW_SECONDS = 300.0  # how far ahead of this host's clock an entry or a receipt may be dated
FRESH_SECONDS = 3600.0  # a receipt counts only if recorded within this long of its issue
MAX_ENTRY_BYTES = 1 << 20
ENTRY_FIELDS = frozenset(
    {"seq", "prev", "time", "agent", "scope", "outcome", "attempt", "receipt"}
    | {"receipt_sha256", "verifier", "signature"}
)
_WINDOW = re.compile(r"^([1-9][0-9]{0,5})([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class TrustError(AssureError):
    """The ledger, its checkpoint or an entry failed a check: every level it holds is void."""


# ------------------------------------------------------------------ policy and identity


@dataclass(frozen=True)
class Policy:
    after: int
    window: float  # seconds
    breaches: int
    max: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Policy:
        earn = data["earn"]
        m = _WINDOW.match(str(earn.get("window", "30d")))
        if m is None:
            raise TrustError(f"trust window {earn.get('window')!r} is not like 30d")
        return cls(
            int(earn["after"]),
            float(int(m[1]) * _UNIT[m[2]]),
            int(earn.get("breaches", 0)),
            gate.LEVELS[data["max"]],
        )


def tree_digest(folder: Path | None) -> str | None:
    """The digest of a folder's names, modes, link targets and bytes, links never followed."""
    if folder is None:
        return None
    h = hashlib.sha256()
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs.sort()
        for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(root, d))]):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, folder).encode("utf-8", "surrogateescape")
            st = os.lstat(path)
            h.update(b"%s\0%o\0" % (rel, st.st_mode))
            if os.path.islink(path):
                h.update(os.readlink(path).encode("utf-8", "surrogateescape"))
            else:
                with open(path, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        h.update(block)
            h.update(b"\0")
    return "sha256:" + h.hexdigest()


def identity(agent: Any, image_id: str | None) -> dict[str, Any]:
    """What the agent is: the image it ran (its id, not its tag), its files, command and preset."""
    return {
        "image": image_id or f"tag:{agent.image}",
        "files": tree_digest(agent.files),
        "command": list(agent.command),
        "preset": agent.preset,
    }


def scope_of(contract: Any) -> str:
    """The contract's id and hash: its acceptance tests and trust policy are pinned by the hash."""
    return "no-contract" if contract is None else f"{contract.id}@{contract.hash or 'unhashed'}"


def receipt_trust(
    *,
    ident: dict[str, Any],
    contract: Any,
    attempt: str,
    outcome: str,
    head: dict[str, Any] | None,  # None: no ledger could be read
) -> dict[str, Any]:
    """A receipt's `trust` field: who ran, under what, how it ended, and the ledger's head."""
    return {
        "agent": gate.digest(ident),
        "identity": ident,
        "scope": scope_of(contract),
        "attempt": attempt,
        "outcome": outcome,
        "policy": None if contract is None or contract.trust is None else dict(contract.trust),
        "ledger": head,
    }


# ------------------------------------------------------------------ state and replay


def _epoch(text: Any) -> float:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise TrustError(f"{text!r} is not a time") from None


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def new_state() -> dict[str, Any]:
    """`entries`, `head`, `time` (the last entry's), `recent` (receipt digests and attempts seen
    in the last FRESH_SECONDS: what a duplicate could be), and each (agent, scope)'s `keys`."""
    return {"entries": 0, "head": None, "time": 0.0, "recent": [], "keys": {}}


def key_of(agent: str, scope: str) -> str:
    return f"{agent} {scope}"


def apply(
    state: dict[str, Any], entry: dict[str, Any], public: Ed25519PublicKey, now: float
) -> dict[str, Any] | None:
    """Check `entry` against the state before it and fold it in; returns the level change it
    made ({from, to, why, receipts}), if any. Raises TrustError for anything out of order."""
    seq = state["entries"]
    body = {k: v for k, v in entry.items() if k != "signature"}
    if set(entry) != ENTRY_FIELDS:
        raise TrustError(f"entry {seq}: not a trust ledger entry")
    sig = entry["signature"]
    problem = (
        keys.signature_problem(sig, canonical(body, 2, "entry"), public)
        if isinstance(sig, dict) and {"key_id", "value"} <= set(sig)
        else "unsigned"
    )
    if problem:
        raise TrustError(f"entry {seq}: {problem}")
    if entry["seq"] != seq or entry["prev"] != state["head"]:
        raise TrustError(f"entry {seq}: out of the chain (seq {entry['seq']}, prev not the head)")
    t = _epoch(entry["time"])
    if t < state["time"]:
        raise TrustError(f"entry {seq}: dated {entry['time']}, before the entry it follows")
    if t > now + SKEW_SECONDS:
        raise TrustError(f"entry {seq}: dated {entry['time']}, in the future")
    receipt = entry["receipt"]
    digest = hashlib.sha256(canonical(receipt, 2, "receipt")).hexdigest()
    if digest != entry["receipt_sha256"]:
        raise TrustError(f"entry {seq}: receipt_sha256 is not its receipt's")
    why = receipt_problem(receipt, public)
    tr: dict[str, Any] = (
        given
        if isinstance(receipt, dict) and isinstance(given := receipt.get("trust"), dict)
        else {}
    )  # read only once the receipt verified (`why is None`): then it is a dict
    if why is None:
        issued = _epoch(receipt["issued"])
        if issued > t + SKEW_SECONDS or issued < t - FRESH_SECONDS:
            why = f"issued {receipt['issued']}, not within {FRESH_SECONDS:.0f} s before its entry"
    if why is not None and entry["outcome"] != "unverified":
        raise TrustError(f"entry {seq}: counts a receipt that fails verification ({why})")
    if why is None and (
        (entry["agent"], entry["scope"], entry["attempt"])
        != (tr["agent"], tr["scope"], tr["attempt"])
        or entry["outcome"] != tr["outcome"]
        or entry["verifier"] != receipt["verifier"]["id"]
    ):
        raise TrustError(f"entry {seq}: says other than its receipt")
    horizon = t - FRESH_SECONDS
    recent = [r for r in state["recent"] if r[2] >= horizon]
    pass_ = entry["outcome"] == "pass" and receipt.get("verdict") == "verified"
    pin = tr.get("ledger") if why is None else None
    if pass_ and not (isinstance(pin, dict) and pin["entries"] <= seq):
        raise TrustError(f"entry {seq}: its receipt pins no ledger head, or one after itself")
    k = key_of(entry["agent"], entry["scope"])
    ks = state["keys"].get(k) or {"policy": None, "passes": [], "falls": []}
    if pass_ and (
        any(r[0] == digest or r[1] == entry["attempt"] for r in recent)
        or any(p[2] == entry["attempt"] for p in ks["passes"])
    ):
        raise TrustError(f"entry {seq}: counts a receipt or an attempt already counted")
    if why is None:
        if ks["policy"] is None:
            ks["policy"] = tr["policy"]
        elif tr["policy"] != ks["policy"]:
            raise TrustError(f"entry {seq}: another trust policy for a scope that pins one")
    before = level(ks, t)
    if entry["outcome"] in FALLS:
        ks["passes"] = []
        ks["falls"] = (ks["falls"] + [[digest, t, entry["outcome"]]])[-101:]
    elif pass_:
        cap = Policy.from_json(ks["policy"]).after if ks["policy"] else 1
        ks["passes"] = (ks["passes"] + [[digest, t, entry["attempt"]]])[-cap:]
    state.update(
        entries=seq + 1,
        head=entry_hash(entry),
        time=t,
        recent=recent + [[digest, entry["attempt"], t]],
    )
    state["keys"][k] = ks
    after = level(ks, t)
    if after["level"] == before["level"]:
        return None
    return {
        "seq": seq,
        "time": entry["time"],
        "agent": entry["agent"],
        "scope": entry["scope"],
        "from": before["level"],
        "to": after["level"],
        "why": (
            after["why"]
            if after["level"] > before["level"]
            else f"{entry['outcome']}: {why or entry['attempt']}"
        ),
        "receipts": after["counted"] if after["level"] > before["level"] else [digest],
    }


def receipt_problem(receipt: Any, public: Ed25519PublicKey) -> str | None:
    """Why `receipt` does not count (unsigned, another key, forged, no trust field); None: it
    does."""
    try:
        check_receipt(receipt, "receipt")
    except ReceiptError as exc:
        return exc.detail
    if receipt.get("trust") is None:
        return "the receipt has no trust field"
    if receipt["signature"] is None:
        return "the receipt is unsigned"
    body = {k: v for k, v in receipt.items() if k != "signature"}
    return keys.signature_problem(receipt["signature"], canonical(body, 2, "receipt"), public)


def level(ks: dict[str, Any] | None, now: float) -> dict[str, Any]:
    """The level one (agent, scope) holds at `now`, why, what would change it, the receipts
    counted."""
    if ks is None or not ks.get("policy"):
        return {
            "level": gate.PROPOSE,
            "why": "no history under a trust policy",
            "counted": [],
            "next": "a verified pass under a contract with a trust policy",
        }
    p = Policy.from_json(ks["policy"])
    horizon = now - p.window
    falls = [f for f in ks["falls"] if f[1] > horizon]
    counted = [x for x in ks["passes"] if x[1] > horizon]
    if len(falls) > p.breaches:
        last = falls[-1]
        return {
            "level": gate.PROPOSE,
            "why": (
                f"{len(falls)} breach(es) in the window (last: {last[2]}, receipt {last[0][:16]}),"
                f" more than the {p.breaches} the policy allows"
            ),
            "counted": [],
            "next": (
                f"the breach leaves the window at {_iso(falls[-1 - p.breaches][1] + p.window)},"
                f" then {p.after} verified passes"
            ),
        }
    if len(counted) >= p.after:
        return {
            "level": p.max,
            "why": (
                f"{len(counted)} verified passes in the window since the last breach (the policy"
                f" asks {p.after})"
            ),
            "counted": [x[0] for x in counted],
            "next": (
                "any breach, quarantine or unverified receipt drops it to propose; the oldest"
                f" counted pass leaves the window at {_iso(counted[-p.after][1] + p.window)}"
            ),
        }
    return {
        "level": gate.PROPOSE,
        "why": (
            f"{len(counted)} of the {p.after} verified passes the policy asks, in the window since"
            " the last breach"
        ),
        "counted": [x[0] for x in counted],
        "next": f"{p.after - len(counted)} more verified pass(es) within {p.window:.0f} s",
    }


def entry_hash(entry: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(entry, 2, "entry")).hexdigest()


# ------------------------------------------------------------------ the ledger on disk


class Ledger:
    """One folder: the ledger, its signed checkpoint and a lock for appends."""

    def __init__(self, folder: Path, public: Ed25519PublicKey) -> None:
        self.folder, self.public = Path(folder), public
        self.path, self.checkpoint = self.folder / LEDGER, self.folder / CHECKPOINT

    @classmethod
    def under(cls, runs_base: Path, public: Ed25519PublicKey) -> Ledger:
        return cls(Path(runs_base) / layout.TRUST, public)

    def state(self, now: float | None = None) -> dict[str, Any]:
        """The state after the ledger's last entry: the checkpoint, checked, plus what follows
        it."""
        now = time.time() if now is None else now
        state, offset, last = self._checkpoint()
        if offset == 0 and not os.path.lexists(self.path):
            return state  # nothing recorded yet
        with _open_regular(self.path) as f:
            size = os.fstat(f.fileno()).st_size
            if size < offset:
                raise TrustError(
                    f"{self.path}: {size} bytes, shorter than the {offset} its checkpoint signed"
                    " (truncated)"
                )
            if state["entries"]:
                f.seek(last)
                line = f.read(offset - last)
                if hashlib.sha256(line.rstrip(b"\n")).hexdigest() != state["head"]:
                    raise TrustError(
                        f"{self.path}: entry {state['entries'] - 1} is not the one its checkpoint"
                        " signed (rolled back or rewritten)"
                    )
            f.seek(offset)
            for raw in _lines(f, size - offset):
                apply(state, _parse(raw, state["entries"]), self.public, now)
        return state

    def _checkpoint(self) -> tuple[dict[str, Any], int, int]:
        if not self.checkpoint.exists() and not self.checkpoint.is_symlink():
            if self.path.exists() or self.path.is_symlink():
                raise TrustError(f"{self.path}: a ledger without its checkpoint")
            return new_state(), 0, 0
        with _open_regular(self.checkpoint) as f:
            doc = _parse(f.read(MAX_ENTRY_BYTES * 8), -1)
        body = {k: v for k, v in doc.items() if k != "signature"}
        sig = doc.get("signature")
        problem = (
            keys.signature_problem(sig, canonical(body, 2, "checkpoint"), self.public)
            if isinstance(sig, dict) and {"key_id", "value"} <= set(sig)
            else "unsigned"
        )
        if problem:
            raise TrustError(f"{self.checkpoint}: {problem}")
        return doc["state"], doc["bytes"], doc["last"]

    def append(
        self, receipt: dict[str, Any], key: Ed25519PrivateKey, now: float | None = None
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Record one receipt (a receipt that fails verification as `unverified`, a fall); returns
        the entry and the level change it made. Raises TrustError if it may not be recorded."""
        now = time.time() if now is None else now
        private.make_folder(self.folder, exist_ok=True)
        with _locked(self.folder / LOCK):
            state = self.state(now)
            offset = _size(self.path)
            why = receipt_problem(receipt, self.public)
            tr = receipt.get("trust") if isinstance(receipt, dict) else None
            tr = tr if isinstance(tr, dict) else {}
            body = {
                "seq": state["entries"],
                "prev": state["head"],
                "time": _iso(max(now, state["time"])),
                "agent": str(tr.get("agent") or "unknown"),
                "scope": str(tr.get("scope") or "unknown"),
                "outcome": "unverified" if why else tr["outcome"],
                "attempt": str(tr.get("attempt") or "unknown"),
                "receipt": receipt,
                "receipt_sha256": hashlib.sha256(canonical(receipt, 2, "receipt")).hexdigest(),
                "verifier": str(
                    ((receipt.get("verifier") or {}) if isinstance(receipt, dict) else {}).get("id")
                    or "unknown"
                ),
            }
            entry = {**body, "signature": keys.signature(canonical(body, 2, "entry"), key)}
            change = apply(state, entry, self.public, now)
            line = canonical(entry, 2, "entry")  # so the line's digest is the entry's hash
            if len(line) > MAX_ENTRY_BYTES:
                raise TrustError(f"entry {body['seq']}: {len(line)} bytes, over {MAX_ENTRY_BYTES}")
            with open(self.path, "ab", opener=_private_opener) as f:
                f.write(line + b"\n")
                f.flush()
                os.fsync(f.fileno())
            self._sign_checkpoint(state, offset + len(line) + 1, offset, key)
        return entry, change

    def _sign_checkpoint(
        self, state: dict[str, Any], size: int, last: int, key: Ed25519PrivateKey
    ) -> None:
        body = {"state": state, "bytes": size, "last": last}
        doc = {**body, "signature": keys.signature(canonical(body, 2, "checkpoint"), key)}
        atomic.write_bytes(self.checkpoint, canonical(doc, 2, "checkpoint"))

    def head(self, now: float | None = None) -> dict[str, Any]:
        """What a new receipt pins: the number of entries and the last one's hash."""
        s = self.state(now)
        return {"entries": s["entries"], "head": s["head"]}


def verify_ledger(
    path: Path,
    public: Ed25519PublicKey,
    now: float | None = None,
    receipts: Iterable[Any] = (),
) -> dict[str, Any]:
    """Replay the whole ledger from its first entry (the receipts alone, no checkpoint): every
    level, every rise and fall with the receipts it counted, and every receipt's pinned head
    checked against the entries before it. Raises TrustError at the first entry that fails."""
    now = time.time() if now is None else now
    state, hashes, events = new_state(), list[str](), list[dict[str, Any]]()
    with _open_regular(Path(path)) as f:
        for raw in _lines(f, os.fstat(f.fileno()).st_size):
            entry = _parse(raw, state["entries"])
            pin = (
                ((entry.get("receipt") or {}).get("trust") or {}).get("ledger")
                if isinstance(entry.get("receipt"), dict)
                else None
            )
            change = apply(state, entry, public, now)
            if isinstance(pin, dict) and entry["outcome"] != "unverified":
                n = pin.get("entries")
                if (
                    not isinstance(n, int)
                    or n > len(hashes)
                    or (n and hashes[n - 1] != pin.get("head"))
                ):
                    raise TrustError(
                        f"entry {entry['seq']}: its receipt pins ledger head {n}, which this ledger"
                        " does not have there (rolled back or forked)"
                    )
            hashes.append(state["head"])
            if change:
                events.append(change)
    for r in receipts:  # receipts issued after the ledger's end would show its rollback
        pinned: dict[str, Any] = (
            r.get("trust", {}).get("ledger") if receipt_problem(r, public) is None else None
        ) or {}
        n = pinned["entries"] if pinned else 0
        if n and (n > len(hashes) or hashes[n - 1] != pinned["head"]):
            raise TrustError(
                f"receipt of {r['trust']['attempt']} pins ledger entry {n}"
                f" ({pinned['head'][:16]}), which this ledger does not have: rolled back or"
                " truncated"
            )
    levels = {k: level(ks, now) for k, ks in state["keys"].items()}
    for k, lv in levels.items():
        before = next(
            (e["to"] for e in reversed(events) if key_of(e["agent"], e["scope"]) == k), gate.PROPOSE
        )
        if lv["level"] != before:
            agent, scope = k.split(" ", 1)
            events.append(
                {
                    "seq": None,
                    "time": _iso(now),
                    "agent": agent,
                    "scope": scope,
                    "from": before,
                    "to": lv["level"],
                    "why": "decay: " + lv["why"],
                    "receipts": [],
                }
            )
    return {
        "entries": state["entries"],
        "head": state["head"],
        "levels": levels,
        "events": events,
        "state": state,
        "hashes": hashes,
    }


# ------------------------------------------------------------------ files, bounded and unfollowed


def _private_opener(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW, private.FILE_MODE)


@contextlib.contextmanager
def _open_regular(path: Path) -> Iterator[Any]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise TrustError(f"{path}: missing") from None
    except OSError as exc:
        raise TrustError(f"{path}: cannot be opened ({exc.strerror}; a link is refused)") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise TrustError(f"{path}: not a regular file")
        yield f


def _size(path: Path) -> int:
    try:
        return os.lstat(path).st_size
    except FileNotFoundError:
        return 0


def _lines(f: Any, limit: int) -> Iterator[bytes]:
    while limit > 0:
        raw = f.readline(min(limit, MAX_ENTRY_BYTES + 1))
        if not raw:
            return
        limit -= len(raw)
        if not raw.endswith(b"\n"):
            raise TrustError("the ledger ends in a partial or over-long line")
        yield raw[:-1]


def _parse(raw: bytes, seq: int) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise TrustError(f"entry {seq}: not JSON") from None
    if not isinstance(value, dict):
        raise TrustError(f"entry {seq}: not a JSON object")
    return value


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, private.FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
