"""Runtime health in the standard's format (`frontier.machine.health.v1`).

The seed's cross-fixtures, as plain documents given to the pure aggregate: green process with
a provider-credit failure => blocked, missing verifier => propose_only, override => halted,
optional failure => degraded, a blocker outranks propose_only. Then the same outcomes from
real run folders read by the probe, and `assure health` on a run driven on the in-memory
backend. Every document is validated against specs/health.schema.json.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from assure import spec as spec_mod
from assure.cli import app
from assure.core import control
from assure.core.chain import ChainWriter
from assure.ops import health_probe
from assure.ops.health_v1 import SCHEMA_VERSION, aggregate, iso
from assure.records import health, store
from tests.unit import test_driver_states as driving
from tests.unit.test_driver_states import ACCEPTANCE, new_run, ratified, write_spec

SCHEMA = json.loads((Path(spec_mod.SCHEMAS) / "health.schema.json").read_text())
NOW = 1_800_000_000.0
CREDIT_ERROR = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": (
            "Your credit balance is too low to access the Anthropic API. Please go to Plans &"
            " Billing to upgrade or purchase credits."
        ),
    },
}
short_tmp = driving.short_tmp  # the fixture: a short folder for the fake's gateway socket
ENGINE = health_probe.Engine(
    True, "engine 27.0 (API 1.47)", ("assure-agent:x", "assure-gateway:x", "assure-egress:x")
)


def valid(doc: dict[str, Any]) -> dict[str, Any]:
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    return doc


def check(cid: str, status: str = "pass", **extra: Any) -> dict[str, Any]:
    return {
        "id": cid,
        "status": status,
        "observed_at": iso(NOW - 1),
        "stale_after_seconds": 60,
        "summary": cid,
        **extra,
    }


def green() -> dict[str, Any]:
    """Every layer passing: the process is green."""
    return {
        "schema_version": SCHEMA_VERSION,
        "deployment_id": "test",
        "checked_at": iso(NOW),
        "layers": {
            "process": [
                check("process.driver"),
                check("process.gateway"),
                check("process.monitor", critical=False),
            ],
            "scheduler": [check("scheduler.run_state")],
            "execution": [check("execution.engine"), check("execution.model_provider")],
            "governance": [
                check("governance.operator"),
                check("governance.verifier"),
                check("governance.contract"),
            ],
        },
    }


def with_checks(**replaced: dict[str, Any]) -> dict[str, Any]:
    """The green document with the named checks (id with `_` for `.`) replaced."""
    doc = green()
    for key, new in replaced.items():
        cid = key.replace("__", ".")
        layer = doc["layers"][cid.split(".")[0]]
        layer[[c["id"] for c in layer].index(cid)] = new
    return valid(doc)


PROVIDER_CREDIT = check("execution.model_provider", "fail", reason_code="provider_credit")
NO_VERIFIER = check("governance.verifier", "fail", reason_code="verifier_missing")
OVERRIDE = check("governance.operator", "fail", reason_code="operator_halt")
OPTIONAL = check("process.monitor", "fail", critical=False, reason_code="heartbeat_stale")


# --- the seed's cross-fixtures -------------------------------------------------------------
def test_all_green_is_pass():
    assert aggregate(valid(green())) == {"status": "pass", "causes": []}


def test_green_process_with_a_provider_credit_failure_is_blocked():
    doc = with_checks(execution__model_provider=PROVIDER_CREDIT)
    assert all(c["status"] == "pass" for c in doc["layers"]["process"])
    assert aggregate(doc)["status"] == "blocked"


def test_a_missing_verifier_is_propose_only():
    assert aggregate(with_checks(governance__verifier=NO_VERIFIER))["status"] == "propose_only"


def test_an_override_is_halted():
    assert aggregate(with_checks(governance__operator=OVERRIDE))["status"] == "halted"


def test_an_optional_failure_is_degraded():
    result = aggregate(with_checks(process__monitor=OPTIONAL))
    assert result == {
        "status": "degraded",
        "causes": [{"id": "process.monitor", "outcome": "degraded", "why": "fail"}],
    }


def test_a_blocker_outranks_propose_only():
    doc = with_checks(execution__model_provider=PROVIDER_CREDIT, governance__verifier=NO_VERIFIER)
    result = aggregate(doc)
    assert result["status"] == "blocked"
    assert {c["id"]: c["outcome"] for c in result["causes"]} == {
        "execution.model_provider": "blocked",
        "governance.verifier": "propose_only",
    }


def test_halted_outranks_everything():
    doc = with_checks(
        execution__model_provider=PROVIDER_CREDIT,
        governance__verifier=NO_VERIFIER,
        governance__operator=OVERRIDE,
        process__monitor=OPTIONAL,
    )
    assert aggregate(doc)["status"] == "halted"


# --- failing closed ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "change, expected",
    [
        (
            lambda d: d["layers"]["execution"].__setitem__(0, check("execution.engine", "unknown")),
            "blocked",
        ),  # unknown counts as failed
        (
            lambda d: d["layers"]["process"][2].__setitem__("status", "unknown"),
            "degraded",
        ),  # an optional unknown degrades
        (
            lambda d: d["layers"]["execution"][0].__setitem__("status", "green"),
            "blocked",
        ),  # a status that is none of the three
        (
            lambda d: d["layers"]["execution"][0].__setitem__("observed_at", iso(NOW - 61)),
            "blocked",
        ),  # a stale pass
        (
            lambda d: d["layers"]["execution"][0].__setitem__("observed_at", iso(NOW + 60)),
            "blocked",
        ),  # observed in the future
        (lambda d: d["layers"]["execution"][0].__setitem__("observed_at", "yesterday"), "blocked"),
        (lambda d: d["layers"]["execution"][0].__setitem__("stale_after_seconds", -1), "blocked"),
        (
            lambda d: d["layers"]["execution"][0].update(status="fail"),
            "blocked",
        ),  # `critical` absent: critical
        (
            lambda d: d["layers"]["execution"][0].update(
                status="fail", reason_code="anything_else", critical=False
            ),
            "degraded",
        ),
        (
            lambda d: d["layers"]["governance"][0].update(
                status="unknown", reason_code="operator_halt"
            ),
            "halted",
        ),  # a halt nobody can read halts
        (
            lambda d: d["layers"]["governance"][0].update(reason_code="operator_halt"),
            "pass",
        ),  # a reason on a pass means nothing
        (
            lambda d: d["layers"].__setitem__("scheduler", []),
            "blocked",
        ),  # an empty layer says nothing is healthy
        (lambda d: d["layers"].pop("governance"), "blocked"),
        (
            lambda d: d["layers"]["process"].append(check("process.driver")),
            "blocked",
        ),  # two checks, one id
        (lambda d: d["layers"]["process"].append({"status": "pass"}), "blocked"),
        (lambda d: d.__setitem__("schema_version", "frontier.machine.health.v0"), "blocked"),
        (lambda d: d.__setitem__("checked_at", None), "blocked"),
        (lambda d: d.__setitem__("layers", []), "blocked"),
    ],
)
def test_the_aggregate_fails_closed(change, expected):
    doc = green()
    change(doc)
    assert aggregate(doc)["status"] == expected


def test_an_old_document_rejudged_later_is_blocked_and_garbage_never_raises():
    doc = valid(green())
    assert aggregate(doc, now=NOW + 30)["status"] == "pass"
    assert aggregate(doc, now=NOW + 3600)["status"] == "blocked"
    for garbage in (
        None,
        [],
        "x",
        {"schema_version": SCHEMA_VERSION, "checked_at": iso(NOW), "layers": {"process": "x"}},
    ):
        assert aggregate(garbage)["status"] == "blocked"


def test_the_schema_refuses_what_the_standard_forbids():
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for change in (
        lambda d: d.pop("deployment_id"),
        lambda d: d["layers"]["process"][0].pop("stale_after_seconds"),
        lambda d: d["layers"]["process"][0].__setitem__("status", "ok"),
        lambda d: d["layers"].__setitem__("network", []),
    ):
        doc = copy.deepcopy(green())
        change(doc)
        assert not validator.is_valid(doc)


# --- the probe on real run folders ---------------------------------------------------------
def spec_file(tmp_path: Path, **fields: Any) -> spec_mod.Spec:
    """A spec with a verifier and a ratified contract, unless `fields` say otherwise (None: left
    out)."""
    data = {"contract": ratified(["fs:**"]), "assertions": ACCEPTANCE, **fields}
    return write_spec(tmp_path, "true", **{k: v for k, v in data.items() if v is not None})


def finished_run(
    tmp_path: Path,
    spec: spec_mod.Spec,
    *,
    journal: list[dict[str, Any]] = (),
    blobs: dict[str, bytes] | None = None,
) -> store.RunDir:
    """A run folder as the driver leaves it after one attempt (the gateway's journal given)."""
    run = new_run(tmp_path, spec)
    run.save_state(
        {
            "run_id": run.run_id,
            "state": "finished",
            "next_attempt": 2,
            "tasks": {"main": {"state": "committed", "attempts": [1]}},
        }
    )
    attempt = run.attempt(1)
    (attempt.root / "gateway").mkdir(parents=True)
    store.write_json(attempt.container, {"exit_code": 0})
    writer = ChainWriter(attempt.journal, base={"actor": "gateway"})
    for record in journal:
        writer.append(**record)
    writer.close()
    attempt.blobs.mkdir()
    for digest, body in (blobs or {}).items():
        (attempt.blobs / digest).write_bytes(body)
    health.beat(tmp_path / "runs" / ".health" / "monitor.json", health.MONITOR, now=NOW - 2)
    return run


def probe(run: store.RunDir | None, tmp_path: Path) -> dict[str, Any]:
    return valid(health_probe.probe(tmp_path / "runs", run.run_id if run else None, ENGINE, NOW))


def statuses(doc: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    return {
        c["id"].split("@")[0]: (c["status"], c.get("reason_code"))
        for layer in doc["layers"].values()
        for c in layer
    }


def test_a_healthy_finished_run_passes(tmp_path):
    run = finished_run(tmp_path, spec_file(tmp_path))
    doc = probe(run, tmp_path)
    assert doc["aggregate"] == {"status": "pass", "causes": []}, doc["aggregate"]
    assert set(statuses(doc)) == {
        "process.driver",
        "process.monitor",
        "process.gateway",
        "scheduler.run_state",
        "scheduler.tasks",
        "execution.engine",
        "execution.images",
        "execution.model_provider",
        "governance.operator",
        "governance.verifier",
        "governance.contract",
        "governance.alerts",
    }


def test_a_provider_credit_error_in_the_journal_blocks_a_green_process(tmp_path):
    body = json.dumps(CREDIT_ERROR).encode()
    digest = hashlib.sha256(body).hexdigest()
    call = {
        "event": "model_call",
        "endpoint": "messages",
        "served": "upstream",
        "status": 400,
        "error": None,
        "response_sha256": digest,
    }
    run = finished_run(
        tmp_path,
        spec_file(tmp_path, model={"mode": "anthropic"}),
        journal=[call],
        blobs={digest: body},
    )
    doc = probe(run, tmp_path)
    assert all(c["status"] == "pass" for c in doc["layers"]["process"])
    assert statuses(doc)["execution.model_provider"] == ("fail", "provider_credit")
    assert doc["aggregate"]["status"] == "blocked"
    assert "credit balance" in doc["layers"]["execution"][-1]["summary"]


@pytest.mark.parametrize(
    "status, served, error, expected",
    [
        (402, "upstream", None, ("fail", "provider_credit")),
        (401, "upstream", None, ("fail", "provider_auth")),
        (529, "upstream", None, ("fail", "provider_unavailable")),  # optional: degrades
        (502, "gateway", "upstream_timeout", ("fail", "provider_unavailable")),
        (403, "gateway", "denied", ("pass", None)),  # the gate said no: not the provider
        (
            400,
            "upstream",
            None,
            ("pass", None),
        ),  # the agent's bad request, no credit words in an absent body
        (200, "upstream", None, ("pass", None)),
    ],
)
def test_the_last_model_call_decides_the_provider_check(tmp_path, status, served, error, expected):
    early = {
        "event": "model_call",
        "served": "upstream",
        "status": 402,
    }  # an earlier failure, since recovered or not
    run = finished_run(
        tmp_path,
        spec_file(tmp_path, model={"mode": "anthropic"}),
        journal=[
            early,
            {"event": "model_call", "served": served, "status": status, "error": error},
        ],
    )
    doc = probe(run, tmp_path)
    assert statuses(doc)["execution.model_provider"] == expected
    assert doc["aggregate"]["status"] == {"provider_unavailable": "degraded", None: "pass"}.get(
        expected[1], "blocked"
    )


def test_a_spec_without_assertions_has_no_verifier_so_propose_only(tmp_path):
    doc = probe(finished_run(tmp_path, spec_file(tmp_path, assertions=[])), tmp_path)
    assert statuses(doc)["governance.verifier"] == ("fail", "verifier_missing")
    assert doc["aggregate"]["status"] == "propose_only"


def test_an_operator_halt_is_halted_and_a_dial_down_is_propose_only(tmp_path):
    run = finished_run(tmp_path, spec_file(tmp_path))
    control.request(run.control_dir, run_id=run.run_id, actor="operator-1", dial="propose")
    assert probe(run, tmp_path)["aggregate"]["status"] == "propose_only"
    control.request(run.control_dir, run_id=run.run_id, actor="operator-1", halt=True)
    doc = probe(run, tmp_path)
    assert statuses(doc)["governance.operator"] == ("fail", "operator_halt")
    assert doc["aggregate"]["status"] == "halted"
    (run.control_dir / control.OPERATOR_FILE).write_text(
        "{garbage"
    )  # unreadable: halted, as the gate reads it
    assert probe(run, tmp_path)["aggregate"]["status"] == "halted"


def test_an_unratified_contract_a_quarantine_and_a_pending_alert_block(tmp_path):
    contract = {**ratified(["fs:**"]), "ratified_by": "alice"}  # ratified by its proposer
    run = finished_run(tmp_path, spec_file(tmp_path, contract=contract))
    assert statuses(probe(run, tmp_path))["governance.contract"] == (
        "fail",
        "contract_self_ratified",
    )
    run.save_state(
        {"state": "finished", "tasks": {"main": {"state": "quarantined", "attempts": [1]}}}
    )
    (run.path / "alerts").mkdir()
    store.write_json(
        run.path / "alerts" / "a1.json",
        {"id": "a1", "run_id": run.run_id, "kind": "quarantine", "state": "pending"},
    )
    doc = probe(run, tmp_path)
    assert statuses(doc)["scheduler.tasks"] == ("fail", "task_quarantined") and statuses(doc)[
        "governance.alerts"
    ] == ("fail", "alerts_pending")
    assert doc["aggregate"]["status"] == "blocked"


def test_an_attempt_in_progress_needs_a_fresh_gateway_and_verifier(tmp_path):
    run = finished_run(tmp_path, spec_file(tmp_path))
    run.save_state(
        {
            "state": "running",
            "next_attempt": 2,
            "tasks": {"main": {"state": "running", "attempts": [1]}},
        }
    )
    attempt = run.attempt(1)
    attempt.container.unlink()  # the attempt has not finished
    attempt.ready.write_text("")
    os.utime(attempt.ready, (NOW - 400, NOW - 400))  # its gateway has been up for 400 s
    health.beat(tmp_path / "runs" / ".health" / "driver.json", health.DRIVER, now=NOW - 1)
    with store.exclusive(run.path, "run"):  # its driver lives
        doc = probe(run, tmp_path)
        assert statuses(doc)["process.gateway"] == (
            "fail",
            "heartbeat_missing",
        )  # 400 s > 300 s with no success
        assert statuses(doc)["governance.verifier"] == ("fail", "verifier_stale")
        assert doc["aggregate"]["status"] == "blocked"
        health.beat(attempt.gateway_state / "heartbeat.json", health.GATEWAY, now=NOW - 10)
        assert (
            probe(run, tmp_path)["aggregate"]["status"] == "propose_only"
        )  # the verifier is still stale: trust 0
        health.beat(run.control_dir / "verifier.json", health.VERIFIER, now=NOW - 1)
        doc = probe(run, tmp_path)
        assert doc["aggregate"] == {"status": "pass", "causes": []}, doc["aggregate"]
    doc = probe(run, tmp_path)  # its driver gone: fresh heartbeats do not make it alive
    assert statuses(doc)["process.driver"] == ("fail", "driver_gone") and statuses(doc)[
        "scheduler.run_state"
    ] == ("fail", "run_interrupted")


@pytest.mark.parametrize(
    "contract, code",
    [
        (None, "contract_missing"),
        (
            {k: v for k, v in ratified(["fs:**"]).items() if k != "ratified_by"},
            "contract_unratified",
        ),
    ],
)
def test_the_contract_check_is_the_gates_own_rule(tmp_path, contract, code):
    doc = probe(finished_run(tmp_path, spec_file(tmp_path, contract=contract)), tmp_path)
    assert (
        statuses(doc)["governance.contract"] == ("fail", code)
        and doc["aggregate"]["status"] == "blocked"
    )


def test_a_contract_whose_terms_changed_since_ratification_blocks(tmp_path):
    spec = spec_file(tmp_path)  # ratified as written
    text = spec.path.read_text()
    spec.path.write_text(
        text.replace("fs:**", "fs:src/**", 1)
    )  # the scope changed after ratification
    doc = probe(finished_run(tmp_path, spec_mod.load(spec.path)), tmp_path)
    assert (
        statuses(doc)["governance.contract"] == ("fail", "contract_terms_changed")
        and doc["aggregate"]["status"] == "blocked"
    )


def test_the_runs_base_counts_live_runs_only_and_a_dead_driver_blocks(tmp_path):
    old = finished_run(tmp_path, spec_file(tmp_path))
    control.request(
        old.control_dir, run_id=old.run_id, actor="operator-1", halt=True
    )  # history: not live
    doc = probe(None, tmp_path)
    assert doc["aggregate"]["status"] == "pass", doc["aggregate"]
    live = finished_run(tmp_path, spec_file(tmp_path))
    live.save_state(
        {
            "state": "running",
            "next_attempt": 2,
            "tasks": {"main": {"state": "running", "attempts": [1]}},
        }
    )
    with store.exclusive(live.path, "run"):  # its driver lives
        doc = probe(None, tmp_path)  # running, and no driver has ever beaten
        assert (
            statuses(doc)["process.driver"] == ("fail", "heartbeat_missing")
            and doc["aggregate"]["status"] == "blocked"
        )
        assert {c["id"] for c in doc["layers"]["scheduler"]} == {
            "scheduler.runs",
            f"scheduler.run_state@{live.run_id}",
            f"scheduler.tasks@{live.run_id}",
        }
        health.beat(tmp_path / "runs" / ".health" / "driver.json", health.DRIVER, now=NOW - 1)
        assert probe(None, tmp_path)["aggregate"]["status"] == "pass"
    assert statuses(probe(None, tmp_path))["process.driver"] == (
        "fail",
        "driver_gone",
    )  # the same fresh heartbeat, no lock held
    (live.path / "state.json").write_text("{")
    doc = probe(None, tmp_path)
    assert (
        statuses(doc)["scheduler.runs"] == ("unknown", "state_unreadable")
        and doc["aggregate"]["status"] == "blocked"
    )


def test_no_engine_blocks(tmp_path):
    doc = valid(
        health_probe.probe(tmp_path / "nothing", None, health_probe.Engine(False, "no socket"), NOW)
    )
    assert (
        statuses(doc)["execution.engine"] == ("fail", "engine_unreachable")
        and doc["aggregate"]["status"] == "blocked"
    )
    assert statuses(valid(health_probe.probe(tmp_path / "nothing", None, ENGINE, NOW)))[
        "execution.images"
    ] == ("pass", None)


# --- `assure health` on a run driven on the in-memory backend --------------------------------
def test_assure_health_on_a_real_run_emits_a_valid_document(tmp_path, short_tmp):
    spec = write_spec(tmp_path, "fix", contract=ratified(["fs:**"]), assertions=ACCEPTANCE)
    run = new_run(tmp_path, spec)
    result, _ = driving.drive(spec, run, short_tmp, {"fix": driving.fix})
    assert result.verdict == "pass"
    out = tmp_path / "health.json"
    cli = CliRunner().invoke(app, ["health", str(run.path), "--out", str(out)])
    doc = valid(json.loads(cli.stdout))
    assert json.loads(out.read_text()) == doc
    assert cli.exit_code == (0 if doc["aggregate"]["status"] == "pass" else 1)
    mine = {
        k: v
        for k, v in statuses(doc).items()
        if k.split(".")[0] in ("scheduler", "governance")
        or k in ("process.driver", "process.gateway", "execution.model_provider")
    }
    assert all(s == ("pass", None) for s in mine.values()), (
        mine
    )  # the run itself is healthy: proposed, verified, ratified
    assert statuses(doc)["process.monitor"] == (
        "fail",
        "heartbeat_missing",
    )  # no monitor ran: degraded at best
    assert doc["aggregate"]["status"] != "pass"
    assert all(c["id"].endswith("@" + run.run_id) for c in doc["layers"]["scheduler"])


def test_hostile_run_files_are_unknown_never_followed_and_block(tmp_path):
    run = finished_run(tmp_path, spec_file(tmp_path))
    run.paths.state.unlink()
    run.paths.state.symlink_to("/etc/hostname")  # never followed
    run.paths.spec_json.write_text("[" * 100_000)  # nested past any parser's depth
    doc = probe(run, tmp_path)
    got = statuses(doc)
    assert got["scheduler.run_state"] == ("unknown", "state_unreadable") and got[
        "governance.contract"
    ] == ("unknown", "spec_unreadable")
    assert (
        "symlink"
        in next(c for c in doc["layers"]["scheduler"] if c["id"].startswith("scheduler.run_state"))[
            "summary"
        ]
    )
    assert doc["aggregate"]["status"] == "blocked"
