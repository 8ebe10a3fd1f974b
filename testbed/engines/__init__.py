"""The engines a run's jobs can go through: each a module of this package holding its run
settings as a frozen dataclass that implements `base.Engine`. Only a run that asks for one
imports its libraries (an RQ run never imports Celery's).

A third engine is one module here, one in `workers.engines` (its workers' `preload` and
`serve`, named in that package's registry), and its name in the engine choice
(`testbed.usecases.engines`), which turns what a front end asks for into the engine's value."""
