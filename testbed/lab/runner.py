"""Running cells on a started stack: the I/O edge that ties the parts together.

For each cell: configure the provider's contract, store every op's intent
and plan and enqueue its job (the first few ahead of the rest), feed the bus
to the controller until every job is over, then have the checker judge the
cell from the provider's log and compare the result with the model's
prediction.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import cast

import httpx
import redis as redis_lib

from labcore import plan as plans
from labcore.bus import Wake
from labcore.delivery import acks_early
from labcore.events import Noted
from labcore.faults import RULES
from labcore.ids import JobId, JobKind, op_id, seq_of
from labcore.keys import QUEUE, CellKeys
from testbed.engines.base import JobRequest
from testbed.errors import RunFailure
from testbed.experiment.matrix import Cell
from testbed.experiment.scenarios import SCENARIOS
from testbed.experiment.workload import make_op
from testbed.infra.liveness import DEATH_SHOWS_WITHIN, shows_dead
from testbed.infra.stack import RunStack
from testbed.judge.checker import OpFacts
from testbed.judge.evidence import Evidence, EvidenceRecords, counted_at
from testbed.judge.facts import ProviderRecords, op_facts, record_of
from testbed.judge.scorecard import Row
from testbed.judge.verdict import Judgement, judge
from testbed.lab import userjobs
from testbed.lab.destination import DestinationGone
from testbed.lab.options import RunOptions
from testbed.nemesis.changes import ScenarioChanges
from testbed.nemesis.controller import Controller
from testbed.nemesis.host_kills import killer_for
from testbed.nemesis.recovery import Recovery, force_recovery
from testbed.store.evidence import evidence_line
from testbed.store.history import cell_line, facts_line, noted_line, records_line
from testbed.store.runs import RunDir
from testbed.store.series import Series
from workers.handler import JobSpec

POLL_INTERVAL = 0.02
INFLIGHT_WAIT = 10.0
CHUNK = 1000
HEAD = 50  # a cell's first jobs, enqueued ahead of the rest of its first chunk
# A cell that has not moved for this long is looked at for jobs its queue lost.
LOOK_FOR_LOST = 2.0
CHECK_EVERY = 0.05  # how often the loop looks at the cells' progress and the stack's parts
# How a part's death first shows in the run's own calls to Redis and the provider.
FAILED_CALL = (redis_lib.RedisError, httpx.HTTPError, OSError)


@dataclass(frozen=True, slots=True)
class Progress:
    """A running cell, as a live display sees it."""

    cell: Cell
    over: int  # jobs returned or given up
    jobs: int
    kills: int
    elapsed: float


def check_rq_prefix(prefix: str) -> None:
    """RQ reads its key prefix once, at import: the CLI sets it first."""
    import rq.defaults

    if prefix != rq.defaults.RQ_KEY_PREFIX:
        raise RunFailure(f"rq was imported with key prefix {rq.defaults.RQ_KEY_PREFIX!r}, not {prefix!r}")


def name_a_dead_part(check: Callable[[], None], within: float = DEATH_SHOWS_WITHIN) -> None:
    """Raises `check`'s PartDied if a part is dead or shows as dead within `within` seconds:
    the call that failed on a part's death can come a moment before the death shows."""
    # What the check itself needs may be gone too: then the failed call is all there is to say.
    with contextlib.suppress(*FAILED_CALL):
        shows_dead(check, within)


@dataclass(slots=True)
class _Running:
    index: int
    id: str
    cell: Cell
    keys: CellKeys
    ledger: str
    plan: plans.Plan
    function: str  # the engine's: a job function, a task name
    spec: dict[str, object]
    started: float
    ops: int  # the cell's: the run's --ops, or its schedule's
    enqueued: int = 0  # ops enqueued so far (with a window, a cell is fed as it drains)
    extra: int = 0  # jobs the planner added (duplicates, re-minted ops)
    over: int = 0
    moved: float = 0.0  # when `over` last changed (from the cell's start)
    missing: set[str] = field(default_factory=set)  # jobs nowhere in the queue at the last look
    series: Series | None = None  # load cells: progress over time


