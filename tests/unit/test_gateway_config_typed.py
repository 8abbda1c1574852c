"""The gateway config is one typed value: the host builds a `Config` (run/attempt.gateway_config),
writes it once, and the gateway reads back the very same value, validated; a key it does not
know, or one it needs and is not given, stops it with the key's name (fail closed)."""

import json
from pathlib import Path

import pytest

from assure import spec as spec_mod
from assure.gateway.config import Config, ConfigError, parse
from assure.records.layout import RunPaths
from assure.run import modelaccess
from assure.run.attempt import gateway_config
from tests.unit.test_policy import load as policy_spec

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "specs" / "examples").glob("*.yaml")) + [
    ROOT / "suites" / "benign" / f"benign--{name}.yaml"
    for name in ("sqlite-keyless", "sqlite-wal", "http-allowlisted")
]


def built(path: Path | spec_mod.Spec, tmp_path: Path) -> Config:
    spec = spec_mod.load(path) if isinstance(path, Path) else path
    run = RunPaths(tmp_path / "run-1")
    egress = modelaccess.egress(spec)
    model = modelaccess.ModelAccess(spec.model, spec.path.parent, tmp_path, 0, 0).gateway_config()
    proxy = "attempt-egress:3128" if egress else None
    return gateway_config(spec, "run-1", run.attempt(1), run, proxy, egress, model)


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_the_gateway_reads_back_the_config_the_host_built(path, tmp_path):
    config = built(path, tmp_path)
    on_disk = json.loads(json.dumps(config.to_json()))
    assert parse(on_disk) == config
    assert parse(on_disk).to_json() == on_disk  # written once: nothing added on the way back


def test_a_contract_human_gates_and_rollbacks_read_back_the_same(tmp_path):
    config = built(policy_spec(tmp_path), tmp_path)
    assert config.policy.contract and config.policy.human_gates and config.policy.rollbacks
    on_disk = json.loads(json.dumps(config.to_json()))
    assert parse(on_disk) == config and parse(on_disk).to_json() == on_disk


def test_the_examples_cover_each_part_of_the_config(tmp_path):
    configs = [built(p, tmp_path) for p in SPECS]
    assert {c.model.mode for c in configs if c.model} >= {"anthropic", "replay", "scripted"}
    assert any(c.egress for c in configs) and any(c.databases for c in configs)


def test_an_unknown_key_or_a_missing_one_stops_the_gateway(tmp_path):
    on_disk = built(SPECS[0], tmp_path).to_json()
    with pytest.raises(ConfigError, match="'protcted': unknown field"):
        parse({**on_disk, "protcted": ["tests/**"]})
    with pytest.raises(ConfigError, match="'policy.operator_dail': unknown field"):
        parse({**on_disk, "policy": {**on_disk["policy"], "operator_dail": 0}})
    for key in ("run_id", "attempt", "socket", "workspace", "journal", "ready_file"):
        with pytest.raises(ConfigError, match=f"'{key}'"):
            parse({k: v for k, v in on_disk.items() if k != key})
    with pytest.raises(ConfigError, match="'limits.tool_calls'"):
        parse({**on_disk, "limits": {}})
