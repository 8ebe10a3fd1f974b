"""Which (op, attempt, boundary) gets which fault: pure and deterministic.

Plans are functions of the op's sequence number, so a 100,000-op run never
holds its plan in memory, and the controller can check any hit against it.
(A schedule, `labcore.schedule`, is a plan written out op by op: a trial's.)
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from labcore.boundaries import Boundary
from labcore.faults import Fault


@dataclass(frozen=True, slots=True)
class Armed:
    attempt: int
    boundary: Boundary
    fault: Fault


def encode(armed: Sequence[Armed]) -> str:
    return json.dumps([[a.attempt, a.boundary.value, a.fault.value] for a in armed])


def decode(raw: str | bytes | None) -> tuple[Armed, ...]:
    if not raw:
        return ()
    return tuple(Armed(n, Boundary(b), Fault(f)) for n, b, f in json.loads(raw))


@dataclass(frozen=True, slots=True)
class EveryNth:
    """The article's plan: the first attempt of every n-th op gets one fault."""

    every: int
    boundary: Boundary | None
    fault: Fault

    def armed(self, seq: int) -> tuple[Armed, ...]:
        if self.boundary is None or seq % self.every:
            return ()
        return (Armed(1, self.boundary, self.fault),)


@dataclass(frozen=True, slots=True)
class Random:
    """Load plans: every attempt that still has a retry after it is armed with
    probability `rate`, at a boundary drawn from `boundaries`. The last attempt
    is never armed, so with enough retries every op can still finish."""

    rate: float
    boundaries: tuple[Boundary, ...]
    fault: Fault
    retries: int
    seed: int

    def armed(self, seq: int) -> tuple[Armed, ...]:
        rng = random.Random(f"{self.seed}:{seq}")
        out = []
        for attempt in range(1, self.retries + 1):
            if rng.random() < self.rate:
                out.append(Armed(attempt, rng.choice(self.boundaries), self.fault))
        return tuple(out)


class Plan(Protocol):
    """What the runner, the controller and the model ask of a plan: the faults armed
    on op `seq`'s attempts. The matrix's `EveryNth`, load's `Random`, and explore's
    schedules (`labcore.schedule`)."""

    def armed(self, seq: int) -> tuple[Armed, ...]: ...
