"""Turning command-line choices into cells and expectations (pure)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from labcore.boundaries import Boundary, boundary_label, parse_boundary
from labcore.faults import RULES, Fault, parse_fault
from testbed.errors import UsageError
from testbed.experiment.matrix import Cell, full, grid
from testbed.experiment.scenarios import SCENARIOS, check_fault
from workers.strategies import ARTICLE_STRATEGIES, parse_strategy

T = TypeVar("T")

ARTICLE_BOUNDARIES = (None, Boundary.BEFORE_EFFECT, Boundary.AFTER_EFFECT)


def parse_all(values: Sequence[str] | None, parse: Callable[[str], T]) -> list[T] | None:
    """Each value parsed, or a usage error naming the bad one; None when nothing was given."""
    if not values:
        return None
    try:
        return [parse(v) for v in values]
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def select_cells(
    matrix: str,
    strategies: list[str] | None,
    boundaries: list[Boundary | None] | None,
    faults: list[Fault] | None,
    scenarios: list[str] | None,
) -> list[Cell]:
    """The chosen matrix, narrowed to the strategies/boundaries/faults/scenarios given."""
    if matrix == "full":
        cells = full()
    elif matrix == "article":
        default_faults = {f for s in scenarios or () for f in SCENARIOS[s].faults if s != "none"}
        cells = grid(
            strategies or ARTICLE_STRATEGIES,
            boundaries or ARTICLE_BOUNDARIES,
            faults or sorted(default_faults) or (Fault.KILL,),
            scenarios or ("none",),
        )
    else:
        raise UsageError(f"unknown matrix {matrix!r} (choose from article, full)")
    for fault in faults or ():
        allowed = [b for b in boundaries or () if b is None or b in RULES[fault].boundaries]
        if boundaries and not allowed:
            where = ", ".join(RULES[fault].boundaries)
            named = ", ".join(map(boundary_label, boundaries))
            raise UsageError(f"fault {fault} cannot be injected at {named} (only at {where})")
    cells = [
        c
        for c in cells
        if (strategies is None or c.strategy in strategies)
        and (boundaries is None or c.boundary in boundaries)
        and (faults is None or c.boundary is None or c.fault in faults)
        and (scenarios is None or c.scenario in scenarios)
    ]
    for cell in cells:
        if cell.boundary is not None:
            try:
                check_fault(SCENARIOS[cell.scenario], cell.fault)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
    if not cells:
        raise UsageError("that selection leaves no cell to run")
    return cells


def with_handlers(cells: list[Cell], handlers: Sequence[str], keep_strategies: bool) -> list[Cell]:
    """Users' jobs in every (boundary, fault, scenario) of the selection; the built-in
    strategies' cells stay only if they were named."""
    places = dict.fromkeys((c.boundary, c.fault, c.scenario, c.spread) for c in cells)
    mine = [Cell(h, b, f, scenario, spread, handler=h) for b, f, scenario, spread in places for h in handlers]
    return (cells if keep_strategies else []) + mine


def parse_expect(
    values: Sequence[str] | None, handlers: Sequence[str] = ()
) -> dict[tuple[str, str], dict[str, int]]:
    """`STRATEGY@BOUNDARY=EFFECTS/MISSING` (or a handler's `module:function@...`): the user's own expectation."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    for value in values or ():
        try:
            where, numbers = value.split("=", 1)
            strategy, boundary = where.rsplit("@", 1)
            effects, missing = (int(n) for n in numbers.split("/", 1))
            if strategy not in handlers:
                parse_strategy(strategy)
            parse_boundary(boundary)
        except ValueError as exc:
            detail = str(exc) if "unknown" in str(exc) else "expected STRATEGY@BOUNDARY=EFFECTS/MISSING"
            raise UsageError(f"bad --expect {value!r}: {detail}") from None
        out[(strategy, boundary)] = {"effects": effects, "missing_operations": missing}
    return out


def parse_kill_fault(command: str, text: str) -> Fault:
    """`replay` and `load` watch kills: the work-horse's or the whole worker's."""
    fault = parse_all([text], parse_fault)
    assert fault is not None
    if fault[0] not in (Fault.KILL, Fault.KILL_WORKER):
        raise UsageError(f"{command} injects kills: --fault kill or kill-worker (got {text})")
    return fault[0]


def at_least(name: str, value: float, minimum: float = 1) -> None:
    if value < minimum:
        raise UsageError(f"{name} must be at least {minimum:g} (got {value:g})")
