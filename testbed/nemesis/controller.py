"""The chaos controller (the nemesis).

It consumes the bus: for each hit it checks the plan, then acts as the fault's
rule says: SIGKILL the work-horse (and, for kill-worker, its worker) by pid,
confirm with psutil that they are gone, record the kill, and only then tell a
holding provider what to do with the request. It applies the scenario's
change to the world, and then *settles* the fault, which lets the op's next
attempt begin. It never kills a process that is not a work-horse or worker of
this run.
"""

from __future__ import annotations

import json
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import psutil
from redis import Redis

from labcore.boundaries import Boundary
from labcore.bus import Bus, Event, Hit
from labcore.faults import RULES, Fault, Release, Settle, Trigger
from labcore.keys import CellKeys
from labcore.plan import Armed, Plan
from labcore.procs import gone
from testbed.errors import RunFailure
from testbed.experiment.scenarios import Nemesis, Scenario
from testbed.experiment.workload import replanned
from testbed.infra.provider_process import ProviderAdmin
from testbed.infra.supervisor import Supervisor

_CONFIRM_TIMEOUT = 5.0

# (cell id, op sequence number, op id, job id suffix, at the front of the queue)
Enqueue = Callable[[str, int, str, str, bool], None]


class Recovery(StrEnum):
    """How a job abandoned by a killed worker comes back."""

    RQ = "rq"  # RQ's own maintenance, after the started-registry entry expires
    FORCED = "forced"  # the controller expires the dead worker's entries and runs RQ's cleanup


@dataclass(slots=True)
class CellObservations:
    """What the controller saw during one cell. Without `keep_history` it holds
    counts and latencies only, so a long run's memory does not grow with it."""

    keep_history: bool = True
    faults: int = 0
    kill_count: int = 0
    replay_latencies_ms: array[float] = field(default_factory=lambda: array("d"))
    history: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    anomalies: list[str] = field(default_factory=list)

    def note(self, op: str, kind: str, at: float, **data: Any) -> None:
        if self.keep_history:
            self.history.setdefault(op, []).append({"event": kind, "at": at, **data})


@dataclass(slots=True)
class _Cell:
    id: str
    ledger: str
    plan: Plan
    scenario: Scenario
    keys: CellKeys
    seen: CellObservations = field(default_factory=CellObservations)
    timeouts: dict[tuple[str, int], Hit] = field(default_factory=dict)  # waiting for the client to give up
    late: dict[str, Hit] = field(default_factory=dict)  # waiting for the next attempt's first answer
    # op -> (killed at, attempt): killed, its next attempt not started yet
    unreplayed: dict[str, tuple[float, int]] = field(default_factory=dict)


