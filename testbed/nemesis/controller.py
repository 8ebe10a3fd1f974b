"""The chaos controller (the nemesis's dispatcher).

It consumes the bus: for each hit it checks the plan, then acts as the fault's
rule says (`labcore.faults.RULES`): kill by pid (`kills`), cut a worker's
host off from the provider and heal it (through its host), tell a holding
provider what to do with the request once the rule's trigger came, change the
world as the scenario says (`world`), and then *settle* the fault, which lets
the op's next attempt begin. What it sees and does goes to the cell's
observations (`testbed.judge.observer`); what it sees that the plan did not
make (a hit, a failed call, a work-horse's death: `unplanned`) is an anomaly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from labcore.answers import CallFailure
from labcore.boundaries import Boundary
from labcore.bus import HOLD_TIMEOUT, Bus
from labcore.events import Event, EventKind, Hit, Side
from labcore.faults import RULES, Fault, Release, Settle, Trigger
from labcore.ids import HitId, JobId, seq_of
from labcore.keys import CellKeys
from labcore.plan import Armed, Plan
from testbed.errors import RunFailure
from testbed.experiment.scenarios import Scenario
from testbed.judge.observer import CellObservations, Sink
from testbed.nemesis.changes import ScenarioChanges
from testbed.nemesis.kills import HorseGone, Killing
from testbed.nemesis.recovery import Recover, Recovery
from testbed.nemesis.unplanned import ENDINGS, stranded_kill, unplanned_call, unplanned_death, unplanned_timeout

# How often a wait on the provider checks that the stack's parts are alive.
_WATCH_EVERY = 0.5
# A held request let go as if nothing were armed.
_THROUGH = {Boundary.BEFORE_EFFECT: Release.APPLY, Boundary.AFTER_EFFECT: Release.RESPOND}


@dataclass(slots=True)
class _Cell:
    id: str
    ledger: str
    plan: Plan
    scenario: Scenario
    keys: CellKeys
    seen: CellObservations
    faults: frozenset[Fault] = frozenset()
    killed: set[tuple[str, int]] = field(default_factory=set)  # (op, pid) of every process it killed
    killed_attempts: set[tuple[str, int]] = field(default_factory=set)  # (op, attempt) of every attempt it killed
    timeouts: dict[tuple[str, int], Hit] = field(default_factory=dict)  # waiting for the client to give up
    # Calls whose client gave up before the provider reached (and reported) their boundary:
    # on a busy machine the armed request can arrive there after the client timeout.
    gave_up: set[tuple[str, int]] = field(default_factory=set)
    struck: set[str] = field(default_factory=set)  # hit ids: an armed hit fires once
    late: dict[str, Hit] = field(default_factory=dict)  # waiting for the next attempt's first answer
    # How each attempt armed with a kill of its work-horse ended (ENDINGS), should it end before the kill.
    endings: dict[tuple[str, int], list[Event]] = field(default_factory=dict)


class WorkerLoss(Protocol):
    """What the queue does around a worker killed whole with a job in hand."""

    def before(self, cell_id: str, job_id: str) -> None:
        """Before the kill: what the cell's delivery setting says has happened by now has."""

    def after(self, job_id: str) -> None:
        """After it: a job the queue will never run again is counted as given up on."""


