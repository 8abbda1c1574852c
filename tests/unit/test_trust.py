"""Earned autonomy (records/trust, run/earned): the attacks that must not raise trust, each
written as the attacker would, and the driver on the in-memory backend earning commit over
runs and losing it on a breach, so that the next promotion that needed it is denied."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from assure.core import gate
from assure.records import keys, layout, receipts, trust
from assure.records.trust import Ledger, TrustError
from assure.spec import Agent
from tests.unit.test_driver_states import (
    ACCEPTANCE,
    drive,
    fix,
    new_run,
    ratified,
    short_tmp,  # noqa: F401 (a fixture)
    tamper,
    target,  # noqa: F401 (a fixture)
    write_spec,
)

POLICY = {"earn": {"after": 3, "window": "1d", "breaches": 0}, "max": "commit"}
CONTRACT = SimpleNamespace(id="c-1", hash="sha256:" + "a" * 64, trust=POLICY)
AGENT = Agent(image="assure-agent:x", command=("python3", "agent.py"), env={}, files=None)
IDENT = trust.identity(AGENT, "sha256:" + "1" * 64)
NOW = 1_900_000_000.0
SEAL = {
    "run_id": "r",
    "sealed_at": "2030-01-01T00:00:00Z",
    "logs": [{"path": layout.EVENTS_LOG, "lines": 0, "head_hash": "0" * 64}],
    "merkle_root": "0" * 64,
}


@pytest.fixture(scope="module")
def key() -> Any:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.generate()


def receipt(
    key: Any,
    book: Ledger,
    n: int,
    *,
    outcome: str = "pass",
    ident: dict[str, Any] = IDENT,
    contract: Any = CONTRACT,
    at: float = NOW,
) -> dict[str, Any]:
    """A signed receipt for attempt `n`, issued at `at`, pinning the ledger's head as it is."""
    verified = outcome == "pass"
    record = receipts.build_receipt(
        run_id=f"run-{n}",
        task_id="main",
        claim="done",
        verdict="verified" if verified else "rejected",
        ground_truth="confirmed" if verified else "contradicted",
        reason="r",
        checks=[
            {
                "source": "verifier:assertion",
                "query": "q",
                "observed_at": "2030-01-01T00:00:00Z",
                "response_sha256": "0" * 64,
                "excerpt": "",
            }
        ],
        subject="agent:x",
        principal=keys.key_id(key.public_key()),
        verifier={"id": "assure-verifier/test", "independence": "host"},
        deployment_id="d",
        scope_id=contract.id,
        seal=SEAL,
        trust=trust.receipt_trust(
            ident=ident,
            contract=contract,
            attempt=f"run-{n}/main/1",
            outcome=outcome,
            head=book.head(at),
        ),
        issued=trust._iso(at),
    )
    return receipts.sign(record, key)


def level(book: Ledger, ident: dict[str, Any] = IDENT, contract: Any = CONTRACT, at=NOW) -> int:
    ks = book.state(at)["keys"].get(trust.key_of(gate.digest(ident), trust.scope_of(contract)))
    return trust.level(ks, at)["level"]


def earn(key: Any, book: Ledger, runs: range, at: float = NOW) -> None:
    for n in runs:
        book.append(receipt(key, book, n, at=at), key, at)


def test_n_verified_passes_earn_the_policy_max_and_one_breach_drops_it_at_once(key, tmp_path):
    book = Ledger(tmp_path / "t", key.public_key())
    earn(key, book, range(2))
    assert level(book) == gate.PROPOSE
    _, change = book.append(receipt(key, book, 2), key, NOW)
    assert level(book) == gate.COMMIT and change is not None
    assert (change["from"], change["to"]) == (gate.PROPOSE, gate.COMMIT)
    assert len(change["receipts"]) == 3  # the receipts it counted
    _, fall = book.append(receipt(key, book, 3, outcome="breach"), key, NOW)
    assert fall is not None and fall["to"] == gate.PROPOSE and fall["why"].startswith("breach")
    assert level(book) == gate.PROPOSE
    earn(key, book, range(4, 7))  # breaches: 0 means none may stand in the window
    assert level(book) == gate.PROPOSE
    assert level(book, at=NOW + 86400 + 1) == gate.PROPOSE  # the passes left the window too


