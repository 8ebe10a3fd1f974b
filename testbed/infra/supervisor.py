"""The worker supervisor: starts real `rq worker` processes, replaces killed
ones, and stops them all at the end (their work-horses included).

The workers are forked by the run's zygote (`workers.zygote`), which imports
their code once for all of them: a run's first cell no longer waits for four
interpreters' imports, nor a killed worker's replacement for a fifth.

What the workers' jobs leave running is stopped as each work-horse ends
(`workers.horses`); what left the work-horse's process group is found once the
workers are stopped, below the zygote, which adopts the orphans of its
descendants, and in its session, which every worker and work-horse shares
(a process adopted by someone else), and stopped (`swept`).

The Redis URL (with its password) and the provider's token reach the workers
through their environment: a command line is visible to every local user."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import psutil

from labcore.credentials import RQ_URL_ENV, TOKEN_ENV
from labcore.delivery import ENGINE_ENV, Engine
from labcore.keys import RunKeys
from labcore.procs import stop_descendants, stop_session
from testbed.errors import RunFailure
from testbed.infra.forks import ForkedProcess, Zygote
from testbed.infra.liveness import check_alive

if TYPE_CHECKING:
    from redis import Redis


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """RQ's own knobs for noticing dead workers (`rq worker` options)."""

    worker_ttl: int = 420
    maintenance_interval: int = 600
    job_monitoring_interval: int = 30


# Celery's own default visibility timeout (seconds), on a Redis broker.
CELERY_VISIBILITY = 3600
# How often, at most, kombu's Redis transport looks for messages past it: every tenth of its 10 s
# ticks (`unacked_restore_interval` x `unacked_restore_throttle`, kombu 5.7's defaults).
CELERY_RESTORE_SWEEP = 100


@dataclass(frozen=True, slots=True)
class CeleryWorkers:
    """A Celery run's workers: the lab's app (its task options per delivery setting), or the
    user's (`app`, with its task `task`), and how long the broker keeps a killed worker's
    unacknowledged message before it restores it."""

    retries: int = 1
    visibility_timeout: int | None = None  # None: the app's own (Celery's default: an hour)
    app: str | None = None
    task: str | None = None
    paths: tuple[str, ...] = ()

    def env(self, run_prefix: str) -> dict[str, str]:
        from workers import celery_app as c

        env = {ENGINE_ENV: Engine.CELERY.value, c.PREFIX_ENV: run_prefix, c.RETRIES_ENV: str(self.retries)}
        if self.visibility_timeout is not None:
            env[c.VISIBILITY_ENV] = str(self.visibility_timeout)
        if self.app is not None and self.task is not None:
            env |= {c.APP_ENV: self.app, c.HANDLER_ENV: self.task, c.PATHS_ENV: os.pathsep.join(self.paths)}
        return env


# How long a run's end waits for its work-horses to exit on their own before its workers are stopped.
HORSES_END = 1.0


def _horses_ended(workers: list[WorkerProcess], within: float) -> None:
    """A run judges a cell once its last job has ended in Redis, and may end a moment before
    that job's work-horse has exited: stopped then, with its children, what the job left
    running would be killed uncounted. A work-horse that is still running after `within`
    (a job that hangs, or was cut short) is left to the stop."""
    deadline = time.monotonic() + within
    for worker in workers:
        try:
            process = psutil.Process(worker.pid)
            while process.children() and time.monotonic() < deadline:
                time.sleep(0.01)
        except psutil.NoSuchProcess:
            continue


@dataclass(slots=True)
class WorkerProcess:
    name: str
    proc: ForkedProcess
    log: Path
    killed: bool = False  # by the controller, on purpose

    @property
    def pid(self) -> int:
        return self.proc.pid


