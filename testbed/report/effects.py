"""The provider's side of a stored run, as the timelines draw it: each op's
effects with the time the provider applied them (and withdrew them), and
the permanent errors it answered.

It is read from the run's copy of the provider's log (`provider.sqlite3`),
opened read-only and immutable, so that reading it creates nothing beside
it (no `-wal`, no `-shm`) and changes no byte of it. For a provider the run
did not start, the run kept only what its audit said of each op
(`provider-records.jsonl`): counts, no times. A run with neither has no
provider side to draw. This is the page's only I/O besides results.json and
history.jsonl; everything else is pure.
"""

from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

from provider.ledger import SendOutcome
from testbed.store.history import read_provider_records
from testbed.store.layout import PROVIDER_LOG, PROVIDER_RECORDS

Source = Literal["log", "audit", "none"]


# Tuples: a long run's log holds one per op and more, made in a loop (a tuple is made fastest).
class Effect(NamedTuple):
    """One effect in the provider's log, on the provider's clock (seconds since the epoch)."""

    at: float
    attempt: int | None  # the attempt whose request applied it, as the request said
    withdrawn_at: float | None = None


class AtProvider(NamedTuple):
    """What the provider holds for one op."""

    effects: int = 0  # withdrawn ones included
    withdrawn: int = 0
    declined: int = 0  # permanent errors it answered
    times: tuple[Effect, ...] | None = None  # None: the run kept counts only


@dataclass(frozen=True, slots=True)
class Ledger:
    """A cell's ledger at the provider: each op it holds something for."""

    ops: dict[str, AtProvider] = field(default_factory=dict)
    complete: bool = True  # an op it does not hold has nothing at the provider (else: not known)

    def of(self, op: str) -> AtProvider | None:
        """What the provider holds for the op; None where that is not known."""
        found = self.ops.get(op)
        if found is None and self.complete:
            return AtProvider(times=())
        return found


@dataclass(frozen=True, slots=True)
class ProviderSide:
    source: Source = "none"
    ledgers: dict[str, Ledger] = field(default_factory=dict)

    def ledger(self, name: str | None) -> Ledger | None:
        """The ledger's ops; None where the run kept nothing of the provider."""
        if self.source == "none" or name is None:
            return None
        return self.ledgers.get(name, Ledger(complete=self.source == "log"))


NOTHING = ProviderSide()


def read(run: Path) -> ProviderSide:
    """A stored run's provider side: its log copy, else its audit's records, else nothing."""
    if (run / PROVIDER_LOG).is_file():
        return _from_log(run / PROVIDER_LOG)
    if (run / PROVIDER_RECORDS).is_file():
        return _from_audit(run)
    return NOTHING


# The applying request is the one the provider recorded as applied at the very time of the effect.
_EFFECTS = f"""
SELECT e.ledger, e.reference, e.applied_at, r.attempt, e.withdrawn_at FROM effects e
LEFT JOIN requests r ON r.ledger = e.ledger AND r.reference = e.reference
    AND r.outcome = '{SendOutcome.APPLIED.value}' AND r.at = e.applied_at
ORDER BY e.id
"""
_DECLINED = f"""
SELECT ledger, reference, COUNT(*) FROM requests WHERE outcome = '{SendOutcome.DECLINED.value}'
GROUP BY ledger, reference
"""


def _from_log(path: Path) -> ProviderSide:
    # immutable: SQLite neither locks the file nor looks for (or makes) a WAL beside it.
    uri = f"{path.resolve().as_uri()}?mode=ro&immutable=1"
    times: dict[str, dict[str, list[Effect]]] = {}
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        for (name,) in db.execute("SELECT name FROM ledgers"):
            times[name] = {}
        for ledger, reference, applied, attempt, withdrawn in db.execute(_EFFECTS):
            held = times.setdefault(ledger, {})
            effect = Effect(applied, attempt, withdrawn)
            if reference in held:
                held[reference].append(effect)
            else:
                held[reference] = [effect]
        declined: dict[str, dict[str, int]] = {}
        for ledger, reference, n in db.execute(_DECLINED):
            declined.setdefault(ledger, {})[reference] = n
    ledgers = {}
    for name, held in times.items():
        refused = declined.get(name, {})
        ops = {
            ref: AtProvider(
                len(found), sum(e.withdrawn_at is not None for e in found), refused.get(ref, 0), tuple(found)
            )
            for ref, found in held.items()
        }
        ops |= {ref: AtProvider(declined=n, times=()) for ref, n in refused.items() if ref not in held}
        ledgers[name] = Ledger(ops)
    return ProviderSide("log", ledgers)


def _from_audit(run: Path) -> ProviderSide:
    ledgers: dict[str, dict[str, AtProvider]] = {}
    for line in read_provider_records(run):
        held = ledgers.setdefault(line.ledger, {})
        for op, record in line.records.items():
            held[op] = AtProvider(record.effects, record.withdrawn, record.declined)
    # The audit answered for the ops the run judged: of any other, nothing is known.
    return ProviderSide("audit", {name: Ledger(held, complete=False) for name, held in ledgers.items()})
