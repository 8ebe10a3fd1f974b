"""Forced recovery over an in-memory Redis, with RQ's own registries: a dead worker's job comes back once."""

import threading
from typing import cast

import fakeredis
import pytest
from rq import Queue, Retry, Worker
from rq.job import JobStatus

from testbed.errors import RunFailure
from testbed.nemesis.recovery import force_recovery


@pytest.fixture
def queue() -> Queue:
    """A queue whose one job a worker named `dead` started (and then died holding)."""
    redis = fakeredis.FakeRedis()
    queue = Queue("ops", connection=redis)
    queue.enqueue("builtins.print", "op", retry=Retry(max=3))
    worker = Worker([queue], connection=redis, name="dead")
    worker.register_birth()  # type: ignore[no-untyped-call]  # rq leaves register_birth unannotated
    dequeued = queue.dequeue_any([queue], None, connection=redis)
    assert dequeued is not None
    job, _ = dequeued
    worker.prepare_execution(job)
    worker.prepare_job_execution(job)
    return queue


def _started(queue: Queue) -> list[tuple[str, float]]:
    # redis-py types every reply as any of its reply types; with scores, zrange's is (member, score) pairs.
    started = cast(
        list[tuple[bytes, float]], queue.connection.zrange(queue.started_job_registry.key, 0, -1, withscores=True)
    )
    return [(k.decode(), s) for k, s in started]


def test_the_dead_workers_job_is_requeued_and_the_lock_let_go(queue: Queue) -> None:
    (job_id,) = queue.started_job_registry.get_job_ids(cleanup=False)
    assert force_recovery(queue.connection, "ops", "dead") == [job_id]
    job = queue.fetch_job(job_id)
    assert queue.job_ids == [job_id] and job is not None and job.get_status() is JobStatus.QUEUED
    assert not queue.connection.exists(queue.registry_cleaning_key)
    assert force_recovery(queue.connection, "ops", "dead") == []  # nothing left to requeue


def test_recovery_waits_while_a_worker_cleans_the_registries(queue: Queue) -> None:
    """A fresh worker cleans the registries at its start, under RQ's lock, just as a
    replaced worker's successor starts: cleaning beside it would requeue the job twice."""
    before = _started(queue)
    assert queue.acquire_maintenance_lock()  # as the starting worker does
    recovering = threading.Thread(target=force_recovery, args=(queue.connection, "ops", "dead"))
    recovering.start()
    recovering.join(0.2)
    assert recovering.is_alive()
    assert _started(queue) == before and queue.count == 0  # not expired, not requeued under the worker's feet
    queue.started_job_registry.cleanup()  # the worker's own cleaning: the live entry is not its to requeue
    queue.release_maintenance_lock()  # type: ignore[no-untyped-call]  # rq leaves it unannotated
    recovering.join(5)
    assert not recovering.is_alive()
    assert queue.count == 1 and _started(queue) == []


def test_a_lock_held_past_the_wait_fails_the_run_and_changes_nothing(queue: Queue) -> None:
    before = _started(queue)
    assert queue.acquire_maintenance_lock()
    with pytest.raises(RunFailure, match="maintenance lock"):
        force_recovery(queue.connection, "ops", "dead", lock_wait=0.05)
    assert _started(queue) == before and queue.count == 0
    assert queue.connection.exists(queue.registry_cleaning_key)  # still its holder's
