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

With a user's own workflow (`WORKFLOW_ENV`), the process registers it and its activity (the
handler), unchanged, as the user's worker would, and the lab's interceptor (`_Lab`) runs
each execution of that activity as one attempt of the workflow's op, the activity itself
called inside it, its retry policy and timeouts the workflow's; a workflow that fails is
noted as the lab's is.

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
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from redis import Redis
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError
from temporalio.exceptions import TimeoutError as ActivityTimeout
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    Interceptor,
    UnsandboxedWorkflowRunner,
    Worker,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

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
WORKFLOW_ENV = "TESTBED_TEMPORAL_WORKFLOW"  # the user's workflow class, package.module:attribute
ACTIVITY_ENV = "TESTBED_TEMPORAL_ACTIVITY"  # its activity under test, package.module:attribute
PATHS_ENV = "TESTBED_TEMPORAL_PATHS"  # os.pathsep-separated, put on sys.path before their import
PLUGINS_ENV = "TESTBED_TEMPORAL_PLUGINS"  # the user's client plugins, package.module:attribute, comma-separated


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
            await _note_given_up(order.attempt, isinstance(error.cause, ActivityTimeout))
            raise


async def _note_given_up(attempt: Attempt | None = None, timed_out: bool = False) -> None:
    note = GivenUp(workflow.info().workflow_id, attempt, timed_out)
    await workflow.execute_activity(GIVEN_UP, note, start_to_close_timeout=timedelta(seconds=30))


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
    """The workflow's note that Temporal gave up on its op's activity, and whether on a timeout
    (a user's workflow's: neither its attempt nor whether it timed out, which it does not know)."""

    workflow_id: str
    attempt: Attempt | None
    timed_out: bool


@activity.defn(name=GIVEN_UP)
async def given_up(note: GivenUp) -> None:
    redis = _redis()
    redis.sadd(RunKeys(os.environ[PREFIX_ENV]).given_up, note.workflow_id)
    if note.timed_out and note.attempt is not None:
        _overtaken(redis, note.attempt, "Temporal gave up on its activity when a timeout of its own expired")


class _Lab(Interceptor):
    """On a user's workflow's worker: each execution of the activity under test (by its type)
    one attempt of the workflow's op, and a workflow that fails noted as given up on."""

    def __init__(self, activity_type: str) -> None:
        self._type = activity_type

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Attempts(next, self._type)

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        return _GivesUp


class _Attempts(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, activity_type: str) -> None:
        super().__init__(next)
        self._type = activity_type

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        from workers import userjob

        info = activity.info()
        if info.activity_type != self._type:
            return await self.next.execute_activity(input)
        orders = RunKeys(os.environ[PREFIX_ENV]).orders
        raw = await asyncio.to_thread(_redis().hget, orders, info.workflow_id or "")
        if raw is None:
            raise RuntimeError(f"workflow {info.workflow_id} is none of the run's ops")
        loop = asyncio.get_running_loop()

        def call(op_id: str, payload: dict[str, Any]) -> Any:
            # The activity as its workflow called it, with the workflow's arguments, in
            # Temporal's own hands (its executor, its context), this attempt armed meanwhile.
            return asyncio.run_coroutine_threadsafe(self.next.execute_activity(input), loop).result()

        return await _attempt(functools.partial(userjob.run, function=call), Attempt.decode(raw), heartbeats=False)


class _GivesUp(WorkflowInboundInterceptor):
    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        try:
            return await self.next.execute_workflow(input)
        except FailureError:
            # The workflow fails (its activity given up on, or its own error): noted as the lab's is.
            await _note_given_up()
            raise


