"""The queue a run's jobs go through: RQ's (the reference) or Celery's, on the run's Redis.

The runner asks both the same things: enqueue these jobs, how many wait, which
did the queue give up on. RQ answers from its own registries; Celery, whose
Redis broker keeps no such record, from the workers, which note each task
Celery failed (`workers.celery_app`) under the run's keys.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from labcore.delivery import APP_TASK
from labcore.keys import QUEUE, RunKeys

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
# How long an early-acknowledged Celery task's acknowledgement is waited for before a kill.
ACK_WAIT = 2.0


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


class RQJobs:
    def __init__(self, redis: Redis, retries: int) -> None:
        from rq import Queue

        self.loses_jobs = False
        self._queue = Queue(QUEUE, connection=redis)
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
        return _names(self._redis.zrange(self._failed_key, 0, -1))

    def acknowledged(self, job_id: str) -> None:
        """RQ acknowledges nothing."""

    def missing(self, job_ids: Sequence[str]) -> set[str]:
        """RQ keeps a job's record from its enqueueing to its end: it loses none."""
        return set()

    def give_up(self, job_id: str) -> None:
        raise AssertionError(f"RQ lost no job, yet {job_id} was given up on")

    def worker_lost(self, job_id: str) -> None:
        """RQ's own maintenance (or the forced recovery) requeues it: nothing to count."""


class CeleryJobs:
    """Tasks sent as a Celery client sends them (`send_task`), to the queue the run's workers
    consume; a Celery queue has no front, so a job asked to go first goes last."""

    def __init__(self, redis: Redis, url: str, run_prefix: str) -> None:
        from celery import Celery

        from workers import celery_app

        self.loses_jobs = True
        self._app = Celery("testbed-run", set_as_current=False)
        self._app.conf.update(celery_app.overrides(url, run_prefix, None))
        self._redis = redis
        self._backlog_key = f"{celery_app.key_prefix(run_prefix)}{QUEUE}"
        # kombu's Redis transport: the messages delivered and not yet acknowledged, by delivery tag.
        self._unacked_key = f"{celery_app.key_prefix(run_prefix)}unacked"
        self._failed_key = RunKeys(run_prefix).celery_failed

    def enqueue(self, jobs: Sequence[JobRequest]) -> None:
        from workers.celery_app import LAB_KWARG

        now = time.time()
        with self._app.producer_or_acquire() as producer:
            for j in jobs:
                args, kwargs = j.args, dict[str, Any](enqueued=now)
                if j.function == APP_TASK:  # the user's own task: its arguments are the lab's business
                    spec, op, seq = j.args
                    args, kwargs = (), {LAB_KWARG: {"spec": spec, "op": op, "seq": seq, "enqueued": now}}
                self._app.send_task(
                    j.function, args=args, kwargs=kwargs, task_id=j.job_id, queue=QUEUE, producer=producer
                )

    def backlog(self) -> int:
        return int(self._redis.llen(self._backlog_key))

    def count_failed(self, pipe: Pipeline) -> None:
        pipe.scard(self._failed_key)

    def failed(self) -> set[str]:
        return _names(self._redis.smembers(self._failed_key))

    def acknowledged(self, job_id: str, within: float = ACK_WAIT) -> None:
        """Early ack is not one step with the start: the pool child takes the task, then tells
        its worker, which acknowledges the message. A worker killed in between (a few ms) leaves
        it unacknowledged, and the broker hands it out again. A fault planned just after the
        start waits for the acknowledgement, so that it strikes where the setting says."""
        deadline = time.monotonic() + within
        while job_id in self._unacknowledged() and time.monotonic() < deadline:
            time.sleep(0.002)

    def missing(self, job_ids: Sequence[str]) -> set[str]:
        if not job_ids:
            return set()
        queued = _task_ids(self._redis.lrange(self._backlog_key, 0, -1), payload=lambda m: m)
        return set(job_ids) - queued - self._unacknowledged()

    def give_up(self, job_id: str) -> None:
        self._redis.sadd(self._failed_key, job_id)

    def worker_lost(self, job_id: str) -> None:
        """A message acknowledged before its worker died (early ack) is gone: Celery never runs
        the task again and records nothing of it, so it is counted here, as given up on. One
        still unacknowledged is the broker's: it restores it once the visibility timeout passes."""
        if job_id not in self._unacknowledged():
            self.give_up(job_id)

    def _unacknowledged(self) -> set[str]:
        """The task ids of the messages the broker holds unacknowledged (as [message, exchange, key])."""
        return _task_ids(self._redis.hvals(self._unacked_key), payload=lambda entry: entry[0])

    def close(self) -> None:
        self._app.close()


def _task_ids(raw: Any, payload: Callable[[Any], Any]) -> set[str]:
    """The task ids of kombu's stored messages (JSON), each found in its entry by `payload`."""
    ids = set()
    for item in raw:
        with contextlib.suppress(ValueError, KeyError, IndexError, TypeError):
            ids.add(str(payload(json.loads(item))["headers"]["id"]))
    return ids


def _names(values: Any) -> set[str]:
    """Members of a Redis set or sorted set, as text."""
    return {v.decode() if isinstance(v, bytes) else str(v) for v in values}
