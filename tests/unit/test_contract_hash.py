"""`assure contract hash` and the gateway agree: what it prints (or writes) is exactly what a real
in-process gateway, configured by the host's policy from the same spec, accepts; a term edited
after that is refused on every mutation, naming the term, and the command names it too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from assure import spec as spec_mod
from assure.cli import app
from assure.client import Client, GatewayError
from assure.core import gate
from assure.core.chain import verify_chain
from assure.errors import AssureError
from assure.gateway.config import parse
from assure.gateway.server import serve
from assure.run import policy

ROOT = Path(__file__).resolve().parents[2]
SPEC = f"""\
version: 1
name: pinned
# the agent is never run here: only the contract block matters
agent: {{command: ["true"], files: {ROOT / "fixtures" / "agents" / "benign"}}}
workspace:
  fixture: {ROOT / "fixtures" / "workspaces" / "calc"}
  writable: ["src/**"]
  protected: ["tests/**"]
assertions:
  - exit_code: 0
expect: pass
contract:
  id: c
  proposed_by: alice  # the proposer
  ratified_by: bob
  scope: ["fs:**"]
  autonomy_ceiling: commit
"""


def contract_hash(*args: str) -> Any:
    result = CliRunner().invoke(app, ["contract", "hash", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result


def write(tmp_path: Path, text: str = SPEC) -> Path:
    path = tmp_path / "pinned.yaml"
    path.write_text(text)
    return path


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.fixture()
def gateway_for(gateway_config):
    """A real gateway whose policy the host made from the spec, as an attempt's would be."""
    started = []

    def start(path: Path) -> tuple[Any, Client]:
        spec = spec_mod.load(path)
        raw = gateway_config(list(spec.workspace.protected))
        raw["policy"] = {
            **json.loads(json.dumps(policy.gateway_policy(spec).to_json())),
            "operator_dial": gate.COMMIT,
            "verifier_trust": gate.COMMIT,
        }
        gw = serve(parse(raw))
        started.append(gw)
        return gw, Client(gw.config.socket, connect_timeout=2, timeout=10)

    yield start
    for gw in started:
        gw.shutdown()


def last_decision(gw: Any) -> dict[str, Any]:
    return [r for r in verify_chain(gw.config.journal) if r["event"] == "tool_call"][-1]


def denied(gw: Any, client: Client) -> dict[str, Any]:
    with pytest.raises(GatewayError) as info:
        client.call("fs.write", path="src/new.py", content="x")
    assert info.value.status == 403
    return last_decision(gw)


def test_the_printed_terms_are_what_the_gateway_accepts(tmp_path, gateway_for):
    path = write(tmp_path)
    first = contract_hash(path)
    printed = yaml.safe_load(first.stdout)
    assert list(printed["terms"]) == [t for t in gate.TERMS if t != "trust"] and printed[
        "hash"
    ] == gate.contract_hash(printed["terms"])
    assert "no term digests" in first.stderr
    edit(
        path,
        "  autonomy_ceiling: commit\n",
        "  autonomy_ceiling: commit\n"
        + "".join(f"  {line}\n" for line in first.stdout.splitlines()),
    )
    again = contract_hash(path)
    assert again.stdout == first.stdout and again.stderr.startswith("unchanged")
    gw, client = gateway_for(path)
    assert denied(gw, client)["rule"] == "contract.signature"  # hashed, not yet signed
    assert ratify_cli(path, key_file(tmp_path)).exit_code == 0
    _, client = gateway_for(path)
    assert client.call("fs.write", path="src/new.py", content="x")["result"]


@pytest.mark.parametrize(
    "term, old, new",
    [
        ("assertions", "  - exit_code: 0\n", "  - exit_code: 1\n"),
        ("protected", 'protected: ["tests/**"]', 'protected: ["tests/unit/**"]'),
        ("writable", 'writable: ["src/**"]', 'writable: ["**"]'),
        ("scope", 'scope: ["fs:**"]', 'scope: ["fs:**", "db:*"]'),
    ],
)
def test_a_term_edited_after_ratification_is_named_by_the_gateway_and_the_command(
    tmp_path, gateway_for, term, old, new
):
    path = write(tmp_path)
    ratify_cli(path, key_file(tmp_path))
    edit(path, old, new)
    gw, client = gateway_for(path)
    record = denied(gw, client)
    assert (
        record["rule"] == "contract.terms_changed" and f"ratified: {term};" in record["reason"]
    ), record
    assert (
        contract_hash(path).stderr
        == f"changed since the terms it carries: {term}; have it re-ratified\n"
    )
    contract_hash(path, "--write")  # the new terms, but nobody signed them
    gw, client = gateway_for(path)
    assert denied(gw, client)["rule"] == "contract.signature"
    ratify_cli(path, key_file(tmp_path))  # re-ratified: allowed again
    _, client = gateway_for(path)
    assert client.call("fs.write", path="src/new.py", content="x")["result"]


