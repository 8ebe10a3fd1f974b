"""Schedules equivalent to one already run, from what its trial saw (pure).

A strike changes nothing if its attempt never runs, or runs but never
reaches its boundary: the run is the one without it. Each trial's trace says,
per op, how many attempts ran and which boundaries each attempt that ended
passed (its `attempt-end` event's `passed`; the provider's two boundaries
lie on the attempt's first effect call, so are passed with `before-request`).
An attempt that was struck, or whose end the trial did not see (an op with no
fault is not watched), is taken to reach everything: never pruned on a guess.

A schedule is reduced op by op, its strikes in attempt order: each is kept if
the trial of the op's strikes kept so far (on their own, one op) reaches it,
dropped if not. A schedule that reduces to another one (its ops left clean
dropped) is that one's equivalent: not run, counted as pruned. Ops are taken
to be independent of one another, as the model takes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from labcore.boundaries import Boundary
from labcore.plan import Armed
from labcore.schedule import Schedule


@dataclass(frozen=True, slots=True)
class OpTrace:
    attempts: int  # attempts that ran
    passed: Mapping[int, frozenset[Boundary]]  # per attempt that ended, the boundaries it passed

    def reaches(self, strike: Armed) -> bool:
        if strike.attempt > self.attempts:
            return False
        passed = self.passed.get(strike.attempt)
        if passed is None:
            return True
        where = Boundary.BEFORE_REQUEST if strike.boundary.on_provider else strike.boundary
        return where in passed


def traces(op_facts: Sequence[Mapping[str, Any]], history: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[OpTrace]:
    """Each op's trace, from a trial's row."""
    out = []
    for facts in op_facts:
        passed = {
            int(e["attempt"]): frozenset(Boundary(b) for b in e["passed"])
            for e in history.get(str(facts.get("op")), ())
            if e.get("event") == "attempt-end" and "passed" in e
        }
        out.append(OpTrace(int(facts.get("attempts", 0)), passed))
    return out


def alone(op: tuple[Armed, ...], schedule: Schedule) -> Schedule:
    return Schedule((op,), schedule.scenario, schedule.retries)


class Equivalents:
    """The traces of the single-op schedules run, and what each schedule reduces to."""

    def __init__(self) -> None:
        self._seen: dict[Schedule, OpTrace] = {}

    def saw(self, schedule: Schedule, trace: Sequence[OpTrace]) -> None:
        if len(schedule.ops) == 1 and trace:
            self._seen[schedule] = trace[0]

    def reduced(self, schedule: Schedule) -> Schedule:
        """The schedule with every strike its ops' trials show could not strike dropped, and
        the ops that leaves clean (one clean op stays, the base)."""
        ops = []
        for op in schedule.ops:
            kept: tuple[Armed, ...] = ()
            for strike in op:
                trace = self._seen.get(alone(kept, schedule))
                if trace is None or trace.reaches(strike):
                    kept += (strike,)
            ops.append(kept)
        faulted = tuple(op for op in ops if op) or ((),)
        return Schedule(faulted, schedule.scenario, schedule.retries)
