"""destination-records.jsonl: what a real destination held for each op, as the user's
evidence reader answered after each cell (`--evidence`), kept so that `testbed check`
judges a destination's cells again from the destination's own records, offline.
Written and parsed here only.

Each line holds a ledger (a cell's) and, for some of its ops by their full id (the
`op_ids` the reader was given), the ids of the records the destination held for them.
Every op the run judged has its line: one without is a file cut short.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, ValidationError

from testbed.errors import UsageError
from testbed.store.formats import Mismatch, Record, published, shown
from testbed.store.history import numbered_lines
from testbed.store.layout import DESTINATION_RECORDS


class DestinationRecordsLine(Record):
    """What the destination held for some ops of a ledger, as the evidence reader answered."""

    model_config = ConfigDict(extra="forbid")

    ledger: str = Field(description="The cell's ledger: its ops' ids start with it.")
    records: dict[str, list[str]] = Field(
        description="op id -> the ids of the records the destination held for it (none: an empty list)."
    )


def evidence_line(ledger: str, held: Mapping[str, Sequence[str]]) -> str:
    """A line of destination-records.jsonl."""
    fields = {"ledger": ledger, "records": {op: list(ids) for op, ids in held.items()}}
    return json.dumps(fields, separators=(",", ":")) + "\n"


class StoredEvidence:
    """destination-records.jsonl read back (each line checked against its record), answering
    as the reader did: the same `read(op_ids)` the run judged its cells with."""

    def __init__(self, run: Path) -> None:
        self._path = run / DESTINATION_RECORDS
        self._ledgers: dict[str, dict[str, tuple[str, ...]]] = {}
        self._ops: dict[str, tuple[str, ...]] = {}
        for where, line in numbered_lines(self._path):
            try:
                read = DestinationRecordsLine.model_validate_json(line)
            except ValidationError as exc:
                raise Mismatch(where, "destination records", exc) from None
            held = {op: tuple(ids) for op, ids in read.records.items()}
            self._ledgers.setdefault(read.ledger, {}).update(held)
            self._ops.update(held)

    def held(self, ledger: str) -> int:
        """The ops of a ledger the file has the answer for."""
        return len(self._ledgers.get(ledger, {}))

    def ledgers(self) -> dict[str, dict[str, tuple[str, ...]]]:
        """Each ledger's ops (by their full id) and what the destination held for each."""
        return {name: dict(held) for name, held in self._ledgers.items()}

    def read(self, op_ids: list[str]) -> dict[str, tuple[str, ...]]:
        """What the destination held for these ops, as stored; UsageError where one is not there."""
        if lost := next((op for op in op_ids if op not in self._ops), None):
            raise UsageError(f"{shown(self._path)} has no answer for op {lost}: it is cut short")
        return {op: self._ops[op] for op in op_ids}


def destination_records_schema() -> dict[str, Any]:
    """The JSON Schema of a line of destination-records.jsonl."""
    return published(DestinationRecordsLine.model_json_schema(), "A line of destination-records.jsonl")
