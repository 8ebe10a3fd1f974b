"""The lab's jobs on Temporal: the workflow and activities a Temporal run's workers serve.

A run with `--engine temporal` forks its workers from the zygote (`workers.zygote`), as on
RQ and Celery; each forks, and forks again whenever it dies, one Temporal worker process
(`temporalio.worker.Worker`, one activity slot) that polls the run's task queue on the
run's dev server. That process runs an attempt's activity, so it is what a `kill` fault
kills, as RQ's work-horse is: Temporal then learns nothing of the attempt until its
timeout expires, as when a production worker dies. A `kill-worker` fault kills both.

One workflow per op's job (`labcore.engines.temporal.WORKFLOW`) runs the attempt as an
activity with the setting's retry policy and the run's timeouts; once Temporal has
given up on the activity, the workflow notes it under the run's keys (the runner's
`failed`) and fails.

Nothing here is imported by an RQ or a Celery run.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from redis import Redis
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError
from temporalio.exceptions import TimeoutError as ActivityTimeout
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from labcore import connections
from labcore.credentials import RQ_URL_ENV
from labcore.engines.temporal import GIVEN_UP, WORKFLOW, Attempt, Order, activity_name
from labcore.keys import RunKeys
from labcore.prctl import die_with_parent
from workers.engines import ENGINE_ENV as ENGINE_ENV  # the lab sets it in its Temporal workers' environment
from workers.instrument import WORKER_ENV, Job, report_death, report_overtaken

# Set by the run in its Temporal workers' environment.
PREFIX_ENV = "TESTBED_RUN_PREFIX"  # the run's keys
ADDRESS_ENV = "TESTBED_TEMPORAL_ADDRESS"  # the dev server's frontend, host:port
QUEUE_ENV = "TESTBED_TEMPORAL_QUEUE"  # the run's task queue
NAMESPACE_ENV = "TESTBED_TEMPORAL_NAMESPACE"
STATE_ENV = "TESTBED_TEMPORAL_STATE"  # a directory of the run's: each worker's attempt in hand


@workflow.defn(name=WORKFLOW)
class OpWorkflow:
    @workflow.run
    async def run(self, order: Order) -> Any:
        beat = None if order.heartbeat is None else timedelta(seconds=order.heartbeat)
        try:
            return await workflow.execute_activity(
                order.activity,
                order.attempt,
                start_to_close_timeout=timedelta(seconds=order.start_to_close),
                heartbeat_timeout=beat,
                retry_policy=RetryPolicy(maximum_attempts=order.maximum_attempts),
            )
        except ActivityError as error:
            # Temporal gave up on the attempt's activity: noted where the runner reads it, and
            # the workflow fails (an ActivityError fails it, not just its task). Given up on a
            # timeout, the attempt was killed by the plan or met the timeout alive: the controller tells.
            timed_out = isinstance(error.cause, ActivityTimeout)
            await workflow.execute_activity(
                GIVEN_UP,
                GivenUp(workflow.info().workflow_id, order.attempt, timed_out),
                start_to_close_timeout=timedelta(seconds=30),
            )
            raise


@activity.defn(name=activity_name(user=False))
async def builtin(attempt: Attempt) -> str:
    from workers import handler

    result: str = await _attempt(handler.run, attempt)
    return result


@activity.defn(name=activity_name(user=True))
async def user(attempt: Attempt) -> Any:
    from workers import userjob

    return await _attempt(userjob.run, attempt)


@dataclass(frozen=True, slots=True)
class GivenUp:
    """The workflow's note that Temporal gave up on its op's activity, and whether on a timeout."""

    workflow_id: str
    attempt: Attempt
    timed_out: bool


@activity.defn(name=GIVEN_UP)
async def given_up(note: GivenUp) -> None:
    redis = _redis()
    redis.sadd(RunKeys(os.environ[PREFIX_ENV]).given_up, note.workflow_id)
    if note.timed_out:
        _overtaken(redis, note.attempt, "Temporal gave up on its activity when a timeout of its own expired")


async def _attempt(run: Callable[[Job, dict[str, Any], str, int], Any], a: Attempt) -> Any:
    """The attempt in a thread of this process (its pid the one a kill is aimed at), the
    activity heartbeating meanwhile where it has a heartbeat timeout. An attempt Temporal runs
    again although the one before did not end by itself was killed, or timed out alive."""
    info = activity.info()
    redis = _redis()
    ended = RunKeys(a.spec["prefix"]).attempts_ended
    if info.attempt > 1 and not redis.sismember(ended, f"{info.workflow_id}:{info.attempt - 1}"):
        said = f"Temporal ran its activity again (its attempt {info.attempt}) before the one in hand ended"
        _overtaken(redis, a, said)
    timeout = info.heartbeat_timeout
    beats = _Beats(timeout.total_seconds()) if timeout else None
    beating = asyncio.create_task(beats.run()) if beats else None
    in_hand = _in_hand()
    in_hand.write_text(f"{os.getpid()}\n{a.spec['prefix']}\n{a.spec['cell']}\n{a.op}")
    try:
        return await asyncio.to_thread(run, Job(redis, a.enqueued), a.spec, a.op, a.seq)
    finally:
        if beating is not None:
            beating.cancel()
        # Ended in time, before Temporal hears of it; one that outlived a timeout did not end for Temporal.
        limit = info.start_to_close_timeout
        late = limit is not None and time.time() - info.started_time.timestamp() > limit.total_seconds()
        if not late and (beats is None or beats.kept):
            redis.sadd(ended, f"{info.workflow_id}:{info.attempt}")
        in_hand.unlink(missing_ok=True)


def _overtaken(redis: Redis, a: Attempt, said: str) -> None:
    """Temporal timed the op's latest attempt out: the controller tells a kill's from the machine's."""
    report_overtaken(redis, a.spec["prefix"], a.spec["cell"], a.op, said)


