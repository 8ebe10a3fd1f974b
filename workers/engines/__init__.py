"""The workers' side of each engine the lab runs its jobs on, by name: what its workers import
once in the zygote (`preload`) and how a forked process becomes one of them (`serve`). Each is
imported only by a run on it, so that an RQ run never imports Celery."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

# Which one a run's zygote and workers serve, in their environment (RQ if unset).
ENGINE_ENV = "TESTBED_ENGINE"
MODULES = {"rq": "workers.engines.rq", "celery": "workers.engines.celery", "temporal": "workers.engines.temporal"}


def name() -> str:
    """The engine this process's workers serve."""
    return os.environ.get(ENGINE_ENV, "rq")


def side(engine: str | None = None) -> ModuleType:
    """An engine's workers' side (this process's, by default): `preload()` and `serve(argv)`,
    and for an engine that runs a user's own app, `check_tasks(app, specs, paths)` (and, for one
    whose client takes plugins, `check_plugins(plugins)`)."""
    return importlib.import_module(MODULES[engine or name()])