async def _attempt(run: Callable[..., Any], a: Attempt, heartbeats: bool = True) -> Any:
    """The attempt in a thread of this process (its pid the one a kill is aimed at), the
    activity heartbeating meanwhile where it has a heartbeat timeout (`heartbeats`: the lab's own
    activities; a user's heartbeats as its own code does). An attempt Temporal runs again
    although the one before did not end by itself was killed, or timed out alive."""
    info = activity.info()
    redis = _redis()
    ended = RunKeys(a.spec["prefix"]).attempts_ended
    if info.attempt > 1 and not redis.sismember(ended, f"{info.workflow_id}:{info.attempt - 1}"):
        said = f"Temporal ran its activity again (its attempt {info.attempt}) before the one in hand ended"
        _overtaken(redis, a, said)
    timeout = info.heartbeat_timeout
    beats = _Beats(timeout.total_seconds()) if timeout and heartbeats else None
    beating = asyncio.create_task(beats.run()) if beats else None
    in_hand = _in_hand()
    in_hand.write_text(f"{os.getpid()}\n{a.spec['prefix']}\n{a.spec['cell']}\n{a.op}")
    try:
        return await asyncio.to_thread(run, Job(redis, a.enqueued), a.spec, a.op, a.seq)
    except Exception as error:
        if a.errors_retried:
            raise
        # The setting's: an error another try would not mend, as an activity says it.
        raise ApplicationError(
            f"{type(error).__name__}: {error}", type=type(error).__name__, non_retryable=True
        ) from error
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


def check_tasks(workflow_spec: str, found: Any, activities: Mapping[str, Any]) -> str | None:
    """Why `found` (imported from `workflow_spec`) is not a Temporal workflow, or one of
    `activities` (by spec) not an activity; None if they are (the handlers' import check)."""
    if not isinstance(found, type) or workflow._Definition.from_class(found) is None:
        return f"--temporal-workflow {workflow_spec}: not a Temporal workflow (no @workflow.defn class)"
    for spec, fn in activities.items():
        if activity._Definition.from_callable(fn) is None:
            return f"handler {spec}: not a Temporal activity (no @activity.defn)"
    return None


def check_plugins(plugins: Mapping[str, Any]) -> str | None:
    """Why one of `plugins` (by spec) is not a Temporal client plugin; None if none (the import check)."""
    from temporalio.client import Plugin

    for spec, found in plugins.items():
        if not isinstance(found, Plugin):
            return f"--temporal-plugin {spec}: not a Temporal client plugin (a temporalio.client.Plugin)"
    return None


def _users() -> tuple[list[type], list[Callable[..., Any]], list[Interceptor]]:
    """The user's workflow and activity (and the lab's interceptor), if the run has them, and
    the lab's own workflow and activities otherwise."""
    spec = os.environ.get(WORKFLOW_ENV)
    if spec is None:
        return [OpWorkflow], [builtin, user, given_up], []
    from workers import specs, userjob  # noqa: F401  (userjob instruments the HTTP clients)

    paths = [p for p in os.environ.get(PATHS_ENV, "").split(os.pathsep) if p]
    found, fn = specs.find(spec, paths), specs.find(os.environ[ACTIVITY_ENV], paths)
    defined, performed = workflow._Definition.must_from_class(found), activity._Definition.must_from_callable(fn)
    # Where the lab starts the op's workflows: by the type it is registered under.
    _redis().set(RunKeys(os.environ[PREFIX_ENV]).workflow_type, defined.name or found.__name__)
    return [found], [fn, given_up], [_Lab(performed.name or fn.__name__)]


def _plugins() -> list[Any]:
    """The user's Temporal plugins (a framework's: its payload converter, the activities it
    registers), on the worker's client as on the user's own: Temporal applies those that are
    worker plugins too to the worker built on that client."""
    from workers import specs

    paths = [p for p in os.environ.get(PATHS_ENV, "").split(os.pathsep) if p]
    return [specs.find(spec, paths) for spec in os.environ.get(PLUGINS_ENV, "").split(",") if spec]


async def _work(name: str) -> None:
    client = await Client.connect(os.environ[ADDRESS_ENV], namespace=os.environ[NAMESPACE_ENV], plugins=_plugins())
    workflows, activities, interceptors = _users()
    worker = Worker(
        client,
        task_queue=os.environ[QUEUE_ENV],
        workflows=workflows,
        activities=activities,
        interceptors=interceptors,
        # A user's activity may be a plain function: Temporal runs it in this executor's thread.
        activity_executor=ThreadPoolExecutor(1) if interceptors else None,
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
