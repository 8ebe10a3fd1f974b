"""What a schedule may hold under its scenario (pure): the shapes the lab runs
and the model predicts. `labcore.schedule` checks what holds whatever the
scenario (each strike one its fault can make, attempts RQ will run); this
adds what the scenarios and the faults that hold requests allow together.
"""

from __future__ import annotations

from labcore.boundaries import Boundary
from labcore.faults import RULES, Fault
from labcore.plan import Armed
from labcore.schedule import Schedule
from testbed.experiment.scenarios import SCENARIOS, Nemesis

# The duplicate-enqueue scenario's one shape: the first attempt's request is held at the
# provider while the planner enqueues the op again, and the duplicate releases it.
HELD_FOR_DUPLICATE = Armed(1, Boundary.BEFORE_EFFECT, Fault.HOLD)


def problem(schedule: Schedule) -> str | None:
    """Why the lab cannot run this schedule as written, in one line; None if it can."""
    scenario = SCENARIOS.get(schedule.scenario)
    if scenario is None:
        return f"unknown scenario {schedule.scenario!r} (choose from {', '.join(SCENARIOS)})"
    duplicate = scenario.nemesis is Nemesis.DUPLICATE
    for n, op in enumerate(schedule.ops, 1):
        # The duplicate job and the held attempt run at once: only this shape has one outcome.
        if duplicate and op not in ((), (HELD_FOR_DUPLICATE,)):
            return f"op {n}: under duplicate-enqueue an op is clean or held at before-effect on attempt 1 (hold)"
        if not duplicate and any(a.fault is Fault.HOLD for a in op):
            return f"op {n}: the hold fault is duplicate-enqueue's (scenario {schedule.scenario})"
        # Every fault re-mints the op again: two jobs of one new identity would race.
        if scenario.nemesis is Nemesis.REMINT and len(op) > 1:
            return f"op {n}: under remint an op has at most one fault"
    cuts = [n for n, op in enumerate(schedule.ops, 1) if any(RULES[a.fault].cuts_network for a in op)]
    if cuts and len(schedule.ops) > 1:
        # A cut is the whole host's: another op's requests from that host would be cut off unplanned.
        return f"a schedule that cuts a host off from the provider is one op (op {cuts[0]} cuts)"
    crashes = [n for n, op in enumerate(schedule.ops, 1) if any(RULES[a.fault].kills_provider for a in op)]
    if crashes:
        # A crash loses every request the provider holds: another op's (or a late one) would be lost unplanned.
        faulted = [n for n, op in enumerate(schedule.ops, 1) if op]
        if faulted != crashes[:1]:
            return f"a schedule that crashes the provider faults one op only (op {crashes[0]})"
        if Fault.LATE in schedule.faults:
            return "a schedule that crashes the provider holds no late request"
    return None


def legal(schedule: Schedule) -> Schedule:
    """The schedule, or a ValueError saying why the lab cannot run it."""
    why = problem(schedule)
    if why is not None:
        raise ValueError(why)
    return schedule
