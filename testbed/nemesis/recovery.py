"""How a job abandoned by a killed worker comes back."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from redis import Redis

# A dead worker's name -> the jobs requeued.
Recover = Callable[[str], list[str]]


class Recovery(StrEnum):
    RQ = "rq"  # RQ's own maintenance, after the started-registry entry expires
    FORCED = "forced"  # the controller expires the dead worker's entries and runs RQ's cleanup


def force_recovery(redis: Redis, queue_name: str, dead_worker: str) -> list[str]:
    """Requeue the jobs a dead worker left `started`, through RQ's own cleanup.

    Only that worker's entries are expired (scored in the past), and cleanup
    is asked to act on entries up to that score only: a live worker's entry is
    never touched, which would run its job twice at once.
    """
    from rq import Queue
    from rq.executions import Execution
    from rq.registry import StartedJobRegistry

    registry = StartedJobRegistry(queue=Queue(queue_name, connection=redis))
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
    return [key.rsplit(":", 1)[0] for key in mine]
