"""The gateway's policy, model and egress blocks are made from the typed spec alone."""

import dataclasses
from pathlib import Path

from assure import spec
from assure.core import gate
from assure.run import modelaccess, policy

SPEC = """\
version: 1
name: demo
agent: {command: [sh, -c, "true"]}
workspace: {fixture: ws}
databases:
  - {name: shop, fixture: shop.sql, rollback: undo.sql}
  - {name: logs, fixture: shop.sql, rollback: missing.sql}
limits: {tokens: 5000, cost: 2}
contract: {id: c, proposed_by: alice, ratified_by: bob, scope: ["fs:**"], autonomy_ceiling: commit}
autonomy:
  dial: propose
  human_gates: [{id: g, scope: "fs:**", approved_by: carol, expires_at: "2030-01-01T00:00:00Z"}]
model: {mode: anthropic, upstream: "https://api.example.com:8443", allow: {betas: [b1]}}
assertions: [{exit_code: 0}]
expect: pass
"""


def load(tmp_path: Path, text: str = SPEC) -> spec.Spec:
    (tmp_path / "ws").mkdir(exist_ok=True)
    (tmp_path / "shop.sql").write_text("CREATE TABLE t (x);\n")
    (tmp_path / "undo.sql").write_text("DELETE FROM t;\n")
    (tmp_path / "s.yaml").write_text(text)
    return spec.load(tmp_path / "s.yaml")


def test_the_gateway_policy_comes_from_typed_fields(tmp_path):
    s = load(tmp_path)
    got = policy.gateway_policy(s).to_json()  # as the gateway's config file holds it
    assert got["operator_dial"] == gate.PROPOSE and got["verifier_trust"] == gate.COMMIT
    assert got["contract"]["id"] == "c" and got["contract"]["ratified_by"] == "bob"
    assert got["human_gates"] == [
        {"id": "g", "scope": "fs:**", "approved_by": "carol", "expires_at": 1893456000.0}
    ]
    assert got["rollbacks"] == {
        "undo.sql": ["db:shop"]
    }  # read beside the spec; a missing file confirms nothing
    assert (got["tokens_limit"], got["cost_limit"]) == (5000, 2.0)
    assert (
        policy.gateway_policy(dataclasses.replace(s, assertions=())).verifier_trust == gate.PROPOSE
    )  # nothing to verify


def test_the_model_upstream_joins_an_egress_with_the_schemas_defaults(tmp_path):
    s = load(tmp_path)
    assert modelaccess.egress(s) == spec.Egress(("api.example.com:8443",), "bridge", False)
    own = spec.Egress(("example.org:443",), "none", True)
    assert modelaccess.egress(dataclasses.replace(s, egress=own)) == spec.Egress(
        ("api.example.com:8443", "example.org:443"), "none", True
    )
    assert modelaccess.egress(dataclasses.replace(s, model=None, egress=own)) == own


def test_the_gateway_model_block_comes_from_typed_fields(tmp_path):
    s = load(tmp_path)
    model = modelaccess.ModelAccess(s.model, s.path.parent, tmp_path, 0, 0).gateway_config()
    assert model is not None and model.allow == {"betas": frozenset({"b1"})}
    conf = model.to_json()  # as the gateway's config file holds it
    assert (
        conf["mode"] == "anthropic"
        and conf["upstream"] == "https://api.example.com:8443"
        and conf["allow_http"] is False
    )
    assert conf["allow"] == {"betas": ["b1"]} and "server_tool_fees" not in conf
    assert modelaccess.ModelAccess(None, s.path.parent, tmp_path, 0, 0).gateway_config() is None
