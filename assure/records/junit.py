"""A summary as JUnit XML, for CI test reports: one testcase per run (spec, or sample, x epoch), a
failure when the
verdict is not the expected one, an error when it is `error`, skipped when it never ran.

The shape is the common JUnit schema's (Ant's, as Jenkins' junit-10.xsd and pytest's xunit2
read it): testsuites/testsuite(name, tests, failures, errors, skipped, time)/testcase(classname,
name, time). That schema has no properties on a testcase, so each spec's run (run_id,
run_dir) is its testcase's system-out; the suite run's are the testsuite's properties.

Built with ElementTree, never by formatting strings, so markup in a name stays text. XML 1.0
cannot carry control characters or lone surrogates at all, even as references: every string
goes through `textsafe.display`, whose escapes keep such a character visible (`\\x1b`), and
anything else XML refuses is escaped the same way after it (failing closed, not dropping).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from assure.core import atomic
from assure.records import summary
from assure.textsafe import display

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def text(value: Any) -> str:
    """Any value as text XML 1.0 carries, its unsafe characters escaped visibly."""
    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", display(str(value)))


def of_summary(doc: dict[str, Any]) -> bytes:
    """A suite summary (specs/report.schema.json, kind "suite") as JUnit XML."""
    props = {
        "suite_run_id": doc["suite_run_id"],
        "suite_digest": doc["suite_digest"],
        "source": doc["source"],
        "started_at": doc["started_at"],
    }
    if doc["shard"]:
        props["shard"] = f"{doc['shard']['index']}/{doc['shard']['count']}"
    if doc.get("epochs", 1) > 1:
        m = doc["metrics"]
        props["epochs"] = doc["epochs"]
        props["pass_rate"] = m["pass_rate"]
        props["pass_rate_stderr"] = m["pass_rate_stderr"]
        props |= {f"pass_at_{k}": v for k, v in m["pass_at_k"].items()}
    if doc["merged_from"]:
        props["merged_from"] = " ".join(
            f"{m['index']}:{m['suite_run_id']}" for m in doc["merged_from"]
        )
    return render(doc["suite"], doc["results"], props, wall_seconds(doc))


def wall_seconds(doc: dict[str, Any]) -> float | None:
    """A suite's wall time: from its start to its end (to its last spec's end while unfinished),
    never the sum of its specs' times, which run side by side."""
    ends = (
        [doc["finished_at"]] if doc["finished_at"] else [r["finished_at"] for r in doc["results"]]
    )
    ends = [e for e in ends if e]
    return (
        summary.seconds_between(doc["started_at"], max(ends, key=summary.instant)) if ends else None
    )


def of_run(run_dir: Path) -> bytes:
    """One run (`assure run --junit`) as JUnit XML, from its run directory."""
    result = summary.run_result(run_dir)
    return render(
        result["spec"],
        [result],
        {"run_id": result["run_id"], "run_dir": result["run_dir"]},
        result["duration_seconds"],
    )


def render(
    name: str,
    results: Sequence[dict[str, Any]],
    properties: dict[str, Any],
    seconds: float | None,
) -> bytes:
    """One <testsuite> named `name` (each testcase's classname) of summary results, taking
    `seconds` of wall time."""
    failures = sum(
        r["verdict"] is not None and r["verdict"] != "error" and not r["as_expected"]
        for r in results
    )
    errors = sum(r["verdict"] == "error" and not r["as_expected"] for r in results)
    skipped = sum(r["verdict"] is None for r in results)
    total = f"{seconds or 0.0:.3f}"
    counts = {
        "tests": str(len(results)),
        "failures": str(failures),
        "errors": str(errors),
        "time": total,
    }
    root = ET.Element("testsuites", {"name": text(name), **counts})
    suite = ET.SubElement(
        root, "testsuite", {"name": text(name), **counts, "skipped": str(skipped)}
    )
    _properties(suite, properties)
    epochs = max((r.get("epoch", 1) for r in results), default=1)
    for r in results:
        _case(suite, name, r, epochs)
    ET.indent(root)
    xml: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return xml + b"\n"


def _properties(parent: ET.Element, values: dict[str, Any]) -> None:
    given = {k: v for k, v in values.items() if v is not None}
    if given:
        props = ET.SubElement(parent, "properties")
        for key, value in given.items():
            ET.SubElement(props, "property", {"name": key, "value": text(value)})


def _case(suite: ET.Element, classname: str, r: dict[str, Any], epochs: int = 1) -> None:
    """One run's testcase, named by its spec (and its epoch, when the suite runs more than one)."""
    case = ET.SubElement(
        suite,
        "testcase",
        {
            "classname": text(classname),
            "name": text(
                r["spec"] + (f" epoch {r['epoch']}" if r.get("epoch", 1) > 1 or epochs > 1 else "")
            ),
            "time": f"{r['duration_seconds'] or 0.0:.3f}",
        },
    )
    reason = text(r["reason"] or f"verdict {r['verdict']}, the spec expects {r['expect']}")
    if r["verdict"] is None and not r["as_expected"]:
        ET.SubElement(case, "skipped", {"message": reason})
    elif not r["as_expected"]:
        element = ET.SubElement(
            case,
            "error" if r["verdict"] == "error" else "failure",
            {"message": reason, "type": text(r["verdict"])},
        )
        lines = [f"verdict {r['verdict']}, the spec expects {r['expect']}"]
        lines += [
            f"{text(f['severity'])} {text(f['kind'])} {text(f['subject'])}: {text(f['message'])}"
            for f in r["findings"]
        ]
        if r["findings_omitted"]:
            lines.append(
                f"... and {r['findings_omitted']} more findings (the run directory has them all)"
            )
        element.text = "\n".join(lines)
    out = [
        f"{key}: {'none' if r[key] is None else text(r[key])}"
        for key in ("run_id", "run_dir", "verdict", "expect")
    ]
    if (placed := r.get("placement")) is not None:  # a cluster suite's: where it ran, what was lost
        out += [text(line) for line in summary.placement_lines(placed)]
    ET.SubElement(case, "system-out").text = "\n".join(out)


def write(path: Path, xml: bytes) -> None:
    """The report, whole or not at all (`core.atomic`)."""
    atomic.write_bytes(path, xml)
