"""RQ, the reference engine: `rq worker` processes (RQ's forking Worker, as `workers.worker`
amends it), one work-horse per attempt, and RQ's `Retry(max=N)` as one budget for every way
an attempt can end without returning."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from labcore.keys import QUEUE, RunKeys
from testbed.engines.base import EngineChoice, JobQueue, JobRequest, RQTimers, RunShape
from testbed.errors import UsageError
from testbed.experiment.matrix import Cell
from testbed.experiment.scenarios import Scenario
from workers.specs import HANDLER, USER_JOB

if TYPE_CHECKING:
    from redis import Redis
    from redis.client import Pipeline

JOB_TIMEOUT = 180
# Long enough to read a failed job's record during and after the run.
FAILURE_TTL = 24 * 3600
# Not 0: with rq 3.0.0, a job that RQ's own cleanup requeued after its worker
# died is marked failed after it succeeds if results are deleted at once (its
# dead execution's record has expired; deleting the job looks it up and raises).
RESULT_TTL = 60
# Jobs as JSON, never pickles: whatever another client of a shared Redis writes there is then
# data, not code, in the workers (a pickle runs its `__reduce__` as it is loaded). A job that
# is not JSON fails to load, and RQ fails it without running anything.
SERIALIZER = "rq.serializers.JSONSerializer"


@dataclass(frozen=True, slots=True)
class RQ:
    name: ClassVar[str] = "rq"
    label: ClassVar[str] = "RQ"
    waits_for_horses: ClassVar[bool] = True
    recovers_by_force: ClassVar[bool] = True
    versions: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def settings(cls, choice: EngineChoice) -> list[str]:
        """RQ's one retry budget: no delivery setting, no broker."""
        s = choice.spelling
        if choice.deliveries:
            raise UsageError(f"{s.delivery} is a Celery setting: it needs {s.engine} celery")
        if choice.visibility_timeout is not None:
            raise UsageError(f"{s.visibility_timeout} is a Celery setting: it needs {s.engine} celery")
        refuse_timeouts(choice, "RQ")
        return []

    @classmethod
    def chosen(cls, choice: EngineChoice, shape: RunShape) -> RQ:
        cls.settings(choice)
        return cls()

    @classmethod
    def refused(cls, scenario: Scenario, delivery: str | None, scheduled: bool) -> str | None:
        return None

    @classmethod
    def flags(cls, choice: EngineChoice, delivery: str | None) -> str:
        return ""

    def server(self) -> None:
        """Its broker is the run's Redis."""

    def worker_env(self, run_prefix: str, tmp: str) -> dict[str, str]:
        return {}

    def worker_argv(self, name: str, queue: str, settings: RQTimers) -> list[str]:
        s = settings
        argv = ["--name", name, "--worker-ttl", str(s.worker_ttl)]
        argv += ["--maintenance-interval", str(s.maintenance_interval)]
        argv += ["--job-monitoring-interval", str(s.job_monitoring_interval), "--logging_level", "WARNING"]
        return [*argv, "--disable-job-desc-logging", "--serializer", SERIALIZER, queue]

    def registered(self, redis: Redis, keys: RunKeys) -> set[str]:
        from rq import Worker

        return {w.name for w in Worker.all(connection=redis)}

    def ending(self, redis: Redis, keys: RunKeys, workers: Sequence[str]) -> set[str]:
        from rq import Worker
        from rq.worker import WorkerStatus

        # A worker is busy from its job's dequeue until its work-horse is reaped and what it left
        # counted (`workers.worker`): RQ sets it idle only then.
        with redis.pipeline(transaction=False) as pipe:
            for name in workers:
                pipe.hget(Worker.redis_worker_namespace_prefix + name, "state")
            states = pipe.execute()
        return {name for name, state in zip(workers, states, strict=True) if state == WorkerStatus.BUSY.value.encode()}

    def job_queue(self, redis: Redis, url: str, keys: RunKeys, retries: int) -> JobQueue:
        return RQJobs(redis, retries)

    def job_function(self, cell: Cell) -> str:
        return HANDLER if cell.handler is None else USER_JOB

    def kill_worker_wait(self, rq_recovery: bool, settings: RQTimers) -> float:
        return recovery_seconds(settings)[1] + 60 if rq_recovery else 0

    def caption(self) -> str:
        return ""

    def recovery(self, mode: str) -> str:
        return mode

    def meta(self) -> dict[str, Any]:
        return {}


def refuse_timeouts(choice: EngineChoice, label: str) -> None:
    """A UsageError if the choice sets Temporal's activity timeouts on another engine."""
    s = choice.spelling
    for given, spelled in (
        (choice.start_to_close_timeout, s.start_to_close_timeout),
        (choice.heartbeat_timeout, s.heartbeat_timeout),
    ):
        if given is not None:
            raise UsageError(f"{spelled} is a Temporal setting: it needs {s.engine} temporal, not {label}")


def recovery_seconds(s: RQTimers) -> tuple[int, int]:
    """When RQ's own maintenance brings a dead worker's job back: its started-registry
    entry expires job-monitoring-interval + 60 s after the last heartbeat, then a
    worker's maintenance (every maintenance-interval, not before worker-ttl - 15) requeues it."""
    expires = s.job_monitoring_interval + 60
    return expires, expires + max(s.maintenance_interval, s.worker_ttl - 15)


def recovery_note(settings: RQTimers) -> str:
    low, high = recovery_seconds(settings)
    return (
        f"RQ's own recovery brings each killed worker's job back {low} to {high} s after the kill"
        " (--job-monitoring-interval + 60 s, then a worker's maintenance); the run waits for it"
    )


class RQJobs:
    def __init__(self, redis: Redis, retries: int) -> None:
        from rq import Queue

        self.loses_jobs = False
        self._queue = Queue(QUEUE, connection=redis, serializer=SERIALIZER)
        self._redis = redis
        self._retries = retries
        self._failed_key = self._queue.failed_job_registry.key

    def enqueue(self, jobs: Sequence[JobRequest]) -> None:
        from rq import Queue, Retry

        retry = Retry(max=self._retries) if self._retries else None
        self._queue.enqueue_many(
            [
                Queue.prepare_data(
                    j.function,
                    args=j.args,
                    job_id=j.job_id,
                    retry=retry,
                    result_ttl=RESULT_TTL,
                    failure_ttl=FAILURE_TTL,
                    timeout=JOB_TIMEOUT,
                    at_front=j.at_front,
                )
                for j in jobs
            ]
        )

    def backlog(self) -> int:
        return self._queue.count

    def count_failed(self, pipe: Pipeline) -> None:
        pipe.zcard(self._failed_key)

    def failed(self) -> set[str]:
        return names(self._redis.zrange(self._failed_key, 0, -1))

    def acknowledged(self, job_id: str) -> None:
        """RQ acknowledges nothing."""

    def missing(self, job_ids: Sequence[str]) -> set[str]:
        """RQ keeps a job's record from its enqueueing to its end: it loses none."""
        return set()

    def give_up(self, job_id: str) -> None:
        raise AssertionError(f"RQ lost no job, yet {job_id} was given up on")

    def worker_lost(self, job_id: str) -> None:
        """RQ's own maintenance (or the forced recovery) requeues it: nothing to count."""

    def close(self) -> None:
        """Its Redis connection is the run's."""


def names(values: Any) -> set[str]:
    """Members of a Redis set or sorted set, as text."""
    return {v.decode() if isinstance(v, bytes) else str(v) for v in values}
