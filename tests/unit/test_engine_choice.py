"""The engine a run asks for (pure): its stack and cells on RQ or Celery, as the command line and
the pytest plugin ask for them alike, and the options that put a replay on the same engine."""

import re

import pytest

from labcore.boundaries import Boundary
from labcore.faults import Fault
from labcore.plan import Armed
from labcore.schedule import Schedule
from testbed.engines.base import EngineChoice, RunShape
from testbed.engines.celery import Celery
from testbed.errors import UsageError
from testbed.experiment.matrix import Cell
from testbed.infra.stack import StackOptions
from testbed.usecases.engines import engine_flags, on_engine, one_delivery

CELLS = [Cell("retry-only", Boundary.AFTER_EFFECT), Cell("jobs:send", Boundary.AFTER_EFFECT, handler="jobs:send")]


def test_on_rq_the_stack_and_cells_stay_as_they_are() -> None:
    stack, cells = on_engine(EngineChoice(), StackOptions(), CELLS, RunShape(1, ["jobs:send"]))
    assert (stack, cells) == (StackOptions(), CELLS)


def test_on_celery_each_cell_runs_once_per_setting_on_celerys_workers() -> None:
    choice = EngineChoice("celery", ("reject-on-lost", "early-ack"), visibility_timeout=30)
    stack, cells = on_engine(choice, StackOptions(workers=2), CELLS, RunShape(2, ["jobs:send"], ("/src",)))
    assert stack == StackOptions(workers=2, engine=Celery(2, 30, None, None, ("/src",)))
    assert [(c.delivery, c.strategy) for c in cells] == [
        ("reject-on-lost", "retry-only"),
        ("reject-on-lost", "jobs:send"),
        ("early-ack", "retry-only"),
        ("early-ack", "jobs:send"),
    ]


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        (EngineChoice(visibility_timeout=30), "--visibility-timeout is a Celery setting"),
        (EngineChoice("celery", visibility_timeout=0), "--visibility-timeout must be from 1 to 604,800 (got 0)"),
        (EngineChoice(app="jobs:app"), "--celery-app runs one --handler, a task of the app, and no built-in"),
        (EngineChoice("temporal", plugins=("p:plugin",)), "--temporal-plugin is for the client of a user's own"),
    ],
)
def test_a_choice_that_cannot_run_says_why(choice: EngineChoice, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        on_engine(choice, StackOptions(), CELLS, RunShape(1, ["jobs:send"]))


def test_duplicate_enqueue_on_celery_runs_only_where_no_held_op_waits_for_ever() -> None:
    def cells(schedule: Schedule | None) -> list[Cell]:
        return [Cell("retry-only", Boundary.BEFORE_EFFECT, Fault.HOLD, "duplicate-enqueue", schedule=schedule)]

    held = Schedule(((Armed(1, Boundary.BEFORE_EFFECT, Fault.HOLD),),), "duplicate-enqueue", 1)
    for delivery in ("early-ack", "autoretry"):
        with pytest.raises(UsageError, match=f"^scenario duplicate-enqueue under {delivery}: a worker holding"):
            on_engine(EngineChoice("celery", (delivery,)), StackOptions(), cells(held), RunShape(1))
    for delivery in ("acks-late", "reject-on-lost"):
        with pytest.raises(UsageError, match=r"^scenario duplicate-enqueue on Celery: the cell holds ops on every"):
            on_engine(EngineChoice("celery", (delivery,)), StackOptions(), cells(None), RunShape(1))
        # A trial's schedule holds fewer ops than there are workers: it runs.
        assert len(on_engine(EngineChoice("celery", (delivery,)), StackOptions(), cells(held), RunShape(1))[1]) == 1
    assert on_engine(EngineChoice(), StackOptions(), cells(None), RunShape(1))[1] == cells(None)  # RQ: as it is


def test_a_search_runs_under_one_setting() -> None:
    assert one_delivery(EngineChoice()) is None
    assert one_delivery(EngineChoice("celery", ("acks-late",))) == "acks-late"
    with pytest.raises(UsageError, match="one Celery delivery setting at a time: name one with --delivery"):
        one_delivery(EngineChoice("celery", ("early-ack", "acks-late")))


def test_a_replay_runs_on_the_engine_its_cell_ran_on() -> None:
    assert engine_flags(EngineChoice(), None) == ""
    assert engine_flags(EngineChoice("celery", ()), "early-ack") == " --engine celery --delivery early-ack"
    app = EngineChoice(app="jobs:app", visibility_timeout=30)
    assert engine_flags(app, "app") == " --celery-app jobs:app --visibility-timeout 30"
