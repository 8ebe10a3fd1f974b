"""The engine a run asks for, as a front end gives it (`EngineChoice`), and the stack and cells
it means: RQ's workers as they are, or Celery's, each cell once per delivery setting
(`labcore.delivery`). The command line and the pytest plugin ask the same way; what cannot run
is refused in the asking front end's own words (`Spelling`). Nothing here imports Celery."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from labcore.delivery import APP, Delivery, Engine, parse_delivery
from testbed.engines.celery import Celery
from testbed.errors import SetupError, UsageError
from testbed.experiment.matrix import Cell
from testbed.experiment.scenarios import celery_refusal, parse_scenario
from testbed.experiment.selection import parse_all
from testbed.infra.stack import StackOptions

MAX_VISIBILITY = 7 * 86_400  # seconds


@dataclass(frozen=True, slots=True)
class Spelling:
    """How a front end names the choices it takes, for the errors that name them."""

    engine: str = "--engine"
    delivery: str = "--delivery"
    app: str = "--celery-app"
    visibility_timeout: str = "--visibility-timeout"
    handler: str = "--handler"
    strategy: str = "-s"
    recovery: str = "--recovery"
    expect: str = "--expect"


COMMAND_LINE = Spelling()
PLUGIN = Spelling("engine=", "delivery=", "celery_app=", "visibility_timeout=", "a handler", "strategies=")


@dataclass(frozen=True, slots=True)
class EngineChoice:
    """The engine asked for, as given: its name, the delivery settings (none: all of them on
    Celery), a user's Celery app (`module:app`), and the broker's visibility timeout."""

    engine: str = Engine.RQ.value
    deliveries: tuple[str, ...] = ()
    celery_app: str | None = None
    visibility_timeout: int | None = None
    spelling: Spelling = field(default=COMMAND_LINE, compare=False)

    @property
    def celery(self) -> bool:
        return self.engine != Engine.RQ or self.celery_app is not None


def engine_cells(cells: Sequence[Cell], deliveries: Sequence[str]) -> list[Cell]:
    """The cells as the engine runs them: on RQ (no deliveries) as they are, on Celery once
    per delivery setting, setting by setting (a user's app's tasks under their own, `APP`)."""
    if not deliveries:
        return list(cells)
    return [replace(cell, delivery=delivery) for delivery in deliveries for cell in cells]


def parse_engine(
    engine: str, deliveries: Sequence[str], celery_app: str | None, s: Spelling = COMMAND_LINE
) -> tuple[Engine, list[str]]:
    """The engine and the delivery settings its cells run under (all of them on Celery, if
    none is named; the app's own, `APP`, with a user's Celery app); a UsageError says why not."""
    try:
        chosen = Engine(engine) if celery_app is None else Engine.CELERY
    except ValueError:
        raise UsageError(f"unknown engine {engine!r} (choose from {', '.join(Engine)})") from None
    if chosen is Engine.RQ:
        if deliveries:
            raise UsageError(f"{s.delivery} is a Celery setting: it needs {s.engine} celery")
        return chosen, []
    if celery_app is not None:
        if deliveries:
            raise UsageError(f"{s.app} runs its task under its own options: not with {s.delivery}")
        return chosen, [APP]
    named = parse_all(list(deliveries), lambda d: parse_delivery(d).value)
    return chosen, list(dict.fromkeys(named)) if named else [d.value for d in Delivery]


def on_engine(
    choice: EngineChoice,
    stack: StackOptions,
    cells: Sequence[Cell],
    retries: int,
    handlers: Sequence[str],
    paths: Sequence[str],
    forced_recovery: bool = True,
) -> tuple[StackOptions, list[Cell]]:
    """The stack and cells for the engine asked for: as they are on RQ; on Celery, the stack's
    workers Celery's and each cell once per delivery setting. A UsageError says why not, a cell
    that would wait for ever under a setting included (`celery_refusal`)."""
    engine, deliveries = parse_engine(choice.engine, choice.deliveries, choice.celery_app, choice.spelling)
    for cell in cells:
        for delivery in deliveries:
            refused = celery_refusal(parse_scenario(cell.scenario), delivery, cell.schedule is not None)
            if refused is not None:
                raise UsageError(refused)
    builtins = any(c.handler is None for c in cells)
    stack = engine_stack(engine, choice, stack, retries, handlers, paths, builtins, forced_recovery)
    return stack, engine_cells(cells, deliveries)


def engine_stack(
    engine: Engine,
    choice: EngineChoice,
    stack: StackOptions,
    retries: int,
    handlers: Sequence[str],
    paths: Sequence[str],
    builtins: bool,
    forced_recovery: bool = True,
) -> StackOptions:
    """The stack with the engine's workers: as it is on RQ; Celery's workers, running the lab's
    app (`retries`: autoretry's max_retries) or the user's (one handler, its task, and no
    built-in strategy: `builtins` says if one runs)."""
    s = choice.spelling
    if engine is Engine.RQ:
        if choice.visibility_timeout is not None:
            raise UsageError(f"{s.visibility_timeout} is a Celery setting: it needs {s.engine} celery")
        return stack
    if stack.remote is not None:
        raise UsageError(f"{s.engine} celery runs its workers on this machine: not with --hosts")
    if not forced_recovery:
        raise UsageError(f"{s.recovery} is RQ's: on Celery a killed task comes back as its delivery settings say")
    visibility = choice.visibility_timeout
    if visibility is not None and not 1 <= visibility <= MAX_VISIBILITY:
        raise UsageError(f"{s.visibility_timeout} must be from 1 to {MAX_VISIBILITY:,} (got {visibility})")
    task = None
    if choice.celery_app is not None:
        if len(handlers) != 1 or builtins:
            raise UsageError(
                f"{s.app} runs one {s.handler}, a task of the app, and no built-in strategy ({s.strategy})"
            )
        task = handlers[0]
    if importlib.util.find_spec("celery") is None:
        raise SetupError(f"{s.engine} celery needs Celery: pip install 'testbed[celery]'")
    celery = Celery(retries, visibility, choice.celery_app, task, tuple(paths))
    if choice.celery_app is not None:
        set_by_lab = ", ".join(celery.overrides())
        print(f"testbed: the run sets in {choice.celery_app}'s configuration: {set_by_lab}", file=sys.stderr)
    return replace(stack, engine=celery)


def searched_setting(choice: EngineChoice) -> tuple[Engine, str | None]:
    """The engine a search runs on, and its one delivery setting (None on RQ)."""
    engine, deliveries = parse_engine(choice.engine, choice.deliveries, choice.celery_app, choice.spelling)
    return engine, one_delivery(deliveries, choice.spelling)


def one_delivery(deliveries: Sequence[str], spelling: Spelling = COMMAND_LINE) -> str | None:
    """The one delivery setting a search runs under (None: on RQ); a UsageError if there are several,
    as there are when none was named on Celery."""
    if len(deliveries) <= 1:
        return deliveries[0] if deliveries else None
    raise UsageError(
        "explore searches under one Celery delivery setting at a time:"
        f" name one with {spelling.delivery} ({', '.join(Delivery)})"
    )


def engine_flags(choice: EngineChoice, delivery: str | None) -> str:
    """The options that run a command again on the same engine as a cell ran (`delivery`, its
    setting): none on RQ."""
    if not choice.celery:
        return ""
    flags = f" --celery-app {choice.celery_app}" if choice.celery_app else f" --engine celery --delivery {delivery}"
    return flags + (f" --visibility-timeout {choice.visibility_timeout}" if choice.visibility_timeout else "")
