"""Running cells on a started stack: the I/O edge that ties the parts together.

For each cell: configure the provider's contract, store every op's intent,
arm the plan, enqueue the ops, feed the bus to the controller until every job
is over, then have the checker judge the cell from the provider's log and
compare the result with the model's prediction.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field

from rq import Queue, Retry

from testbed import plan as plans
from testbed.checker import tally
from testbed.controller import Controller, Recovery
from testbed.errors import RunFailure
from testbed.expectations import predict
from testbed.keys import QUEUE, CellKeys
from testbed.matrix import Cell
from testbed.observe import job_id, op_facts
from testbed.scenarios import SCENARIOS
from testbed.scorecard import Expected, Row, latency_stats
from testbed.stack import Stack
from testbed.workload import make_op
from workers.handler import JobSpec

JOB_FUNCTION = "workers.handler.perform"
JOB_TIMEOUT = 180
# Long enough to read a failed job's record during and after the run.
FAILURE_TTL = 24 * 3600
POLL_INTERVAL = 0.02
INFLIGHT_WAIT = 10.0


@dataclass(frozen=True, slots=True)
class RunOptions:
    cells: list[Cell]
    ops: int = 100
    every: int = 10
    retries: int = 1
    seed: int = 0
    client_timeout: float = 0.5
    recovery: Recovery = Recovery.FORCED
    cell_timeout: float = 120.0
    parallel: int = 2  # cells in flight at once
    # (strategy, boundary label) -> fields the user expects instead of the model's values
    overrides: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)


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
    started: float


class CellRunner:
    """Runs cells on the stack, up to `parallel` at a time.

    Cells are independent (own ledger at the provider, own intents, markers
    and plan in Redis), so overlapping them changes no outcome; it keeps both
    cores busy while one cell waits on its last retries or on held requests.
    """

    def __init__(self, stack: Stack, options: RunOptions, progress: Callable[[str], None]) -> None:
        self.stack = stack
        self.options = options
        self.progress = progress
        self.queue = Queue(QUEUE, connection=stack.redis)
        self.controller = Controller(stack.bus, stack.redis, stack.supervisor, stack.admin, QUEUE, options.recovery)
        # Jobs RQ gave up on; their ids start with their cell's id. Read again when the registry grows.
        self._failed_key = self.queue.failed_job_registry.key
        self._failed: set[str] = set()
        self._failed_count = stack.redis.zcard(self._failed_key)

    def run(self, cells: list[Cell]) -> list[Row]:
        o = self.options
        waiting = list(enumerate(cells, 1))
        running: dict[str, _Running] = {}
        rows: dict[int, Row] = {}
        next_check = 0.0
        while waiting or running:
            while waiting and len(running) < o.parallel:
                index, cell = waiting.pop(0)
                started = self._start(index, cell)
                running[started.id] = started
            message = self.stack.bus.next(timeout=0.1)
            if message is not None:
                self.controller.handle(message)
            if time.monotonic() < next_check:
                continue
            next_check = time.monotonic() + 0.05
            for done in self._finished(running.values()):
                del running[done.id]
                rows[done.index] = row = self._judge(done)
                self._report(done.index, len(cells), row)
            self.stack.supervisor.check()
        return [rows[i] for i in sorted(rows)]

    def _start(self, index: int, cell: Cell) -> _Running:
        s, o = self.stack, self.options
        cell_id = f"c{index:03d}"
        scenario = SCENARIOS[cell.scenario]
        running = _Running(
            index,
            cell_id,
            cell,
            s.keys.cell(cell_id),
            f"{s.run_id}.{cell_id}",
            plans.EveryNth(o.every, cell.boundary, cell.fault),
            time.monotonic(),
        )
        s.admin.put_ledger(running.ledger, scenario.contract)
        self._store_intents(running.keys, running.plan, scenario.declines_faulted_ops)
        self.controller.begin(cell_id, running.ledger, running.plan, scenario, running.keys)
        spec = JobSpec(
            prefix=s.keys.prefix,
            cell=cell_id,
            strategy=cell.strategy,
            ledger=running.ledger,
            provider=s.provider.url,
            read_path=scenario.read_path.value,
            client_timeout=o.client_timeout,
            max_waits=int(INFLIGHT_WAIT / POLL_INTERVAL),
            poll_interval=POLL_INTERVAL,
        )
        self._enqueue(cell_id, spec)
        return running

    def _finished(self, running: Iterable[_Running]) -> list[_Running]:
        """Cells whose every job has returned or been given up by RQ."""
        s, o = self.stack, self.options
        cells = list(running)
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
            over = int(count or 0) + sum(f.startswith(f"{r.id}-") for f in self._failed)
            if over >= o.ops:
                done.append(r)
            elif time.monotonic() - r.started > o.cell_timeout:
                late = f"{r.cell.label} did not finish within {o.cell_timeout:.0f} s"
                raise RunFailure(f"{late} ({over}/{o.ops} jobs over)")
        if done:  # what the finished jobs reported must reach the controller first
            while (message := s.bus.next(timeout=0.01)) is not None:
                self.controller.handle(message)
        return done

    def _judge(self, r: _Running) -> Row:
        s, o = self.stack, self.options
        seen = self.controller.finish(r.id)
        wall = time.monotonic() - r.started
        failed = {f for f in self._failed if f.startswith(f"{r.id}-")}
        result = tally(op_facts(s.redis, r.keys, s.log, r.ledger, r.id, o.ops, failed))
        expected = Expected.from_prediction(predict(r.cell, r.plan, o.ops, o.retries))
        override = o.overrides.get((r.cell.strategy, r.cell.boundary.value if r.cell.boundary else "none"))
        if override:
            expected = expected.override(override)
        latencies = [k.replay_latency_ms for k in seen.kills if k.replay_latency_ms is not None]
        return Row(
            cell=r.cell,
            counts=result.counts,
            kills=len(seen.kills),
            faults=seen.faults,
            workers=s.options.workers,
            wall_seconds=wall,
            expected=expected,
            held=result.held,
            replay_latency_ms=latency_stats(latencies),
            anomalies=seen.anomalies,
        )

    def _report(self, index: int, total: int, row: Row) -> None:
        c = row.counts
        verdict = "as expected" if row.passed else "DIFFERS"
        width = len(str(total))
        self.progress(
            f"[{index:>{width}}/{total}] {row.cell.label:<56} {c.effects:>4} / {c.missing_operations:<4}"
            f" {verdict:<11} {row.wall_seconds:5.2f} s"
        )

    def _store_intents(self, keys: CellKeys, plan: plans.Plan, declines: bool) -> None:
        """Every op's identity and payload is persisted before anything is enqueued."""
        o = self.options
        for chunk in _chunks(o.ops):
            with self.stack.redis.pipeline(transaction=False) as pipe:
                for seq in chunk:
                    armed = plan.armed(seq)
                    op = make_op(seq, o.seed, declined=declines and bool(armed))
                    pipe.hset(keys.ops, op.id, op.encode())
                    if armed:
                        pipe.hset(keys.plan, op.id, plans.encode(armed))
                pipe.execute()

    def _enqueue(self, cell_id: str, spec: JobSpec) -> None:
        o = self.options
        retry = Retry(max=o.retries) if o.retries else None
        args = asdict(spec)
        for chunk in _chunks(o.ops):
            jobs = [
                Queue.prepare_data(
                    JOB_FUNCTION,
                    args=(args, make_op(seq, o.seed).id, seq),
                    job_id=job_id(cell_id, seq),
                    retry=retry,
                    result_ttl=0,
                    failure_ttl=FAILURE_TTL,
                    timeout=JOB_TIMEOUT,
                )
                for seq in chunk
            ]
            self.queue.enqueue_many(jobs)


def _chunks(ops: int, size: int = 1000) -> Iterator[range]:
    for start in range(1, ops + 1, size):
        yield range(start, min(ops, start + size - 1) + 1)


def run_cells(
    stack: Stack, options: RunOptions, progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr)
) -> list[Row]:
    return CellRunner(stack, options, progress).run(options.cells)
