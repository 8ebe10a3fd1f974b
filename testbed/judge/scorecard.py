"""A scorecard row: the observed counts next to the expected ones, and the verdict.

As results.json holds it: testbed.store.results (`row_json`)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from testbed.experiment.matrix import Cell
from testbed.judge.checker import COUNT_FIELDS, Counts, HeldOutcome, Tally


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


@dataclass(frozen=True, slots=True)
class Difference:
    field: str
    expected: int
    observed: int

    def __str__(self) -> str:
        return f"{camel(self.field)} expected {self.expected}, observed {self.observed}"


@dataclass(frozen=True, slots=True)
class Expected:
    """What a cell must show: the model's prediction, possibly overridden by the user."""

    counts: dict[str, int]
    inexact: frozenset[str] = frozenset()

    @classmethod
    def from_tally(cls, tally: Tally, kills: int, faults: int, inexact: frozenset[str]) -> Expected:
        counts = {name: getattr(tally.counts, name) for name in COUNT_FIELDS}
        return cls(counts | {"kills": kills, "faults": faults}, inexact)

    def override(self, values: dict[str, int]) -> Expected:
        return Expected(self.counts | values, self.inexact - set(values))


def compare(expected: Expected, observed: dict[str, int]) -> list[Difference]:
    return [
        Difference(name, value, observed[name])
        for name, value in expected.counts.items()
        if name not in expected.inexact and observed[name] != value
    ]


def latency_stats(values_ms: list[float]) -> dict[str, float] | None:
    if not values_ms:
        return None
    ordered = sorted(values_ms)
    p99 = ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]  # nearest rank
    return {
        "min": round(ordered[0], 2),
        "median": round(statistics.median(ordered), 2),
        "p99": round(p99, 2),
        "max": round(ordered[-1], 2),
    }


@dataclass(slots=True)
class Row:
    cell: Cell
    counts: Counts
    kills: int
    faults: int
    workers: int
    wall_seconds: float
    expected: Expected
    held: list[HeldOutcome] = field(default_factory=list)
    replay_latency_ms: dict[str, float] | None = None
    anomalies: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)  # invariants a load row breaks
    # What results.json keeps of a row besides its counts, each written where it is set, in this order.
    history: dict[str, list[dict[str, Any]]] | None = None  # the watched ops' events (observer.history_json)
    invariants: list[str] | None = None  # what the strategy promises whatever the faults (a load row)
    promise: dict[str, Any] | None = None  # the promise's stored verdict (promises.verdict)
    op_facts: list[dict[str, Any]] | None = None  # a trial's ops, each as its account in words reads it
    cell_id: str | None = None  # the row's cell in the run (its cell line in history.jsonl)
    series: list[dict[str, float]] | None = None  # a load row's samples over time
    op_differences: list[Any] = field(default_factory=list)  # verdict.OpMismatch, when the row differs
    # Processes its work-horses left in their groups, stopped: counted by their workers after
    # each ended, so set once they all have (the run's end), not as the cell is judged.
    leftovers: int = 0

    @property
    def observed(self) -> dict[str, int]:
        counts = {name: getattr(self.counts, name) for name in COUNT_FIELDS}
        return counts | {"kills": self.kills, "faults": self.faults}

    @property
    def differences(self) -> list[Difference]:
        return compare(self.expected, self.observed)

    @property
    def problems(self) -> list[str]:
        return [str(d) for d in self.differences] + self.anomalies + self.broken

    @property
    def passed(self) -> bool:
        return not self.problems

    @property
    def withheld(self) -> bool:
        """The cell saw what its plan did not make (`testbed.nemesis.unplanned`): what it
        observed is the lab's failure as much as the job's, so it is not judged."""
        return bool(self.anomalies)
