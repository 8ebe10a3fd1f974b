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
from typing import TYPE_CHECKING

import psutil

from labcore.credentials import RQ_URL_ENV, TOKEN_ENV
from labcore.keys import RunKeys
from labcore.procs import stop_descendants, stop_session
from testbed.engines.base import Engine, RQTimers
from testbed.engines.rq import RQ
from testbed.errors import RunFailure
from testbed.infra.forks import ForkedProcess, Zygote
from testbed.infra.liveness import check_alive

if TYPE_CHECKING:
    from redis import Redis


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
        settings: RQTimers,
        provider_token: str | None = None,
        engine: Engine = RQ(),  # noqa: B008  (a frozen value)
        name_prefix: str = "",
        run_prefix: str = "",
    ) -> None:
        """`engine`: the queue whose workers these are, for the run whose keys start with
        `run_prefix`. `name_prefix`: a host's workers carry its name, unique among the run's hosts."""
        self._name_prefix = name_prefix
        self._engine = engine
        self._keys = RunKeys(run_prefix)
        self._dir = workdir / "workers"
        self._dir.mkdir(exist_ok=True)
        self._queue = queue
        self._settings = settings
        self._env = {**os.environ, "RQ_KEY_PREFIX": rq_prefix, "TESTBED_PARENT_PID": str(os.getpid())}
        self._env[RQ_URL_ENV] = redis_url
        if provider_token:
            self._env[TOKEN_ENV] = provider_token
        # A directory of the run's own for what an engine's workers leave in a temp dir.
        tmp = self._dir / "tmp"
        tmp.mkdir(exist_ok=True)
        self._env |= engine.worker_env(run_prefix, str(tmp))
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
        argv = self._engine.worker_argv(name, self._queue, self._settings)
        log = self._dir / f"{name}.log"
        assert self._zygote is not None
        worker = WorkerProcess(name, self._zygote.fork(name, argv, log), log)
        self.workers[name] = worker
        return worker

    def wait_ready(self, redis: Redis, timeout: float = 30.0) -> None:
        """Until every worker has registered with its engine: it is then dequeuing."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check()
            if set(self.workers) <= self._engine.registered(redis, self._keys):
                return
            time.sleep(0.05)
        raise RunFailure(f"workers did not register with {self._engine.label} within {timeout:.0f} s")

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
        if self._engine.waits_for_horses:
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
