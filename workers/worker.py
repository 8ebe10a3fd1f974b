"""The lab's RQ worker: RQ's own forking Worker, stopping without its shutdown's one-second stall,
and keeping its work-horses' connection to the run's provider open between jobs.

A worker's pubsub thread (RQ's commands to it) blocks on its connection. At
shutdown RQ unsubscribes first and trips the thread's flag after: when the
unsubscribe's answer reaches the thread in between, the thread waits again,
and RQ's join gives up on it only after a second (rq/rq#1613). Tripping the
flag first lets the answer end the thread, but redis-py's own thread would
then close the pubsub as its loop ends, possibly in the middle of the
worker's UNSUBSCRIBE on the same connection, and its `stop()` waits for a
thread that is blocked in its read until that UNSUBSCRIBE is answered. The
thread is therefore the lab's own (`_Listener`): RQ's commands read as
redis-py's thread reads them, a `stop()` that only trips its flag, and no
close of the pubsub, which RQ closes after the join.

Before it forks a work-horse for the lab's handler, the worker opens (or
keeps) a connection to the provider's unix socket, and the work-horse sends
on it: no connect, accept and close for every job (`workers.client`). A
work-horse that did not exit cleanly may have left half a request or an
unread answer on it: the worker drops it then.

Every work-horse opens a Redis connection of its own (redis-py starts a fresh
pool in a forked child), and redis-py builds each connection's CLIENT SETINFO
from the package's installed metadata, read and parsed again for every
connection: a large part of what a work-horse of a no-op job costs. The
worker's pool names redis-py and its version as the lab's other clients do
(`labcore.connections`), and its work-horses' pools are copies of it.
Each work-horse is bounded (`workers.horses`): once the worker has reaped it,
the processes it left in its process group are stopped, and counted under the
run's keys by cell (a job of the lab's, whose spec names the run and the cell); what it wrote
beyond a cap is cut from its worker's log. A user's job whose work-horse
exits with 0 before RQ has recorded the job (`os._exit(0)` in the user's
function) is an unexpected death, as a nonzero exit is: RQ would otherwise
take the exit for a job done and leave the job started until its cell's
timeout. A work-horse of the lab's jobs that died of a signal is reported on
the run's bus (`horse-died`): the controller knows whether it killed it, and a
death it did not plan (the OOM killer, a `kill -9` from outside) is the lab's.

Nothing else differs from RQ's Worker: the jobs, their work-horses and RQ's
bookkeeping are its own, and other jobs (raw RQ's, users') are forked as RQ
forks them; the benchmarks' raw RQ runs on this class too, so that neither
side of a comparison pays the shutdown stall.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from redis.client import PubSub
from rq.exceptions import DeserializationError
from rq.job import JobStatus
from rq.worker import Worker as RQWorker

from labcore import connections
from labcore.keys import RunKeys
from workers import horses
from workers.instrument import report_death
from workers.specs import HANDLER, USER_JOB

CLASS_PATH = f"{__name__}.Worker"  # as RQ names a worker class (--worker-class, RQ_WORKER_CLASS)
# A work-horse that exits with this status died before it ended its job (`os.waitstatus_to_exitcode`: 1).
_DIED = 1 << 8


class Worker(RQWorker):
    _keeps_connection = False  # the job at hand's work-horse sends on the worker's connection (`kept_for`)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._job: Any = None  # the job at hand
        self._logs: dict[int, int] = {}  # the sizes of its logs as its work-horse began
        connections.name(self.connection.connection_pool.connection_kwargs)

    def subscribe(self) -> None:
        # RQ's own, but for its thread (see the module's doc).
        self.log.info("Worker %s: subscribing to channel %s", self.name, self.pubsub_channel_name)
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        # RQ's handler is typed for an Exception; redis-py's own thread hands it any BaseException too.
        listener = _Listener(self.pubsub, self._pubsub_exception_handler)  # type: ignore[arg-type]
        listener.start()
        self.pubsub_thread = listener  # type: ignore[assignment]  # RQ types it as redis-py's thread

    def unsubscribe(self) -> None:
        if self.pubsub_thread:
            self.pubsub_thread.stop()
        super().unsubscribe()  # type: ignore[no-untyped-call]  # rq leaves it unannotated

    @staticmethod
    def kept_for(job: Any) -> str | None:
        """The provider whose connection this worker keeps for the job's work-horse: the lab's handler's."""
        return job.args[0]["provider"] if _function(job) == HANDLER else None

    def execute_job(self, job: Any, queue: Any) -> None:
        base = self.kept_for(job)
        self._keeps_connection = base is not None
        if base is not None:
            from workers import client  # preloaded by the lab's zygote

            client.keep_open(base)
        self._job = job
        self._logs = horses.log_sizes()
        super().execute_job(job, queue)

    def wait_for_horse(self) -> Any:
        pid, status, usage = super().wait_for_horse()
        if pid is not None:
            status = self._horse_ended(pid, status)
        return pid, status, usage

    def _horse_ended(self, pid: int, status: int | None) -> int | None:
        """What its work-horse left stopped and counted, its output capped; its exit
        status as RQ should take it."""
        job = self._job
        function = _function(job)
        left = horses.stop_group(pid)
        horses.cap_output(self._logs)
        if left and function in (HANDLER, USER_JOB):
            spec = job.args[0]
            self.connection.hincrby(RunKeys(spec["prefix"]).leftovers, spec["cell"], left)
        if status is not None and os.WIFSIGNALED(status) and function in (HANDLER, USER_JOB):
            self._report_death(job, pid, os.WTERMSIG(status))
        if status == 0 and function == USER_JOB and self._still_mine(job):
            status = _DIED
        if self._keeps_connection:
            from workers import client

            client.horse_ended(clean=status == 0)
        return status

    def _report_death(self, job: Any, pid: int, signal: int) -> None:
        """Before RQ records the job as failed: the run judges a cell once all its jobs have ended."""
        spec, op, _ = job.args
        report_death(self.connection, spec["prefix"], spec["cell"], op, pid, signal)

    def _still_mine(self, job: Any) -> bool:
        """The job is still started by this worker: its work-horse exited without ending it.
        Its status alone does not say whose: a job that failed and was retried at once may
        already be started again, by another worker, as this one reaps the horse."""
        status, worker = self.connection.hmget(job.key, "status", "worker_name")
        return status == JobStatus.STARTED.encode() and worker == self.name.encode()


class _Listener(threading.Thread):
    """The worker's pubsub thread: RQ's commands, read until `stop`, each handed to its handler."""

    def __init__(self, pubsub: PubSub, exception_handler: Callable[[BaseException, PubSub, Any], None]) -> None:
        super().__init__(daemon=True)
        self._pubsub = pubsub
        self._exception_handler = exception_handler  # RQ's: a lost connection is retried, anything else ends it
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                # RQ's own wait (its `run_in_thread(sleep_time=60)`): a command or an answer ends it sooner.
                self._pubsub.get_message(ignore_subscribe_messages=True, timeout=60)
            except BaseException as exc:  # as redis-py's thread hands them on
                self._exception_handler(exc, self._pubsub, self)

    def stop(self) -> None:
        """The loop ends after the read in progress: nothing waits for it here (RQ joins it next)."""
        self._stopped.set()


def _function(job: Any) -> str | None:
    """The job's function; None for a job whose data does not load (JSON, testbed.engines.rq):
    not the lab's, but another client's of a shared Redis, which RQ fails in its work-horse.
    Read here, in the worker, it would raise and end the worker."""
    try:
        return str(job.func_name)
    except DeserializationError:
        return None