class Supervisor:
    def __init__(
        self,
        workdir: Path,
        redis_url: str,
        rq_prefix: str,
        queue: str,
        settings: WorkerSettings,
        provider_token: str | None = None,
        name_prefix: str = "",
        celery: CeleryWorkers | None = None,
        run_prefix: str = "",
    ) -> None:
        """`name_prefix`: a host's workers carry its name, unique among the run's hosts.
        `celery`: the workers are Celery's, for the run whose keys start with `run_prefix`."""
        self._name_prefix = name_prefix
        self._celery = celery
        self._ready_key = RunKeys(run_prefix).celery_ready
        self._dir = workdir / "workers"
        self._dir.mkdir(exist_ok=True)
        self._queue = queue
        self._settings = settings
        self._env = {**os.environ, "RQ_KEY_PREFIX": rq_prefix, "TESTBED_PARENT_PID": str(os.getpid())}
        self._env[RQ_URL_ENV] = redis_url
        if provider_token:
            self._env[TOKEN_ENV] = provider_token
        if celery is not None:
            self._env |= celery.env(run_prefix)
            # Celery's pool makes a temp dir per worker, removed only at an interpreter's exit,
            # which a worker killed whole (or ended as the zygote ends it) never reaches: in the
            # run's own directory, it goes with it.
            tmp = self._dir / "tmp"
            tmp.mkdir(exist_ok=True)
            self._env["TMPDIR"] = str(tmp)
        self._started = 0
        self._zygote: Zygote | None = None
        self.workers: dict[str, WorkerProcess] = {}
        self.swept = 0  # processes left in the workers' session once they were stopped

    def boot(self) -> None:
        """Start the zygote: it imports the workers' code (needing no Redis yet) while the run does its own."""
        if self._zygote is None:
            self._zygote = Zygote(self._dir / "zygote.log", self._env)

    def start(self, count: int) -> None:
        self.boot()
        for _ in range(count):
            self._spawn()

    def _spawn(self) -> WorkerProcess:
        self._started += 1
        # RQ's worker registry lives under the run's prefix: names need only be unique within the run.
        name = f"{self._name_prefix}w{self._started}"
        argv = self._celery_argv(name) if self._celery is not None else self._rq_argv(name)
        log = self._dir / f"{name}.log"
        assert self._zygote is not None
        worker = WorkerProcess(name, self._zygote.fork(name, argv, log), log)
        self.workers[name] = worker
        return worker

    def _rq_argv(self, name: str) -> list[str]:
        s = self._settings
        argv = ["--name", name, "--worker-ttl", str(s.worker_ttl)]
        argv += ["--maintenance-interval", str(s.maintenance_interval)]
        argv += ["--job-monitoring-interval", str(s.job_monitoring_interval), "--logging_level", "WARNING"]
        return [*argv, "--disable-job-desc-logging", self._queue]

    def _celery_argv(self, name: str) -> list[str]:
        """One pool child per worker, as one work-horse at a time per RQ worker; no chatter
        between workers (gossip, mingle, heartbeats), which the lab does not test."""
        argv = ["--hostname", f"{name}@testbed", "--pool", "prefork", "--concurrency", "1", "--queues", self._queue]
        return [*argv, "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "WARNING"]

    def wait_ready(self, redis: Redis, timeout: float = 30.0) -> None:
        """Until every worker has registered with RQ, or said it is ready (Celery): it is then dequeuing."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check()
            if set(self.workers) <= self._registered(redis):
                return
            time.sleep(0.05)
        engine = "RQ" if self._celery is None else "Celery"
        raise RunFailure(f"workers did not register with {engine} within {timeout:.0f} s")

    def _registered(self, redis: Redis) -> set[str]:
        if self._celery is not None:
            return {name.decode() for name in cast(set[bytes], redis.smembers(self._ready_key))}
        from rq import Worker

        return {w.name for w in Worker.all(connection=redis)}

    def owner_of(self, horse_pid: int) -> WorkerProcess | None:
        """The worker whose work-horse this pid is, if it is one of ours."""
        try:
            parent = psutil.Process(horse_pid).ppid()
        except psutil.NoSuchProcess:
            return None
        return next((w for w in self.workers.values() if w.pid == parent and not w.killed), None)

    def replace(self, worker: WorkerProcess) -> WorkerProcess:
        """A killed worker is reaped and a fresh one takes its place."""
        worker.proc.wait()
        del self.workers[worker.name]
        return self._spawn()

    def check(self) -> None:
        if self._zygote is not None:
            check_alive("the workers' zygote", self._zygote.proc, self._zygote.log)
        for worker in self.workers.values():
            if not worker.killed:
                check_alive(f"worker {worker.name}", worker.proc, worker.log)

    def release(self) -> list[ForkedProcess]:
        """Hand the worker processes over to be stopped (SIGTERM is a warm shutdown in RQ);
        `close` once they are: the zygote reports their exits until then."""
        if self._zygote is not None:
            self._zygote.settle()
        if self._celery is None:  # a Celery worker's pool child lives as long as its worker
            _horses_ended([w for w in self.workers.values() if not w.killed], HORSES_END)
        procs = [w.proc for w in self.workers.values()]
        self.workers.clear()
        return procs

    def close(self) -> None:
        """The zygote stopped, once its workers are: what is left below it or in its session
        (it leads the session it was started in) is what their jobs left, stopped."""
        if self._zygote is not None:
            zygote = self._zygote.proc.pid
            self.swept += stop_descendants(zygote)
            self._zygote.close()
            self._zygote = None
            self.swept += stop_session(zygote)
