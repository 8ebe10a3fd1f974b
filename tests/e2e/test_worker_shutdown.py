"""How the lab's workers stop: the pubsub thread at once, and a worker mid-job without waiting for its job.

The lab's worker stops its pubsub thread at once, on the schedule where RQ's own order stalls.

RQ unsubscribes, then trips the thread's flag: when the unsubscribe's answer
reaches the thread in between, the thread blocks again and RQ's join gives up
after a second, the thread still alive (rq/rq#1613). Here that schedule is
forced: the answer reaches the thread before the worker goes on. On a real
Redis; RQ's own Worker, put through the same schedule, is left with the thread
alive (not run here: the stuck thread would outlive the test by a minute).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import redis
from redis.client import PubSubWorkerThread
from rq import Queue

from labcore.procs import stop_all
from workers.worker import CLASS_PATH, Worker

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e


def _subscribed(redis_: redis.Redis) -> Worker:
    """A worker of the lab's class, subscribed to its channel, its pubsub thread running."""
    worker = Worker([Queue("q", connection=redis_)], connection=redis_)
    worker.subscribe()
    assert worker.pubsub is not None
    deadline = time.monotonic() + 5
    while not worker.pubsub.subscribed:
        assert time.monotonic() < deadline, "never subscribed"
        time.sleep(0.001)
    return worker


def _thread(worker: Worker) -> PubSubWorkerThread:
    """The pubsub thread `subscribe()` started."""
    # rq sets pubsub_thread to None in __init__ without an annotation, so mypy takes it for None for good.
    thread: PubSubWorkerThread = worker.pubsub_thread  # type: ignore[assignment]
    return thread


def test_the_pubsub_thread_ends_when_the_worker_unsubscribes(
    private_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = _subscribed(private_redis)
    assert worker.pubsub is not None
    send = worker.pubsub.unsubscribe

    def unsubscribe_and_let_the_answer_arrive(*channels: str) -> None:
        send(*channels)  # type: ignore[no-untyped-call]  # redis-py leaves PubSub.unsubscribe unannotated
        time.sleep(0.05)  # the thread reads the answer before the worker trips its flag, if it has not yet

    monkeypatch.setattr(worker.pubsub, "unsubscribe", unsubscribe_and_let_the_answer_arrive)
    worker.unsubscribe()
    assert not _thread(worker).is_alive()


def test_the_pubsub_thread_leaves_the_connection_to_the_worker(private_redis: redis.Redis) -> None:
    """The thread's stop only trips its flag, and a message that reaches the thread after
    that ends its loop; redis-py's thread would close the pubsub then, maybe in the middle
    of the worker's UNSUBSCRIBE on the same connection: it stays open for the worker to close."""
    worker = _subscribed(private_redis)
    thread = _thread(worker)
    thread.stop()
    # stop() did not wait for the thread (redis-py 8.2's does, until its 60 s read ends): still reading.
    assert thread.is_alive()
    private_redis.publish(worker.pubsub_channel_name, json.dumps({"command": "none"}))  # RQ ignores it
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert worker.pubsub is not None and worker.pubsub.connection is not None
    worker.unsubscribe()
    assert worker.pubsub.connection is None


def test_a_worker_stopped_mid_job_reaps_its_horse_and_exits_by_itself(
    private_redis_url: str, private_redis: redis.Redis, tmp_path: Path
) -> None:
    """`stop_all` SIGTERMs the worker (RQ's warm shutdown, which waits for the job) and
    SIGKILLs its work-horse at once: the worker reaps the horse and exits on its own,
    instead of waiting out the grace for a job that hangs and being SIGKILLed too."""
    env = {**os.environ, "RQ_REDIS_URL": private_redis_url, "RQ_WORKER_CLASS": CLASS_PATH, "PYTHONPATH": str(ROOT)}
    job = Queue("q", connection=private_redis).enqueue("time.sleep", 3600)  # before the worker: it works in burst mode
    worker = subprocess.Popen([sys.executable, "-m", "rq.cli", "worker", "--burst", "q"], env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        # Started is set in the work-horse, after the worker's signal handlers are in place. A child
        # alone is no sign: rq's command line imports croniter, which runs `file` on the interpreter.
        while job.get_status(refresh=True) != "started":
            assert time.monotonic() < deadline and worker.poll() is None, "the job never started"
            time.sleep(0.05)
        horse = _horse(psutil.Process(worker.pid))
        stop_all([worker], grace=60)
        assert worker.returncode == 0  # not -SIGKILL: it stopped by itself
        assert not horse.is_running()
        assert job.get_status(refresh=True) != "started"
    finally:
        stop_all([worker])


def _horse(worker: psutil.Process) -> psutil.Process:
    """The worker's work-horse: a fork of it, with its command line."""
    (horse,) = (child for child in worker.children() if child.cmdline() == worker.cmdline())
    return horse
