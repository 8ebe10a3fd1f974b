"""How a job abandoned by a killed worker comes back."""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING

from testbed.errors import RunFailure

if TYPE_CHECKING:
    from redis import Redis

# A dead worker's name -> the jobs requeued.
Recover = Callable[[str], list[str]]

# RQ's maintenance lock is held for the milliseconds a worker's registry
# cleaning takes; one held longer than this has outlived its holder.
LOCK_WAIT = 10.0
_LOCK_POLL = 0.005


class Recovery(StrEnum):
    RQ = "rq"  # RQ's own maintenance, after the started-registry entry expires
    FORCED = "forced"  # the controller expires the dead worker's entries and runs RQ's cleanup


def force_recovery(redis: Redis, queue_name: str, dead_worker: str, lock_wait: float = LOCK_WAIT) -> list[str]:
    """Requeue the jobs a dead worker left `started`, through RQ's own cleanup.

    Only that worker's entries are expired (scored in the past), and cleanup
    is asked to act on entries up to that score only: a live worker's entry is
    never touched, which would run its job twice at once.

    Both steps run under the queue's maintenance lock, the one RQ's workers
    take to clean registries (a fresh worker does at its start, which is just
    when a replaced worker's successor starts): two cleanings that both read
    the expired entry before either removes it would each requeue its job.
    """
    from rq import Queue
    from rq.executions import Execution
    from rq.registry import StartedJobRegistry

    from testbed.engines.rq import SERIALIZER

    queue = Queue(queue_name, connection=redis, serializer=SERIALIZER)
    registry = StartedJobRegistry(queue=queue)
    deadline = time.monotonic() + lock_wait
    while not queue.acquire_maintenance_lock():
        if time.monotonic() > deadline:
            raise RunFailure(f"RQ's maintenance lock {queue.registry_cleaning_key} was held for {lock_wait:g} s")
        time.sleep(_LOCK_POLL)
    try:
        mine = []
        for job_id, execution_id in registry.get_job_and_execution_ids(cleanup=False):
            try:
                execution = Execution.fetch(execution_id, job_id, redis)
            except ValueError:
                continue
            if execution.worker_name == dead_worker:
                mine.append(execution.composite_key)
        if mine:
            redis.zadd(registry.key, dict.fromkeys(mine, 1), xx=True)
            registry.cleanup(timestamp=1)
    finally:
        queue.release_maintenance_lock()  # type: ignore[no-untyped-call]  # rq leaves it unannotated
    return [key.rsplit(":", 1)[0] for key in mine]
