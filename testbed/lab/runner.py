"""Running cells on a started stack: the I/O edge that ties the parts together.

For each cell: configure the provider's contract, store every op's intent,
arm the plan, enqueue the ops, feed the bus to the controller until every job
is over, then have the checker judge the cell from the provider's log and
compare the result with the model's prediction.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

from rq import Queue, Retry

from labcore import plan as plans
from labcore.keys import QUEUE, CellKeys
from labcore.scoped import new_secret
from testbed.errors import RunFailure
from testbed.experiment.matrix import Cell
from testbed.experiment.scenarios import SCENARIOS
from testbed.experiment.workload import make_op
from testbed.infra.stack import Stack
from testbed.judge.checker import tally
from testbed.judge.model import predict
from testbed.judge.observe import job_id, op_facts
from testbed.judge.scorecard import Expected, Row, latency_stats
from testbed.lab import userjobs
from testbed.nemesis.controller import Controller, Recovery
from workers.handler import JobSpec

JOB_FUNCTION = "workers.handler.perform"
JOB_TIMEOUT = 180
# Long enough to read a failed job's record during and after the run.
FAILURE_TTL = 24 * 3600
# Not 0: with rq 3.0.0, a job that RQ's own cleanup requeued after its worker
# died is marked failed after it succeeds if results are deleted at once (its
# dead execution's record has expired; deleting the job looks it up and raises).
RESULT_TTL = 60
POLL_INTERVAL = 0.02
INFLIGHT_WAIT = 10.0
CHUNK = 1000


@dataclass(frozen=True, slots=True)
class RunOptions:
    cells: list[Cell]
    plan: Callable[[Cell], plans.Plan]
    ops: int = 100
    retries: int = 1
    seed: int = 0
    client_timeout: float = 0.5
    recovery: Recovery = Recovery.FORCED
    cell_timeout: float = 120.0
    parallel: int = 2  # cells in flight at once
    # Jobs enqueued ahead of the workers at most (None: a cell's jobs all at once).
    window: int | None = None
    # Per-op event histories in the results (off for load: memory must not grow with the run).
    history: bool = True
    # (strategy, boundary label) -> fields the user expects instead of the model's values
    overrides: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    # Users' jobs: the promise they are judged against, their import path, their work-horses' environment.
    promise: str = "exactly-once"
    paths: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cell_prefix: str = "c"  # cell ids are <prefix><index>: unique per stack (the pytest plugin runs many)


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


@dataclass(slots=True)
class _Running:
    index: int
    id: str
    cell: Cell
    keys: CellKeys
    ledger: str
    plan: plans.Plan
    function: str  # the RQ job function
    spec: dict[str, object]
    started: float
    enqueued: int = 0  # ops enqueued so far (with a window, a cell is fed as it drains)
    extra: int = 0  # jobs the planner added (duplicates, re-minted ops)
    over: int = 0


class CellRunner:
    """Runs cells on the stack, up to `parallel` at a time.

    Cells are independent (own ledger at the provider, own intents, markers
    and plan in Redis), so overlapping them changes no outcome; it keeps both
    cores busy while one cell waits on its last retries or on held requests.
    """

    def __init__(
        self,
        stack: Stack,
        options: RunOptions,
        progress: Callable[[str], None],
        tick: Callable[[list[Progress]], None] | None = None,
    ) -> None:
        self.stack = stack
        self.options = options
        self.progress = progress
        self.tick = tick
        self.queue = Queue(QUEUE, connection=stack.redis)
        self.controller = Controller(
            stack.bus,
            stack.redis,
            stack.supervisor,
            stack.admin,
            QUEUE,
            self._enqueue_extra,
            options.recovery,
            options.history,
        )
        self._running: dict[str, _Running] = {}
        # Jobs RQ gave up on; their ids start with their cell's id. Read again when the registry grows.
        self._failed_key = self.queue.failed_job_registry.key
        self._failed: set[str] = set()
        self._failed_count = stack.redis.zcard(self._failed_key)
        # Signs users' jobs' scoped provider URLs.
        self._secret = new_secret()

    def run(self, cells: list[Cell]) -> list[Row]:
        o = self.options
        waiting = list(enumerate(cells, 1))
        rows: dict[int, Row] = {}
        next_check = 0.0
        while waiting or self._running:
            while waiting and len(self._running) < o.parallel:
                index, cell = waiting.pop(0)
                started = self._start(index, cell)
                self._running[started.id] = started
            message = self.stack.bus.next(timeout=0.1)
            if message is not None:
                self.controller.handle(message)
            if time.monotonic() < next_check:
                continue
            next_check = time.monotonic() + 0.05
            for done in self._finished():
                del self._running[done.id]
                rows[done.index] = row = self._judge(done)
                self._report(done.index, len(cells), row)
            self._feed()
            if self.tick is not None:
                now = time.monotonic()
                self.tick([self._progress(r, now) for r in self._running.values()])
            self.stack.supervisor.check()
        return [rows[i] for i in sorted(rows)]

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
            provider=s.provider.url,
            read_path=scenario.read_path.value,
            client_timeout=scenario.client_timeout or o.client_timeout,
            max_waits=int(INFLIGHT_WAIT / POLL_INTERVAL),
            poll_interval=POLL_INTERVAL,
        )
        function, spec = JOB_FUNCTION, asdict(builtin)
        if cell.handler is not None:
            function = userjobs.FUNCTION
            spec = userjobs.job_spec(
                s.keys.prefix, cell_id, cell.handler, ledger, s.provider.url, self._secret, o.paths, o.env
            )
        running = _Running(
            index, cell_id, cell, s.keys.cell(cell_id), ledger, o.plan(cell), function, spec, time.monotonic()
        )
        s.admin.put_ledger(ledger, scenario.contract)
        if cell.handler is not None:
            s.admin.put_scope_secret(ledger, self._secret)
        self._store_intents(running, scenario.declines_faulted_ops)
        self.controller.begin(cell_id, ledger, running.plan, scenario, running.keys)
        self._enqueue(running, o.ops if o.window is None else min(o.ops, o.window))
        return running

    def _finished(self) -> list[_Running]:
        """Cells whose every job has returned or been given up by RQ."""
        s, o = self.stack, self.options
        cells = list(self._running.values())
        with s.redis.pipeline(transaction=False) as pipe:
            for r in cells:
                pipe.get(r.keys.ended)
            pipe.zcard(self._failed_key)
            *ended, failed_count = pipe.execute()
        if failed_count != self._failed_count:
            self._failed = {f.decode() for f in s.redis.zrange(self._failed_key, 0, -1)}
            self._failed_count = failed_count
        done = []
        for r, count in zip(cells, ended, strict=True):
            r.over = int(count or 0) + sum(f.startswith(f"{r.id}-") for f in self._failed)
            if r.over >= o.ops + r.extra:
                done.append(r)
            elif time.monotonic() - r.started > o.cell_timeout:
                late = f"{r.cell.label} did not finish within {o.cell_timeout:.0f} s"
                raise RunFailure(f"{late} ({r.over}/{o.ops + r.extra} jobs over)")
        if done:  # what the finished jobs reported must reach the controller first
            while (message := s.bus.next(timeout=0.01)) is not None:
                self.controller.handle(message)
        return done

    def _feed(self) -> None:
        """With a window, top a cell's jobs up as the queue drains: a long run never holds them all."""
        window = self.options.window
        if window is None:
            return
        backlog = self.queue.count
        for r in self._running.values():
            room = window - backlog
            if room >= CHUNK // 2 and r.enqueued < self.options.ops:
                backlog += self._enqueue(r, min(room, self.options.ops - r.enqueued))

    def _judge(self, r: _Running) -> Row:
        s, o = self.stack, self.options
        seen = self.controller.finish(r.id)
        wall = time.monotonic() - r.started
        failed = {f for f in self._failed if f.startswith(f"{r.id}-")}
        facts = op_facts(s.redis, r.keys, s.log, r.ledger, r.id, o.ops, failed)
        if r.cell.handler is None:
            judge = None
            expected = Expected.from_prediction(predict(r.cell, r.plan, o.ops, o.retries))
        else:  # no model of a user's job: its promise is checked instead
            judge = userjobs.judge(o.promise, r.ledger, r.plan, seen.history if o.history else None)
            facts = judge.watch(facts)
            expected = Expected({})
        result = tally(facts)
        override = o.overrides.get((r.cell.strategy, r.cell.boundary.value if r.cell.boundary else "none"))
        if override:
            expected = expected.override(override)
        extra = {"history": seen.history} if o.history else {}
        row = Row(
            cell=r.cell,
            counts=result.counts,
            kills=seen.kill_count,
            faults=seen.faults,
            workers=s.options.workers,
            wall_seconds=wall,
            expected=expected,
            held=result.held,
            replay_latency_ms=latency_stats(list(seen.replay_latencies_ms)),
            anomalies=seen.anomalies,
            extra=extra,
        )
        if judge is not None:
            row.broken, row.extra["promise"] = userjobs.verdict(judge, r.plan, o.ops, seen.faults)
        return row

    def _progress(self, r: _Running, now: float) -> Progress:
        return Progress(r.cell, r.over, self.options.ops + r.extra, self.controller.kills(r.id), now - r.started)

    def _report(self, index: int, total: int, row: Row) -> None:
        c = row.counts
        verdict = "as expected" if row.passed else "DIFFERS"
        width = len(str(total))
        self.progress(
            f"[{index:>{width}}/{total}] {row.cell.label:<56} {c.effects:>4} / {c.missing_operations:<4}"
            f" {verdict:<11} {row.wall_seconds:5.2f} s"
        )

    def _store_intents(self, r: _Running, declines: bool) -> None:
        """Every op's identity and payload is persisted before anything is enqueued."""
        o = self.options
        for chunk in _chunks(1, o.ops):
            with self.stack.redis.pipeline(transaction=False) as pipe:
                for seq in chunk:
                    armed = r.plan.armed(seq)
                    op = make_op(seq, o.seed, declined=declines and bool(armed))
                    pipe.hset(r.keys.ops, op.id, op.encode())
                    if armed:
                        pipe.hset(r.keys.plan, op.id, plans.encode(armed))
                pipe.execute()

    def _enqueue(self, r: _Running, count: int) -> int:
        first = r.enqueued + 1
        for chunk in _chunks(first, first + count - 1):
            self.queue.enqueue_many([self._job(r, seq, make_op(seq, self.options.seed).id) for seq in chunk])
        r.enqueued += count
        return count

    def _job(self, r: _Running, seq: int, op: str, suffix: str = "", at_front: bool = False) -> object:
        retries = self.options.retries
        return Queue.prepare_data(
            r.function,
            args=(r.spec, op, seq),
            job_id=job_id(r.id, seq) + suffix,
            retry=Retry(max=retries) if retries else None,
            result_ttl=RESULT_TTL,
            failure_ttl=FAILURE_TTL,
            timeout=JOB_TIMEOUT,
            at_front=at_front,
        )

    def _enqueue_extra(self, cell_id: str, seq: int, op: str, suffix: str, at_front: bool) -> None:
        """A job the planner adds for an op (a duplicate of it, or a re-minted one)."""
        r = self._running[cell_id]
        r.extra += 1
        self.queue.enqueue_many([self._job(r, seq, op, f"-{suffix}", at_front)])


def _chunks(first: int, last: int, size: int = CHUNK) -> Iterator[range]:
    for start in range(first, last + 1, size):
        yield range(start, min(last, start + size - 1) + 1)


def run_cells(
    stack: Stack,
    options: RunOptions,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
    tick: Callable[[list[Progress]], None] | None = None,
) -> list[Row]:
    return CellRunner(stack, options, progress, tick).run(options.cells)