class CellRunner:
    """Runs cells on the stack, up to `parallel` at a time.

    Cells are independent (own ledger at the provider, own intents, markers
    and plan in Redis), so overlapping them changes no outcome; it keeps both
    cores busy while one cell waits on its last retries or on held requests.
    """

    def __init__(
        self,
        stack: RunStack,
        options: RunOptions,
        judged: Callable[[int, int, Row], None],
        tick: Callable[[list[Progress]], None] | None = None,
        run_dir: RunDir | None = None,
    ) -> None:
        """`judged(index, total, row)` hears of each cell as it is judged; `run_dir`
        keeps the history as the run goes."""
        self.stack = stack
        self.options = options
        self.judged = judged
        self.tick = tick
        self.run_dir = run_dir
        self.queue = stack.job_queue(options.retries)
        recover = functools.partial(force_recovery, stack.redis, QUEUE)
        self.controller = Controller(
            stack.bus,
            killer_for(stack),
            ScenarioChanges(stack.redis, stack.admin, self._enqueue_extra),
            recover if options.recovery is Recovery.FORCED and stack.options.engine.recovers_by_force else None,
            options.history,
            watch=stack.check,
            lost=self,
        )
        self._running: dict[str, _Running] = {}
        self.rows: dict[int, Row] = {}
        # Jobs the queue gave up on; their ids start with their cell's id. Read again when there are more.
        self._failed: set[str] = set()
        self._failed_count = 0
        # The provider's own failures before the run's first cell: only those after are this run's.
        self._provider_failures = stack.admin.failures()

    def before(self, cell_id: str, job_id: str) -> None:
        """A worker is about to be killed whole with this job (the controller's WorkerLoss)."""
        if acks_early(self._running[cell_id].cell.delivery):
            self.queue.acknowledged(job_id)

    def after(self, job_id: str) -> None:
        self.queue.worker_lost(job_id)

    def run(self, cells: list[Cell]) -> list[Row]:
        """Every cell's row, in order. A RunFailure leaves the rows of the cells
        already judged in `self.rows`."""
        try:
            self._run(cells)
        except FAILED_CALL as exc:
            # A part that died shows first as a failed call: name the part if one died.
            name_a_dead_part(self.stack.check)
            lost = f"the run lost {_part_of(exc)}: {type(exc).__name__}: {exc}"
            raise RunFailure(lost + _paused(self.stack)) from None
        return [self.rows[i] for i in sorted(self.rows)]

    def _run(self, cells: list[Cell]) -> None:
        s, o = self.stack, self.options
        waiting = list(enumerate(cells, 1))
        next_check = 0.0
        while waiting or self._running:
            while waiting and len(self._running) < o.parallel and self._may_start(waiting[0][1]):
                index, cell = waiting.pop(0)
                started = self._start(index, cell)
                self._running[started.id] = started
            # Woken by the bus or by a cell's last job (workers.markers), else at the next check
            # (a timeout of 0 would block for ever).
            drained = [r.keys.drained for r in self._running.values()]
            message = self.stack.bus.next(max(0.005, next_check - time.monotonic()), drained)
            if message is Wake.DRAINED:
                next_check = 0.0
            elif message is not None:
                self.controller.handle(message)
            if time.monotonic() < next_check:
                continue
            next_check = time.monotonic() + CHECK_EVERY
            self.stack.check()
            finished = self._finished()
            if finished:
                self._provider_held_up()
            for done in finished:
                del self._running[done.id]
                self.rows[done.index] = row = self._judge(done)
                self.judged(done.index, len(cells), row)
                if o.until is not None and o.until(done.index, row):
                    waiting.clear()
            self._feed()
            now = time.monotonic()
            for r in self._running.values():
                if r.series is not None and r.series.due(now - r.started):
                    r.series.sample(now - r.started, r.over, self.controller.kills(r.id), s.log.effect_count(r.ledger))
            if self.tick is not None:
                self.tick([self._progress(r, now) for r in self._running.values()])

    def _may_start(self, cell: Cell) -> bool:
        """A cell that crashes the provider, or cuts a worker host off from it, runs alone:
        its crashes and cuts must hit no other cell's requests (the cut is the whole host's).
        Cells together hold fewer ops than there are workers: a held op keeps its worker
        until its duplicate runs, and with every worker holding, no duplicate would."""
        cells = (cell, *(r.cell for r in self._running.values()))
        if not self._running:
            return True
        if any(RULES[f].alone for c in cells for f in c.faults):
            return False
        return sum(_held_ops(c) for c in cells) < self.stack.options.workers

    def _start(self, index: int, cell: Cell) -> _Running:
        s, o = self.stack, self.options
        cell_id = f"{o.cell_prefix}{index:03d}"
        scenario = SCENARIOS[cell.scenario]
        ledger = f"{s.run_id}.{cell_id}"
        builtin = JobSpec(
            prefix=s.keys.prefix,
            cell=cell_id,
            strategy=cell.strategy,
            ledger=ledger,
            provider=s.provider.job_url,
            read_path=scenario.read_path.value,
            client_timeout=scenario.client_timeout or o.client_timeout,
            max_waits=int(INFLIGHT_WAIT / POLL_INTERVAL),
            poll_interval=POLL_INTERVAL,
            provider_crashes=_crashes_provider(cell),
        )
        function, spec = self.stack.options.engine.job_function(cell), asdict(builtin)
        if cell.handler is not None:
            destination = None if o.reader is None else o.reader.destination
            spec = userjobs.job_spec(
                s.keys.prefix,
                cell_id,
                cell.handler,
                ledger,
                s.provider.url,
                o.paths,
                o.env,
                destination,
                s.provider.mail_relay,
            )
        ops = o.ops if cell.schedule is None else len(cell.schedule.ops)
        running = _Running(
            index, cell_id, cell, s.keys.cell(cell_id), ledger, o.plan(cell), function, spec, time.monotonic(), ops
        )
        running.moved = running.started
        if cell.spread:
            running.series = Series()
        s.admin.put_ledger(ledger, scenario.contract)
        if cell.handler is not None:
            s.admin.put_scope(ledger)
        if o.reader is not None:
            s.admin.put_destination(ledger, o.reader.destination)
        sink = None
        if self.run_dir is not None:
            self.run_dir.record(cell_line(cell_id, ledger, cell))
            sink = functools.partial(_record_event, self.run_dir, cell_id)
        self.controller.begin(cell_id, ledger, running.plan, scenario, running.keys, sink, cell.faults)
        self._fill(running, scenario.declines_faulted_ops)
        return running

    def _finished(self) -> list[_Running]:
        """Cells whose every job has returned or been given up by RQ."""
        s, o = self.stack, self.options
        cells = list(self._running.values())
        with s.redis.pipeline(transaction=False) as pipe:
            for r in cells:
                pipe.get(r.keys.ended)
            self.queue.count_failed(pipe)
            *ended, failed_count = pipe.execute()
        if failed_count != self._failed_count:
            self._failed = self.queue.failed()
            self._failed_count = failed_count
        done = []
        now = time.monotonic()
        for r, count in zip(cells, ended, strict=True):
            over = int(count or 0) + sum(JobId.of_cell(f, r.id) for f in self._failed)
            if over != r.over:
                r.over, r.moved = over, now
            if r.over >= self._total(r):
                done.append(r)
            elif now - r.moved > LOOK_FOR_LOST and self.queue.loses_jobs:
                self._look_for_lost(r)
            if r not in done and now - r.started > o.cell_timeout:
                self._provider_held_up()  # its failure may be why the cell did not finish
                late = f"{r.cell.label} did not finish within {o.cell_timeout:.0f} s"
                raise RunFailure(f"{late} ({r.over}/{self._total(r)} jobs over){_paused(s)}")
        if done:  # what the finished jobs reported must reach the controller first
            for message in s.bus.queued():
                self.controller.handle(message)
        return done

    def _provider_held_up(self) -> None:
        """A RunFailure if the provider failed on its own during the cells (a log it could not
        write, a connection of the lab's own it refused): what a job got of it is the lab's
        failure, never a finding about the job, so the cells it may have touched are not judged."""
        cause = self.stack.admin.failures().since(self._provider_failures)
        if cause is not None:
            db = self.stack.provider.db
            raise RunFailure(cause + (f" (its log: {db})" if db is not None else ""))

    def _look_for_lost(self, r: _Running) -> None:
        """A cell that has not moved for a while may wait for a job its queue lost: one never
        started, neither queued nor held by the broker (Celery's Redis transport loses a
        message a worker killed whole had popped and not yet recorded as unacknowledged).
        Seen lost twice, LOOK_FOR_LOST apart, it is counted as given up on."""
        r.moved = time.monotonic()
        started = {seq_of(op.decode()) for op in cast(list[bytes], self.stack.redis.hkeys(r.keys.attempts))}
        unstarted = [str(JobId(r.id, seq)) for seq in range(1, r.enqueued + 1) if seq not in started]
        missing = self.queue.missing(unstarted)
        for job in missing & r.missing:
            self.queue.give_up(job)
        r.missing = missing

    def _feed(self) -> None:
        """With a window, top a cell's jobs up as the queue drains: a long run never holds them all."""
        window = self.options.window
        if window is None:
            return
        backlog = self.queue.backlog()
        for r in self._running.values():
            room = window - backlog
            if room >= CHUNK // 2 and r.enqueued < r.ops:
                backlog += self._enqueue(r, min(room, r.ops - r.enqueued))

    def _judge(self, r: _Running) -> Row:
        s, o = self.stack, self.options
        seen = self.controller.finish(r.id)
        wall = time.monotonic() - r.started
        failed = {f for f in self._failed if JobId.of_cell(f, r.id)}
        # With a real destination, its own records are the ops' effects.
        log: ProviderRecords = s.log
        if o.reader is not None:
            kept = None if self.run_dir is None else functools.partial(_keep_evidence, self.run_dir)
            log = EvidenceRecords(s.log, self._evidence, kept)
        observed = op_facts(s.redis, r.keys, log, r.ledger, r.id, r.ops, failed)
        if self.run_dir is not None:
            # A provider this run did not start keeps its log on its host: keep what it said, as judged.
            observed = _recorded(self.run_dir, r.id, observed, r.ledger if s.provider.db is None else None)
        overrides = o.overrides.get(r.cell)
        source = None if o.reader is None else counted_at(o.reader.destination.url, o.reader.spec)
        judgement = Judgement(
            r.cell,
            r.plan,
            r.ops,
            o.retries,
            overrides,
            promises=o.promises,
            ledger=r.ledger,
            promise=o.promise,
            source=source,
        )
        row = judge(judgement, observed, seen, s.options.workers, wall)
        row.cell_id = r.id
        if r.series is not None:
            r.series.sample(wall, r.over, seen.kill_count, row.counts.effects, final=True)
            row.series = r.series.to_json()
        return row

    def _evidence(self, op_ids: list[str]) -> Evidence:
        """What the destination holds for these ops. A destination that stopped answering may be
        a sandbox of the stack's that died: named as a dead part is, if it is."""
        assert self.options.reader is not None
        try:
            return self.options.reader.read(op_ids)
        except DestinationGone:
            name_a_dead_part(self.stack.check)
            raise

    def _progress(self, r: _Running, now: float) -> Progress:
        return Progress(r.cell, r.over, self._total(r), self.controller.kills(r.id), now - r.started)

    def _fill(self, r: _Running, declines: bool) -> None:
        """Every op's identity and payload persisted, each before its job is enqueued
        (up to the window). The first ops go out on their own, ahead of the rest: the
        workers start on them while the rest are stored and enqueued, instead of
        waiting, both cores idle, for the first thousand of each."""
        for stored, enqueued in filling(r.ops, self.options.window):
            self._store_intents(r, stored, declines)
            if enqueued:
                self._enqueue(r, enqueued)

    def _store_intents(self, r: _Running, seqs: range, declines: bool) -> None:
        """These ops' intents and plans, with the cell's total before the first (the job
        that ends last wakes the loop: workers.markers), in one round trip."""
        with self.stack.redis.pipeline(transaction=False) as pipe:
            if seqs.start == 1:
                pipe.set(r.keys.total, self._total(r))
            for seq in seqs:
                armed = r.plan.armed(seq)
                op = make_op(seq, self.options.seed, declined=declines and bool(armed))
                pipe.hset(r.keys.ops, op.id, op.encode())
                if armed:
                    pipe.hset(r.keys.plan, op.id, plans.encode(armed))
            pipe.execute()

    def _enqueue(self, r: _Running, count: int) -> int:
        first = r.enqueued + 1
        for chunk in _chunks(first, first + count - 1):
            self.queue.enqueue([self._job(r, seq, op_id(seq)) for seq in chunk])
        r.enqueued += count
        return count

    def _job(self, r: _Running, seq: int, op: str, kind: str = JobKind.FIRST, at_front: bool = False) -> JobRequest:
        return JobRequest(r.function, (r.spec, op, seq), str(JobId(r.id, seq, kind)), at_front)

    def _enqueue_extra(self, cell_id: str, seq: int, op: str, kind: str, at_front: bool) -> None:
        """A job the planner adds for an op (a duplicate of it, or a re-minted one)."""
        r = self._running[cell_id]
        r.extra += 1
        self.stack.redis.set(r.keys.total, self._total(r))
        self.queue.enqueue([self._job(r, seq, op, kind, at_front)])

    def _total(self, r: _Running) -> int:
        """The jobs a cell runs in all: it is over when this many have returned or failed."""
        return r.ops + r.extra


