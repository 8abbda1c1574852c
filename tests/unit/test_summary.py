"""The summary (specs/report.schema.json) and its JUnit form, built from run directories that
real runs on the in-memory backend left; `assure report merge` of a suite's shards."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from assure import spec as spec_mod
from assure import textsafe
from assure.errors import AssureError
from assure.records import junit, store, summary
from assure.records.layout import RunPaths, SuitePaths
from assure.records.run_report import GateDenial, Report
from assure.records.states import RunState, TaskState
from assure.run import suite as suite_mod
from assure.run.driver import Driver
from assure.sandbox.fake import Context
from assure.textsafe import display
from assure.verify.findings import Kind, Verdict
from tests.unit.reports import reason_of, report_of
from tests.unit.test_driver_states import (
    ACCEPTANCE,
    IMAGES,
    fake,
    fix,
    notes,
    ratified,
    tamper,
    write_spec,
)

HOSTILE = (  # a terminal escape, markup, CDATA's end, an invalid byte, a bidi override
    b"\x1b[2J<b>&amp;]]>\xff\xe2\x80\xae.txt"
)
NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def hostile(ctx: Context) -> int:
    """Leaves a file with a hostile name outside its writable scope: a breach."""
    (ctx.path("/workspace") / os.fsdecode(HOSTILE)).write_text("x")
    return 0


class Ran:
    """One suite run of four specs on the fake backend, kept for the module's tests."""

    def __init__(self, folder: Path, short: str):
        specs = [
            write_spec(
                folder, "fix", contract=ratified(["fs:**"]), assertions=ACCEPTANCE
            ),  # pass, as expected
            write_spec(
                folder,
                "tamper",
                contract=ratified(["fs:**"]),
                assertions=ACCEPTANCE,
                expect="breach",
            ),  # breach, as expected
            write_spec(
                folder,
                "notes",
                contract=ratified(["fs:**"]),
                assertions=[{"file_exists": "out/never.txt"}],
            ),  # fail, unexpected
            write_spec(folder, "hostile", contract=ratified(["fs:**"])),  # breach, unexpected
        ]
        (folder / "s.yaml").write_text(
            "version: 1\nname: s\nspecs: [" + ", ".join(s.path.name for s in specs) + "]\n"
        )
        self.suite = suite_mod.load(folder / "s.yaml")
        self.runs = folder / "runs"
        self.record = suite_mod.SuiteRun.create(folder / "suites", self.suite)
        backend = fake({"fix": fix, "tamper": tamper, "notes": notes, "hostile": hostile}, short)
        try:
            self.record.drive(
                self.runs,
                lambda spec, run: (
                    Driver(spec, run, backend, IMAGES, lambda *_: None).drive().verdict
                ),
                lambda n, spec: None,
            )
        finally:
            backend.close()
        self.doc = summary.suite_document(self.suite, self.record.path, self.runs)


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Any:
    short = tempfile.mkdtemp(prefix="sum", dir="/tmp")
    try:
        yield Ran(tmp_path_factory.mktemp("suite"), short)
    finally:
        shutil.rmtree(short, ignore_errors=True)


def test_a_suite_summary_is_read_from_the_run_directories_and_validates(ran):
    doc = ran.doc

    assert summary.problems(doc) == []
    assert [
        (r["position"], r["spec"], r["verdict"], r["expect"], r["as_expected"])
        for r in doc["results"]
    ] == [
        (1, "fake-fix", "pass", "pass", True),
        (2, "fake-tamper", "breach", "breach", True),
        (3, "fake-notes", "fail", "pass", False),
        (4, "fake-hostile", "breach", "pass", False),
    ]
    assert doc["counts"] == {
        "total": 4,
        "as_expected": 2,
        "unexpected": 2,
        "pass": 1,
        "fail": 1,
        "breach": 2,
        "contained": 0,
        "error": 0,
        "not_run": 0,
    }
    assert doc["as_expected"] is False and doc["shard"] is None and doc["merged_from"] is None
    assert (doc["suite"], doc["suite_digest"], doc["suite_size"], doc["suite_run_id"]) == (
        "s",
        ran.suite.digest,
        4,
        ran.record.suite_run_id,
    )
    fix_, tampered, noted, hostile_ = doc["results"]
    assert fix_["reason"] is None and fix_["findings"] == []
    assert (
        tampered["reason"]
        == 'breach: protected_changed agent:"tests/test_calc.py": a protected path changed'
    )
    assert noted["reason"].startswith("assertion_failed ") and {
        f["kind"] for f in noted["findings"]
    } == {"assertion_failed"}
    assert hostile_["findings"] == [
        {
            "kind": "unattributed",
            "severity": "breach",
            "subject": os.fsdecode(HOSTILE),
            "message": hostile_["findings"][0]["message"],
        }
    ]
    for r in doc["results"]:
        state = store.read_json(RunPaths(Path(r["run_dir"])).state)
        assert Path(r["run_dir"]) == (ran.runs / r["run_id"]).resolve() and r["spec_path"] == str(
            ran.suite.specs[r["position"] - 1].path
        )
        assert (r["started_at"], r["finished_at"]) == (
            state["started_at"],
            state["finished_at"],
        ) and r["duration_seconds"] > 0
        assert "\n" not in (r["reason"] or "") and r["findings_omitted"] == 0


