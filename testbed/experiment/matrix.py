"""Cells: one (strategy, boundary, fault, scenario) each, and the matrices made of them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from labcore.boundaries import Boundary, boundary_label
from labcore.faults import RULES, Fault
from labcore.schedule import Schedule
from testbed.experiment.scenarios import SCENARIOS
from workers.strategies import ARTICLE_STRATEGIES


@dataclass(frozen=True, slots=True)
class Cell:
    strategy: str
    boundary: Boundary | None  # None: the control, no fault armed (unless spread)
    fault: Fault = Fault.KILL
    scenario: str = "none"
    spread: bool = False  # load: faults strike at boundaries drawn by the plan, not at `boundary`
    # A user's job (`module:function`) instead of a built-in strategy; `strategy` is then its row label.
    handler: str | None = None
    # A trial of explore: its faults are the schedule's strikes (boundary and fault are not used).
    schedule: Schedule | None = None
    # Celery's delivery settings the cell's task runs under (`labcore.delivery`); None: RQ's job.
    delivery: str | None = None

    @classmethod
    def trial(cls, target: str, schedule: Schedule, handler: bool, delivery: str | None = None) -> Cell:
        """A schedule run as a cell, by a built-in strategy or (`handler`) a user's job (on Celery,
        under `delivery`)."""
        fault = min(schedule.faults, default=Fault.KILL)
        user = target if handler else None
        return cls(target, None, fault, schedule.scenario, handler=user, schedule=schedule, delivery=delivery)

    @property
    def where(self) -> str:
        return SCHEDULE if self.schedule is not None else "random" if self.spread else boundary_label(self.boundary)

    @property
    def injected(self) -> bool:
        if self.schedule is not None:
            return bool(self.schedule.strikes)
        return self.spread or self.boundary is not None

    @property
    def faults(self) -> frozenset[Fault]:
        """Every fault armed in the cell: what the run's per-cell settings follow."""
        if self.schedule is not None:
            return self.schedule.faults
        return frozenset({self.fault}) if self.injected else frozenset()

    @property
    def label(self) -> str:
        shape = None if self.schedule is None else (len(self.schedule.ops), len(self.schedule.strikes))
        return cell_label(self.strategy, self.where, self.fault, self.scenario, self.delivery, self.injected, shape)


# Where a trial's faults strike: where its schedule says.
SCHEDULE = "schedule"


def cell_label(
    strategy: str,
    where: str,
    fault: str,
    scenario: str,
    delivery: str | None,
    injected: bool,
    shape: tuple[int, int] | None,
) -> str:
    """A cell's label, from what a cell and its stored row both name (`shape`: a trial's ops
    and faults), so that a report labels a stored row without making its cell again."""
    extra = "" if scenario == "none" else f", {scenario}"
    runtime = "" if delivery is None else f"{delivery}: "
    if shape is not None:
        ops, strikes = shape
        said = f"{ops} op{'s' * (ops != 1)}, {strikes} fault{'s' * (strikes != 1)}"
        return f"{runtime}{strategy} @ {SCHEDULE} ({said}{extra})"
    faulted = f" ({fault}{extra})" if injected else ""
    return f"{runtime}{strategy} @ {where}{faulted}"


def grid(
    strategies: Iterable[str],
    boundaries: Iterable[Boundary | None],
    faults: Iterable[Fault],
    scenarios: Iterable[str],
) -> list[Cell]:
    """Every combination where the fault can happen at the boundary; the
    control column (no fault) once per strategy and scenario."""
    cells: list[Cell] = []
    for scenario in scenarios:
        for fault in faults:
            for boundary in boundaries:
                if boundary is not None and boundary not in RULES[fault].boundaries:
                    continue
                for strategy in strategies:
                    cell = Cell(strategy, boundary, Fault.KILL if boundary is None else fault, scenario)
                    if cell not in cells:
                        cells.append(cell)
    return cells


def article() -> list[Cell]:
    """The article's 12 cells: 4 strategies x none / before-effect / after-effect."""
    return grid(ARTICLE_STRATEGIES, (None, Boundary.BEFORE_EFFECT, Boundary.AFTER_EFFECT), (Fault.KILL,), ("none",))


def full() -> list[Cell]:
    """Every meaningful cell: each scenario at the boundaries and faults where it says something."""
    cells = grid(SCENARIOS["none"].strategies, (None,), (Fault.KILL,), ("none",))
    for scenario in SCENARIOS.values():
        if scenario.in_full_matrix:
            cells += grid(scenario.strategies, scenario.boundaries, scenario.faults, (scenario.name,))
    return cells
