"""What the lab asks of the queue its jobs run on, whichever it is (`Engine`), and the
queue client every engine gives the runner (`JobQueue`).

The runner, the supervisor, the stack and the front ends ask the engine value a run
carries (`StackOptions.engine`), never which engine it is. An engine is one module of
this package (its lab side) and one of `workers.engines` (its workers' side), named in
both registries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from labcore.keys import RunKeys
from testbed.experiment.matrix import Cell
from testbed.experiment.scenarios import Scenario

if TYPE_CHECKING:
    from redis import Redis
    from redis.client import Pipeline


@dataclass(frozen=True, slots=True)
class RQTimers:
    """RQ's own knobs for noticing dead workers (`rq worker` options): the stack carries them
    whatever its engine, as the command line takes them."""

    worker_ttl: int = 420
    maintenance_interval: int = 600
    job_monitoring_interval: int = 30


@dataclass(frozen=True, slots=True)
class JobRequest:
    """One job of an op: the queue's function (an RQ job function, a Celery task name),
    its arguments (spec, op, seq), its id, and whether it goes ahead of the others."""

    function: str
    args: tuple[Any, ...]
    job_id: str
    at_front: bool = False


class JobQueue(Protocol):
    # The queue can lose a job that never started (`missing`): the runner looks for such jobs.
    loses_jobs: bool

    def enqueue(self, jobs: Sequence[JobRequest]) -> None: ...

    def backlog(self) -> int:
        """Jobs waiting for a worker."""
        ...

    def count_failed(self, pipe: Pipeline) -> None:
        """Ask, in the caller's round trip, how many jobs the queue gave up on."""
        ...

    def failed(self) -> set[str]:
        """The ids of the jobs the queue gave up on."""
        ...

    def acknowledged(self, job_id: str) -> None:
        """Until the job's message is acknowledged, if it is about to be."""
        ...

    def missing(self, job_ids: Sequence[str]) -> set[str]:
        """Of these jobs, never started, those the queue holds nowhere."""
        ...

    def give_up(self, job_id: str) -> None:
        """Count a job the queue lost among those given up on."""
        ...

    def worker_lost(self, job_id: str) -> None:
        """The worker running this job was killed whole: if the queue will never run the job
        again, count it among those given up on."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Spelling:
    """How a front end names the choices it takes, for the errors that name them."""

    engine: str = "--engine"
    delivery: str = "--delivery"
    app: str = "--celery-app"
    workflow: str = "--temporal-workflow"
    visibility_timeout: str = "--visibility-timeout"
    start_to_close_timeout: str = "--start-to-close-timeout"
    heartbeat_timeout: str = "--heartbeat-timeout"
    handler: str = "--handler"
    strategy: str = "-s"
    recovery: str = "--recovery"
    expect: str = "--expect"
    plugins: str = "--temporal-plugin"


COMMAND_LINE = Spelling()
PLUGIN = Spelling(
    "engine=",
    "delivery=",
    "celery_app=",
    "temporal_workflow=",
    "visibility_timeout=",
    "start_to_close_timeout=",
    "heartbeat_timeout=",
    "a handler",
    "strategies=",
    plugins="temporal_plugins=",
)


@dataclass(frozen=True, slots=True)
class EngineChoice:
    """The engine asked for, as given: its name, the delivery settings (none: all of the
    engine's), a user's own app (`module:app`) whose task runs the handler, the broker's
    visibility timeout, an activity's timeouts, and a user's own Temporal workflow
    (`module:Workflow`) whose activity the handler is, with the Temporal plugins its client takes
    (`module:plugin`: a framework's, as Pydantic AI's)."""

    engine: str = "rq"
    deliveries: tuple[str, ...] = ()
    app: str | None = None
    visibility_timeout: int | None = None
    # Temporal's activity timeouts, seconds (None: the engine's defaults).
    start_to_close_timeout: float | None = None
    heartbeat_timeout: float | None = None
    workflow: str | None = None
    plugins: tuple[str, ...] = ()
    spelling: Spelling = field(default=COMMAND_LINE, compare=False)


@dataclass(frozen=True, slots=True)
class RunShape:
    """What a run puts on its engine: the retries, the users' handlers and where they import
    from, whether a built-in strategy runs too, whether the workers run on other hosts, and
    whether the controller brings a killed worker's jobs back (RQ's forced recovery)."""

    retries: int
    handlers: Sequence[str] = ()
    paths: Sequence[str] = ()
    builtins: bool = True
    remote: bool = False
    forced_recovery: bool = True


@dataclass(frozen=True, slots=True)
class ServerCommand:
    """A server of an engine's own that its workers and its queue reach (Temporal's), which the
    run's stack starts beside Redis and the provider and stops with them: its name, as errors
    name it, its command line, and the port on 127.0.0.1 it answers on once ready."""

    name: str
    argv: tuple[str, ...]
    port: int


class Engine(Protocol):
    """A queue the lab's jobs run on, as a run configured it."""

    # As `--engine` names it, and results.json (absent there on RQ); as sentences name it.
    name: ClassVar[str]
    label: ClassVar[str]
    # The run's end waits for its work-horses to exit before it stops the workers (a pool
    # child that lives as long as its worker is not waited for).
    waits_for_horses: ClassVar[bool]
    # The controller may bring a dead worker's jobs back at once (RQ's forced recovery); where
    # it cannot, a search kills no whole worker (the broker would keep its jobs past any trial).
    recovers_by_force: ClassVar[bool]
    # The distributions whose releases a run on it records, beside the lab's own.
    versions: ClassVar[tuple[str, ...]]

    def server(self) -> tuple[Engine, ServerCommand] | None:
        """Its own server, on ports chosen now, and the engine as its workers and queue reach
        that server; None where it has none (its broker is the run's Redis)."""
        ...

    def worker_env(self, run_prefix: str, tmp: str) -> dict[str, str]:
        """What its workers' environment holds (`tmp`: a directory of the run's own)."""
        ...

    def worker_argv(self, name: str, queue: str, settings: RQTimers) -> list[str]:
        """The options of one of its workers."""
        ...

    def registered(self, redis: Redis, keys: RunKeys) -> set[str]:
        """The names of its workers that take jobs now."""
        ...

    def ending(self, redis: Redis, keys: RunKeys, workers: Sequence[str]) -> set[str]:
        """Those of these live workers still ending a job: what it left may not be counted yet."""
        ...

    def job_queue(self, redis: Redis, url: str, keys: RunKeys, retries: int) -> JobQueue:
        """Where a run's jobs go (`retries`: the run's retries, where the queue keeps them)."""
        ...

    def job_function(self, cell: Cell) -> str:
        """What runs a cell's jobs: a job function, a task name."""
        ...

    def kill_worker_wait(self, rq_recovery: bool, settings: RQTimers) -> float:
        """Seconds a cell that kills whole workers may wait, past its own time, for their jobs
        to come back (`rq_recovery`: RQ's own maintenance brings them back, not the controller)."""
        ...

    def caption(self) -> str:
        """What the tables' caption adds about it ("" if nothing)."""
        ...

    def recovery(self, mode: str) -> str:
        """Who brings a killed job back, in a replay's words (`mode`: the run's --recovery)."""
        ...

    def meta(self) -> dict[str, Any]:
        """What results.json's options say of it (nothing on RQ)."""
        ...

    # What a front end's choice means on it, asked of the class before there is a value.

    @classmethod
    def settings(cls, choice: EngineChoice) -> list[str]:
        """The delivery settings its cells run under, each a row (none: the cells as they are);
        a UsageError, in the front end's words, says why not."""
        ...

    @classmethod
    def chosen(cls, choice: EngineChoice, shape: RunShape) -> Engine:
        """Its value for this run; a UsageError (or SetupError) says why it cannot run it."""
        ...

    @classmethod
    def refused(cls, scenario: Scenario, delivery: str | None, scheduled: bool) -> str | None:
        """Why a cell of this scenario cannot run on it under `delivery` (`scheduled`: the cell
        runs a trial's schedule, not the matrix's plan), or None where it runs."""
        ...

    @classmethod
    def flags(cls, choice: EngineChoice, delivery: str | None) -> str:
        """The options that run a command again on it as a cell ran (`delivery`, its setting)."""
        ...
