"""Re-judging a stored run from its history and provider log alone (no Redis,
no workers): Jepsen's analyze for the lab.

Each cell is rebuilt from results.json (its strategy, boundary, fault and
scenario, the run's plan options); each op's facts are its local facts from
history.jsonl joined with what the stored provider log holds for it now (or,
for a provider the run did not start, what its audit said as the run judged
it; for a run against a real destination, what its evidence reader answered, as
stored in destination-records.jsonl, counts the effects, as in the run); the
observations (faults, kills, latencies, anomalies) are the cell's
history replayed. The same verdict then judges them. A log altered after the
run is judged as it is now.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from labcore.boundaries import Boundary
from labcore.plan import EveryNth, Plan, Random
from provider.store import ReferenceRecord
from testbed.errors import UsageError
from testbed.experiment.matrix import Cell
from testbed.judge.checker import OpFacts
from testbed.judge.evidence import EvidenceRecords, counted_at
from testbed.judge.facts import ProviderRecords, with_record
from testbed.judge.observer import CellObservations
from testbed.judge.scorecard import Row
from testbed.judge.verdict import Judgement, judge
from testbed.store.evidence import StoredEvidence
from testbed.store.formats import shown
from testbed.store.history import AnomalyLine, CellLine, EventLine, FactsLine, read_history
from testbed.store.layout import RESULTS
from testbed.store.results import GivenOptions, Results
from testbed.store.runs import stored_provider

Overrides = dict[Cell, dict[str, int]]


def recheck(path: Path, results: Results, overrides: Overrides | None = None) -> list[Row]:
    """Every stored row judged again; `overrides` replace the expectations the run had."""
    options = results.options
    command = results.command or "chaos"
    ledgers: dict[str, str] = {}
    facts: dict[str, list[list[OpFacts]]] = defaultdict(list)
    seen: dict[str, CellObservations] = {}
    for line in read_history(path):
        if isinstance(line, CellLine):
            ledgers[line.cell] = line.ledger
            seen[line.cell] = CellObservations(keep_history=command != "load")
        elif isinstance(line, EventLine):
            seen[line.cell].add(line.op, line.noted())
        elif isinstance(line, AnomalyLine):
            seen[line.cell].anomaly(line.text)
        elif isinstance(line, FactsLine):
            facts[line.cell].append([o.op_facts(line.intent) for o in line.ops])
    with stored_provider(path) as provider:
        log, source = provider, None
        if options.destination is not None:  # its records count the effects, as they did in the run
            log = EvidenceRecords(provider, StoredEvidence(path).read)
            source = counted_at(options.destination.url, options.evidence or "?")
        rows = []
        for stored in results.rows:
            cell_id = stored.cell
            if cell_id is None or cell_id not in ledgers:
                raise UsageError(f"{shown(path / RESULTS)}: row {stored.strategy} has no history to check")
            cell = stored.as_cell()
            judgement = Judgement(
                cell,
                _plan(cell, options, results.seed or 0),
                options.ops if cell.schedule is None else len(cell.schedule.ops),
                options.retries,
                _expected(cell, overrides, options),
                promises=command == "load",
                ledger=ledgers[cell_id],
                promise=options.promise or "exactly-once",
                source=source,
            )
            observed = _with_provider(log, ledgers[cell_id], facts[cell_id])
            row = judge(judgement, observed, seen[cell_id], stored.workers, stored.wall_seconds)
            row.leftovers = stored.leftover_processes  # counted by the workers, not judged
            rows.append(row)
        return rows


def _with_provider(log: ProviderRecords, ledger: str, intents: list[list[OpFacts]]) -> Iterator[list[OpFacts]]:
    """The stored local facts, joined with what the provider's log says of each op."""
    for start in range(0, len(intents), 1000):
        chunk = intents[start : start + 1000]
        records = log.records(ledger, [o.op for ops in chunk for o in ops])
        for ops in chunk:
            yield [with_record(o, records.get(o.op, ReferenceRecord())) for o in ops]


def _plan(cell: Cell, options: GivenOptions, seed: int) -> Plan:
    if cell.schedule is not None:
        return cell.schedule
    if cell.spread:
        boundaries = tuple(Boundary(b) for b in options.boundaries or ())
        return Random(options.kill_rate or 0.0, boundaries, cell.fault, options.retries, seed)
    return EveryNth(options.every or 10, cell.boundary, cell.fault)


def stored_cells(results: Results) -> list[Cell]:
    return [row.as_cell() for row in results.rows]


def _expected(cell: Cell, overrides: Overrides | None, options: GivenOptions) -> dict[str, int] | None:
    """The user's own expectation for the cell: given now, or else the one the run had."""
    if overrides is not None:
        return overrides.get(cell)
    stored = (options.expect or {}).get(cell.label)
    return {"effects": stored[0], "missing_operations": stored[1]} if stored else None
