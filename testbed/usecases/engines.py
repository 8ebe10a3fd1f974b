"""The engine a run asks for, as a front end gives it (`EngineChoice`), and the stack and cells
it means: each cell once per delivery setting of the engine (none: as it is). The command line
and the pytest plugin ask the same way; what cannot run is refused in the asking front end's
own words (`base.Spelling`), by the engine itself (`testbed.engines`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from labcore.delivery import askable
from testbed.engines import engine_of
from testbed.engines.base import EngineChoice, RunShape
from testbed.errors import UsageError
from testbed.experiment.matrix import Cell
from testbed.infra.stack import StackOptions


def engine_cells(cells: Sequence[Cell], deliveries: Sequence[str]) -> list[Cell]:
    """The cells as the engine runs them: as they are (no deliveries), or once per delivery
    setting, setting by setting."""
    if not deliveries:
        return list(cells)
    return [replace(cell, delivery=delivery) for delivery in deliveries for cell in cells]


def on_engine(
    choice: EngineChoice, stack: StackOptions, cells: Sequence[Cell], shape: RunShape
) -> tuple[StackOptions, list[Cell]]:
    """The stack and cells for the engine asked for: the stack's workers the engine's and each
    cell once per delivery setting. A UsageError says why not."""
    deliveries = engine_of(choice).settings(choice)
    builtins = any(c.handler is None for c in cells)
    stack = engine_stack(choice, stack, replace(shape, builtins=builtins))
    return stack, engine_cells(cells, deliveries)


def engine_stack(choice: EngineChoice, stack: StackOptions, shape: RunShape) -> StackOptions:
    """The stack with the engine's workers, on the stack's hosts or not."""
    return replace(stack, engine=engine_of(choice).chosen(choice, replace(shape, remote=stack.remote is not None)))


def one_delivery(choice: EngineChoice) -> str | None:
    """The one delivery setting a search runs under (None: the engine has none); a UsageError
    if there are several, as there are when none was named on an engine that has some."""
    kind = engine_of(choice)
    deliveries = kind.settings(choice)
    if len(deliveries) <= 1:
        return deliveries[0] if deliveries else None
    raise UsageError(
        f"explore searches under one {kind.label} delivery setting at a time:"
        f" name one with {choice.spelling.delivery} ({', '.join(askable(kind.name))})"
    )


def engine_flags(choice: EngineChoice, delivery: str | None) -> str:
    """The options that run a command again on the same engine as a cell ran (`delivery`, its
    setting): none on RQ."""
    return engine_of(choice).flags(choice, delivery)
