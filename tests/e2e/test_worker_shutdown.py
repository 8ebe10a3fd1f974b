"""The lab's worker stops its pubsub thread at once, on the schedule where RQ's own order stalls.

RQ unsubscribes, then trips the thread's flag: when the unsubscribe's answer
reaches the thread in between, the thread blocks again and RQ's join gives up
after a second, the thread still alive (rq/rq#1613). Here that schedule is
forced: the answer reaches the thread before the worker goes on. On a real
Redis; RQ's own Worker, put through the same schedule, is left with the thread
alive (not run here: the stuck thread would outlive the test by a minute).
"""

import time

import pytest
import redis
from rq import Queue

from workers.worker import Worker

pytestmark = pytest.mark.e2e


def test_the_pubsub_thread_ends_when_the_worker_unsubscribes(private_redis: redis.Redis) -> None:
    worker = Worker([Queue("q", connection=private_redis)], connection=private_redis)
    worker.subscribe()
    deadline = time.monotonic() + 5
    while not worker.pubsub.subscribed:
        assert time.monotonic() < deadline, "never subscribed"
        time.sleep(0.001)
    send = worker.pubsub.unsubscribe

    def unsubscribe_and_let_the_answer_arrive(*channels: str) -> None:
        send(*channels)
        time.sleep(0.05)  # the thread reads the answer before the worker trips its flag, if it has not yet

    worker.pubsub.unsubscribe = unsubscribe_and_let_the_answer_arrive
    worker.unsubscribe()
    assert not worker.pubsub_thread.is_alive()
