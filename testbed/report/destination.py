"""What the lab saw of a real destination's ops against what the destination holds, per op:
the requests the proxy forwarded (by attempt; effects and reads) from the provider's log
(`forwards`), beside the records the evidence reader found (destination-records.jsonl).

A record that no forwarded effect explains, or a forwarded effect that left no record, is
named; so is an effect forwarded more than once that the destination kept once (it
deduplicated). Reading is the I/O edge (`read`); the comparison and its section are pure.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from labcore.ids import seq_of
from labcore.scoped import user_op_id
from testbed.report.svg import el, esc
from testbed.store.evidence import StoredEvidence
from testbed.store.layout import DESTINATION_RECORDS, PROVIDER_LOG
from testbed.store.results import ResultRow

SHOWN = 100  # ops listed per cell: those with something to say first


@dataclass(slots=True)
class Attempt:
    """What the proxy forwarded for one attempt of an op."""

    effects: int = 0  # effect requests forwarded
    reads: int = 0
    unanswered: int = 0  # effect requests the destination gave no answer to


@dataclass(slots=True)
class OpSides:
    """One op: what the lab forwarded, and the records the destination holds for it."""

    op: str  # its reference in the ledger
    attempts: dict[int, Attempt] = field(default_factory=dict)
    records: int = 0

    @property
    def forwarded(self) -> int:
        """Effect requests forwarded, answered or not (one unanswered may still have been applied)."""
        return sum(a.effects for a in self.attempts.values())

    def finding(self) -> str:
        """What the two sides say together, in words ("" where they agree one to one)."""
        sent = self.forwarded
        if self.records > sent:
            return f"{self.records - sent} record(s) that no forwarded effect explains"
        if sent and not self.records:
            return "a forwarded effect left no record"
        if sent > self.records:
            return f"the destination kept {self.records} of {sent} forwarded effects (it deduplicated)"
        return ""


Ledgers = dict[str, dict[str, OpSides]]  # ledger -> op reference -> its two sides

_FORWARDS = "SELECT ledger, reference, attempt, effect, status FROM forwards ORDER BY id"


def read(run: Path) -> Ledgers | None:
    """Both sides of a stored run's destination; None for a run without one (or without the
    provider's log: a provider the run did not start keeps its forwards on its host)."""
    if not (run / DESTINATION_RECORDS).is_file() or not (run / PROVIDER_LOG).is_file():
        return None
    ledgers: Ledgers = {}
    for ledger, held in StoredEvidence(run).ledgers().items():
        ops = ledgers.setdefault(ledger, {})
        prefix = user_op_id(ledger, "")
        for op, records in held.items():
            reference = op.removeprefix(prefix)
            ops[reference] = OpSides(reference, records=len(records))
    # immutable: SQLite neither locks the file nor makes a WAL beside it.
    uri = f"{(run / PROVIDER_LOG).resolve().as_uri()}?mode=ro&immutable=1"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        for ledger, reference, attempt, effect, status in db.execute(_FORWARDS):
            sides = ledgers.setdefault(ledger, {}).setdefault(reference, OpSides(reference))
            seen = sides.attempts.setdefault(attempt, Attempt())
            if effect:
                seen.effects += 1
                seen.unanswered += status == 0
            else:
                seen.reads += 1
    return ledgers


def _seq(reference: str) -> int:
    """An op's place in its cell, where its reference has one (the lab's ops all do)."""
    try:
        return seq_of(reference)
    except (IndexError, ValueError):
        return 0


def _requests(op: OpSides) -> str:
    """Per attempt: its effects and reads forwarded (and effects left unanswered)."""
    parts = []
    for attempt, seen in sorted(op.attempts.items()):
        said = f"{seen.effects} effect{'s' * (seen.effects != 1)}"
        said += f", {seen.reads} read{'s' * (seen.reads != 1)}" if seen.reads else ""
        said += f" ({seen.unanswered} unanswered)" if seen.unanswered else ""
        parts.append(f"#{attempt}: {said}")
    return "; ".join(parts) or "none"


def section(rows: Sequence[ResultRow], ledgers_of_rows: Sequence[str | None], found: Ledgers) -> tuple[str, str, str]:
    """`#destination`: per cell (`.destination-cell[data-cell]`), its ops where the two sides
    differ first (`tr.destination-op[data-op]`, `data-finding` where they do not agree one to one)."""
    parts = [
        el(
            "p",
            esc(
                "What the lab forwarded to the destination (its provider's log) beside what the destination holds"
                " (the evidence reader's answers, which count the effects)."
            ),
            class_="note",
        )
    ]
    for row, ledger in zip(rows, ledgers_of_rows, strict=True):
        ops = found.get(ledger or "", {})
        if not ops:
            continue
        listed = sorted(ops.values(), key=lambda o: (not o.finding(), _seq(o.op), o.op))
        differing = sum(bool(o.finding()) for o in listed)
        forwarded, records = sum(o.forwarded for o in listed), sum(o.records for o in listed)
        head = (
            f"{row.label}: {len(listed)} ops, {forwarded} effects forwarded, {records} records at the destination;"
            f" {differing} op(s) where they differ"
        )
        lines = el("tr", "".join(el("th", esc(h)) for h in ("op", "forwarded, by attempt", "records", "shows")))
        for op in listed[:SHOWN]:
            cells = [op.op, _requests(op), op.records, op.finding()]
            lines += el(
                "tr",
                "".join(el("td", esc(c)) for c in cells),
                class_="destination-op",
                data_op=op.op,
                data_finding="yes" if op.finding() else None,
            )
        more = el("p", esc(f"and {len(listed) - SHOWN} more ops"), class_="note") if len(listed) > SHOWN else ""
        parts.append(
            el(
                "details",
                el("summary", esc(head)) + el("table", lines, class_="kv") + more,
                class_="destination-cell",
                data_cell=row.cell,
                open=bool(differing),
            )
        )
    return "destination", "Destination", "".join(parts)