class Controller:
    def __init__(
        self,
        bus: Bus,
        redis: Redis,
        supervisor: Supervisor,
        admin: ProviderAdmin,
        queue: str,
        enqueue: Enqueue,
        recovery: Recovery = Recovery.FORCED,
        history: bool = True,
    ) -> None:
        self._bus = bus
        self._redis = redis
        self._supervisor = supervisor
        self._admin = admin
        self._queue = queue
        self._enqueue = enqueue
        self._recovery = recovery
        self._history = history
        self._cells: dict[str, _Cell] = {}

    def begin(self, cell_id: str, ledger: str, plan: Plan, scenario: Scenario, keys: CellKeys) -> None:
        self._cells[cell_id] = _Cell(cell_id, ledger, plan, scenario, keys, CellObservations(self._history))

    def kills(self, cell_id: str) -> int:
        return self._cells[cell_id].seen.kill_count

    def handle(self, message: Hit | Event) -> None:
        if isinstance(message, Hit):
            self._on_hit(message)
        else:
            self._on_event(message)

    def finish(self, cell_id: str) -> CellObservations:
        """The cell's jobs are all over: let go of whatever is still held."""
        cell = self._cells.pop(cell_id)
        for hit in [*cell.timeouts.values(), *cell.late.values()]:
            self._release(hit)
        return cell.seen

    # -- hits ----------------------------------------------------------------

    def _on_hit(self, hit: Hit) -> None:
        cell = self._cell_of(hit.cell)
        armed = self._armed(cell, hit)
        if armed is None:
            cell.seen.anomalies.append(f"unplanned hit {hit.hit} from pid {hit.pid}; released untouched")
            if hit.side == "provider":
                self._release(hit)
            return
        rule = RULES[armed.fault]
        cell.seen.faults += 1
        cell.seen.note(hit.op, "hit", hit.ts, attempt=hit.attempt, boundary=hit.boundary, fault=hit.fault, pid=hit.pid)
        if rule.kills_horse:
            self._kill(cell, hit, whole_worker=rule.kills_worker)
        if rule.settle is Settle.AT_HIT:
            self._settle(cell, hit)
        if rule.trigger is Trigger.KILLED:
            self._let_go(cell, hit)
        elif rule.trigger is Trigger.CLIENT_TIMED_OUT:
            cell.timeouts[(hit.op, hit.attempt)] = hit
        else:
            cell.late[hit.op] = hit

    def _armed(self, cell: _Cell, hit: Hit) -> Armed | None:
        seq = _seq(hit)
        if seq is None:
            return None
        for armed in cell.plan.armed(seq):
            if armed.attempt == hit.attempt and armed.boundary == hit.boundary and armed.fault == hit.fault:
                return armed
        return None

    def _kill(self, cell: _Cell, hit: Hit, whole_worker: bool) -> None:
        owner = self._supervisor.owner_of(hit.pid)
        if owner is None:
            raise RunFailure(f"refusing to kill pid {hit.pid}: not a work-horse of this run's workers")
        victims = [owner.pid, hit.pid] if whole_worker else [hit.pid]
        killed_at = time.time()
        for pid in victims:  # the worker first, so it cannot requeue the job itself
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                cell.seen.anomalies.append(f"pid {pid} was already gone at {hit.hit}")
        deadline = time.monotonic() + _CONFIRM_TIMEOUT
        while not all(gone(pid) for pid in victims):
            if time.monotonic() > deadline:
                raise RunFailure(f"pid(s) {victims} still alive {_CONFIRM_TIMEOUT:.0f} s after SIGKILL")
            time.sleep(0.001)
        confirmed_ms = (time.time() - killed_at) * 1000
        cell.seen.note(
            hit.op,
            "killed",
            killed_at,
            attempt=hit.attempt,
            boundary=hit.boundary,
            worker=owner.name,
            pids=victims,
            confirmedMs=round(confirmed_ms, 2),
        )
        cell.seen.kill_count += 1
        cell.unreplayed[hit.op] = (killed_at, hit.attempt)
        if whole_worker:
            owner.killed = True
            fresh = self._supervisor.replace(owner)
            cell.seen.note(hit.op, "worker-restarted", time.time(), dead=owner.name, fresh=fresh.name)
            if self._recovery is Recovery.FORCED:
                requeued = force_recovery(self._redis, self._queue, owner.name)
                cell.seen.note(hit.op, "recovered", time.time(), mode="forced", jobs=requeued)

    def _let_go(self, cell: _Cell, hit: Hit) -> None:
        """The fault's trigger came: release a held request, then settle if the rule says so."""
        if hit.side == "provider":
            self._release(hit)
        if RULES[Fault(hit.fault)].settle is Settle.AT_RELEASE:
            self._settle(cell, hit)

    def _release(self, hit: Hit) -> None:
        """Tell the holding provider what to do, and wait until it has done it."""
        fault = Fault(hit.fault)
        action = RULES[fault].release.get(Boundary(hit.boundary), Release.DROP)
        self._bus.release(hit.hit, action)
        if not self._bus.await_acted(hit.hit):
            raise RunFailure(f"provider did not carry out {action} for {hit.hit}")

    def _settle(self, cell: _Cell, hit: Hit) -> None:
        self._nemesis(cell, hit)
        self._bus.settle(hit.hit)

    def _nemesis(self, cell: _Cell, hit: Hit) -> None:
        nemesis, op, seq = cell.scenario.nemesis, hit.op, _seq(hit)
        assert seq is not None
        if nemesis is Nemesis.CHANGE_PAYLOAD:
            intent = json.loads(self._redis.hget(cell.keys.ops, op))
            intent["payload"] = replanned(intent["payload"])
            self._redis.hset(cell.keys.ops, op, json.dumps(intent))
        elif nemesis is Nemesis.EXPIRE_KEYS:
            self._admin.advance_clock(cell.ledger, cell.scenario.contract.retention_seconds + 1)
        elif nemesis is Nemesis.WITHDRAW:
            self._admin.withdraw(cell.ledger, op)
        elif nemesis is Nemesis.DUPLICATE:
            # At the front: it races the held request now, not after the whole backlog.
            self._enqueue(cell.id, seq, op, "d", True)
        elif nemesis is Nemesis.REMINT:
            # Same logical action and payload, a new identity: nothing links it to the first.
            fresh = f"{op}:r1"
            with self._redis.pipeline(transaction=False) as pipe:
                pipe.hset(cell.keys.ops, fresh, self._redis.hget(cell.keys.ops, op))
                pipe.hset(cell.keys.remints, op, json.dumps([fresh]))
                pipe.execute()
            self._enqueue(cell.id, seq, fresh, "r", False)
        if nemesis is not None:
            cell.seen.note(op, "nemesis", time.time(), action=nemesis.value)

    # -- events --------------------------------------------------------------

    def _on_event(self, event: Event) -> None:
        cell = self._cells.get(event.cell)
        if cell is None:  # an event of a cell already judged carries nothing new
            return
        data = {"attempt": event.attempt, "pid": event.pid, "worker": event.worker, **event.data}
        cell.seen.note(event.op, event.kind, event.ts, **data)
        if event.kind == "attempt-start":
            killed = cell.unreplayed.get(event.op)
            if killed is not None and killed[1] < event.attempt:
                del cell.unreplayed[event.op]
                cell.seen.replay_latencies_ms.append((event.ts - killed[0]) * 1000)
        elif event.kind == "call-timeout":
            hit = cell.timeouts.pop((event.op, event.attempt), None)
            if hit is not None:
                self._let_go(cell, hit)
        elif event.kind in ("contact", "attempt-end"):
            late = cell.late.get(event.op)
            if late is not None and event.attempt > late.attempt:
                del cell.late[event.op]
                self._let_go(cell, late)

    def _cell_of(self, cell_id: str) -> _Cell:
        try:
            return self._cells[cell_id]
        except KeyError:
            raise RunFailure(f"a fault was hit in cell {cell_id!r}, which is not running") from None


def _seq(hit: Hit) -> int | None:
    """The op's sequence number, from the hit id (cell:seq:attempt:boundary)."""
    parts = hit.hit.split(":")
    return int(parts[1]) if len(parts) == 4 and parts[1].isdigit() else None


def force_recovery(redis: Redis, queue_name: str, dead_worker: str) -> list[str]:
    """Requeue the jobs a dead worker left `started`, through RQ's own cleanup.

    Only that worker's entries are expired (scored in the past), and cleanup
    is asked to act on entries up to that score only: a live worker's entry is
    never touched, which would run its job twice at once.
    """
    from rq import Queue
    from rq.executions import Execution
    from rq.registry import StartedJobRegistry

    registry = StartedJobRegistry(queue=Queue(queue_name, connection=redis))
    mine = []
    for job_id, execution_id in registry.get_job_and_execution_ids(cleanup=False):
        try:
            execution = Execution.fetch(execution_id, job_id, redis)
        except ValueError:
            continue
        if execution.worker_name == dead_worker:
            mine.append(execution.composite_key)
    if mine:
        redis.zadd(registry.key, dict.fromkeys(mine, 1), xx=True)
        registry.cleanup(timestamp=1)
    return [key.rsplit(":", 1)[0] for key in mine]
