"""A stored run, as the reports read it: results.json (as `write_results`
wrote it) and, optionally, the run's event stream (pure).

The event stream is the run store's history.jsonl: one event a line, the
event's own fields (as under a row's `history`) plus the cell it belongs to
(a row's `cell`) and its op:

    {"type": "event", "cell": "c003", "op": "tenant-demo:notification:10",
     "event": "killed", "at": 1796016247.57, ...}

Where the stream has events for a cell, they replace the row's `history`;
lines of other kinds (cells, per-op facts) are ignored here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from labcore.boundaries import parse_boundary
from labcore.faults import Fault
from testbed.experiment.matrix import Cell
from testbed.report.tables import RANDOM

Event = Mapping[str, Any]
History = dict[str, list[dict[str, Any]]]  # op -> its events

# The event kinds a row's history holds, in the order an attempt meets them.
EVENT_KINDS = (
    "attempt-start",
    "hit",
    "killed",
    "worker-restarted",
    "recovered",
    "nemesis",
    "contact",
    "call-timeout",
    "attempt-end",
)
FAULT_EVENTS = frozenset({"hit", "killed"})
# What a stream line carries besides the event's own fields.
_STREAM_FIELDS = ("type", "cell", "op")


def cell_of(row: Mapping[str, Any]) -> Cell:
    """The cell a stored row was run for (its label is the one the run printed)."""
    spread = row["boundary"] == RANDOM
    boundary = None if spread else parse_boundary(row["boundary"])
    fault = Fault.KILL if row["fault"] == "none" else Fault(row["fault"])
    return Cell(row["strategy"], boundary, fault, row["scenario"], spread)


def label(row: Mapping[str, Any]) -> str:
    return cell_of(row).label


def is_load(results: Mapping[str, Any]) -> bool:
    """A `testbed load` run: said so, or recognisable by its rows (random boundaries, promises)."""
    if results.get("command") is not None:
        return results["command"] == "load"
    rows = results.get("rows", [])
    return any(r["boundary"] == RANDOM or "invariants" in r or "series" in r for r in rows)


def command(results: Mapping[str, Any]) -> str:
    """The command that made the run, where the document says or shows it; "run" otherwise."""
    return str(results.get("command") or ("load" if is_load(results) else "run"))


def faulted(events: Iterable[Event]) -> bool:
    """An op a fault struck: a boundary was hit or a process killed."""
    return any(e["event"] in FAULT_EVENTS for e in events)


def histories(results: Mapping[str, Any], stream: Iterable[Mapping[str, Any]] | None = None) -> list[History]:
    """Per row (in the document's order), each op's events: the row's
    `history`, or the stream's events for the row's cell where it has any."""
    rows: Sequence[Mapping[str, Any]] = results.get("rows", [])
    out: list[History] = [dict(r.get("history") or {}) for r in rows]
    if stream is None:
        return out
    index = {r["cell"]: i for i, r in enumerate(rows) if "cell" in r}
    streamed: dict[int, History] = {}
    for record in stream:
        if record.get("event") not in EVENT_KINDS or "op" not in record:
            continue
        i = index.get(record.get("cell"))
        if i is None:
            continue
        event = {k: v for k, v in record.items() if k not in _STREAM_FIELDS}
        streamed.setdefault(i, {}).setdefault(record["op"], []).append(event)
    for i, history in streamed.items():
        out[i] = history
    return out
