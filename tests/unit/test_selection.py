"""From command-line choices to cells."""

import pytest

from labcore.boundaries import Boundary
from labcore.faults import Fault
from testbed.errors import UsageError
from testbed.experiment.matrix import Cell
from testbed.experiment.selection import parse_expect, select_cells, with_handlers


def test_default_is_the_articles_twelve_cells() -> None:
    cells = select_cells("article", None, None, None, None)
    assert len(cells) == 12
    assert {c.boundary for c in cells} == {None, Boundary.BEFORE_EFFECT, Boundary.AFTER_EFFECT}


def test_options_narrow_the_grid() -> None:
    cells = select_cells("article", ["reconcile"], [Boundary.JOB_START, None], [Fault.KILL], None)
    assert [c.label for c in cells] == ["reconcile @ job-start (kill)", "reconcile @ none"]


def test_a_scenario_brings_its_fault() -> None:
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
def test_hold_and_duplicate_enqueue_go_together(faults: list[Fault], scenarios: list[str] | None, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        select_cells("article", None, [Boundary.BEFORE_EFFECT], faults, scenarios)


def test_full_matrix_narrowed_by_fault() -> None:
    cells = select_cells("full", None, None, [Fault.LATE], None)
    assert {c.fault for c in cells if c.injected} == {Fault.LATE}


def test_full_matrix_runs_a_named_fault_everywhere_it_can_strike() -> None:
    cells = select_cells("full", ["record-before"], None, [Fault.KILL_WORKER], None)
    injected = [c for c in cells if c.injected]
    assert {c.fault for c in injected} == {Fault.KILL_WORKER}
    assert {c.boundary for c in injected if c.scenario == "none"} == set(Boundary)


def test_full_matrix_runs_a_named_scenario_it_leaves_out_by_default() -> None:
    cells = select_cells("full", None, None, None, ["remint"])
    assert cells and {c.scenario for c in cells} == {"remint"}


ARTICLE = select_cells("article", None, None, None, None)
TWO_FAULTS = select_cells("article", ["retry-only"], [Boundary.AFTER_EFFECT], [Fault.KILL, Fault.TIMEOUT], None)


def test_an_expectation_names_one_cell() -> None:
    expected = parse_expect(["retry-only@after-effect=100/0"], ARTICLE)
    ((cell, values),) = expected.items()
    assert cell.label == "retry-only @ after-effect (kill)" and values == {"effects": 100, "missing_operations": 0}
    ((cell, _),) = parse_expect(["retry-only@after-effect:timeout=11/0"], TWO_FAULTS).items()
    assert cell.fault is Fault.TIMEOUT


@pytest.mark.parametrize(
    ("value", "cells", "message"),
    [
        ("retry-only@middle=1/0", ARTICLE, "unknown boundary 'middle'"),
        ("retry-only@after-effect=-1/0", ARTICLE, "counts are whole numbers"),
        ("retry-only@job-start=1/0", ARTICLE, "matches no cell of this run"),
        ("reconcile@after-effect=1/0", ARTICLE, "matches no cell of this run"),
        ("retry-only@after-effect=11/0", TWO_FAULTS, "matches 2 cells"),
    ],
)
def test_an_expectation_for_no_cell_or_many_is_an_error(value: str, cells: list[Cell], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_expect([value], cells)


def test_a_repeated_expectation_is_an_error() -> None:
    with pytest.raises(UsageError, match="given twice"):
        parse_expect(["retry-only@none=100/0", "retry-only@none:none=100/0"], ARTICLE)


def test_handlers_take_every_place_of_the_selection() -> None:
    cells = with_handlers(select_cells("article", None, None, None, None), ["jobs:send"], keep_strategies=False)
    assert [c.label for c in cells] == [
        "jobs:send @ none",
        "jobs:send @ before-effect (kill)",
        "jobs:send @ after-effect (kill)",
    ]
    assert {c.handler for c in cells} == {"jobs:send"}


def test_named_strategies_stay_beside_the_handlers() -> None:
    chosen = select_cells("article", ["provider-key"], [Boundary.AFTER_EFFECT], None, None)
    cells = with_handlers(chosen, ["a:send", "b:send"], keep_strategies=True)
    assert [(c.strategy, c.handler) for c in cells] == [
        ("provider-key", None),
        ("a:send", "a:send"),
        ("b:send", "b:send"),
    ]


def test_expectations_for_a_handler() -> None:
    cells = with_handlers(ARTICLE, ["jobs:send"], keep_strategies=False)
    ((cell, values),) = parse_expect(["jobs:send@after-effect=110/0"], cells).items()
    assert cell.handler == "jobs:send" and values == {"effects": 110, "missing_operations": 0}
    with pytest.raises(UsageError, match="unknown strategy 'jobs:other'"):
        parse_expect(["jobs:other@none=1/0"], cells)
