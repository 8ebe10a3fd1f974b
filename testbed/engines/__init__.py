"""The engines a run's jobs can go through, by name (`--engine`): each a module of this
package, imported only when a run asks for it (an RQ run never imports Celery's).

A third engine is one module here (a frozen dataclass that implements `base.Engine` and
holds the engine's run settings), one in `workers.engines` (its workers' `preload` and
`serve`), and a line in each registry; `testbed.usecases.engines` turns what a front end asks for into it."""

from __future__ import annotations

MODULES = {"rq": "testbed.engines.rq", "celery": "testbed.engines.celery"}
LABELS = {"rq": "RQ", "celery": "Celery"}
