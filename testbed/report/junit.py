"""JUnit XML for CI: one test case per cell, a cell that differs from its
expectation (or breaks its promise) as a failure whose message is its
differences. A run the lab could not finish (exit 3) adds one case in error
naming what failed and the cells not judged. Every case names its ops as the terminal does (breaking, differing
and held ops, `testbed.report.findings`) and counts its bad outcomes, and the
processes its jobs left running after their attempts, as properties, passing or
not (the latter also in its system-out, where there were any); an exploration is one test case, failing with its
counterexample."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path

from testbed.report import explore, findings, reading
from testbed.report.tables import left_said
from testbed.store.files import replaced
from testbed.store.results import ResultRow, Results


def junit(results: Results) -> ET.Element:
    rows = results.rows
    failures = sum(not r.passed for r in rows)
    if results.explore is not None:  # one case: the exploration, failing with its counterexample
        rows, failures = [], int(results.explore.counterexample is not None)
    suite_name = f"testbed {reading.command(results)} {results.run}".strip()
    wall = f"{results.wall_seconds:.3f}"
    tests = (1 if results.explore is not None else len(rows)) + int(results.incomplete)
    errors = str(int(results.incomplete))
    totals = {"tests": str(tests), "failures": str(failures), "errors": errors, "skipped": "0", "time": wall}
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
    if results.incomplete:
        _withheld(suite, results)
    return top


def _withheld(suite: ET.Element, results: Results) -> None:
    """The verdict withheld: an error (the lab's), not a failure (the job's)."""
    case = ET.SubElement(suite, "testcase", {"classname": "testbed", "name": "the lab's own parts", "time": "0"})
    failure = results.failure or "a part of the lab failed"
    error = ET.SubElement(case, "error", {"message": f"verdict withheld: {failure}", "type": "incomplete"})
    error.text = "\n".join([failure, *(f"not judged: {cell}" for cell in results.not_run)])


# Per test case, as properties: what a CI dashboard can count across runs (and leftoverProcesses,
# what the cell's jobs left running after their attempts, stopped).
_COUNTED = ("duplicateEffects", "missingOperations", "falseCompletions", "unresolved", "conflicts", "failedByProvider")


def _case(suite: ET.Element, row: ResultRow) -> None:
    found = findings.cell_findings(row)
    case = ET.SubElement(
        suite,
        "testcase",
        {"classname": f"{row.fault}/{row.scenario}", "name": found.label, "time": f"{row.wall_seconds:.3f}"},
    )
    counts = row.counts()
    properties = ET.SubElement(case, "properties")
    for name in _COUNTED:
        ET.SubElement(properties, "property", {"name": name, "value": str(counts[name])})
    left = row.leftover_processes
    ET.SubElement(properties, "property", {"name": "leftoverProcesses", "value": str(left)})
    ops = [op.text for op in found.ops]
    if not row.passed:
        failure = ET.SubElement(case, "failure", {"message": "; ".join(found.problems) or "differs", "type": "differs"})
        failure.text = "\n".join([*found.problems, *ops])
    out = ET.SubElement(case, "system-out")
    names = ("effects", "missingOperations", "duplicateEffects", "kills", "replays")
    lines = [found.verdict, ", ".join(f"{name} {counts[name]}" for name in names), *ops]
    if left:
        lines.append(left_said(left))
    out.text = "\n".join(lines)


def write_junit(path: Path | str, results: Results) -> None:
    """Whole or not at all (`testbed.store.files.replaced`): Unwritable where it cannot be."""
    tree = ET.ElementTree(junit(results))
    ET.indent(tree)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with replaced(target) as out:
        tree.write(out, encoding="utf-8", xml_declaration=True)
