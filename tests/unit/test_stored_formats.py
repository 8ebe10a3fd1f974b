"""The stored run's formats: results.json and the history's lines, written and read back
by their records, checked against the JSON Schemas the docs publish (docs/reference)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from labcore.boundaries import Boundary
from labcore.events import Event, EventKind, Noted
from labcore.faults import Fault
from labcore.plan import EveryNth, Random
from provider.store import ReferenceRecord
from testbed.experiment.matrix import Cell
from testbed.judge.model import predict_ops
from testbed.judge.observer import CellObservations
from testbed.judge.scorecard import Row
from testbed.judge.verdict import Judgement, judge
from testbed.lab.session import Session
from testbed.store import history, reference, results
from testbed.store.formats import Mismatch

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference"
T = 1_796_000_000.0
OP = "tenant-demo:notification:10"
CHAOS = {"matrix": "article", "ops": 20, "every": 10, "parallel": 2, "workers": 4, "redis": "private"}
CHAOS |= {"retries": 1, "clientTimeout": 0.5, "recovery": "forced", "expect": {"retry-only @ none": [20, 0]}}
CHAOS |= {"workerSettings": {"workerTtl": 420, "maintenanceInterval": 600, "jobMonitoringInterval": 30}}


def seen_killed() -> CellObservations:
    """An op killed after its effect at its first attempt, and run again."""
    seen = CellObservations()
    seen.event(Event(EventKind.ATTEMPT_START, "c001", OP, 1, 100, "w1", T, {"enqueuedAt": T - 0.1}))
    seen.note(OP, EventKind.HIT, T + 0.01, attempt=1, boundary=Boundary.AFTER_EFFECT, fault=Fault.KILL, pid=100)
    seen.note(OP, EventKind.KILLED, T + 0.02, attempt=1, boundary="after-effect", worker="w1", pids=[100])
    seen.event(Event(EventKind.ATTEMPT_START, "c001", OP, 2, 101, "w2", T + 0.3, {"enqueuedAt": T + 0.025}))
    seen.event(Event(EventKind.ATTEMPT_END, "c001", OP, 2, 101, "w2", T + 0.4, {"outcome": "completed"}))
    seen.anomaly("pid 7 was already gone")
    return seen


def rows() -> list[Row]:
    """A chaos row that differs from the model (its ops named), and a load row."""
    cell = Cell("record-after", Boundary.AFTER_EFFECT)
    plan = EveryNth(10, Boundary.AFTER_EFFECT, Fault.KILL)
    facts = [f for _, f, _, _ in predict_ops(cell, plan, 20, 1)]
    facts[9] = [replace(facts[9][0], effects=1)]
    chaos = judge(Judgement(cell, plan, 20, 1), facts, seen_killed(), 4, 1.25)
    chaos.cell_id = "c001"
    spread = Cell("provider-key", None, Fault.KILL, spread=True)
    spread_plan = Random(0.3, (Boundary.AFTER_EFFECT,), Fault.KILL, 1, 7)
    load = judge(
        Judgement(spread, spread_plan, 20, 1, promises=True),
        [f for _, f, _, _ in predict_ops(spread, spread_plan, 20, 1)],
        CellObservations(keep_history=False),
        4,
        2.5,
    )
    load.cell_id, load.series = "c002", [{"t": 0.05, "over": 4, "kills": 0, "effects": 4}]
    return [chaos, load]


def document(failure: str | None = None) -> dict[str, Any]:
    """A results document as a run writes it: what its session says, then its rows."""
    versions = {"testbed": "0.1.0", "rq": "3.0.0", "python": "3.11.7"}
    session = Session("20261206-000000-abcdef", rows(), T, 3.5, versions, failure, ["a cell"] if failure else [])
    return results.document({"command": "chaos"} | session.meta(CHAOS, 0), session.rows)


def published(name: str) -> jsonschema.protocols.Validator:
    schema = json.loads((REFERENCE / name).read_text())
    return jsonschema.Draft202012Validator(schema)


def test_the_published_schemas_are_the_records_own() -> None:
    for name, text in reference.rendered().items():
        path = REFERENCE / name
        assert path.is_file() and path.read_text() == text, f"{path} is stale: python -m testbed.store.reference"


@pytest.mark.parametrize("failure", [None, "the provider died"])
def test_a_runs_results_match_the_published_schema_and_read_back(failure: str | None) -> None:
    written = json.loads(json.dumps(document(failure)))  # as the file holds it
    published("results.schema.json").validate(written)
    read = results.parse(json.dumps(written))
    assert read.incomplete is (failure is not None)
    assert read.verdict == ("incomplete" if failure else "fail")  # never pass, nor a finding, for a run the lab failed
    chaos, load = read.rows
    assert (chaos.as_cell().label, chaos.cell, chaos.passed) == ("record-after @ after-effect (kill)", "c001", False)
    assert chaos.history is not None and chaos.history[OP][2].as_dict()["pids"] == [100]
    assert chaos.op_differences and chaos.op_differences[0].plan[0].boundary == "after-effect"
    assert load.invariants and load.series and load.series[0].over == 4
    assert read.options.as_stored() == CHAOS  # every option, in the order the run wrote them
    assert list(read.options.as_stored()) == list(CHAOS)


def test_a_row_read_back_counts_as_it_was_written() -> None:
    written = document()["rows"][0]
    read = results.parse_row(written)
    assert read.counts() == {name: written[name] for name in read.counts()}
    assert read.wall_seconds == 1.25 and read.expected == written["expected"]


@pytest.mark.parametrize(
    ("field", "said"),
    [
        ("fault", "'zzz' is not a valid Fault"),
        ("boundary", "unknown boundary 'zzz'"),
        ("scenario", "unknown scenario 'zzz'"),
    ],
)
def test_a_row_naming_a_cell_the_lab_does_not_know_is_refused_as_it_is_read(field: str, said: str) -> None:
    """Not left for `check` to trip on (a traceback, exit 1): the file is named, as for any mismatch."""
    tampered = document()
    tampered["rows"][0][field] = "zzz"
    with pytest.raises(Mismatch, match=rf"^runs/x/results\.json does not match the results schema: rows\.0: .*{said}"):
        results.parse(tampered, "runs/x/results.json")


def test_a_document_that_does_not_match_is_refused_in_one_line() -> None:
    tampered = document()
    tampered["rows"][1]["effects"] = "20"
    with pytest.raises(Mismatch) as refused:
        results.parse(tampered, "runs/x/results.json")
    assert (
        str(refused.value)
        == "runs/x/results.json does not match the results schema: rows.1.effects: expected an integer"
    )
    del tampered["rows"][1]["effects"], tampered["machine"]
    with pytest.raises(Mismatch, match=r"schema: machine: missing \(and 1 more\)$"):
        results.parse(tampered)
    with pytest.raises(Mismatch, match="invalid JSON"):
        results.parse(b"{")


def test_an_older_run_without_the_later_fields_still_reads() -> None:
    old = document()
    del old["command"]
    for row in old["rows"]:
        later = ("cell", "lookups", "faults", "withdrawnEffects", "jobsFailed", "history", "opDifferences")
        for name in (*later, "leftoverProcesses"):
            row.pop(name, None)
    read = results.parse(old)
    assert read.command is None and read.rows[0].cell is None and read.rows[0].lookups == 0
    assert read.rows[0].leftover_processes == 0


def test_history_lines_as_the_run_writes_them_read_back() -> None:
    cell = Cell("provider-key", Boundary.AFTER_EFFECT)
    facts = [f for _, f, _, _ in predict_ops(cell, EveryNth(10, Boundary.AFTER_EFFECT, Fault.KILL), 10, 1)][9]
    written = [history.cell_line("c001", "run.c001", cell)]
    written += [
        history.noted_line("c001", op, entry) for op, entries in seen_killed().history.items() for entry in entries
    ]
    written.append(history.noted_line("c001", "", Noted(EventKind.ANOMALY, 0.0, {"text": "pid 7 was already gone"})))
    written.append(history.facts_line("c001", facts))
    validator = published("history.schema.json")
    for line in written:
        assert line.endswith("\n") and "\n" not in line[:-1]
        validator.validate(json.loads(line))
    lines = [history.parse_line(line) for line in written]
    first, *events, anomaly, facts_read = lines
    assert isinstance(first, history.CellLine) and (first.ledger, first.fault, first.boundary) == (
        "run.c001",
        "kill",
        "after-effect",
    )
    assert [e.noted() for e in events if isinstance(e, history.EventLine)] == seen_killed().history[OP]
    assert isinstance(anomaly, history.AnomalyLine) and anomaly.text == "pid 7 was already gone"
    assert isinstance(facts_read, history.FactsLine)
    assert [o.op_facts(facts_read.intent) for o in facts_read.ops] == [
        replace(f, effects=0, sends=0, lookups=0, withdrawn=0, declined=0) for f in facts
    ]


def test_a_history_line_that_does_not_match_is_named_by_its_place(tmp_path: Path) -> None:
    (tmp_path / "history.jsonl").write_text('{"type":"cell"}\n\n{"type":"note","cell":"c001"}\n')
    with pytest.raises(Mismatch, match=r"history\.jsonl:1 does not match the history schema: cell\.cell: missing"):
        list(history.read_history(tmp_path))
    (tmp_path / "history.jsonl").write_text('\n{"type":"note","cell":"c001"}\n')
    with pytest.raises(Mismatch, match=r"history\.jsonl:2 does not match the history schema: .*'note'"):
        list(history.read_history(tmp_path))


def test_provider_records_lines_match_their_schema() -> None:
    line = history.records_line("run.c001", {"op-1": ReferenceRecord(effects=1, sends=2)})
    published("provider-records.schema.json").validate(json.loads(line))
    assert history.ProviderRecordsLine.model_validate_json(line).records == {
        "op-1": ReferenceRecord(effects=1, sends=2)
    }