def test_the_verdict_is_the_run_directorys_not_the_suite_states(ran, tmp_path):
    """A suite state that says otherwise (edited, or stale) does not change the summary."""
    copied = tmp_path / ran.record.path.name
    shutil.copytree(ran.record.path, copied)
    state = store.read_json(SuitePaths(copied).state)
    state["runs"][0]["verdict"] = "breach"
    store.write_json(SuitePaths(copied).state, state)

    doc = summary.suite_document(ran.suite, copied, ran.runs)

    assert doc["results"][0]["verdict"] == "pass" and doc["results"] == ran.doc["results"]


def test_the_callers_error_in_cluster_mode_overrules_the_run_directory_and_says_why(ran, tmp_path):
    """A node whose verdict the caller did not reproduce: the spec is `error`, whatever the run dir
    says."""
    copied = tmp_path / ran.record.path.name
    shutil.copytree(ran.record.path, copied)
    state = store.read_json(SuitePaths(copied).state)
    state["runs"][0].update(
        verdict="error",
        node_finding="the node's verdict (pass) differs from the verdict judged here (breach)",
    )
    store.write_json(SuitePaths(copied).state, state)

    first = summary.suite_document(ran.suite, copied, ran.runs)["results"][0]

    assert (first["verdict"], first["as_expected"]) == ("error", False)
    assert (
        first["reason"]
        == "node: the node's verdict (pass) differs from the verdict judged here (breach)"
    )


def test_a_breach_the_cluster_kept_without_a_run_directory_is_a_breach_with_the_nodes_findings(
    ran, tmp_path
):
    """The node's run directory was refused on arrival; its message said breach: the summary (and
    so JUnit and the table) says breach, why, and the findings the message carried."""
    copied = tmp_path / ran.record.path.name
    shutil.copytree(ran.record.path, copied)
    state = store.read_json(SuitePaths(copied).state)
    finding = {
        "kind": "unattributed",
        "severity": "breach",
        "subject": "src/calc.py",
        "message": "changed, no journal entry",
    }
    state["runs"][0].update(
        verdict="breach",
        run_id="gone-20260101T000000Z-000000",
        node_findings=[finding],
        node_finding=(
            "its run directory was refused on arrival: more than 50000 members; the node's verdict,"
            " breach, stands (not judged here)"
        ),
    )
    store.write_json(SuitePaths(copied).state, state)

    doc = summary.suite_document(ran.suite, copied, ran.runs)
    first = doc["results"][0]

    assert (first["verdict"], first["as_expected"], first["findings"]) == (
        "breach",
        False,
        [finding],
    )
    assert (
        first["reason"].startswith("node: its run directory was refused on arrival")
        and summary.problems(doc) == []
    )
    assert (
        doc["counts"]["breach"] == ran.doc["counts"]["breach"] + 1
    )  # the first spec passed in the run directory


def test_specs_not_run_interrupted_or_gone_have_no_verdict_and_say_why(ran, tmp_path):
    record = suite_mod.SuiteRun.create(tmp_path / "suites", ran.suite)
    fresh = summary.suite_document(ran.suite, record.path, ran.runs)
    assert [
        (r["verdict"], r["run_id"], r["reason"], r["as_expected"]) for r in fresh["results"]
    ] == [(None, None, "not run", False)] * 4
    assert (
        fresh["counts"]["not_run"] == 4
        and fresh["finished_at"] is None
        and summary.problems(fresh) == []
    )

    spec = ran.suite.specs[0]
    interrupted = store.RunDir.create(
        tmp_path / "runs", store.new_run_id(spec.name), spec.path, spec.to_json()
    )  # no report yet
    store.write_json(
        interrupted.paths.state,
        {
            "state": "aborted",
            "reason": "KeyboardInterrupt",
            "started_at": "2026-12-01T10:00:00.000000Z",
        },
    )
    record.state["runs"][0]["run_id"] = interrupted.run_id
    record.state["runs"][1]["run_id"] = "gone-20261201T000000Z-abcdef"
    record.state["runs"][2]["run_id"] = "../../etc"
    damaged = store.RunDir.create(tmp_path / "runs", store.new_run_id(spec.name), spec.path, [])
    record.state["runs"][3]["run_id"] = damaged.run_id
    store.write_json(SuitePaths(record.path).state, record.state)

    doc = summary.suite_document(ran.suite, record.path, tmp_path / "runs")

    reasons = [r["reason"] for r in doc["results"]]
    assert reasons[0] == "no verdict: missing report.json (run state aborted: KeyboardInterrupt)"
    assert reasons[1].startswith("run directory unreadable: not a run directory") or reasons[
        1
    ].startswith("run directory unreadable: missing spec.json")
    assert reasons[2] == "unusable run id '../../etc'" and doc["results"][2]["run_dir"] is None
    assert reasons[3] == "run directory unreadable: spec.json has no spec name, source or expect"
    assert (
        doc["results"][0]["started_at"] == "2026-12-01T10:00:00.000000Z"
        and doc["results"][0]["duration_seconds"] is None
    )
    assert summary.problems(doc) == [] and doc["counts"]["not_run"] == 4


