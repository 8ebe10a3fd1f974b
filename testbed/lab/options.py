"""What a run is asked to do: its cells, how their faults are planned, and the
run's settings. The command line and the pytest plugin make them the same way
(`matrix_cells`, `every_nth`); nothing here imports rq or redis-py, so a
command can check and build its whole request before the stack starts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from labcore import plan as plans
from labcore.boundaries import parse_boundary
from labcore.faults import parse_fault
from labcore.schedule import Schedule
from testbed import inputs
from testbed.errors import UsageError
from testbed.experiment.matrix import Cell
from testbed.experiment.scenarios import parse_scenario
from testbed.experiment.schedules import legal
from testbed.experiment.selection import parse_all, select_cells, with_handlers
from testbed.nemesis.recovery import Recovery
from workers.strategies import parse_strategy

if TYPE_CHECKING:
    from testbed.judge.scorecard import Row
    from testbed.lab.destination import Reader

# A schedule has at most ten ops of a few attempts each: a few KB.
SCHEDULE_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class RunOptions:
    cells: list[Cell]
    plan: Callable[[Cell], plans.Plan]
    ops: int = 100
    retries: int = 1
    seed: int = 0
    client_timeout: float = 0.5
    recovery: Recovery = Recovery.FORCED
    cell_timeout: float = 120.0
    parallel: int = 2  # cells in flight at once
    # Jobs enqueued ahead of the workers at most (None: a cell's jobs all at once).
    window: int | None = None
    # Per-op event histories in the results (off for load: memory must not grow with the run).
    history: bool = True
    # Check each strategy's promises whatever the faults (load).
    promises: bool = False
    # cell -> fields the user expects instead of the model's values
    overrides: dict[Cell, dict[str, int]] = field(default_factory=dict)
    # Users' jobs: the promise they are judged against, their import path, their work-horses' environment.
    promise: str = "exactly-once"
    paths: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cell_prefix: str = "c"  # cell ids are <prefix><index>: unique per stack (the pytest plugin runs many)
    # A real destination the users' jobs talk to through the lab, and its evidence reader: the judge.
    reader: Reader | None = None
    # Once a judged cell (its index among `cells`, from 1, and its row) makes it true, no further
    # cell starts (those in flight are judged): explore stops at the first failure of a bounded
    # space it runs as one stream of cells.
    until: Callable[[int, Row], bool] | None = None


def matrix_cells(
    matrix: str,
    strategies: Sequence[str] | None,
    boundaries: Sequence[str] | None,
    faults: Sequence[str] | None,
    scenarios: Sequence[str] | None,
    handlers: Sequence[str] = (),
) -> list[Cell]:
    """The cells a selection by name asks for (a usage error names a bad one): the
    matrix narrowed to the strategies, boundaries, faults and scenarios given,
    with each handler in every place of it; named strategies stay beside them."""
    names = parse_all(list(strategies or ()), lambda s: parse_strategy(s).name)
    cells = select_cells(
        matrix,
        names,
        parse_all(list(boundaries or ()), parse_boundary),
        parse_all(list(faults or ()), parse_fault),
        parse_all(list(scenarios or ()), lambda s: parse_scenario(s).name),
    )
    if handlers:
        cells = with_handlers(cells, handlers, keep_strategies=names is not None)
    return cells


def every_nth(every: int) -> Callable[[Cell], plans.Plan]:
    """The matrix's plan: the first attempt of every `every`-th op faulted, at the cell's boundary."""
    return lambda cell: plans.EveryNth(every, cell.boundary, cell.fault)


def refuse_untested(cells: Sequence[Cell], plan: Callable[[Cell], plans.Plan], ops: int) -> None:
    """A usage error for a faulted cell whose plan arms no op: it would pass without testing
    its boundary (e.g. `--ops 1` with the default `--every 10`)."""
    for cell in cells:
        chosen = plan(cell)
        if cell.boundary is None or not isinstance(chosen, plans.EveryNth) or ops >= chosen.every:
            continue
        raise UsageError(
            f"{ops} op{'s' * (ops != 1)} with one op in {chosen.every} faulted arms no fault: {cell.label} would"
            f" pass without testing its boundary (use --ops {chosen.every} or more, or a smaller --every)"
        )


def scheduled(cell: Cell) -> plans.Plan:
    """A trial's plan: its schedule, op by op."""
    if cell.schedule is None:
        raise ValueError(f"{cell.label} has no schedule")
    return cell.schedule


def load_schedule(path: Path) -> Schedule:
    """A schedule file, as the lab can run it: a UsageError (one line) says why not. Only a
    regular file is read, and only a small one (`SCHEDULE_BYTES`)."""
    try:
        return legal(Schedule.from_json(inputs.loads(inputs.read_bytes(path, SCHEDULE_BYTES))))
    except ValueError as exc:
        raise UsageError(f"--schedule {inputs.quoted(str(path))}: {inputs.quoted(str(exc))}") from None


def schedule_cells(schedule: Schedule, strategies: Sequence[str] | None, handlers: Sequence[str]) -> list[Cell]:
    """The schedule run by each strategy and handler named (at least one)."""
    names = parse_all(list(strategies or ()), lambda s: parse_strategy(s).name) or []
    if not names and not handlers:
        raise UsageError("--schedule runs for each -s STRATEGY and --handler given: name at least one")
    return [Cell.trial(name, schedule, handler=False) for name in names] + [
        Cell.trial(h, schedule, handler=True) for h in handlers
    ]
