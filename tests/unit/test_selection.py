"""From command-line choices to cells."""

import pytest

from labcore.boundaries import Boundary
from labcore.faults import Fault
from testbed.errors import UsageError
from testbed.experiment.selection import parse_expect, select_cells, with_handlers


def test_default_is_the_articles_twelve_cells():
    cells = select_cells("article", None, None, None, None)
    assert len(cells) == 12
    assert {c.boundary for c in cells} == {None, Boundary.BEFORE_EFFECT, Boundary.AFTER_EFFECT}


def test_options_narrow_the_grid():
    cells = select_cells("article", ["reconcile"], [Boundary.JOB_START, None], [Fault.KILL], None)
    assert [c.label for c in cells] == ["reconcile @ job-start (kill)", "reconcile @ none"]


def test_a_scenario_brings_its_fault():
    cells = select_cells("article", ["provider-key"], None, None, ["duplicate-enqueue"])
    injected = [c for c in cells if c.injected]
    assert [(c.boundary, c.fault) for c in injected] == [(Boundary.BEFORE_EFFECT, Fault.HOLD)]


@pytest.mark.parametrize(
    ("faults", "scenarios", "message"),
    [
        ([Fault.HOLD], None, "scenario none runs with fault"),
        ([Fault.KILL], ["duplicate-enqueue"], "scenario duplicate-enqueue runs with fault hold, not kill"),
    ],
)
def test_hold_and_duplicate_enqueue_go_together(faults, scenarios, message):
    with pytest.raises(UsageError, match=message):
        select_cells("article", None, [Boundary.BEFORE_EFFECT], faults, scenarios)


def test_full_matrix_narrowed_by_fault():
    cells = select_cells("full", None, None, [Fault.LATE], None)
    assert {c.fault for c in cells if c.injected} == {Fault.LATE}


def test_expectations_from_the_command_line():
    assert parse_expect(["retry-only@after-effect=100/0"]) == {
        ("retry-only", "after-effect"): {"effects": 100, "missing_operations": 0}
    }
    with pytest.raises(UsageError, match="unknown boundary 'middle'"):
        parse_expect(["retry-only@middle=1/0"])


def test_handlers_take_every_place_of_the_selection():
    cells = with_handlers(select_cells("article", None, None, None, None), ["jobs:send"], keep_strategies=False)
    assert [c.label for c in cells] == [
        "jobs:send @ none",
        "jobs:send @ before-effect (kill)",
        "jobs:send @ after-effect (kill)",
    ]
    assert {c.handler for c in cells} == {"jobs:send"}


def test_named_strategies_stay_beside_the_handlers():
    chosen = select_cells("article", ["provider-key"], [Boundary.AFTER_EFFECT], None, None)
    cells = with_handlers(chosen, ["a:send", "b:send"], keep_strategies=True)
    assert [(c.strategy, c.handler) for c in cells] == [
        ("provider-key", None),
        ("a:send", "a:send"),
        ("b:send", "b:send"),
    ]


def test_expectations_for_a_handler():
    assert parse_expect(["jobs:send@after-effect=110/0"], ["jobs:send"]) == {
        ("jobs:send", "after-effect"): {"effects": 110, "missing_operations": 0}
    }
    with pytest.raises(UsageError, match="unknown strategy 'jobs:other'"):
        parse_expect(["jobs:other@none=1/0"], ["jobs:send"])
