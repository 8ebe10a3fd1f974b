"""A schedule: one trial of `testbed explore`, as data. Written and parsed here only.

A schedule says, for each op of a trial in order, which fault strikes which
of its attempts (an attempt with no strike runs clean), the scenario the
trial runs under (its op-level events: a duplicate delivery, a withdrawn
effect, an expired key, a changed payload...) and how many times RQ retries
a job. It is a plan (`armed(seq)`): the runner, the controller and the model
take it where they take the matrix's plan. Saved as JSON:

    {"format": "testbed-schedule/1", "scenario": "none", "retries": 3,
     "ops": [{"faults": [{"attempt": 1, "boundary": "before-request", "fault": "kill"},
                         {"attempt": 2, "boundary": "after-effect", "fault": "kill"}]},
             {"faults": []}]}

What is checked here is what holds whatever the scenario: each strike is one
its fault can make (`labcore.faults.RULES`), on an attempt RQ will run
(1 to retries + 1), one strike per attempt. The scenario's name and what it
allows are the lab's to check (`testbed.experiment.schedules`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from labcore.boundaries import ORDER
from labcore.choices import pick
from labcore.faults import RULES, Fault, parse_fault
from labcore.plan import Armed

FORMAT = "testbed-schedule/1"
MAX_OPS = 1000
MAX_RETRIES = 10


class ScheduleError(ValueError):
    """A schedule that is not one: the message says where, in one line."""


@dataclass(frozen=True, slots=True)
class Schedule:
    ops: tuple[tuple[Armed, ...], ...]  # per op, in order: its strikes, by attempt
    scenario: str = "none"
    retries: int = 3

    def __post_init__(self) -> None:
        check(self)

    def armed(self, seq: int) -> tuple[Armed, ...]:
        return self.ops[seq - 1] if 1 <= seq <= len(self.ops) else ()

    @property
    def strikes(self) -> tuple[Armed, ...]:
        return tuple(a for op in self.ops for a in op)

    @property
    def held(self) -> tuple[int, ...]:
        """The ops (by index) a fault holds with the client waiting: each keeps its worker
        busy until the op's duplicate job runs (a hold)."""
        return tuple(n for n, op in enumerate(self.ops) if any(not RULES[a.fault].client_gives_up for a in op))

    @property
    def faults(self) -> frozenset[Fault]:
        return frozenset(a.fault for a in self.strikes)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "scenario": self.scenario,
            "retries": self.retries,
            "ops": [
                {"faults": [{"attempt": a.attempt, "boundary": a.boundary.value, "fault": a.fault.value} for a in op]}
                for op in self.ops
            ],
        }

    def encode(self) -> str:
        """As a file: an op a line, to read and edit by hand."""
        data = self.to_json()
        ops = ",\n".join(f"    {json.dumps(op)}" for op in data.pop("ops"))
        head = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in data.items())
        return f'{{{head},\n  "ops": [\n{ops}\n  ]\n}}\n'

    @classmethod
    def from_json(cls, data: Any) -> Schedule:
        """ScheduleError (one line, saying where) for anything that is not a schedule."""
        if not isinstance(data, dict):
            raise ScheduleError("a schedule is a JSON object")
        unknown = set(data) - {"format", "scenario", "retries", "ops"}
        if unknown:
            raise ScheduleError(f"unknown field {sorted(unknown)[0]!r}")
        if data.get("format", FORMAT) != FORMAT:
            raise ScheduleError(f"format {data['format']!r} is not {FORMAT!r}")
        scenario = data.get("scenario", "none")
        if not isinstance(scenario, str):
            raise ScheduleError("scenario: expected a string")
        retries = _integer(data.get("retries", 3), "retries")
        ops = data.get("ops")
        if not isinstance(ops, list):
            raise ScheduleError("ops: expected a list")
        return cls(tuple(_op(op, n) for n, op in enumerate(ops, 1)), scenario, retries)

    @classmethod
    def decode(cls, text: str | bytes) -> Schedule:
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ScheduleError(f"not JSON: {exc}") from None
        return cls.from_json(data)


def check(schedule: Schedule) -> None:
    """What a schedule must be whatever its scenario; ScheduleError says where it is not."""
    if not 0 <= schedule.retries <= MAX_RETRIES:
        raise ScheduleError(f"retries must be from 0 to {MAX_RETRIES} (got {schedule.retries})")
    if not 1 <= len(schedule.ops) <= MAX_OPS:
        raise ScheduleError(f"a schedule has 1 to {MAX_OPS} ops (got {len(schedule.ops)})")
    last = schedule.retries + 1
    for n, op in enumerate(schedule.ops, 1):
        seen: set[int] = set()
        for a in op:
            where = f"op {n}, attempt {a.attempt}"
            if not 1 <= a.attempt <= last:
                raise ScheduleError(f"{where}: attempts run from 1 to {last} (retries {schedule.retries})")
            if a.attempt in seen:
                raise ScheduleError(f"{where}: one fault per attempt")
            seen.add(a.attempt)
            allowed = RULES[a.fault].boundaries
            if a.boundary not in allowed:
                raise ScheduleError(f"{where}: {a.fault} cannot strike at {a.boundary} (only at {', '.join(allowed)})")


def _op(data: Any, n: int) -> tuple[Armed, ...]:
    if not isinstance(data, dict) or set(data) - {"faults"} or not isinstance(data.get("faults", []), list):
        raise ScheduleError(f'op {n}: expected {{"faults": [...]}}')
    return tuple(sorted((_strike(s, n) for s in data.get("faults", [])), key=lambda a: a.attempt))


def _strike(data: Any, n: int) -> Armed:
    if not isinstance(data, dict) or set(data) != {"attempt", "boundary", "fault"}:
        raise ScheduleError(f"op {n}: a fault is {{attempt, boundary, fault}}")
    names = data["boundary"], data["fault"]
    if not all(isinstance(name, str) for name in names):
        raise ScheduleError(f"op {n}: a fault's boundary and fault are names")
    try:
        boundary = pick("boundary", names[0], {b.value: b for b in ORDER})
        fault = parse_fault(names[1])
    except ValueError as exc:
        raise ScheduleError(f"op {n}: {exc}") from None
    return Armed(_integer(data["attempt"], f"op {n}: attempt"), boundary, fault)


def _integer(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScheduleError(f"{what}: expected an integer")
    return value