def test_write_replaces_only_the_terms_and_hash_lines_and_keeps_comments(tmp_path):
    path = write(tmp_path, SPEC + "  hash: sha256:" + "0" * 64 + "  # old\n# the end\n")
    result = contract_hash(path, "--write")
    assert "no term digests" in result.stderr  # an old-format contract: a hash alone
    text = path.read_text()
    assert (
        "# the agent is never run here" in text
        and "# the proposer" in text
        and text.endswith("# the end\n")
    )
    assert "0" * 64 not in text and text.count("hash: sha256:") == 1
    contract = spec_mod.load(path).contract
    assert (contract.terms, contract.hash) == (
        yaml.safe_load(result.stdout)["terms"],
        yaml.safe_load(result.stdout)["hash"],
    )
    kept = [
        line
        for line in text.splitlines(keepends=True)
        if not line.startswith(("  terms:", "    ", "  hash:"))
    ]
    assert "".join(kept) == SPEC + "# the end\n"  # everything else as written


def test_an_old_format_contract_is_denied_with_the_fix(tmp_path, gateway_for):
    path = write(tmp_path, SPEC + "  hash: sha256:" + "0" * 64 + "\n")
    record = denied(*gateway_for(path))
    assert record["rule"] == "contract.old_format" and "assure contract hash" in record["reason"]


TASKS = (
    SPEC
    + """\
tasks:
  - {id: first, assertions: [{exit_code: 0}]}
  - id: second
    assertions: [{exit_code: 0}]
  - id: own
    contract:
      id: c-own
      proposed_by: dan
      ratified_by: erin
      scope: ["fs:out/**"]
      autonomy_ceiling: propose
"""
)


def test_a_shared_contract_pins_every_task_it_governs_and_a_task_may_carry_its_own(tmp_path):
    path = write(tmp_path, TASKS)
    contract_hash(path, "--write")
    own = contract_hash(path, "--task", "own", "--write")
    loaded = spec_mod.load(path)
    assert (
        loaded.contract.hash != loaded.tasks[2].contract.hash == yaml.safe_load(own.stdout)["hash"]
    )
    assert loaded.tasks[0].contract == loaded.tasks[1].contract == loaded.contract
    assert contract_hash(path, "--task", "second").stderr.startswith("unchanged")
    edit(
        path, "    assertions: [{exit_code: 0}]\n", "    assertions: [{exit_code: 3}]\n"
    )  # the second task's acceptance test
    assert (
        contract_hash(path, "--task", "first").stderr
        == "changed since the terms it carries: assertions; have it re-ratified\n"
    )
    assert contract_hash(path, "--task", "own").stderr.startswith(
        "unchanged"
    )  # it governs no task whose tests changed


def test_no_contract_or_no_task_is_an_error_that_says_what_to_pass(tmp_path):
    path = write(tmp_path, SPEC.split("contract:")[0])
    result = CliRunner().invoke(app, ["contract", "hash", str(path)])
    assert result.exit_code != 0 and "no contract block" in result.output
    result = CliRunner().invoke(app, ["contract", "hash", str(write(tmp_path)), "--task", "nope"])
    assert result.exit_code != 0 and "no task 'nope'" in result.output and "'main'" in result.output


def test_the_schema_refuses_a_term_it_does_not_know(tmp_path):
    path = write(tmp_path, SPEC + "  terms: {budget: sha256:" + "0" * 64 + "}\n")
    with pytest.raises(AssureError, match="budget"):
        spec_mod.load(path)


# ---------------------------------------------------------------- signed ratification


def ratify_cli(path: Path, key: Path, name: str = "bob", *extra: str) -> Any:
    return CliRunner().invoke(
        app, ["contract", "ratify", str(path), "--as", name, "--key", str(key), *extra]
    )


