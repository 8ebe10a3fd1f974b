"""history.jsonl and provider-records.jsonl: what a run writes into its stored
run while it goes, a line at a time, and how they are read back. Written and
parsed here only.

history.jsonl holds one JSON object a line; its `type` says what it is:
- `cell`: a cell as it starts: its id, its ledger at the provider, and the
  cell as results.json names it (strategy, boundary, fault, scenario);
- `event`: one event of a watched op (the event's own fields, as under a row's
  `history`), with its cell and op;
- `anomaly`: something in a cell the controller did not plan for;
- `facts`: as a cell is judged, each logical action's local facts: of each op
  made for it, its attempts, what the application concluded, and whether RQ
  gave up on its job (the provider's side stays in the provider's log).

provider-records.jsonl, kept for a provider the run did not start (its log
stays on its host), holds per line a ledger and what that provider's audit
said of some of its ops, as the run judged them.

The lines are written as plain JSON (a run writes one per event, and a load
run one per op); the records below read them back, validated, and give their
JSON Schema (`history_schema`, `provider_records_schema`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from labcore.events import EventKind, Noted
from provider.store import ReferenceRecord
from testbed import inputs
from testbed.errors import UsageError
from testbed.experiment.matrix import Cell
from testbed.judge.checker import OpFacts
from testbed.store.formats import Mismatch, Record, StoredEvent, published, shown
from testbed.store.layout import HISTORY, PROVIDER_RECORDS
from workers.flow import Outcome

# What an event line carries besides the event's own fields.
_WHERE = ("type", "cell", "op")


# ---------------------------------------------------------------- the records


class CellLine(Record):
    """A cell, as it starts."""

    type: Literal["cell"]
    cell: str = Field(description="Its id in the run, as its row's `cell` in results.json.")
    ledger: str = Field(description="Its ledger at the provider.")
    strategy: str
    boundary: str
    fault: str
    scenario: str


class EventLine(StoredEvent):
    """An event of a watched op: its own fields (as under a row's `history`), with its cell and op."""

    type: Literal["event"]
    cell: str
    op: str

    def stored_event(self) -> StoredEvent:
        """The event as a row's history holds it."""
        return StoredEvent.model_validate({k: v for k, v in self.as_dict().items() if k not in _WHERE})


class AnomalyLine(Record):
    """Something in a cell the controller did not plan for."""

    type: Literal["anomaly"]
    cell: str
    text: str


class LocalFacts(Record):
    """One op's facts as the application and RQ saw them."""

    op: str
    attempts: int
    outcome: Outcome | None = Field(description="What the op's last returning attempt concluded; null: none returned.")
    detail: str = ""
    job_failed: bool = Field(description="RQ gave up on the op's job.")

    def op_facts(self, intent: str) -> OpFacts:
        return OpFacts(
            op=self.op,
            intent=intent,
            attempts=self.attempts,
            outcome=self.outcome,
            detail=self.detail,
            job_failed=self.job_failed,
        )


class FactsLine(Record):
    """A logical action's local facts, as its cell is judged (the provider's side stays in its log)."""

    type: Literal["facts"]
    cell: str
    intent: str = Field(description="The logical action.")
    ops: list[LocalFacts] = Field(
        description="Every op made for it: its own first, then any the planner made again under a new identity."
    )


Line = CellLine | EventLine | AnomalyLine | FactsLine
_Tagged = Annotated[Line, Field(discriminator="type")]  # told apart by their `type`


class ProviderRecordsLine(Record):
    """What the audit of a provider the run did not start said of some ops of a ledger."""

    model_config = ConfigDict(extra="forbid")  # the provider's own record (provider.store) included

    ledger: str
    records: dict[str, ReferenceRecord] = Field(description="op -> what the provider's log holds for it.")


# ---------------------------------------------------------------- writing


def cell_line(cell_id: str, ledger: str, cell: Cell) -> str:
    return _line({"type": "cell", "ledger": ledger, "cell": cell_id, **cell_fields(cell)})


def cell_fields(cell: Cell) -> dict[str, str]:
    """A cell as results.json names it."""
    if cell.schedule is not None:  # a trial: every fault its schedule arms
        fault = "+".join(sorted(cell.faults)) or "none"
    else:
        fault = cell.fault.value if cell.injected else "none"
    named = {"strategy": cell.strategy, "boundary": cell.where, "fault": fault, "scenario": cell.scenario}
    return named if cell.delivery is None else named | {"delivery": cell.delivery}


def noted_line(cell_id: str, op: str, entry: Noted) -> str:
    """An entry of an op's history, or an anomaly of its cell."""
    if entry.kind is EventKind.ANOMALY:
        return _line({"type": "anomaly", "cell": cell_id, "text": entry.data["text"]})
    return _line({"type": "event", "cell": cell_id, "op": op, **entry.to_json()})


def facts_line(cell_id: str, facts: Sequence[OpFacts]) -> str:
    """A logical action's local facts, as judged."""
    local = [
        {"op": o.op, "attempts": o.attempts, "outcome": o.outcome, "detail": o.detail, "jobFailed": o.job_failed}
        for o in facts
    ]
    return _line({"type": "facts", "cell": cell_id, "intent": facts[0].intent, "ops": local})


def records_line(ledger: str, records: dict[str, ReferenceRecord]) -> str:
    """A line of provider-records.jsonl."""
    return _line({"ledger": ledger, "records": {op: asdict(r) for op, r in records.items()}})


def _line(fields: dict[str, Any]) -> str:
    return json.dumps(fields, separators=(",", ":")) + "\n"


# ---------------------------------------------------------------- reading


@cache
def _history() -> TypeAdapter[_Tagged]:
    return TypeAdapter(_Tagged)


def parse_line(text: str | bytes) -> Line:
    """One line of history.jsonl; ValidationError if it is not one."""
    return _history().validate_json(text)


def read_history(run: Path, *, interrupted: bool = False) -> Iterator[Line]:
    """A stored run's history, a line at a time, each checked against its record and
    against the lines before it (a cell's lines come after its `cell` line): UsageError,
    one line, where one is not. `interrupted`: the run was killed outright, and its last
    line may be half-written; left out if so."""
    started: set[str] = set()
    for where, line in numbered_lines(run / HISTORY):
        try:
            read = parse_line(line)
        except ValidationError as exc:
            if interrupted and not line.endswith(b"\n"):
                return
            raise Mismatch(where, "history", exc) from None
        if isinstance(read, CellLine):
            started.add(read.cell)
        elif read.cell not in started:
            raise UsageError(f"{where} is out of place: cell {read.cell} has no cell line before it")
        yield read


def read_provider_records(run: Path) -> Iterator[ProviderRecordsLine]:
    """A stored run's provider-records.jsonl, a line at a time, each checked against its record."""
    for where, line in numbered_lines(run / PROVIDER_RECORDS):
        try:
            yield ProviderRecordsLine.model_validate_json(line)
        except ValidationError as exc:
            raise Mismatch(where, "provider records", exc) from None


def numbered_lines(path: Path) -> Iterator[tuple[str, bytes]]:
    """Each line that is not blank, and where it is (`path:number`): UsageError, one line naming
    the file, where it is not a regular file or has a line over `inputs.LINE_CAP` bytes. Its
    size is not capped: a run writes a line per op, and the file is read a line at a time."""
    name = shown(path)
    try:
        for number, line in inputs.lines(path):
            if line.strip():
                yield f"{name}:{number}", line
    except inputs.InputError as exc:
        raise UsageError(f"cannot read {name}: {exc}") from None


# ---------------------------------------------------------------- schemas


def history_schema() -> dict[str, Any]:
    """The JSON Schema of a line of history.jsonl."""
    return published(_history().json_schema(), "A line of history.jsonl")


def provider_records_schema() -> dict[str, Any]:
    """The JSON Schema of a line of provider-records.jsonl."""
    return published(ProviderRecordsLine.model_json_schema(), "A line of provider-records.jsonl")
