"""JUnit XML for CI: one test case per cell, a cell that differs from its
expectation (or breaks its promise, under load) as a failure whose message
is its differences."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from testbed.report import document


def junit(results: Mapping[str, Any]) -> ET.Element:
    rows = results.get("rows", [])
    failures = sum(r.get("verdict") == "fail" for r in rows)
    suite_name = f"testbed {document.command(results)} {results.get('run', '')}".strip()
    wall = f"{float(results.get('wallSeconds', 0.0)):.3f}"
    totals = {"tests": str(len(rows)), "failures": str(failures), "errors": "0", "skipped": "0", "time": wall}
    top = ET.Element("testsuites", {"name": "testbed", **{k: totals[k] for k in ("tests", "failures", "errors")}})
    top.set("time", wall)
    suite = ET.SubElement(top, "testsuite", {"name": suite_name, **totals})
    if results.get("startedAt"):
        suite.set("timestamp", str(results["startedAt"]).removesuffix("Z"))  # the schema's form: no zone
    properties = ET.SubElement(suite, "properties")
    for name in ("run", "seed"):
        if name in results:
            ET.SubElement(properties, "property", {"name": name, "value": str(results[name])})
    for name, value in (results.get("options") or {}).items():
        if not isinstance(value, Mapping):
            ET.SubElement(properties, "property", {"name": f"option.{name}", "value": str(value)})
    for row in rows:
        _case(suite, row)
    return top


def _case(suite: ET.Element, row: Mapping[str, Any]) -> None:
    case = ET.SubElement(
        suite,
        "testcase",
        {
            "classname": f"{row['fault']}/{row['scenario']}",
            "name": document.label(row),
            "time": f"{float(row.get('wallSeconds', 0.0)):.3f}",
        },
    )
    if row.get("verdict") == "fail":
        differences = list(row.get("differences", []))
        failure = ET.SubElement(case, "failure", {"message": "; ".join(differences) or "differs", "type": "differs"})
        lines = differences + [_op_line(op) for op in row.get("opDifferences") or []]
        failure.text = "\n".join(lines)
    counts = ("effects", "missingOperations", "duplicateEffects", "kills", "replays")
    out = ET.SubElement(case, "system-out")
    out.text = ", ".join(f"{name} {row[name]}" for name in counts if name in row)


def _op_line(op: Mapping[str, Any]) -> str:
    expected, observed = op.get("expected") or {}, op.get("observed") or {}
    fields = [
        f"{k} expected {expected.get(k)}, observed {observed.get(k)}"
        for k in dict.fromkeys([*expected, *observed])
        if expected.get(k) != observed.get(k)
    ]
    return f"op {op.get('op')}: " + ("; ".join(fields) or "differs")


def write_junit(path: Path | str, results: Mapping[str, Any]) -> None:
    tree = ET.ElementTree(junit(results))
    ET.indent(tree)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tree.write(target, encoding="utf-8", xml_declaration=True)
