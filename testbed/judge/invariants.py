"""What each strategy promises under load, whatever the kills: checked on every load row.

The load plan never arms an op's last attempt, so every job can end; the
rest is what the strategy is for.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.judge.checker import Counts
from testbed.judge.scorecard import camel


@dataclass(frozen=True, slots=True)
class Invariant:
    field: str  # a Counts field that must stay 0
    promise: str


EVERY_JOB_ENDS = Invariant("jobs_failed", "every job ends")
NO_LOSS = (
    Invariant("missing_operations", "no work lost"),
    Invariant("false_completions", "nothing marked done without an effect"),
)
NO_DUPLICATES = (Invariant("duplicate_effects", "no effect twice"),)
NOTHING_HELD = (Invariant("unresolved", "a strongly consistent lookup resolves every op"),)

INVARIANTS: dict[str, tuple[Invariant, ...]] = {
    "retry-only": NO_LOSS,
    "record-after": NO_LOSS,
    "record-before": NO_DUPLICATES,
    "provider-key": NO_LOSS + NO_DUPLICATES,
    "reconcile": NO_LOSS + NO_DUPLICATES + NOTHING_HELD,
    "naive-reconcile": NO_LOSS + NO_DUPLICATES,
    "fresh-key": NO_LOSS,
}


def broken(strategy: str, counts: Counts) -> list[str]:
    """The invariants this row breaks, each with the observed value."""
    return [
        f"{inv.promise}: {camel(inv.field)} = {getattr(counts, inv.field)}"
        for inv in (EVERY_JOB_ENDS, *INVARIANTS[strategy])
        if getattr(counts, inv.field) != 0
    ]


def promises(strategy: str) -> list[str]:
    return [f"{camel(inv.field)} = 0" for inv in (EVERY_JOB_ENDS, *INVARIANTS[strategy])]