def key_file(tmp_path: Path, key=None) -> Path:
    """A 0600 PEM file of `key` (default: the checkout's example key, which the tests trust)."""
    from cryptography.hazmat.primitives import serialization

    from tests.contracts import example_key

    path = tmp_path / f"key-{len(list(tmp_path.glob('key-*')))}.pem"
    path.write_bytes(
        (key or example_key()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    return path


def test_ratify_signs_the_terms_the_gateway_accepts_and_validate_names_the_key(
    tmp_path, gateway_for
):
    path = write(tmp_path)
    done = ratify_cli(path, key_file(tmp_path))
    assert done.exit_code == 0, done.output
    contract = yaml.safe_load(path.read_text())["contract"]
    assert contract["ratified_by"] == "bob" and contract["signature"]["alg"] == "Ed25519"
    _, client = gateway_for(path)
    assert client.call("fs.write", path="src/new.py", content="x")["result"]
    checked = CliRunner().invoke(app, ["validate", str(path)])
    assert checked.exit_code == 0, checked.output
    assert f"ratified by bob with key {contract['signature']['key_id']}" in checked.output


def test_the_proposer_cannot_ratify(tmp_path):
    path = write(tmp_path)
    done = ratify_cli(path, key_file(tmp_path), "Alice")
    assert done.exit_code == 1 and "proposed this contract" in done.output
    assert "signature" not in path.read_text()


def _forged(path: Path, tmp_path: Path) -> str:
    ratify_cli(path, key_file(tmp_path))
    text = path.read_text()
    value = yaml.safe_load(text)["contract"]["signature"]["value"]
    flipped = ("B" if value[0] == "A" else "A") + value[1:]
    path.write_text(text.replace(value, flipped))
    return "does not match the content"


def _edited_then_rehashed(path: Path, tmp_path: Path) -> str:
    ratify_cli(path, key_file(tmp_path))
    edit(path, 'scope: ["fs:**"]', 'scope: ["fs:**", "db:*"]')
    contract_hash(path, "--write")  # the old way to "ratify" again, by anyone who edits the spec
    return "does not match the content"


def _untrusted_key(path: Path, tmp_path: Path) -> str:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    done = ratify_cli(path, key_file(tmp_path, Ed25519PrivateKey.generate()))
    assert done.exit_code == 1 and "the gate will refuse it" in done.output
    return "not by"


def _copied_from_another_spec(path: Path, tmp_path: Path) -> str:
    other = tmp_path / "other"
    other.mkdir()
    donor = write(other, SPEC.replace("name: pinned", "name: donor"))
    ratify_cli(donor, key_file(tmp_path))
    contract_hash(path, "--write")  # the same terms, hash and name of ratifier
    signature = yaml.safe_load(donor.read_text())["contract"]["signature"]
    assert (
        yaml.safe_load(path.read_text())["contract"]["hash"]
        == yaml.safe_load(donor.read_text())["contract"]["hash"]
    )
    edit(
        path,
        "  autonomy_ceiling: commit\n",
        "  autonomy_ceiling: commit\n"
        + "".join(f"  {line}\n" for line in yaml.safe_dump({"signature": signature}).splitlines()),
    )
    return "does not match the content"


def _unsigned(path: Path, tmp_path: Path) -> str:
    contract_hash(path, "--write")
    return "did not sign it"


@pytest.mark.parametrize(
    "attack",
    [_forged, _edited_then_rehashed, _untrusted_key, _copied_from_another_spec, _unsigned],
)
def test_a_ratification_that_is_not_a_trusted_signature_of_these_terms_is_refused(
    tmp_path, gateway_for, attack
):
    path = write(tmp_path)
    why = attack(path, tmp_path)
    gw, client = gateway_for(path)
    record = denied(gw, client)
    assert record["rule"] == "contract.signature" and why in record["reason"], record
    checked = CliRunner().invoke(app, ["validate", str(path)])
    assert checked.exit_code == 1 and "contract.signature" in checked.output, checked.output


def test_a_keyring_naming_a_ratifier_twice_with_two_keys_fails_closed(tmp_path, monkeypatch):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from assure.run import ratifiers
    from tests.contracts import KEYRING

    path = write(tmp_path)
    ratify_cli(path, key_file(tmp_path))
    other = tmp_path / "other.yaml"
    other.write_text(f"bob: {ratifiers.public_text(Ed25519PrivateKey.generate().public_key())}\n")
    monkeypatch.setenv(ratifiers.ENV, f"{KEYRING}:{other}")
    check = ratifiers.check("pinned", spec_mod.load(path).contract)
    assert check.key_id is None and "two different keys" in check.problem
