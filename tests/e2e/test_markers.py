"""The work-horse's last round trip (workers/markers.py) on a real Redis: the job that
brings its cell's ended jobs to the cell's total wakes the run's loop."""

import pytest
import redis

from labcore.keys import RunKeys
from workers.flow import Outcome, Result
from workers.markers import Markers
from workers.strategies import Marker, State

pytestmark = pytest.mark.e2e

DONE = Result(Outcome.COMPLETED, "")
RECEIPT = Marker(State.DONE, "rcpt-1")


def test_the_job_that_reaches_the_total_wakes_the_loop_and_no_earlier_one(private_redis: redis.Redis) -> None:
    cell = RunKeys("testbed:run").cell("c001")
    private_redis.set(cell.total, 3)
    markers = Markers(private_redis, cell)
    markers.finish("op-1", DONE)
    markers.finish("op-2", DONE, RECEIPT)
    assert private_redis.llen(cell.drained) == 0
    markers.finish("op-3", DONE)
    assert private_redis.lrange(cell.drained, 0, -1) == [b"op-3"]
    # A job the planner added raises the total; a job past it (a duplicate) wakes it again.
    private_redis.incr(cell.total)
    markers.finish("op-2", DONE)
    assert private_redis.lrange(cell.drained, 0, -1) == [b"op-3", b"op-2"]
    assert private_redis.get(cell.ended) == b"4"
    assert private_redis.hget(cell.markers, "op-2") == RECEIPT.encode().encode()


def test_without_a_total_no_job_wakes_anyone(private_redis: redis.Redis) -> None:
    cell = RunKeys("testbed:run").cell("c001")
    Markers(private_redis, cell).finish("op-1", DONE)
    assert private_redis.get(cell.ended) == b"1" and not private_redis.exists(cell.drained)