def test_passes_outside_the_window_decay(key, tmp_path):
    book = Ledger(tmp_path / "t", key.public_key())
    earn(key, book, range(3))
    assert level(book, at=NOW + 3600) == gate.COMMIT
    assert level(book, at=NOW + 86400 + 1) == gate.PROPOSE


def test_a_forged_receipt_is_refused_and_drops_trust(key, tmp_path):
    book = Ledger(tmp_path / "t", key.public_key())
    earn(key, book, range(3))
    forged = receipt(key, book, 3, outcome="fail")
    forged = {**forged, "verdict": "verified", "trust": {**forged["trust"], "outcome": "pass"}}
    entry, change = book.append(forged, key, NOW)
    assert entry["outcome"] == "unverified" and change and change["to"] == gate.PROPOSE
    assert level(book) == gate.PROPOSE


def test_a_receipt_signed_by_another_key_does_not_count(key, tmp_path):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    other = Ed25519PrivateKey.generate()
    book = Ledger(tmp_path / "t", key.public_key())
    for n in range(3):
        entry, _ = book.append(receipt(other, book, n), key, NOW)
        assert entry["outcome"] == "unverified"
    assert level(book) == gate.PROPOSE


def test_the_same_receipt_twice_is_refused(key, tmp_path):
    book = Ledger(tmp_path / "t", key.public_key())
    once = receipt(key, book, 0)
    book.append(once, key, NOW)
    for _ in range(2):
        with pytest.raises(TrustError, match="already counted"):
            book.append(once, key, NOW)
    again = receipt(key, book, 0)  # the same attempt, issued anew (as a later promote does)
    with pytest.raises(TrustError, match="already counted"):
        book.append(again, key, NOW)
    assert book.state(NOW)["entries"] == 1


def test_passes_count_for_their_own_scope_and_agent_only(key, tmp_path):
    book = Ledger(tmp_path / "t", key.public_key())
    other_scope = SimpleNamespace(id="c-1", hash="sha256:" + "b" * 64, trust=POLICY)
    other_agent = trust.identity(AGENT, "sha256:" + "2" * 64)
    earn(key, book, range(3))
    assert level(book, contract=other_scope) == gate.PROPOSE
    assert level(book, ident=other_agent) == gate.PROPOSE
    book.append(receipt(key, book, 9, ident=other_agent, outcome="breach"), key, NOW)
    assert level(book) == gate.COMMIT  # another agent's breach is its own


def test_an_agent_that_swaps_its_files_but_keeps_its_name_starts_from_propose(key, tmp_path):
    files = tmp_path / "agent"
    files.mkdir()
    (files / "agent.py").write_text("print('careful')\n")
    before = trust.identity(Agent(**{**AGENT.__dict__, "files": files}), "sha256:" + "1" * 64)
    book = Ledger(tmp_path / "t", key.public_key())
    earn_as = [receipt(key, book, 0, ident=before)]
    book.append(earn_as[0], key, NOW)
    for n in (1, 2):
        book.append(receipt(key, book, n, ident=before), key, NOW)
    assert level(book, ident=before) == gate.COMMIT
    (files / "agent.py").write_text("print('reckless')\n")  # same name, same image, same command
    after = trust.identity(Agent(**{**AGENT.__dict__, "files": files}), "sha256:" + "1" * 64)
    assert gate.digest(after) != gate.digest(before)
    assert level(book, ident=after) == gate.PROPOSE


def test_a_backdated_or_stale_receipt_is_refused(key, tmp_path):
    book = Ledger(tmp_path / "t", key.public_key())
    with pytest.raises(TrustError, match="not within"):
        book.append(receipt(key, book, 0, at=NOW - 2 * trust.FRESH_SECONDS), key, NOW)
    with pytest.raises(TrustError, match="not within"):
        book.append(receipt(key, book, 0, at=NOW + 2 * trust.SKEW_SECONDS), key, NOW)
    assert book.state(NOW)["entries"] == 0


def _resigned(key: Any, entry: dict[str, Any], **change: Any) -> dict[str, Any]:
    """An entry rewritten by someone holding the key: still refused if it is out of order."""
    body = {k: v for k, v in {**entry, **change}.items() if k != "signature"}
    from assure.records.receipt_format import canonical

    return {**body, "signature": keys.signature(canonical(body, 2, "e"), key)}


