"""Schedules: the one format (labcore.schedule), what the lab can run (experiment.schedules),
and a schedule as a cell."""

import json
import re

import pytest

from labcore.boundaries import Boundary
from labcore.faults import Fault
from labcore.plan import Armed
from labcore.schedule import Schedule, ScheduleError
from testbed.experiment.matrix import Cell
from testbed.experiment.schedules import HELD_FOR_DUPLICATE, legal, problem

B, F = Boundary, Fault
TWO_FAULTS = Schedule(
    ((Armed(1, B.BEFORE_REQUEST, F.KILL), Armed(2, B.AFTER_EFFECT, F.TIMEOUT)), ()), scenario="none", retries=3
)


def test_a_schedule_is_a_plan_op_by_op() -> None:
    assert TWO_FAULTS.armed(1) == (Armed(1, B.BEFORE_REQUEST, F.KILL), Armed(2, B.AFTER_EFFECT, F.TIMEOUT))
    assert TWO_FAULTS.armed(2) == ()
    assert TWO_FAULTS.armed(3) == () and TWO_FAULTS.armed(0) == ()
    assert TWO_FAULTS.faults == {F.KILL, F.TIMEOUT}


def test_the_file_round_trips_and_reads_as_written() -> None:
    assert Schedule.decode(TWO_FAULTS.encode()) == TWO_FAULTS
    written = {
        "scenario": "none",
        "ops": [{"faults": [{"attempt": 2, "boundary": "after-effect", "fault": "timeout"},
                            {"attempt": 1, "boundary": "before-request", "fault": "kill"}]}, {}],
    }  # fmt: skip
    assert Schedule.decode(json.dumps(written)) == TWO_FAULTS  # retries 3 by default, faults in attempt order


def strikes(*faults: dict[str, object]) -> str:
    """A one-op schedule file with these faults."""
    return json.dumps({"ops": [{"faults": list(faults)}]})


def strike(attempt: int = 1, boundary: str = "job-start", fault: str = "kill") -> dict[str, object]:
    return {"attempt": attempt, "boundary": boundary, "fault": fault}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1]", "a schedule is a JSON object"),
        ("{", "not JSON"),
        ('{"ops": []}', "a schedule has 1 to 1000 ops (got 0)"),
        ('{"ops": [{}], "retries": 11}', "retries must be from 0 to 10 (got 11)"),
        ('{"ops": [{}], "retries": true}', "retries: expected an integer"),
        ('{"ops": [{}], "faults": []}', "unknown field 'faults'"),
        ('{"ops": [{}], "format": "other/2"}', "format 'other/2' is not 'testbed-schedule/1'"),
        ('{"ops": [[]]}', 'op 1: expected {"faults": [...]}'),
        (strikes(strike(attempt=5)), "op 1, attempt 5: attempts run from 1 to 4"),
        (strikes(strike(fault="timeout")), "attempt 1: timeout cannot strike at job-start (only at before-effect"),
        (strikes(strike(boundary="nowhere")), "op 1: unknown boundary 'nowhere'"),
        (strikes(strike(fault="boom")), "op 1: unknown fault 'boom'"),
        (strikes({"attempt": 1, "boundary": "job-start"}), "op 1: a fault is {attempt, boundary, fault}"),
        (strikes(strike(), strike(boundary="after-record")), "op 1, attempt 1: one fault per attempt"),
    ],
)
def test_a_bad_file_says_where_in_one_line(text: str, message: str) -> None:
    with pytest.raises(ScheduleError) as bad:
        Schedule.decode(text)
    assert message in str(bad.value) and "\n" not in str(bad.value)


def crash(attempt: int = 1) -> Armed:
    return Armed(attempt, B.AFTER_EFFECT, F.PROVIDER_CRASH)


@pytest.mark.parametrize(
    ("ops", "scenario", "why"),
    [
        (((HELD_FOR_DUPLICATE,), ()), "duplicate-enqueue", None),
        (((Armed(1, B.JOB_START, F.KILL),),), "duplicate-enqueue", "op 1: under duplicate-enqueue"),
        (((HELD_FOR_DUPLICATE,),), "none", "op 1: the hold fault is duplicate-enqueue's"),
        (((Armed(1, B.JOB_START, F.KILL), Armed(2, B.JOB_START, F.KILL)),), "remint", "at most one fault"),
        (((crash(), Armed(2, B.AFTER_EFFECT, F.KILL)), ()), "none", None),
        (((crash(),), (Armed(1, B.JOB_START, F.KILL),)), "none", "faults one op only (op 1)"),
        (((Armed(1, B.BEFORE_EFFECT, F.LATE), crash(2)),), "none", "holds no late request"),
        (((Armed(1, B.AFTER_EFFECT, F.PARTITION), Armed(2, B.JOB_START, F.KILL)),), "none", None),
        (((), (Armed(1, B.AFTER_EFFECT, F.PARTITION),)), "none", "cuts a host off from the provider is one op (op 2"),
        (((),), "nowhere", "unknown scenario 'nowhere'"),
    ],
)
def test_what_the_lab_can_run_under_each_scenario(
    ops: tuple[tuple[Armed, ...], ...], scenario: str, why: str | None
) -> None:
    schedule = Schedule(ops, scenario, 3)
    found = problem(schedule)
    assert (found is None) if why is None else (found is not None and why in found), found
    if why is not None:
        with pytest.raises(ValueError, match=re.escape(why)):
            legal(schedule)


def test_a_schedule_as_a_cell() -> None:
    cell = Cell.trial("record-before", TWO_FAULTS, handler=False)
    assert (cell.where, cell.injected, cell.faults, cell.scenario) == (
        "schedule",
        True,
        frozenset({F.KILL, F.TIMEOUT}),
        "none",
    )
    assert cell.label == "record-before @ schedule (2 ops, 2 faults)"
    mine = Cell.trial("jobs:send", Schedule(((),), "withdrawn", 1), handler=True)
    assert (mine.handler, mine.injected, mine.faults) == ("jobs:send", False, frozenset())
    assert mine.label == "jobs:send @ schedule (1 op, 0 faults, withdrawn)"
