"""The engines a run's jobs can go through: each a module of this package holding its run
settings as a frozen dataclass that implements `base.Engine`. Only a run that asks for one
imports its libraries (an RQ run never imports Celery's).

A third engine is one module here, named in `ENGINES`, one in `workers.engines` (its
workers' `preload` and `serve`, named in that package's registry), and, if its cells run
under delivery settings, their table in `labcore.engines`."""

from __future__ import annotations

from testbed.engines.base import Engine, EngineChoice
from testbed.engines.celery import Celery
from testbed.engines.rq import RQ
from testbed.engines.temporal import Temporal
from testbed.errors import UsageError

ENGINES: dict[str, type[Engine]] = {RQ.name: RQ, Celery.name: Celery, Temporal.name: Temporal}


def engine_of(choice: EngineChoice) -> type[Engine]:
    """The engine a choice names (a user's app: Celery, a user's workflow: Temporal); a
    UsageError if there is none by that name."""
    if choice.app is not None and choice.workflow is not None:
        s = choice.spelling
        raise UsageError(f"{s.app} is a Celery app's, {s.workflow} a Temporal workflow's: not both")
    if choice.plugins and choice.workflow is None:
        raise UsageError(
            f"{choice.spelling.plugins} is for the client of a user's own workflow: it needs {choice.spelling.workflow}"
        )
    if choice.app is not None:
        return Celery
    if choice.workflow is not None:
        return Temporal
    try:
        return ENGINES[choice.engine]
    except KeyError:
        raise UsageError(f"unknown engine {choice.engine!r} (choose from {', '.join(ENGINES)})") from None