def test_backdated_and_future_dated_entries_are_refused(key, tmp_path):
    book = Ledger(tmp_path / "t", key.public_key())
    earn(key, book, range(2))
    lines = book.path.read_bytes().splitlines()
    second = json.loads(lines[1])
    for when, said in ((NOW - 3600, "before the entry it follows"), (NOW + 3600, "in the future")):
        forged = _resigned(key, second, time=trust._iso(when))
        ledger = tmp_path / f"l{when}.jsonl"
        ledger.write_bytes(lines[0] + b"\n" + json.dumps(forged).encode() + b"\n")
        if when < NOW:  # an earlier time than the first entry's needs the first one later
            first = _resigned(key, json.loads(lines[0]), time=trust._iso(NOW))
            ledger.write_bytes(b"\n".join(json.dumps(e).encode() for e in (first, forged)) + b"\n")
        with pytest.raises(TrustError, match=said if when > NOW else "chain|before"):
            trust.verify_ledger(ledger, key.public_key(), NOW)


def test_a_truncated_or_rolled_back_ledger_fails_and_earns_nothing(key, tmp_path):
    book = Ledger(tmp_path / "t", key.public_key())
    earn(key, book, range(2))
    old_ledger, old_checkpoint = book.path.read_bytes(), book.checkpoint.read_bytes()
    book.append(receipt(key, book, 2, outcome="breach"), key, NOW)
    later = receipt(key, book, 3, outcome="fail")  # pins the head after the breach
    full = book.path.read_bytes()
    book.path.write_bytes(full[: len(old_ledger)])  # truncated: the breach is gone
    with pytest.raises(TrustError, match="truncated"):
        book.state(NOW)
    book.path.write_bytes(old_ledger + b"x" * (len(full) - len(old_ledger)))
    with pytest.raises(TrustError):
        book.state(NOW)
    book.path.write_bytes(old_ledger)  # rolled back, the checkpoint with it: consistent...
    book.checkpoint.write_bytes(old_checkpoint)
    assert book.state(NOW)["entries"] == 2
    with pytest.raises(TrustError, match="rolled back"):  # ...but a later receipt pins more
        trust.verify_ledger(book.path, key.public_key(), NOW, receipts=[later])


def test_passes_farmed_on_trivial_tasks_do_not_count_on_another_contract(key, tmp_path):
    def contract(assertions: Any) -> Any:
        c = gate.ratify(
            gate.Contract(
                id="c-1",
                proposed_by="a",
                ratified_by="b",
                scope=("fs:**",),
                autonomy_ceiling=gate.COMMIT,
                trust=POLICY,
            ),
            assertions=assertions,
        )
        return SimpleNamespace(id=c.id, hash=c.hash, trust=c.trust)

    trivial, real = contract([{"exit_code": 0}]), contract(ACCEPTANCE)
    assert trust.scope_of(trivial) != trust.scope_of(real)  # the same id, other tests
    book = Ledger(tmp_path / "t", key.public_key())
    for n in range(10):
        book.append(receipt(key, book, n, contract=trivial), key, NOW)
    assert level(book, contract=trivial) == gate.COMMIT
    assert level(book, contract=real) == gate.PROPOSE


def test_the_checkpoint_is_signed_and_a_ledger_without_one_fails(key, tmp_path):
    book = Ledger(tmp_path / "t", key.public_key())
    earn(key, book, range(3))
    doc = json.loads(book.checkpoint.read_bytes())
    doc["state"]["keys"] = {}
    book.checkpoint.write_text(json.dumps(doc))
    with pytest.raises(TrustError, match="does not match"):
        book.state(NOW)
    book.checkpoint.unlink()
    with pytest.raises(TrustError, match="without its checkpoint"):
        book.state(NOW)


def test_verify_recomputes_every_level_and_event_from_the_receipts_alone(key, tmp_path):
    book = Ledger(tmp_path / "t", key.public_key())
    earn(key, book, range(3))
    book.append(receipt(key, book, 3, outcome="quarantine"), key, NOW)
    report = trust.verify_ledger(book.path, key.public_key(), NOW)
    assert report["state"] == book.state(NOW)
    assert [(e["from"], e["to"]) for e in report["events"]] == [(0, 1), (1, 0)]
    assert len(report["events"][0]["receipts"]) == 3
    assert [lv["level"] for lv in report["levels"].values()] == [gate.PROPOSE]