def _in_hand() -> Path:
    """Where this worker's Temporal process notes the attempt it runs (its pid, the run's keys,
    the cell, the op), for its worker to read if it dies of a signal."""
    return Path(os.environ[STATE_ENV]) / f"{os.environ[WORKER_ENV]}.attempt"


def _report_death(pid: int, status: int) -> None:
    """The process running an attempt died of a signal: the controller hears of it, as from
    an RQ worker whose work-horse died (an anomaly unless it killed it)."""
    in_hand = _in_hand()
    try:
        noted, prefix, cell, op = in_hand.read_text().split("\n")
    except (OSError, ValueError):
        return  # it held no attempt
    in_hand.unlink(missing_ok=True)
    if int(noted) != pid:
        return
    redis = connections.from_url(os.environ[RQ_URL_ENV])
    try:
        report_death(redis, prefix, cell, op, pid, os.WTERMSIG(status))
    finally:
        redis.close()


class _Beats:
    """The activity's heartbeats, four per heartbeat timeout, and whether they kept within it
    (a machine so busy that the loop stalled longer lets Temporal time the attempt out alive)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.kept = True

    async def run(self) -> None:
        last = time.monotonic()
        while True:
            activity.heartbeat()
            await asyncio.sleep(self.timeout / 4)
            now = time.monotonic()
            self.kept = self.kept and now - last <= self.timeout
            last = now


@functools.cache
def _redis() -> Redis:
    """The run's Redis, for the lab's keys: one client per process."""
    return connections.from_url(os.environ[RQ_URL_ENV])


def preload() -> None:
    import temporalio.worker._worker  # noqa: F401

    import workers.handler  # noqa: F401


def serve(argv: list[str]) -> None:
    """This process becomes one of the run's Temporal workers (`--name NAME`): it forks the
    process that serves Temporal, and again each time that process dies (a kill at a
    boundary), as a production worker's supervisor restarts it."""
    name = argv[argv.index("--name") + 1]
    parent = os.getpid()
    while True:
        child = os.fork()
        if child == 0:
            code = 1
            try:
                die_with_parent(parent)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                asyncio.run(_work(name))
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(child, 0)
        if os.WIFSIGNALED(status):
            _report_death(child, status)
        elif os.waitstatus_to_exitcode(status) > 0:
            raise SystemExit(f"the Temporal worker process {child} failed (exit {os.waitstatus_to_exitcode(status)})")


async def _work(name: str) -> None:
    client = await Client.connect(os.environ[ADDRESS_ENV], namespace=os.environ[NAMESPACE_ENV])
    worker = Worker(
        client,
        task_queue=os.environ[QUEUE_ENV],
        workflows=[OpWorkflow],
        activities=[builtin, user, given_up],
        # One attempt at a time, as one work-horse per RQ worker; the lab's code runs outside
        # Temporal's workflow sandbox, and no workflow stays cached on a process that may be killed.
        max_concurrent_activities=1,
        workflow_runner=UnsandboxedWorkflowRunner(),
        max_cached_workflows=0,
        identity=f"{name}-{os.getpid()}",
    )
    async with worker:
        _redis().sadd(RunKeys(os.environ[PREFIX_ENV]).ready_workers, name)
        await asyncio.Event().wait()
