"""JUnit XML for CI: one test case per cell, a cell that differs from its
expectation (or breaks its promise, under load) as a failure whose message
is its differences; an exploration is one test case, failing with its
counterexample."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path

from testbed.lab.results import OpDifference, ResultRow, Results
from testbed.report import document, explore


def junit(results: Results) -> ET.Element:
    rows = results.rows
    failures = sum(not r.passed for r in rows)
    if results.explore is not None:  # one case: the exploration, failing with its counterexample
        rows, failures = [], int(results.explore.counterexample is not None)
    suite_name = f"testbed {document.command(results)} {results.run}".strip()
    wall = f"{results.wall_seconds:.3f}"
    tests = 1 if results.explore is not None else len(rows)
    totals = {"tests": str(tests), "failures": str(failures), "errors": "0", "skipped": "0", "time": wall}
    top = ET.Element("testsuites", {"name": "testbed", **{k: totals[k] for k in ("tests", "failures", "errors")}})
    top.set("time", wall)
    suite = ET.SubElement(top, "testsuite", {"name": suite_name, **totals})
    if results.started_at:
        suite.set("timestamp", results.started_at.removesuffix("Z"))  # the schema's form: no zone
    properties = ET.SubElement(suite, "properties")
    for name, value in (("run", results.run), ("seed", results.seed)):
        ET.SubElement(properties, "property", {"name": name, "value": str(value)})
    for name, value in results.options.as_stored().items():
        if not isinstance(value, Mapping):
            ET.SubElement(properties, "property", {"name": f"option.{name}", "value": str(value)})
    for row in rows:
        _case(suite, row)
    if results.explore is not None:
        explore.junit_case(suite, results)
    return top


def _case(suite: ET.Element, row: ResultRow) -> None:
    case = ET.SubElement(
        suite,
        "testcase",
        {
            "classname": f"{row.fault}/{row.scenario}",
            "name": document.label(row),
            "time": f"{row.wall_seconds:.3f}",
        },
    )
    if not row.passed:
        differences = list(row.differences)
        failure = ET.SubElement(case, "failure", {"message": "; ".join(differences) or "differs", "type": "differs"})
        lines = differences + [_op_line(op) for op in row.op_differences or []]
        failure.text = "\n".join(lines)
    counts = row.counts()
    out = ET.SubElement(case, "system-out")
    names = ("effects", "missingOperations", "duplicateEffects", "kills", "replays")
    out.text = ", ".join(f"{name} {counts[name]}" for name in names)


def _op_line(op: OpDifference) -> str:
    expected, observed = op.expected, op.observed
    fields = [
        f"{k} expected {expected.get(k)}, observed {observed.get(k)}"
        for k in dict.fromkeys([*expected, *observed])
        if expected.get(k) != observed.get(k)
    ]
    return f"op {op.op}: " + ("; ".join(fields) or "differs")


def write_junit(path: Path | str, results: Results) -> None:
    tree = ET.ElementTree(junit(results))
    ET.indent(tree)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tree.write(target, encoding="utf-8", xml_declaration=True)