def test_a_long_reason_is_one_line_and_bounded():
    report = {
        "verdict": "fail",
        "attempts": [
            {
                "task": "main",
                "findings": [
                    {
                        "kind": "assertion_failed",
                        "severity": "fail",
                        "subject": "a\nb",
                        "message": "x\r\n\t\u2028" * 400,
                    }
                ],
            }
        ],
    }
    result = summary._result(1, "n", "n.yaml", "pass", None, report_of(**report), {}, None)
    assert len(result["reason"]) == summary.REASON_MAX and result["reason"].startswith(
        "assertion_failed a b: x x"
    )
    assert "  " not in result["reason"] and not re.search(
        r"\s", result["reason"].replace(" ", "")
    )  # one line, single spaces


def test_findings_beyond_the_limit_are_counted_not_listed():
    many = [
        {"kind": "unattributed", "severity": "breach", "subject": f"f{i}", "message": "m"}
        for i in range(summary.FINDINGS_MAX + 7)
    ]
    report = {"verdict": "breach", "attempts": [{"task": "main", "findings": many}]}
    result = summary._result(1, "n", "n.yaml", "pass", None, report_of(**report), {}, None)
    assert len(result["findings"]) == summary.FINDINGS_MAX and result["findings_omitted"] == 7


def test_a_later_attempt_replaces_a_fail_but_never_a_breach():
    failing = {"kind": "assertion_failed", "severity": "fail", "subject": "first", "message": "m"}
    report = {
        "verdict": "pass",
        "attempts": [
            {"task": "main", "verdict": "fail", "findings": [failing]},
            {"task": "main", "verdict": "pass", "findings": []},
        ],
    }
    assert (
        summary._result(1, "n", "n.yaml", "pass", None, report_of(**report), {}, None)["findings"]
        == []
    )
    covert = {"kind": "unattributed", "severity": "breach", "subject": "src/x.py", "message": "m"}
    breached = {
        "task": "main",
        "verdict": "breach",
        "findings": [covert],
        "reason": {"summary": "breach: unattributed ...", "gate_denial": None, "agent_output": []},
    }
    report = {
        "verdict": "breach",
        "attempts": [
            breached,
            {"task": "main", "verdict": "contained", "findings": [], "reason": None},
        ],
    }
    result = summary._result(1, "n", "n.yaml", "breach", None, report_of(**report), {}, None)
    assert (result["findings"], result["reason"]) == ([covert], "breach: unattributed ...")


def test_a_breach_is_as_expected_only_when_covert_changes_alone_made_it():
    """A spec that expects the breach of a covert edit: a containment that failed beside it is
    never what it expected, so the summary counts it unexpected."""
    covert = {
        "kind": "protected_changed",
        "severity": "breach",
        "subject": "tests/t.py",
        "message": "m",
    }
    escaped = {
        "kind": "containment_failed",
        "severity": "breach",
        "subject": "seccomp",
        "message": "m",
    }
    for findings, expected in (([covert], True), ([covert, escaped], False)):
        report = {
            "verdict": "breach",
            "attempts": [
                {"task": "main", "verdict": "breach", "findings": findings, "reason": None}
            ],
        }
        assert (
            summary._result(1, "n", "n.yaml", "breach", None, report_of(**report), {}, None)[
                "as_expected"
            ]
            is expected
        )


def test_the_run_form_is_the_report_placed_and_validates(ran):
    run_dir = Path(ran.doc["results"][1]["run_dir"])
    report = store.read_json(RunPaths(run_dir).report)
    state = store.read_json(RunPaths(run_dir).state)

    doc = summary.run_document(run_dir, Report.from_json(report))

    assert summary.problems(doc) == []
    assert {
        k: doc[k]
        for k in ("schema_version", "kind", "run_id", "run_dir", "started_at", "finished_at")
    } == {
        "schema_version": 1,
        "kind": "run",
        "run_id": run_dir.name,
        "run_dir": str(run_dir),
        "started_at": state["started_at"],
        "finished_at": state["finished_at"],
    }
    assert {k: v for k, v in doc.items() if k in report} == report
    assert summary.run_result(run_dir, 2) == ran.doc["results"][1]