def filling(ops: int, window: int | None, head: int = HEAD) -> list[tuple[range, int]]:
    """How a cell starts: each step's ops to store, then how many of them to enqueue
    (each op's intent before its job, and no more jobs than the window)."""
    count = ops if window is None else min(ops, window)
    steps = [range(1, min(head, ops) + 1), *_chunks(head + 1, ops)]
    return [(chunk, max(0, min(chunk.stop, count + 1) - chunk.start)) for chunk in steps]


def _chunks(first: int, last: int, size: int = CHUNK) -> Iterator[range]:
    for start in range(first, last + 1, size):
        yield range(start, min(last, start + size - 1) + 1)


def _held_ops(cell: Cell) -> int:
    """A matrix cell's faulted ops are spread (every tenth), not held all at once."""
    return 0 if cell.schedule is None else len(cell.schedule.held)


def _paused(stack: RunStack) -> str:
    """Why a part did not answer within its bound, if a signal stopped it."""
    paused = stack.paused()
    return f"; {', '.join(paused)} stopped by a signal" if paused else ""


def _part_of(failed: BaseException) -> str:
    """The part a failed call of the run's own went to (none of them is a fault's)."""
    if isinstance(failed, redis_lib.RedisError):
        return "its Redis"
    if isinstance(failed, httpx.HTTPError):
        return "its provider"
    return "a part of its stack"


def _crashes_provider(cell: Cell) -> bool:
    return any(RULES[f].kills_provider for f in cell.faults)


def _record_event(run_dir: RunDir, cell_id: str, op: str, entry: Noted) -> None:
    run_dir.record(noted_line(cell_id, op, entry))


def _keep_evidence(run_dir: RunDir, ledger: str, held: Evidence) -> None:
    run_dir.keep_evidence(evidence_line(ledger, held))


def _recorded(
    run_dir: RunDir, cell_id: str, observed: Iterable[list[OpFacts]], remote_ledger: str | None
) -> Iterator[list[OpFacts]]:
    """Each op's local facts into the history as they are judged; the provider's side
    stays in its log, or, with `remote_ledger`, is kept beside the history."""
    for facts in observed:
        run_dir.record(facts_line(cell_id, facts))
        if remote_ledger is not None:
            run_dir.keep_records(records_line(remote_ledger, {o.op: record_of(o) for o in facts}))
        yield facts
