"""Turning command-line choices into cells and expectations (pure)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TypeVar

from labcore.boundaries import ORDER, Boundary, boundary_label, parse_boundary
from labcore.faults import RULES, Fault, parse_fault
from testbed.errors import UsageError
from testbed.experiment.matrix import Cell, full, grid
from testbed.experiment.scenarios import SCENARIOS, check_fault, parse_scenario
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
    """The chosen matrix, narrowed (or, for the full matrix, widened) by the
    strategies/boundaries/faults/scenarios given. Every name given is run: a
    selection that would leave one out, or run nothing, is an error saying why."""
    for fault in faults or ():
        allowed = [b for b in boundaries or () if b is None or b in RULES[fault].boundaries]
        if boundaries and not allowed:
            where = ", ".join(RULES[fault].boundaries)
            named = ", ".join(map(boundary_label, boundaries))
            raise UsageError(f"fault {fault} cannot be injected at {named} (only at {where})")
    if matrix == "full":
        cells = _full(strategies, boundaries, faults, scenarios)
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
        raise UsageError("that selection leaves no cell to run (" + _why_empty(strategies, scenarios) + ")")
    return cells


def with_handlers(cells: list[Cell], handlers: Sequence[str], keep_strategies: bool) -> list[Cell]:
    """Users' jobs in every (boundary, fault, scenario) of the selection; the built-in
    strategies' cells stay only if they were named."""
    places = dict.fromkeys((c.boundary, c.fault, c.scenario, c.spread) for c in cells)
    mine = [Cell(h, b, f, scenario, spread, handler=h) for b, f, scenario, spread in places for h in handlers]
    return (cells if keep_strategies else []) + mine


def _full(
    strategies: list[str] | None,
    boundaries: list[Boundary | None] | None,
    faults: list[Fault] | None,
    scenarios: list[str] | None,
) -> list[Cell]:
    """Every meaningful cell; a scenario named is run even if the full matrix leaves
    it out, a fault named is run wherever it can strike in each scenario."""
    if faults is None and scenarios is None:
        return full()
    names = scenarios or [name for name, s in SCENARIOS.items() if s.in_full_matrix]
    cells = grid(SCENARIOS["none"].strategies, (None,), (Fault.KILL,), ("none",)) if "none" in names else []
    for name in names:
        scenario = SCENARIOS[name]
        where = ORDER if name == "none" else scenario.boundaries
        cells += grid(scenario.strategies, where, faults or scenario.faults, (name,))
    return cells


def _why_empty(strategies: list[str] | None, scenarios: list[str] | None) -> str:
    where = []
    if strategies:
        where.append(f"strategies {', '.join(strategies)}")
    if scenarios:
        where.append(f"scenarios {', '.join(scenarios)}")
    return "no cell of the matrix has " + (" and ".join(where) or "these boundaries and faults")


_EXPECT = re.compile(
    r"^(?P<strategy>[^@=]+)@(?P<boundary>[\w-]+)(?::(?P<fault>[\w-]+))?(?::(?P<scenario>[\w-]+))?"
    r"=(?P<effects>\d+)/(?P<missing>\d+)$"
)
EXPECT_FORM = "STRATEGY@BOUNDARY[:FAULT[:SCENARIO]]=EFFECTS/MISSING"


def parse_expect(values: Sequence[str] | None, cells: Sequence[Cell]) -> dict[Cell, dict[str, int]]:
    """The user's own expectations, each for exactly one cell of the run."""
    out: dict[Cell, dict[str, int]] = {}
    for value in values or ():
        match = _EXPECT.match(value)
        if match is None:
            raise UsageError(f"bad --expect {value!r}: expected {EXPECT_FORM} (counts are whole numbers)")
        where = match.groupdict()
        try:
            if not any(c.handler == where["strategy"] for c in cells):  # a user's job is named as given
                parse_strategy(where["strategy"])
            parse_boundary(where["boundary"]) if where["boundary"] != "random" else None
            if where["fault"]:
                parse_fault(where["fault"]) if where["fault"] != "none" else None
            if where["scenario"]:
                parse_scenario(where["scenario"])
        except ValueError as exc:
            raise UsageError(f"bad --expect {value!r}: {exc}") from None
        matching = [c for c in cells if _addresses(c, where)]
        if not matching:
            raise UsageError(f"--expect {value!r} matches no cell of this run")
        if len(matching) > 1:
            labels = "; ".join(c.label for c in matching)
            raise UsageError(f"--expect {value!r} matches {len(matching)} cells ({labels}): add :FAULT[:SCENARIO]")
        if matching[0] in out:
            raise UsageError(f"--expect for {matching[0].label} is given twice")
        out[matching[0]] = {"effects": int(where["effects"]), "missing_operations": int(where["missing"])}
    return out


def _addresses(cell: Cell, where: dict[str, str | None]) -> bool:
    fault = cell.fault.value if cell.injected else "none"
    return (
        cell.strategy == where["strategy"]
        and cell.where == where["boundary"]
        and where["fault"] in (None, fault)
        and where["scenario"] in (None, cell.scenario)
    )


def parse_kill_fault(command: str, text: str) -> Fault:
    """`replay` and `load` watch kills: the work-horse's or the whole worker's."""
    fault = parse_all([text], parse_fault)
    assert fault is not None
    if fault[0] not in (Fault.KILL, Fault.KILL_WORKER):
        raise UsageError(f"{command} injects kills: --fault kill or kill-worker (got {text})")
    return fault[0]


def at_least(name: str, value: float, minimum: float = 1) -> None:
    if not value >= minimum:  # NaN is not at least anything
        raise UsageError(f"{name} must be at least {minimum:g} (got {value:g})")