class Controller:
    def __init__(
        self,
        bus: Bus,
        killer: Killing[Any],
        world: ScenarioChanges,
        recover: Recover | None = None,
        history: bool = True,
        watch: Callable[[], None] = lambda: None,
        lost: WorkerLoss | None = None,
    ) -> None:
        """`recover`: requeue a dead worker's jobs at once (forced recovery); None leaves it to RQ.
        `watch` raises if a part of the stack has died; long waits call it. `lost`: told of the job
        whose worker is killed whole, where only the broker knows whether it comes back (Celery)."""
        self._watch = watch
        self._lost = lost
        self._bus = bus
        self._killer = killer
        self._world = world
        self._recover = recover
        self._history = history
        self._cells: dict[str, _Cell] = {}

    def begin(
        self,
        cell_id: str,
        ledger: str,
        plan: Plan,
        scenario: Scenario,
        keys: CellKeys,
        sink: Sink | None = None,
        faults: Iterable[Fault] = (),
    ) -> None:
        """`faults`: the cell's, which say what else its planned faults may fail."""
        seen = CellObservations(self._history, sink)
        self._cells[cell_id] = _Cell(cell_id, ledger, plan, scenario, keys, seen, frozenset(faults))

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
            self._abandon(cell, hit)
        return cell.seen

    # -- hits ----------------------------------------------------------------

    def _on_hit(self, hit: Hit) -> None:
        cell = self._cell_of(hit.cell)
        if _armed(cell.plan, hit) is None:
            cell.seen.anomaly(f"unplanned hit {hit.hit} from pid {hit.pid}; released untouched")
            if hit.side is Side.PROVIDER:
                self._release(hit)
            return
        if hit.hit in cell.struck:
            # An armed hit fires once (provider.scopes): a provider restarted after it crashed
            # there has forgotten it fired, and a job that sends again within the attempt
            # (a user's job, after the connection dropped) goes through.
            self._release(hit, _THROUGH[hit.boundary])
            return
        cell.struck.add(hit.hit)
        rule = RULES[hit.fault]
        cell.seen.note(
            hit.op, EventKind.HIT, hit.ts, attempt=hit.attempt, boundary=hit.boundary, fault=hit.fault, pid=hit.pid
        )
        if rule.kills_horse:
            self._kill(cell, hit, whole_worker=rule.kills_worker)
        if rule.kills_provider:
            self._crash(cell, hit)
        if rule.cuts_network:
            self._cut(cell, hit)
        if rule.settle is Settle.AT_HIT:
            self._settle(cell, hit)
        if rule.trigger is Trigger.KILLED:
            self._let_go(cell, hit)
        elif rule.trigger is Trigger.CLIENT_TIMED_OUT:
            if (hit.op, hit.attempt) in cell.gave_up:
                cell.gave_up.discard((hit.op, hit.attempt))
                self._let_go(cell, hit)
            else:
                cell.timeouts[(hit.op, hit.attempt)] = hit
        else:
            cell.late[hit.op] = hit

    def _kill(self, cell: _Cell, hit: Hit, whole_worker: bool) -> None:
        seq = HitId.parse(hit.hit)
        assert seq is not None
        job = str(JobId(hit.cell, seq.seq))
        if whole_worker and self._lost is not None:
            self._lost.before(cell.id, job)
        try:
            kill = self._killer.kill(hit.pid, whole_worker, hit.worker)
        except HorseGone:
            self._stranded(cell, hit)
            return
        finally:
            cell.endings.pop((hit.op, hit.attempt), None)
        cell.killed.update((hit.op, pid) for pid in [*kill.victims, *kill.already_gone])
        cell.killed_attempts.add((hit.op, hit.attempt))
        for pid in kill.already_gone:
            cell.seen.anomaly(f"pid {pid} was already gone at {hit.hit}")
        cell.seen.note(
            hit.op,
            EventKind.KILLED,
            kill.at,
            attempt=hit.attempt,
            boundary=hit.boundary,
            worker=kill.owner.name,
            pids=kill.victims,
            confirmedMs=round(kill.confirmed_ms, 2),
        )
        if whole_worker:
            fresh = self._killer.replace(kill.owner)
            cell.seen.note(hit.op, EventKind.WORKER_RESTARTED, time.time(), dead=kill.owner.name, fresh=fresh.name)
            if self._recover is not None:
                requeued = self._recover(kill.owner.name)
                cell.seen.note(hit.op, EventKind.RECOVERED, time.time(), mode=Recovery.FORCED.value, jobs=requeued)
            if self._lost is not None:
                self._lost.after(job)

    def _stranded(self, cell: _Cell, hit: Hit) -> None:
        """The attempt ended before its kill: an anomaly saying how, from its reports heard so
        far or still on the bus (a work-horse reaped has made all of them); the hit is then let
        go and settled as after a kill, so that the op goes on and its cell is judged withheld."""
        ahead = [m for m in self._bus.pending() if isinstance(m, Event) and m.cell == hit.cell]
        reports = [
            e
            for e in [*cell.endings.get((hit.op, hit.attempt), []), *ahead]
            if (e.op, e.attempt) == (hit.op, hit.attempt) and e.kind in ENDINGS
        ]
        cell.seen.anomaly(stranded_kill(hit.op, hit.attempt, hit.boundary, hit.pid, reports))

    def _crash(self, cell: _Cell, hit: Hit) -> None:
        """The provider dies holding the request. Several armed requests may be
        held by one provider when it dies: they all died in that one crash."""
        if hit.holder != self._killer.provider_pid:
            cell.seen.note(
                hit.op,
                EventKind.KILLED,
                time.time(),
                attempt=hit.attempt,
                boundary=hit.boundary,
                provider=hit.holder,
                shared=True,
            )
            return
        crash = self._killer.crash_provider()
        cell.seen.note(
            hit.op,
            EventKind.KILLED,
            crash.at,
            attempt=hit.attempt,
            boundary=hit.boundary,
            provider=crash.pid,
            confirmedMs=round(crash.confirmed_ms, 2),
            restartedMs=round(crash.restarted_ms, 2),
        )

    def _cut(self, cell: _Cell, hit: Hit) -> None:
        """Cut the hit worker's host off from the provider, then let the held request
        go at once: whatever the provider answers is sent into the cut."""
        cut = self._killer.cut(hit.hit, hit.worker)
        self._release(hit)
        cell.seen.note(
            hit.op,
            EventKind.PARTITIONED,
            cut.at,
            attempt=hit.attempt,
            boundary=hit.boundary,
            worker=hit.worker,
            host=cut.host,
            confirmedMs=round(cut.confirmed_ms, 2),
            letGo=time.time(),  # the provider had done with the request (and answered, after the effect)
        )

    def _heal(self, cell: _Cell, hit: Hit) -> None:
        healed = self._killer.heal(hit.hit)
        cell.seen.note(
            hit.op,
            EventKind.HEALED,
            healed.at,
            attempt=hit.attempt,
            host=healed.host,
            confirmedMs=round(healed.confirmed_ms, 2),
        )

    def _let_go(self, cell: _Cell, hit: Hit) -> None:
        """The fault's trigger came: release a held request (or heal the cut it was
        released into), then settle if the rule says so."""
        self._abandon(cell, hit)
        if RULES[hit.fault].settle is Settle.AT_RELEASE:
            self._settle(cell, hit)

    def _abandon(self, cell: _Cell, hit: Hit) -> None:
        rule = RULES[hit.fault]
        if rule.cuts_network:
            self._heal(cell, hit)
        elif hit.side is Side.PROVIDER and not rule.kills_provider:
            self._release(hit)

    def _release(self, hit: Hit, action: Release | None = None) -> None:
        """Tell the holding provider what to do (by default, what the fault's rule says),
        and wait until it has done it."""
        action = action or RULES[hit.fault].release.get(hit.boundary, Release.DROP)
        self._bus.release(hit.hit, action)
        deadline = time.monotonic() + HOLD_TIMEOUT
        while not self._bus.await_acted(hit.hit, timeout=_WATCH_EVERY):
            self._watch()
            if time.monotonic() > deadline:
                raise RunFailure(f"provider did not carry out {action} for {hit.hit}")

    def _settle(self, cell: _Cell, hit: Hit) -> None:
        if cell.scenario.nemesis is not None:
            seq = HitId.parse(hit.hit)
            assert seq is not None
            self._world.change(cell.scenario, cell.id, cell.keys, cell.ledger, hit.op, seq.seq)
            cell.seen.note(hit.op, EventKind.NEMESIS, time.time(), action=cell.scenario.nemesis.value)
        self._bus.settle(hit.hit)

    # -- events --------------------------------------------------------------

    def _on_event(self, event: Event) -> None:
        cell = self._cells.get(event.cell)
        if cell is None:  # an event of a cell already judged carries nothing new
            return
        if event.kind in ENDINGS and _kills_horse(cell.plan, event):
            cell.endings.setdefault((event.op, event.attempt), []).append(event)
        if event.kind in (EventKind.CALL_FAILED, EventKind.HORSE_DIED, EventKind.OVERTAKEN):
            self._unplanned(cell, event)
            return
        cell.seen.event(event)
        if event.kind is EventKind.CALL_TIMEOUT:
            hit = cell.timeouts.pop((event.op, event.attempt), None)
            if hit is not None:
                self._let_go(cell, hit)
            else:
                cell.gave_up.add((event.op, event.attempt))
        elif event.kind in (EventKind.CONTACT, EventKind.ATTEMPT_END):
            late = cell.late.get(event.op)
            if late is not None and event.attempt > late.attempt:
                del cell.late[event.op]
                self._let_go(cell, late)

    def _unplanned(self, cell: _Cell, event: Event) -> None:
        """A failed call, a dead work-horse or an engine's own timeout: an anomaly unless the plan made it."""
        if event.kind is EventKind.HORSE_DIED:
            text = unplanned_death(event.op, event.attempt, event.pid, int(event.data["signal"]), cell.killed)
        elif event.kind is EventKind.OVERTAKEN:
            text = unplanned_timeout(event.op, event.attempt, str(event.data["detail"]), cell.killed_attempts)
        else:
            armed = cell.plan.armed(seq_of(event.op))
            failure = CallFailure(event.data["failure"])
            text = unplanned_call(event.op, event.attempt, armed, cell.faults, failure, str(event.data["detail"]))
        if text is not None:
            cell.seen.anomaly(text)

    def _cell_of(self, cell_id: str) -> _Cell:
        try:
            return self._cells[cell_id]
        except KeyError:
            raise RunFailure(f"a fault was hit in cell {cell_id!r}, which is not running") from None


def _kills_horse(plan: Plan, event: Event) -> bool:
    """Whether the plan arms a kill of the event's attempt's work-horse."""
    armed = plan.armed(seq_of(event.op))
    return any(a.attempt == event.attempt and RULES[a.fault].kills_horse for a in armed)


def _armed(plan: Plan, hit: Hit) -> Armed | None:
    parsed = HitId.parse(hit.hit)
    if parsed is None:
        return None
    for armed in plan.armed(parsed.seq):
        if armed.attempt == hit.attempt and armed.boundary == hit.boundary and armed.fault == hit.fault:
            return armed
    return None