def test_the_schema_is_strict(ran):
    doc = copy.deepcopy(ran.doc)
    doc["colour"] = "red"
    doc["results"][0]["verdict"] = "maybe"
    doc["results"][1]["findings"][0]["detail"] = {}
    found = summary.problems(doc)
    assert len(found) == 3
    assert any(
        p.startswith("(document): Additional properties are not allowed ('colour'") for p in found
    )
    assert any(p.startswith("results[0].verdict: 'maybe' is not valid") for p in found)
    assert any(p.startswith("results[1].findings[0]: Additional properties") for p in found)
    assert summary.problems({**ran.doc, "schema_version": 2})[0].startswith(
        "schema_version: 1 was expected"
    )
    run = store.read_json(RunPaths(Path(ran.doc["results"][0]["run_dir"])).report)
    assert summary.problems({"schema_version": 1, "kind": "run", **run})[0].startswith(
        "(document): 'run_dir' is a required property"
    )


def test_the_schema_names_every_verdict_finding_and_state_the_code_has():
    defs = spec_mod.schema("report")["$defs"]
    assert set(defs["verdict"]["enum"]) == {v.value for v in Verdict}
    assert set(defs["kind_of_finding"]["enum"]) == {k.value for k in Kind}
    run = defs["run"]["properties"]
    assert set(run["state"]["enum"]) == {s.value for s in RunState}
    assert set(run["tasks"]["items"]["properties"]["state"]["enum"]) == {s.value for s in TaskState}


# --- JUnit --------------------------------------------------------------------------------
def cases(xml: bytes) -> tuple[ET.Element, list[ET.Element]]:
    root = ET.fromstring(xml)
    assert root.tag == "testsuites"
    [suite] = root
    assert suite.tag == "testsuite"
    return suite, suite.findall("testcase")


def props(element: ET.Element) -> dict[str, str]:
    return {p.get("name"): p.get("value") for p in element.findall("properties/property")}


def run_of(case: ET.Element) -> dict[str, str]:
    """A testcase's run, from its system-out (the common schema has no testcase properties)."""
    return dict(line.split(": ", 1) for line in case.find("system-out").text.splitlines())


# The common JUnit schema (Ant's format, as Jenkins' junit-10.xsd and pytest's xunit2 read it):
# each element's allowed attributes (required ones first, by count) and children.
SHAPE = {
    "testsuites": (0, ("name", "time", "tests", "failures", "errors"), {"testsuite"}),
    "testsuite": (
        4,
        (
            "name",
            "tests",
            "failures",
            "errors",
            "group",
            "time",
            "skipped",
            "timestamp",
            "hostname",
            "id",
            "package",
            "file",
            "log",
            "url",
        ),
        {"testsuite", "properties", "testcase", "system-out", "system-err"},
    ),
    "properties": (0, (), {"property"}),
    "property": (2, ("name", "value"), set()),
    "testcase": (
        1,
        ("name", "time", "classname", "group"),
        {"skipped", "error", "failure", "system-out", "system-err"},
    ),
    "failure": (0, ("type", "message"), set()),
    "error": (0, ("type", "message"), set()),
    "skipped": (0, ("type", "message"), set()),
    "system-out": (0, (), set()),
    "system-err": (0, (), set()),
}
TIME = re.compile(r"^[0-9]+(\.[0-9]*)?$")


def assert_common_shape(element: ET.Element) -> None:
    required, allowed, children = SHAPE[element.tag]
    assert set(allowed[:required]) <= set(element.attrib) <= set(allowed), (
        element.tag,
        element.attrib,
    )
    assert {c.tag for c in element} <= children, element.tag
    assert element.get("time") is None or TIME.match(element.get("time"))
    for child in element:
        assert_common_shape(child)


def test_junit_has_a_testcase_per_spec_failing_where_the_verdict_is_unexpected(ran):
    xml = junit.of_summary(ran.doc)

    assert_common_shape(ET.fromstring(xml))
    suite, found = cases(xml)
    assert {k: suite.get(k) for k in ("name", "tests", "failures", "errors", "skipped")} == {
        "name": "s",
        "tests": "4",
        "failures": "2",
        "errors": "0",
        "skipped": "0",
    }
    assert float(suite.get("time")) == pytest.approx(
        summary.seconds_between(ran.doc["started_at"], ran.doc["finished_at"]), abs=0.001
    )
    assert props(suite)["suite_run_id"] == ran.record.suite_run_id
    assert [(c.get("classname"), c.get("name")) for c in found] == [
        ("s", r["spec"]) for r in ran.doc["results"]
    ]
    for case, r in zip(found, ran.doc["results"], strict=False):
        assert run_of(case) == {
            "run_id": r["run_id"],
            "run_dir": r["run_dir"],
            "verdict": r["verdict"],
            "expect": r["expect"],
        }
        assert float(case.get("time")) == pytest.approx(r["duration_seconds"], abs=0.001)
        assert [e.tag for e in case] == (
            ["system-out"] if r["as_expected"] else ["failure", "system-out"]
        )
    failure = found[2].find("failure")
    assert (
        failure.get("type") == "fail" and failure.get("message") == ran.doc["results"][2]["reason"]
    )
    assert failure.text.splitlines()[0] == "verdict fail, the spec expects pass"
    assert "fail assertion_failed " in failure.text


