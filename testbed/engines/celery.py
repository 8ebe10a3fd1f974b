"""Celery (`--engine celery`): real Celery workers (prefork, one pool child each) on the run's
Redis, as broker and result backend under the run's keys, each cell once per delivery setting
(`labcore.delivery`), or a user's own app's task under its own options (`--celery-app`).

Only this module and the workers' side (`workers.engines.celery`) import Celery, kombu or
billiard (an import contract keeps it so): an RQ run imports none of them.

The runner asks Celery's queue what it asks RQ's: enqueue these jobs, how many wait, which
did the queue give up on. Celery's Redis broker keeps no such record: the workers note each
task Celery failed under the run's keys (`workers.engines.celery`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, cast

from labcore.delivery import acks_early, askable, parse_delivery
from labcore.engines.celery import APP, APP_TASK, ENGINE, Delivery, task_name
from labcore.keys import QUEUE, RunKeys
from testbed.engines.base import EngineChoice, JobQueue, JobRequest, RQTimers, RunShape
from testbed.engines.rq import names, refuse_timeouts
from testbed.errors import RunFailure, SetupError, UsageError
from testbed.experiment.matrix import Cell
from testbed.experiment.scenarios import Nemesis, Scenario
from testbed.experiment.selection import parse_all

if TYPE_CHECKING:
    from redis import Redis
    from redis.client import Pipeline

# Celery's own default visibility timeout (seconds), on a Redis broker.
VISIBILITY = 3600
# How often, at most, kombu's Redis transport looks for messages past it: every tenth of its 10 s
# ticks (`unacked_restore_interval` x `unacked_restore_throttle`, kombu 5.7's defaults).
RESTORE_SWEEP = 100
MAX_VISIBILITY = 7 * 86_400  # seconds
# How long an early-acknowledged Celery task's acknowledgement is waited for before a kill.
ACK_WAIT = 2.0


@dataclass(frozen=True, slots=True)
class Celery:
    """A Celery run's workers: the lab's app (its task options per delivery setting), or the
    user's (`app`, with its task `task`), and how long the broker keeps a killed worker's
    unacknowledged message before it restores it."""

    retries: int = 1
    visibility_timeout: int | None = None  # None: the app's own (Celery's default: an hour)
    app: str | None = None
    task: str | None = None
    paths: tuple[str, ...] = ()

    name: ClassVar[str] = ENGINE
    label: ClassVar[str] = "Celery"
    waits_for_horses: ClassVar[bool] = False  # a pool child lives as long as its worker
    recovers_by_force: ClassVar[bool] = False  # the broker brings a message back, or nothing does
    versions: ClassVar[tuple[str, ...]] = ("celery", "kombu")

    @classmethod
    def settings(cls, choice: EngineChoice) -> list[str]:
        """The delivery settings named (all of them if none is), or with a user's app its
        tasks' own (`APP`)."""
        s = choice.spelling
        refuse_timeouts(choice, "Celery")
        if choice.app is not None:
            if choice.deliveries:
                raise UsageError(f"{s.app} runs its task under its own options: not with {s.delivery}")
            return [APP]
        named = parse_all(list(choice.deliveries), lambda d: parse_delivery(d, ENGINE))
        return list(dict.fromkeys(named)) if named else askable(ENGINE)

    @classmethod
    def chosen(cls, choice: EngineChoice, shape: RunShape) -> Celery:
        """Celery's workers, running the lab's app (`retries`: autoretry's max_retries) or the
        user's (one handler, its task, and no built-in strategy)."""
        cls.settings(choice)
        s = choice.spelling
        if shape.remote:
            raise UsageError(f"{s.engine} celery runs its workers on this machine: not with --hosts")
        if not shape.forced_recovery:
            raise UsageError(f"{s.recovery} is RQ's: on Celery a killed task comes back as its delivery settings say")
        visibility = choice.visibility_timeout
        if visibility is not None and not 1 <= visibility <= MAX_VISIBILITY:
            raise UsageError(f"{s.visibility_timeout} must be from 1 to {MAX_VISIBILITY:,} (got {visibility})")
        task = None
        if choice.app is not None:
            if len(shape.handlers) != 1 or shape.builtins:
                raise UsageError(
                    f"{s.app} runs one {s.handler}, a task of the app, and no built-in strategy ({s.strategy})"
                )
            task = shape.handlers[0]
        if importlib.util.find_spec("celery") is None:
            raise SetupError(f"{s.engine} celery needs Celery: pip install 'testbed[celery]'")
        engine = cls(shape.retries, visibility, choice.app, task, tuple(shape.paths))
        if choice.app is not None:
            set_by_lab = ", ".join(engine.overrides())
            print(f"testbed: the run sets in {choice.app}'s configuration: {set_by_lab}", file=sys.stderr)
        return engine

    @classmethod
    def refused(cls, scenario: Scenario, delivery: str | None, scheduled: bool) -> str | None:
        """A held op waits for its duplicate to run: a worker that acknowledges as the task starts
        takes its next message while it holds the op, perhaps that duplicate; and a matrix cell
        holds ops on every worker before their duplicates, sent behind the backlog (a Celery queue
        has no front), can start. A trial's schedule (explore, --schedule) holds fewer ops than
        there are workers."""
        if scenario.nemesis is not Nemesis.DUPLICATE:
            return None
        if acks_early(delivery):
            return (
                f"scenario {scenario.name} under {delivery}: a worker holding an op takes the next message, which may"
                " be the op's duplicate, and both wait for ever (use --delivery acks-late or reject-on-lost)"
            )
        if not scheduled:
            return (
                f"scenario {scenario.name} on Celery: the cell holds ops on every worker before their duplicates,"
                " sent behind the backlog (a Celery queue has no front), can release them; explore it instead"
                f" (testbed explore --engine celery --delivery acks-late --scenario {scenario.name})"
            )
        return None

    @classmethod
    def flags(cls, choice: EngineChoice, delivery: str | None) -> str:
        flags = f" --celery-app {choice.app}" if choice.app else f" --engine celery --delivery {delivery}"
        return flags + (f" --visibility-timeout {choice.visibility_timeout}" if choice.visibility_timeout else "")

    def server(self) -> None:
        """Its broker is the run's Redis."""

    def worker_env(self, run_prefix: str, tmp: str) -> dict[str, str]:
        from workers.engines import celery as c

        env = {c.ENGINE_ENV: self.name, c.PREFIX_ENV: run_prefix, c.RETRIES_ENV: str(self.retries)}
        if self.visibility_timeout is not None:
            env[c.VISIBILITY_ENV] = str(self.visibility_timeout)
        if self.app is not None and self.task is not None:
            env |= {c.APP_ENV: self.app, c.HANDLER_ENV: self.task, c.PATHS_ENV: os.pathsep.join(self.paths)}
        # Celery's pool makes a temp dir per worker, removed only at an interpreter's exit,
        # which a worker killed whole (or ended as the zygote ends it) never reaches: in the
        # run's own directory, it goes with it.
        return env | {"TMPDIR": tmp}

    def worker_argv(self, name: str, queue: str, settings: RQTimers) -> list[str]:
        """One pool child per worker, as one work-horse at a time per RQ worker; no chatter
        between workers (gossip, mingle, heartbeats), which the lab does not test."""
        argv = ["--hostname", f"{name}@testbed", "--pool", "prefork", "--concurrency", "1", "--queues", queue]
        return [*argv, "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "WARNING"]

    def registered(self, redis: Redis, keys: RunKeys) -> set[str]:
        return {name.decode() for name in cast(set[bytes], redis.smembers(keys.ready_workers))}

    def ending(self, redis: Redis, keys: RunKeys, workers: Sequence[str]) -> set[str]:
        # A worker is busy from its task's start until what the task left is counted (in its
        # pool child, before the task ends: `workers.engines.celery`).
        busy = cast(set[bytes], redis.smembers(keys.busy_workers)) if workers else set()
        return set(workers) & {name.decode() for name in busy}

    def job_queue(self, redis: Redis, url: str, keys: RunKeys, retries: int) -> JobQueue:
        return CeleryJobs(redis, url, keys.prefix)

    def job_function(self, cell: Cell) -> str:
        """The Celery task for the cell's delivery setting."""
        if cell.delivery is None:
            raise RunFailure(f"{cell.label} names no delivery setting: it cannot run on Celery")
        if cell.delivery == APP:
            return APP_TASK
        return task_name(Delivery(cell.delivery), user=cell.handler is not None)

    def kill_worker_wait(self, rq_recovery: bool, settings: RQTimers) -> float:
        """The broker restores a killed worker's unacknowledged task after the visibility
        timeout, at its next sweep."""
        given = self.visibility_timeout
        return (VISIBILITY + RESTORE_SWEEP if given is None else given) + 20

    def caption(self) -> str:
        return f"; Celery's visibility timeout {self.visibility_timeout or VISIBILITY} s"

    def recovery(self, mode: str) -> str:
        return "Celery's"

    def meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"engine": self.name}
        meta |= {"celeryApp": self.app} if self.app else {}
        return meta | ({"visibilityTimeout": self.visibility_timeout} if self.visibility_timeout else {})

    def overrides(self) -> list[str]:
        """What the run sets in a user's app's configuration, by name."""
        from workers.engines.celery import overrides

        return list(overrides("", "", self.visibility_timeout))


class CeleryJobs:
    """Tasks sent as a Celery client sends them (`send_task`), to the queue the run's workers
    consume; a Celery queue has no front, so a job asked to go first goes last."""

    def __init__(self, redis: Redis, url: str, run_prefix: str) -> None:
        from celery import Celery as App

        from workers.engines import celery as c

        self.loses_jobs = True
        self._app = App("testbed-run", set_as_current=False)
        self._app.conf.update(c.overrides(url, run_prefix, None))
        self._redis = redis
        self._backlog_key = f"{c.key_prefix(run_prefix)}{QUEUE}"
        # kombu's Redis transport: the messages delivered and not yet acknowledged, by delivery tag.
        self._unacked_key = f"{c.key_prefix(run_prefix)}unacked"
        self._failed_key = RunKeys(run_prefix).given_up

    def enqueue(self, jobs: Sequence[JobRequest]) -> None:
        from workers.engines.celery import LAB_KWARG

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
        return names(self._redis.smembers(self._failed_key))

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