# ------------------------------------------------------------------ the driver, on the fake

MODE = {"breach": False}


def worker(ctx: Any) -> int:
    """One agent (one command, one identity) that fixes add(), or, when told, breaches."""
    return tamper(ctx) if MODE["breach"] else fix(ctx)


def test_the_driver_earns_commit_over_runs_and_a_breach_denies_the_next_promotion(
    tmp_path,
    short_tmp,
    target,  # noqa: F811 (the fixtures imported above)
):
    private, public = keys.generate_keypair(tmp_path / "keys")
    contract = {
        **ratified(["fs:**"]),
        "trust": {"earn": {"after": 2, "window": "1d"}, "max": "commit"},
    }
    spec = write_spec(
        tmp_path,
        "worker",
        contract=contract,
        promote={"target": str(target)},
        assertions=ACCEPTANCE,
        max_attempts=1,
    )

    runs: list[Path] = []

    def once(breach: bool = False) -> str:
        MODE["breach"] = breach
        run = new_run(tmp_path, spec)
        shutil.rmtree(short_tmp, ignore_errors=True)
        Path(short_tmp).mkdir()
        result, _ = drive(spec, run, short_tmp, {"worker": worker}, signing_key=private)
        runs.append(run.path)  # in the order they ran (two ids of one second sort by chance)
        return result.report["tasks"][0]["state"]

    assert [once(), once()] == ["proposed", "proposed"]  # two passes earned, none before
    assert once() == "committed"
    assert once(breach=True) == "quarantined"
    assert once() == "proposed"  # the breach dropped it: the promotion that needed it is denied
    dropped = [a for a in (runs[3] / layout.ALERTS).iterdir() if a.name.startswith("trust_dropped")]
    assert dropped and "breach" in json.loads(dropped[0].read_text())["message"]
    report = trust.verify_ledger(
        tmp_path / "runs" / layout.TRUST / trust.LEDGER,
        keys.load_public(public),
        receipts=[
            json.loads(p.read_text())
            for r in runs
            for p in (r / layout.RECEIPTS).glob("*.json")
            if p.name != layout.SEAL
        ],
    )
    assert [(e["from"], e["to"]) for e in report["events"]] == [(0, 1), (1, 0)]
    assert report["entries"] == 5
    from typer.testing import CliRunner

    from assure.cli import app

    ledger, runs_dir = str(tmp_path / "runs" / layout.TRUST / trust.LEDGER), str(tmp_path / "runs")
    cli = CliRunner()
    verified = cli.invoke(
        app,
        ["trust", "verify", ledger, "--public-key", str(public), "--runs-dir", runs_dir, "--json"],
    )
    assert verified.exit_code == 0, verified.output
    agent = json.loads((runs[0] / layout.RECEIPTS).glob("main-*.json").__next__().read_text())
    shown = cli.invoke(
        app,
        ["trust", "show", agent["trust"]["agent"][:20], "--public-key", str(public)]
        + ["--runs-dir", runs_dir],
        env={"COLUMNS": "300"},
    )
    assert shown.exit_code == 0 and "propose" in shown.output and "breach" in shown.output, (
        shown.output
    )
    (runs[0] / layout.RECEIPTS).joinpath("x.json").write_text("{}")  # not a receipt: skipped
    book = Path(ledger)
    book.write_bytes(book.read_bytes().splitlines(keepends=True)[0])  # rolled back to 1 entry
    refused = cli.invoke(
        app, ["trust", "verify", ledger, "--public-key", str(public), "--runs-dir", runs_dir]
    )
    assert refused.exit_code == 1 and "rolled back" in refused.output, refused.output


def test_under_a_trust_policy_an_attempts_own_live_effects_get_no_static_trust(tmp_path):
    from assure.run import policy

    plain = write_spec(tmp_path, "fix", contract=ratified(["fs:**"]), assertions=ACCEPTANCE)
    earning = write_spec(
        tmp_path,
        "fix2",
        contract={**ratified(["fs:**"]), "trust": {"earn": {"after": 1}, "max": "commit"}},
        assertions=ACCEPTANCE,
    )
    assert policy.gateway_policy(plain).verifier_trust == policy.verifier_trust(plain)
    assert policy.gateway_policy(earning).verifier_trust == gate.PROPOSE