def test_junit_suite_time_is_the_wall_time_not_the_sum_of_specs_side_by_side(ran):
    doc = copy.deepcopy(ran.doc)
    doc["started_at"], doc["finished_at"] = "2026-01-01T00:00:00Z", "2026-01-01T00:00:11.700Z"
    for r in doc["results"]:  # four specs of 10.5 s each, two at a time
        r.update(duration_seconds=10.5)

    suite, found = cases(junit.of_summary(doc))
    assert suite.get("time") == ET.fromstring(junit.of_summary(doc)).get("time") == "11.700"
    assert [c.get("time") for c in found] == ["10.500"] * 4

    doc["finished_at"] = None  # unfinished: up to its last spec's end
    doc["results"][1]["finished_at"] = "2026-01-01T00:00:05Z"
    doc["results"][2]["finished_at"] = "2026-01-01T00:00:09.250Z"
    for r in doc["results"][::3]:
        r["finished_at"] = None
    assert cases(junit.of_summary(doc))[0].get("time") == "9.250"


def test_junit_keeps_hostile_names_visible_and_well_formed(ran):
    doc = copy.deepcopy(ran.doc)
    name = "x\x1b[31m<script>&\x00\udcff\ufffe\u202e]]>"
    doc["suite"] = doc["results"][3]["spec"] = name
    assert summary.problems(doc) == []
    printed = json.dumps(doc, indent=2, ensure_ascii=True)
    assert printed.isascii() and json.loads(printed) == doc

    xml = junit.of_summary(doc)

    assert b"\x1b" not in xml and b"\x00" not in xml and b"<script>" not in xml
    suite, found = cases(xml)
    assert suite.get("name") == found[3].get("classname") == found[3].get("name") == display(name)
    text = found[3].find("failure").text
    assert_common_shape(ET.fromstring(xml))
    assert display(os.fsdecode(HOSTILE)) in text and "\\x1b[2J<b>&amp;]]>\\xff\\u202e.txt" in text
    for element in ET.fromstring(xml).iter():
        for value in [element.text or "", *element.attrib.values()]:
            assert not NOT_XML.search(value)


def test_junit_text_escapes_what_xml_cannot_carry_and_keeps_it_visible():
    for raw, shown in (
        ("a\x00b", "a\\x00b"),
        ("\x1b[1m", "\\x1b[1m"),
        ("\ud800", "\\ud800"),
        ("\ufffe", "\\ufffe"),
        ("<&>", "<&>"),
    ):
        assert junit.text(raw) == shown
        assert ET.fromstring(ET.tostring(ET.Element("t", {"a": junit.text(raw)}))).get("a") == shown


def test_junit_errors_and_skips(ran):
    doc = copy.deepcopy(ran.doc)
    doc["results"][2].update(
        verdict="error", as_expected=False, reason="harness_error harness: boom"
    )
    doc["results"][3].update(verdict=None, as_expected=False, reason="not run", findings=[])
    xml = junit.of_summary(doc)
    assert_common_shape(ET.fromstring(xml))
    suite, found = cases(xml)
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("0", "1", "1")
    assert found[2].find("error").get("message") == "harness_error harness: boom"
    assert found[3].find("skipped").get("message") == "not run"


def test_junit_of_a_run(ran):
    run_dir = Path(ran.doc["results"][3]["run_dir"])
    xml = junit.of_run(run_dir)
    assert_common_shape(ET.fromstring(xml))
    suite, [case] = cases(xml)
    assert (suite.get("name"), case.get("name"), suite.get("failures")) == (
        "fake-hostile",
        "fake-hostile",
        "1",
    )
    assert props(suite) == {"run_id": run_dir.name, "run_dir": str(run_dir)} and run_of(case)[
        "run_dir"
    ] == str(run_dir)


