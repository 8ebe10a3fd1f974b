"""Re-judging a stored run from its history and provider log alone (no Redis,
no workers): Jepsen's analyze for the lab.

Each cell is rebuilt from results.json (its strategy, boundary, fault and
scenario, the run's plan options); each op's facts are its local facts from
history.jsonl joined with what the stored provider log holds for it now (or,
for a provider the run did not start, what its audit said as the run judged
it); the observations (faults, kills, latencies, anomalies) are the cell's
history replayed. The same verdict then judges them. A log altered after the
run is judged as it is now.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from labcore.boundaries import Boundary, parse_boundary
from labcore.events import Noted
from labcore.faults import Fault
from labcore.plan import EveryNth, Plan, Random
from provider.store import LogReader, ReferenceRecord
from testbed.errors import UsageError
from testbed.experiment.matrix import Cell
from testbed.judge.checker import OpFacts
from testbed.judge.observe import ProviderRecords, with_record
from testbed.judge.observer import CellObservations
from testbed.judge.scorecard import Row
from testbed.judge.verdict import Judgement, judge
from testbed.lab.store import (
    ANOMALY,
    CELL,
    EVENT,
    FACTS,
    PROVIDER_LOG,
    PROVIDER_RECORDS,
    RESULTS,
    StoredRecords,
    read_history,
)
from workers.flow import Outcome
from workers.strategies import STRATEGIES

Overrides = dict[Cell, dict[str, int]]

_NOT_EVENT_FIELDS = ("type", "cell", "strategy", "boundary", "fault", "scenario", "op")


def recheck(path: Path, results: dict[str, Any], overrides: Overrides | None = None) -> list[Row]:
    """Every stored row judged again; `overrides` replace the expectations the run had."""
    options = results.get("options", {})
    command = results.get("command", "chaos")
    ledgers: dict[str, str] = {}
    facts: dict[str, list[list[OpFacts]]] = defaultdict(list)
    seen: dict[str, CellObservations] = {}
    for line in read_history(path):
        kind, cell = line.get("type"), line.get("cell", "")
        if kind == CELL:
            ledgers[cell] = line["ledger"]
            seen[cell] = CellObservations(keep_history=command != "load")
        elif kind == EVENT:
            entry = Noted.from_json({k: v for k, v in line.items() if k not in _NOT_EVENT_FIELDS})
            seen[cell].add(line["op"], entry)
        elif kind == ANOMALY:
            seen[cell].anomaly(line["text"])
        elif kind == FACTS:
            facts[cell].append([_local(o, line["intent"]) for o in line["ops"]])
    with _provider(path) as log:
        rows = []
        for stored in results["rows"]:
            cell_id = stored.get("cell")
            if cell_id not in ledgers:
                raise UsageError(f"{path / RESULTS}: row {stored.get('strategy')} has no history to check")
            cell = _cell(stored)
            judgement = Judgement(
                cell,
                _plan(cell, options, results.get("seed", 0)),
                int(options["ops"]),
                int(options["retries"]),
                _expected(cell, overrides, options),
                promises=command == "load",
                ledger=ledgers[cell_id],
                promise=options.get("promise", "exactly-once"),
            )
            observed = _with_provider(log, ledgers[cell_id], facts[cell_id])
            rows.append(judge(judgement, observed, seen[cell_id], int(stored["workers"]), float(stored["wallSeconds"])))
        return rows


@contextlib.contextmanager
def _provider(path: Path) -> Iterator[ProviderRecords]:
    """The stored run's provider side: its log copy, or what a remote provider's audit said."""
    if (path / PROVIDER_LOG).is_file():
        with contextlib.closing(LogReader(path / PROVIDER_LOG)) as log:
            yield log
    elif (path / PROVIDER_RECORDS).is_file():
        yield StoredRecords(path / PROVIDER_RECORDS)
    else:
        raise UsageError(f"{path} has no provider log ({PROVIDER_LOG} or {PROVIDER_RECORDS}): it cannot be checked")


def _local(op: dict[str, Any], intent: str) -> OpFacts:
    outcome = op.get("outcome")
    return OpFacts(
        op=op["op"],
        intent=intent,
        attempts=int(op["attempts"]),
        outcome=Outcome(outcome) if outcome else None,
        detail=op.get("detail", ""),
        job_failed=bool(op["jobFailed"]),
    )


def _with_provider(log: ProviderRecords, ledger: str, intents: list[list[OpFacts]]) -> Iterator[list[OpFacts]]:
    """The stored local facts, joined with what the provider's log says of each op."""
    for start in range(0, len(intents), 1000):
        chunk = intents[start : start + 1000]
        records = log.records(ledger, [o.op for ops in chunk for o in ops])
        for ops in chunk:
            yield [with_record(o, records.get(o.op, ReferenceRecord())) for o in ops]


def _cell(row: dict[str, Any]) -> Cell:
    spread = row["boundary"] == "random"
    boundary = None if spread else parse_boundary(row["boundary"])
    fault = Fault(row["fault"]) if row["fault"] != "none" else Fault.KILL
    handler = None if row["strategy"] in STRATEGIES else row["strategy"]  # a user's job, named as given
    return Cell(row["strategy"], boundary, fault, row["scenario"], spread=spread, handler=handler)


def _plan(cell: Cell, options: dict[str, Any], seed: int) -> Plan:
    if cell.spread:
        boundaries = tuple(Boundary(b) for b in options["boundaries"])
        return Random(float(options["killRate"]), boundaries, cell.fault, int(options["retries"]), seed)
    return EveryNth(int(options.get("every", 10)), cell.boundary, cell.fault)


def stored_cells(results: dict[str, Any]) -> list[Cell]:
    return [_cell(row) for row in results["rows"]]


def _expected(cell: Cell, overrides: Overrides | None, options: dict[str, Any]) -> dict[str, int] | None:
    """The user's own expectation for the cell: given now, or else the one the run had."""
    if overrides is not None:
        return overrides.get(cell)
    stored = options.get("expect", {}).get(cell.label)
    return {"effects": stored[0], "missing_operations": stored[1]} if stored else None
