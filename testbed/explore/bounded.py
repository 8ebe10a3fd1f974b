"""The bounded space of schedules, smallest first (pure): every schedule of up to
`depth` faults, in order of size, each once.

Size is the number of faults, then the number of ops they are spread over:
one op with no fault (the base every pruning starts from), then one op with one
fault (every attempt x boundary), one op with two faults, two ops with one
each, and so on up to `depth` faults; kills first: the schedules of kills only
(in that order), then those with one fault of another kind, and so on
(`size_of`). Within a size, earlier attempts first, then the order of
`space.strikes` (simplest first). Every part of a schedule (some of its
strikes) comes before it, so the first schedule that fails has no part that
fails: a smallest one, nothing to shrink.

Every op of a schedule is faulted (a clean op beside them adds nothing the base
does not show), ops are a set (the same strikes on op 1 and 2, or 2 and 1, are
one schedule), and each schedule is made runnable as the random search's are
(`space.reachable`, `space.fitted`): what the queue never runs is dropped, and
what then says the same as a schedule seen before is not listed again.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import combinations, product

from labcore.boundaries import Boundary
from labcore.faults import Fault
from labcore.plan import Armed
from labcore.redelivery import Redelivery
from labcore.schedule import Schedule
from testbed.experiment.scenarios import SCENARIOS, Nemesis
from testbed.experiment.schedules import HELD_FOR_DUPLICATE, problem
from testbed.explore.space import fitted, reachable, strikes

Op = tuple[Armed, ...]


def op_shapes(scenario: str, retries: int, faults: Sequence[Fault], size: int) -> list[Op]:
    """One op's strikes with exactly `size` faults under the scenario, in the space's order."""
    nemesis = SCENARIOS[scenario].nemesis
    if nemesis is Nemesis.DUPLICATE:  # an op is clean or held for its duplicate
        return [(HELD_FOR_DUPLICATE,)] if size == 1 else []
    if nemesis is Nemesis.REMINT and size > 1:  # one fault per op: each re-mints it
        return []
    places = strikes(faults)
    rank = {p: n for n, p in enumerate(places)}
    shapes = [
        tuple(Armed(a, b, f) for a, (b, f) in zip(attempts, choice, strict=True))
        for attempts in combinations(range(1, retries + 1), size)
        for choice in product(places, repeat=size)
    ]
    return sorted(shapes, key=lambda op: _op_key(op, rank))


def _op_key(op: Op, rank: dict[tuple[Boundary, Fault], int]) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    others = sum(a.fault is not Fault.KILL for a in op)
    return others, tuple(a.attempt for a in op), tuple(rank[(a.boundary, a.fault)] for a in op)


def _parts(total: int, count: int) -> Iterator[tuple[int, ...]]:
    """The ways `total` faults spread over `count` ops, each faulted, largest part first."""
    if count == 1:
        yield (total,)
        return
    for first in range(total - count + 1, 0, -1):
        for rest in _parts(total - first, count - 1):
            if rest[0] <= first:
                yield (first, *rest)


def schedules(
    scenario: str,
    retries: int,
    faults: Sequence[Fault],
    depth: int,
    max_ops: int,
    max_held: int | None = None,
    policy: Redelivery | None = None,
) -> list[Schedule]:
    """The bounded space under one scenario, smallest first, each schedule once."""
    out: list[Schedule] = [Schedule(((),), scenario, retries)]
    shapes = {n: op_shapes(scenario, retries, faults, n) for n in range(1, depth + 1)}
    for size in range(1, depth + 1):
        for count in range(1, min(size, max_ops) + 1):
            for parts in _parts(size, count):
                for ops in product(*(range(len(shapes[p])) for p in parts)):
                    # Ops are a set: among ops of one size, their shapes in order.
                    if any(p == q and i > j for p, q, i, j in zip(parts, parts[1:], ops, ops[1:], strict=False)):
                        continue
                    chosen = tuple(shapes[p][i] for p, i in zip(parts, ops, strict=True))
                    if policy is not None:
                        chosen = tuple(reachable(op, policy) for op in chosen)
                    schedule = _runnable(Schedule(chosen, scenario, retries), max_held)
                    if schedule is not None:
                        out.append(schedule)
    # A stable sort: within a size, the shapes' own order (earlier attempts, simpler strikes).
    return sorted(dict.fromkeys(out), key=size_of)


def _runnable(schedule: Schedule, max_held: int | None) -> Schedule | None:
    try:
        made = fitted(schedule, max_held)
    except ValueError:
        return None
    return made if problem(made) is None else None


def size_of(schedule: Schedule) -> tuple[int, int, int]:
    """The order the space is tried in: faults other than kills, faults, faulted ops. Each part of a
    schedule (some of its strikes) comes before it: so when one fails, none of its parts did."""
    strikes = schedule.strikes
    return sum(a.fault is not Fault.KILL for a in strikes), len(strikes), sum(bool(op) for op in schedule.ops)


@dataclass(slots=True)
class Tried:
    """How much of the bounded space an exploration tried, and how: run on the real stack,
    predicted by the model alone (built-ins), or pruned as equivalent to a schedule run."""

    depth: int
    schedules: int = 0  # in the bounded space: every target, every scenario
    ran: int = 0
    predicted: int = 0
    pruned: int = 0
    sampled: int = 0  # of those run, built-ins' schedules run to check the model

    @property
    def tried(self) -> int:
        return self.ran + self.predicted + self.pruned

    def to_json(self) -> dict[str, int]:
        return {
            "depth": self.depth,
            "schedules": self.schedules,
            "tried": self.tried,
            "ran": self.ran,
            "predicted": self.predicted,
            "pruned": self.pruned,
            "sampled": self.sampled,
        }

    def text(self) -> str:
        """In words, as the search's end says it."""
        how = [f"{self.ran} run"]
        how += [f"{self.sampled} of them checking the model"] if self.sampled else []
        how += [f"{self.predicted} predicted by the model alone"] if self.predicted else []
        how += [f"{self.pruned} pruned as equivalent to one run"]
        return f"{self.tried} of {self.schedules} schedules of the bounded space (depth {self.depth}) tried: " + (
            ", ".join(how)
        )
