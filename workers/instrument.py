"""The instrumented boundary points of one attempt.

At an armed worker-side boundary the work-horse reports its pid and blocks
until the controller kills it. An armed provider-side boundary travels with
the request as a header, and the provider holds the request there. Attempts
of watched ops (ops with any armed fault) also report what happened to them,
and a retry waits until the controller has finished with earlier faults.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import Any

from redis import Redis

from labcore import plan
from labcore.answers import CallFailure
from labcore.boundaries import Boundary
from labcore.bus import HOLD_TIMEOUT, Bus
from labcore.events import Event, EventKind, Hit
from labcore.faults import RULES
from labcore.ids import HitId
from labcore.intent import OpIntent
from labcore.keys import CellKeys, RunKeys
from labcore.plan import Armed
from labcore.prctl import die_with_parent
from workers.batch import batch

_DETAIL = 200  # characters of a failed call's error kept in its report
# The name of the worker a process runs for (set by the zygote as it forks the worker).
WORKER_ENV = "TESTBED_WORKER"


@dataclass(frozen=True, slots=True)
class Job:
    """What an attempt needs of the queue's job that runs it: the run's Redis, and when
    the job was enqueued (its attempts' latency is measured from there)."""

    redis: Redis
    enqueued_at: float | None


def rq_job() -> Job:
    """The RQ job at hand in this work-horse."""
    from rq import get_current_job

    job = get_current_job()
    assert job is not None
    return Job(job.connection, job.enqueued_at.timestamp() if job.enqueued_at else None)


def report_death(redis: Redis, prefix: str, cell: str, op: str, pid: int, signum: int) -> None:
    """Tell the controller that the process running the op's attempt died of a signal (its
    worker saw it): an anomaly unless the controller killed it."""
    _report(redis, prefix, cell, op, pid, EventKind.HORSE_DIED, {"signal": signum})


def report_overtaken(redis: Redis, prefix: str, cell: str, op: str, detail: str) -> None:
    """Tell the controller that the engine timed out the op's latest attempt (`detail`, in the
    engine's words): an anomaly unless the controller killed that attempt."""
    _report(redis, prefix, cell, op, os.getpid(), EventKind.OVERTAKEN, {"detail": detail})


def _report(redis: Redis, prefix: str, cell: str, op: str, pid: int, kind: EventKind, data: dict[str, Any]) -> None:
    """An event about the op's latest attempt (its number as counted so far). A Redis gone by now
    is a run ending (stopped, or failed and said so): nobody to tell."""
    from redis.exceptions import RedisError

    keys = RunKeys(prefix)
    with contextlib.suppress(RedisError):
        raw = redis.hget(keys.cell(cell).attempts, op)
        attempt = int(raw) if raw is not None else 0
        worker = os.environ.get(WORKER_ENV, "")
        Bus(redis, keys).emit(Event(kind, cell, op, attempt, pid, worker, time.time(), data))


class ControllerAbsent(RuntimeError):
    """An armed boundary was reached and nobody acted on it."""


class Probe:
    def __init__(self, bus: Bus, cell: str, op: str, seq: int, attempt: int, armed: tuple[Armed, ...]) -> None:
        self._bus = bus
        self._cell = cell
        self._op = op
        self._attempt = attempt
        self._pid = os.getpid()
        self._worker = os.environ.get(WORKER_ENV, "")
        self.watched = bool(armed)
        self._hits = {
            a.boundary: Hit(
                str(HitId(cell, seq, a.attempt, a.boundary)),
                cell,
                op,
                a.attempt,
                a.boundary,
                a.fault,
                self._pid,
                self._worker,
                bus=bus.keys.prefix,
            )
            for a in armed
            if a.attempt == attempt
        }
        self._earlier = [str(HitId(cell, seq, a.attempt, a.boundary)) for a in armed if a.attempt < attempt]
        self._contacted = False

    def begin(self, enqueued_at: float | None) -> bool:
        """True if the attempt waited for the controller to settle earlier faults."""
        if not self.watched:
            return False
        if self._earlier and not self._bus.await_settled(self._earlier):
            raise ControllerAbsent(f"faults before attempt {self._attempt} of {self._op} were never settled")
        self.event(EventKind.ATTEMPT_START, enqueuedAt=enqueued_at)
        return bool(self._earlier)

    def stops_at(self, boundary: Boundary) -> bool:
        """This attempt is held at this worker-side boundary (elsewhere `at` does nothing)."""
        return boundary in self._hits and not boundary.on_provider

    def at(self, boundary: Boundary) -> None:
        hit = self._hits.get(boundary)
        if hit is None or boundary.on_provider:
            return
        self._bus.report(hit)
        self._bus.await_release(hit.hit)
        raise ControllerAbsent(f"{hit.hit} was reported but the work-horse was not killed")

    def provider_hit(self) -> str | None:
        hit = self._provider_hit()
        return None if hit is None else hit.header()

    def call_timeout(self, client_timeout: float) -> float:
        """How long a call to the provider may wait. Only where the fault under
        test is the client's own timeout does `client_timeout` apply. Every other
        call waits as long as a hold may last, however busy the machine: a call
        that timed out on its own would be a fault nobody planned (and a request
        held for a kill would outlive its work-horse's kill order)."""
        hit = self._provider_hit()
        if hit is not None and RULES[hit.fault].client_gives_up and not RULES[hit.fault].kills:
            return client_timeout
        return HOLD_TIMEOUT

    def died_unprocessed(self) -> bool:
        """Asked when a call in a cell that crashes the provider went unanswered. The
        provider drains before it dies, so the call was never processed, unless it is
        this attempt's armed call and reached its boundary (then it is the fault)."""
        hit = self._provider_hit()
        if hit is None or not RULES[hit.fault].kills_provider:
            return True
        return not self._bus.was_reported(hit.hit)

    def _provider_hit(self) -> Hit | None:
        return next((hit for boundary, hit in self._hits.items() if boundary.on_provider), None)

    def contact(self, answer: str) -> None:
        """The first answer the provider gave this attempt."""
        if not self._contacted:
            self._contacted = True
            self.event(EventKind.CONTACT, answer=answer)

    def event(self, kind: EventKind, **data: Any) -> None:
        if self.watched:
            self._emit(kind, data)

    def call_failed(self, failure: CallFailure, detail: str) -> None:
        """A call of this attempt to the provider failed: reported whether the op is watched
        or not, since the plan may have made it or not (the controller judges which)."""
        self._emit(EventKind.CALL_FAILED, {"failure": failure.value, "detail": detail[:_DETAIL]})

    def _emit(self, kind: EventKind, data: dict[str, Any]) -> None:
        self._bus.emit(Event(kind, self._cell, self._op, self._attempt, self._pid, self._worker, time.time(), data))


@dataclass(frozen=True, slots=True)
class Opened:
    """An attempt as a job begins it: its number, its op's intent (and local marker), its probe."""

    redis: Redis
    cell: CellKeys
    number: int
    intent: OpIntent
    marker: bytes | None
    probe: Probe


def open_attempt(job: Job, prefix: str, cell_id: str, op: str, seq: int, with_marker: bool) -> Opened:
    """Count the attempt and read what it needs in one round trip, then wait, if
    the plan says so, until the controller is done with the op's earlier faults."""
    die_with_parent(os.getppid())  # a work-horse whose worker was killed has no one to report to
    redis = job.redis
    keys = RunKeys(prefix)
    cell = keys.cell(cell_id)
    intent = ("HGET", cell.ops, op)
    mark = [("HGET", cell.markers, op)] if with_marker else []
    count = ("HINCRBY", cell.attempts, op, 1)
    number, raw_plan, raw_intent, *marker = batch(redis, count, ("HGET", cell.plan, op), intent, *mark)
    probe = Probe(Bus(redis, keys), cell_id, op, seq, number, plan.decode(raw_plan))
    if probe.begin(job.enqueued_at):
        # Settling may have changed the world (the scenario's new payload): what was read
        # before it is stale. Only attempts after a fault pay this round trip.
        raw_intent, *marker = batch(redis, intent, *mark)
    return Opened(redis, cell, number, OpIntent.decode(raw_intent), marker[0] if marker else None, probe)
