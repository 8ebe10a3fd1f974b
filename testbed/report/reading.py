"""A stored run, as the reports read it: its results (`testbed.store.results`)
and, optionally, the run's event stream (pure).

The event stream is the run store's history.jsonl (`testbed.store.history`):
each event's line carries the event's own fields (as under a row's
`history`) with the cell it belongs to (a row's `cell`) and its op:

    {"type": "event", "cell": "c003", "op": "tenant-demo:notification:10",
     "event": "killed", "at": 1796016247.57, ...}

Where the stream has events for a cell, they replace the row's `history`.
The stream's cell lines name each cell's ledger at the provider, and its
facts lines each logical action's ops as the run judged them (`facts`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from testbed.report.tables import RANDOM
from testbed.store.formats import StoredEvent
from testbed.store.history import CellLine, EventLine, FactsLine, Line, LocalFacts
from testbed.store.results import ResultRow, Results

History = dict[str, list[StoredEvent]]  # op -> its events

# The event kinds a row's history holds, in the order an attempt meets them.
EVENT_KINDS = (
    "attempt-start",
    "hit",
    "killed",
    "worker-restarted",
    "recovered",
    "nemesis",
    "partitioned",
    "healed",
    "contact",
    "call-timeout",
    "attempt-end",
)
FAULT_EVENTS = frozenset({"hit", "killed", "partitioned"})


def label(row: ResultRow) -> str:
    """The cell's label, as the run printed it."""
    return row.label


def is_load(results: Results) -> bool:
    """A `testbed load` run: said so, or recognisable by its rows (random boundaries, promises)."""
    if results.command is not None:
        return results.command == "load"
    return any(r.boundary == RANDOM or r.invariants is not None or r.series is not None for r in results.rows)


def command(results: Results) -> str:
    """The command that made the run, where the document says or shows it; "run" otherwise."""
    return results.command or ("load" if is_load(results) else "run")


def faulted(events: Iterable[StoredEvent]) -> bool:
    """An op a fault struck: a boundary was hit, a process killed or its host cut off."""
    return any(e.event in FAULT_EVENTS for e in events)


def histories(results: Results, stream: Iterable[Line] | None = None) -> list[History]:
    """Per row (in the document's order), each op's events: the row's
    `history`, or the stream's events for the row's cell where it has any."""
    rows = results.rows
    out: list[History] = [{op: list(events) for op, events in (r.history or {}).items()} for r in rows]
    if stream is None:
        return out
    index = {r.cell: i for i, r in enumerate(rows) if r.cell is not None}
    streamed: dict[int, History] = {}
    for line in stream:
        if not isinstance(line, EventLine) or line.event not in EVENT_KINDS:
            continue
        i = index.get(line.cell)
        if i is None:
            continue
        streamed.setdefault(i, {}).setdefault(line.op, []).append(line.stored_event())
    for i, history in streamed.items():
        out[i] = history
    return out


@dataclass(frozen=True, slots=True)
class CellStream:
    """What the stream says of a row's cell besides its events."""

    ledger: str | None = None  # its ledger at the provider
    intents: list[list[LocalFacts]] = field(default_factory=list)  # each logical action's ops


def cell_streams(results: Results, stream: Iterable[Line] | None = None) -> list[CellStream]:
    """Per row (in the document's order), its cell's ledger and facts lines."""
    out = [CellStream() for _ in results.rows]
    index = {r.cell: i for i, r in enumerate(results.rows) if r.cell is not None}
    for line in stream or ():
        if isinstance(line, FactsLine):
            i = index.get(line.cell)
            if i is not None:
                out[i].intents.append(line.ops)
        elif isinstance(line, CellLine):
            i = index.get(line.cell)
            if i is not None:
                out[i] = CellStream(line.ledger, out[i].intents)
    return out