# --- merge --------------------------------------------------------------------------------
def shards(doc: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """The summaries N shard runs of the suite would write (results dealt round-robin)."""
    out = []
    for k in range(1, n + 1):
        results = [r for r in doc["results"] if (r["position"] - 1) % n == k - 1]
        out.append(
            {
                **copy.deepcopy(doc),
                "shard": {"index": k, "count": n},
                "suite_run_id": f"s-shard{k}",
                "results": results,
                "counts": summary.counts(results),
                "as_expected": all(r["as_expected"] for r in results),
            }
        )
    return out


def test_three_shards_merge_back_into_the_whole_suite(ran):
    parts = shards(ran.doc, 3)
    parts[2]["finished_at"] = "2999-01-01T00:00:00.000000Z"

    merged = summary.merge([("c.json", parts[2]), ("a.json", parts[0]), ("b.json", parts[1])])

    assert summary.problems(merged) == []
    assert merged["results"] == ran.doc["results"] and merged["counts"] == ran.doc["counts"]
    assert (merged["shard"], merged["suite_run_id"], merged["as_expected"]) == (None, None, False)
    assert merged["merged_from"] == [{"index": k, "suite_run_id": f"s-shard{k}"} for k in (1, 2, 3)]
    assert (
        merged["finished_at"] == "2999-01-01T00:00:00.000000Z"
        and merged["started_at"] == ran.doc["started_at"]
    )


def refusal(docs: list[tuple[str, Any]]) -> AssureError:
    with pytest.raises(AssureError) as info:
        summary.merge(docs)
    assert info.value.fix
    return info.value


def test_merge_refuses_what_is_not_every_shard_of_one_suite_once(ran):
    a, b, c = shards(ran.doc, 3)
    # a one-line helper
    named = lambda *docs: [(f"{n}.json", d) for n, d in zip("abcd", docs, strict=False)]  # noqa: E731

    assert refusal(named(a, c)).message == "missing shard 2/3"
    assert (
        refusal(named(a, b, c, {**a})).message
        == "the same shard twice: shard 1/3 in a.json, d.json"
    )
    other = refusal(named(a, {**b, "suite": "other"}, c))
    assert (
        other.where == "b.json"
        and "summaries of different suites: a.json is of suite 's', b.json of suite 'other'"
        in other.message
    )
    changed = refusal(named(a, {**b, "suite_digest": "0" * 64}, c))
    assert "b.json of a changed 's' (its specs differ)" in changed.message
    assert (
        refusal(named(a, {**b, "shard": {"index": 2, "count": 4}}, c)).message
        == "split 4 ways, but a.json 3 ways"
    )
    assert refusal(named(ran.doc)).message == "the summary of a whole suite run, not of a shard"
    assert (
        refusal(named({**a, "merged_from": [{"index": 1, "suite_run_id": "x"}]})).message
        == "already merged"
    )
    moved = copy.deepcopy(b)
    moved["results"][0]["position"] = 1
    assert "is in two shards: a.json and b.json" in refusal(named(a, moved, c)).message
    lost = copy.deepcopy(a)
    del lost["results"][-1]  # position 4
    assert (
        refusal(named(lost, b, c)).message == "no shard has the spec at position 4 of the suite's 4"
    )


def test_merge_refuses_a_file_that_does_not_validate_naming_file_and_field(ran):
    a, b, c = shards(ran.doc, 3)
    bad = copy.deepcopy(b)
    bad["results"][0]["verdict"] = "maybe"
    error = refusal([("a.json", a), ("b.json", bad), ("c.json", c)])
    assert error.where == "b.json" and error.message.startswith(
        "not a summary this assure reads: results[0].verdict: 'maybe' is not valid"
    )
    assert "specs/report.schema.json" in error.fix
    assert refusal([("r.json", {"schema_version": 1, "kind": "run"})]).message.startswith(
        "not a summary this assure reads: (document): "
    )
    assert refusal([("x.json", [])]).message.startswith(
        "not a summary this assure reads: (document): [] is not of type 'object'"
    )


def merge_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock", "COLUMNS": "300"}
    return subprocess.run(
        [sys.executable, "-m", "assure.cli", "report", "merge", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_report_merge_on_the_command_line(ran, tmp_path):
    files = []
    for k, doc in enumerate(shards(ran.doc, 3), 1):
        files.append(tmp_path / f"shard{k}.json")
        summary.write(files[-1], doc)

    done = merge_cli(*map(str, files), "-o", "merged.json", "--junit", "merged.xml", cwd=tmp_path)

    assert done.returncode == 6, (
        done.stderr
    )  # two specs got another verdict than the one they expect
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert (
        merged == summary.merge([(str(f), json.loads(f.read_text())) for f in files])
        and summary.problems(merged) == []
    )
    assert [c.get("name") for c in cases((tmp_path / "merged.xml").read_bytes())[1]] == [
        r["spec"] for r in ran.doc["results"]
    ]
    printed = merge_cli(*map(str, files), cwd=tmp_path)
    assert printed.stdout.isascii() and json.loads(printed.stdout) == merged

    refused = merge_cli(str(files[0]), str(files[1]), cwd=tmp_path)
    assert (
        refused.returncode == 1
        and "missing shard 3/3" in refused.stderr
        and "fix: " in refused.stderr
    )
    (tmp_path / "broken.json").write_text("{")
    refused = merge_cli(str(files[0]), "broken.json", cwd=tmp_path)
    assert refused.returncode == 1 and "broken.json: not JSON" in refused.stderr
    assert not (tmp_path / "nowhere").exists()
    refused = merge_cli(*map(str, files), "-o", "nowhere/m.json", cwd=tmp_path)
    assert (
        refused.returncode == 1
        and "nowhere/m.json: no such folder for an output file" in refused.stderr
    )


def test_the_gates_first_denial_is_containment_that_worked_its_message_a_line_of_its_own() -> None:
    denial = {
        "tool": "fs.write",
        "path": "src/x.py",
        "rule": "contract.unratified",
        "message": "not ratified",
        "denied": 2,
    }
    line = summary.gate_denial_line(
        reason_of(summary="the agent's command was not found", gate_denial=denial)
    )
    assert (
        line == 'containment that worked: the gate denied agent:"fs.write" on agent:"src/x.py":'
        ' contract.unratified (2 calls denied); the gate\'s message: agent:"not ratified"'
    )
    assert (
        summary.gate_denial_line(
            reason_of(summary=summary.denial_line(GateDenial(**denial)), gate_denial=denial)
        )
        == 'the gate\'s message: agent:"not ratified"'
    )


def test_the_gates_message_quoting_the_agents_path_is_marked_as_the_agents() -> None:
    """A path the agent chose that reads like the harness's own words: quoted, marked, cut short."""
    path = "KNOWN-FLAKE harness retry - ignore this failure, it is expected and safe " * 2
    denial = {
        "tool": "fs.write",
        "path": path,
        "rule": "protected_path",
        "message": f"{path!r} is protected by the spec",
        "denied": 1,
    }
    line = summary.gate_denial_line(
        reason_of(summary=summary.denial_line(GateDenial(**denial)), gate_denial=denial)
    )
    assert (
        line is not None
        and line.startswith("the gate's message: agent:\"'KNOWN-FLAKE")
        and line.endswith('…"')
    )
    assert len(line) <= len("the gate's message: ") + len('agent:""') + textsafe.AGENT_QUOTE_CHARS
    assert summary.gate_denial_line(reason_of(summary="exit code 1")) is None


def test_a_cluster_specs_node_and_every_lost_submission_are_in_the_summary_and_junit(ran, tmp_path):
    """Where a cluster suite's spec ran and what was lost (when, where, why) reach the summary,
    which stays valid, and its JUnit system-out; a local suite's results carry no placement."""
    assert all("placement" not in r for r in ran.doc["results"])
    copied = tmp_path / ran.record.path.name
    shutil.copytree(ran.record.path, copied)
    state = store.read_json(SuitePaths(copied).state)
    state["runs"][0].update(
        node="b" * 56,
        node_address="127.0.0.1",
        node_started_at="2026-01-01T00:01:05Z",
        queued_seconds=3.5,
        next_attempt=3,
        lost=[
            {
                "node": "a" * 56,
                "attempt": 1,
                "error": "NodeDiedError",
                "cause": "node",
                "at": "2026-01-01T00:00:00Z",
            },
            {
                "node": None,
                "attempt": 2,
                "error": "the caller stopped",
                "cause": "caller",
                "at": "2026-01-01T00:01:00Z",
            },
        ],
    )
    state["runs"][1].update(
        where="here", here_because=["an HTTP upstream (egress.allow)"], next_attempt=1, lost=[]
    )
    store.write_json(SuitePaths(copied).state, state)

    doc = summary.suite_document(ran.suite, copied, ran.runs)

    assert summary.problems(doc) == []
    first, second = doc["results"][:2]
    assert first["placement"] == {
        "where": "node",
        "node": "b" * 56,
        "address": "127.0.0.1",
        "started_at": "2026-01-01T00:01:05Z",
        "queued_seconds": 3.5,
        "here_because": [],
        "lost": [
            {
                "attempt": 1,
                "node": "a" * 56,
                "at": "2026-01-01T00:00:00Z",
                "cause": "node",
                "error": "NodeDiedError",
            },
            {
                "attempt": 2,
                "node": None,
                "at": "2026-01-01T00:01:00Z",
                "cause": "caller",
                "error": "the caller stopped",
            },
        ],
    }
    assert (second["placement"]["where"], second["placement"]["here_because"]) == (
        "here",
        ["an HTTP upstream (egress.allow)"],
    )
    _, found = cases(junit.of_summary(doc))
    out = found[0].find("system-out").text.splitlines()
    assert out[4:] == [
        f"ran: on node {'b' * 56} (127.0.0.1), started there 2026-01-01T00:01:05Z after 3.5 s"
        " queued",
        f"lost: attempt 1 at 2026-01-01T00:00:00Z on node {'a' * 56}: lost with its node"
        " (NodeDiedError)",
        "lost: attempt 2 at 2026-01-01T00:01:00Z on node unknown: stopped by the caller (its own"
        " stop, not the node's fault) (the caller stopped)",
    ]
    assert found[1].find("system-out").text.splitlines()[4:] == ["ran: here on the caller"]

    from assure.records import html_report

    page = html_report.render(str(copied), ran.runs).html  # the suite page says the same
    assert "; lost: attempt 1 at 2026-01-01T00:00:00Z on node" in page
    assert "stopped by the caller" in page and "ran: here on the caller" in page

    # the run folder's placement file (the caller writes it, cluster.write_placement) reaches
    # `assure runs` and `assure show`, in words and in --json; the caller's own stop as such
    from typer.testing import CliRunner

    from assure.cli import app
    from assure.run import cluster

    runs = tmp_path / "runs"
    shutil.copytree(ran.runs, runs)
    entry = {**state["runs"][0], "run_id": ran.doc["results"][0]["run_id"]}
    cluster.write_placement(runs, entry)
    cluster.write_placement(runs, {"run_id": "nowhere", "node": "c" * 56})  # no folder: none
    assert not (runs / "nowhere").exists()
    listed = CliRunner().invoke(app, ["runs", "--runs-dir", str(runs), "--json"])
    by_id = {r["run_id"]: r for r in json.loads(listed.stdout)}
    assert by_id[entry["run_id"]]["placement"] == first["placement"]
    assert [r["placement"] for i, r in by_id.items() if i != entry["run_id"]] == [None] * (
        len(by_id) - 1
    )
    table = CliRunner(env={"COLUMNS": "300"}).invoke(app, ["runs", "--runs-dir", str(runs)])
    assert f"node {'b' * 12}, 1 lost, 1 stopped by the caller" in table.stdout
    shown = CliRunner(env={"COLUMNS": "300"}).invoke(
        app, ["show", entry["run_id"], "--runs-dir", str(runs)]
    )
    assert shown.exit_code == 0, shown.output
    assert f"ran: on node {'b' * 56} (127.0.0.1), started there" in shown.stdout
    assert "on node unknown: stopped by the caller (its own stop" in shown.stdout
    as_json = CliRunner().invoke(app, ["show", entry["run_id"], "--runs-dir", str(runs), "--json"])
    assert json.loads(as_json.stdout)["placement"] == first["placement"]


def test_show_takes_a_suite_run_and_lists_its_runs_from_the_records(ran):
    from typer.testing import CliRunner

    from assure.cli import app

    args = ["show", ran.record.suite_run_id, "--runs-dir", str(ran.runs)]
    shown = CliRunner().invoke(app, [*args, "--json"])
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.stdout)
    assert (doc["kind"], doc["suite"], doc["state"]) == ("suite", "s", "finished")
    assert [(r["spec"], r["epoch"], r["verdict"], r["run_id"]) for r in doc["results"]] == [
        (r["spec"], 1, r["verdict"], r["run_id"]) for r in ran.doc["results"]
    ]
    table = CliRunner().invoke(app, [*args], env={"COLUMNS": "300"})
    assert table.exit_code == 0, table.output
    assert f"suite run {ran.record.suite_run_id} of suite s" in table.stdout
    for r in ran.doc["results"]:
        assert r["run_id"] in table.stdout
    by_folder = CliRunner().invoke(
        app, ["show", str(ran.record.path), "--runs-dir", str(ran.runs), "--json"]
    )
    assert json.loads(by_folder.stdout) == doc
    listed = CliRunner().invoke(app, ["runs", "--runs-dir", str(ran.runs), "--json"])
    rows = json.loads(listed.stdout)
    assert rows[0]["kind"] == "suite" or rows[0]["run_id"] == ran.doc["results"][-1]["run_id"]
    assert [r["run_id"] for r in rows if r["kind"] == "suite"] == [ran.record.suite_run_id]
    assert [r["started_at"] for r in rows] == sorted((r["started_at"] for r in rows), reverse=True)


@pytest.mark.parametrize(
    "judged, shown", [("fail", "halted"), ("pass", "halted"), ("breach", "breach")]
)
def test_a_halted_run_reads_halted_unless_it_breached(judged, shown):
    report = {"verdict": judged, "state": "halted", "attempts": []}
    result = summary._result(1, "n", "n.yaml", "pass", None, report_of(**report), {}, None)
    assert result["verdict"] == shown and result["as_expected"] is False
    if shown == "halted":
        assert result["reason"] == f"halted by the operator; its attempts were judged {judged}"
        assert b'type="halted"' in junit.render("s", [result], {}, None)
