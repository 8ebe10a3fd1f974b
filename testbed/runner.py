"""Running cells on the real stack: the I/O edge that ties the parts together.

The run starts its stack (Redis, the provider process, the RQ workers), and
for each cell: configures the provider's contract, stores every op's intent,
arms the plan, enqueues the ops, feeds the bus to the controller until every
job is over, then has the checker judge the cell from the provider's log and
compares the result with the model's prediction.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import redis as redis_lib
from rq import Queue, Retry

from provider.store import LogReader
from testbed import plan as plans
from testbed.bus import Bus
from testbed.checker import Tally, tally
from testbed.controller import CellObservations, Controller, Recovery
from testbed.errors import RunFailure, SetupError
from testbed.expectations import predict
from testbed.keys import QUEUE, CellKeys, RunKeys, rq_prefix, run_prefix
from testbed.matrix import Cell
from testbed.observe import failed_jobs, job_id, op_facts
from testbed.redis_server import PrivateRedis
from testbed.scenarios import SCENARIOS
from testbed.scorecard import Expected, Row, latency_stats
from testbed.services import ProviderAdmin, ProviderProcess
from testbed.supervisor import Supervisor, WorkerSettings
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
    workers: int = 2
    retries: int = 1
    seed: int = 0
    redis_url: str | None = None
    provider_port: int = 0
    client_timeout: float = 0.5
    recovery: Recovery = Recovery.FORCED
    settings: WorkerSettings = field(default_factory=WorkerSettings)
    cell_timeout: float = 120.0
    keep: bool = False
    # (strategy, boundary label) -> fields the user expects instead of the model's values
    overrides: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)


class Stack:
    """Everything a run starts, torn down in reverse order whatever happens."""

    def __init__(self, run_id: str, options: RunOptions) -> None:
        self.run_id = run_id
        self.options = options
        self.keys = RunKeys(run_prefix(run_id))
        self._exit = contextlib.ExitStack()

    def __enter__(self) -> Stack:
        try:
            self._start()
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    def _start(self) -> None:
        o = self.options
        self.workdir = Path(tempfile.mkdtemp(prefix=f"testbed-{self.run_id}-"))
        if not o.keep:
            self._exit.callback(shutil.rmtree, self.workdir, ignore_errors=True)
        if o.redis_url:
            self.redis_url = o.redis_url
            self.redis = _connect(o.redis_url)
            if not o.keep:
                self._exit.callback(delete_keys, self.redis, self.keys.pattern)
        else:
            private = PrivateRedis(self.workdir)
            self._exit.callback(private.stop)
            self.redis_url = private.start()
            self.redis = _connect(self.redis_url)
        self.bus = Bus(self.redis, self.keys)
        self.provider = ProviderProcess(self.workdir, self.redis_url, self.keys.prefix, o.provider_port)
        self._exit.callback(self.provider.stop)
        self.supervisor = Supervisor(
            self.workdir, self.redis_url, rq_prefix(self.keys.prefix), QUEUE, f"tb-{self.run_id}", o.settings
        )
        self._exit.callback(self.supervisor.stop)
        # Both boot at once: most of their start-up is importing Python.
        self.provider.launch()
        self.supervisor.start(o.workers)
        self.provider.wait_ready()
        self.supervisor.wait_ready(self.redis)
        self.admin = ProviderAdmin(self.provider.url)
        self._exit.callback(self.admin.close)
        self.log = LogReader(self.provider.db)
        self._exit.callback(self.log.close)
        self.queue = Queue(QUEUE, connection=self.redis)
        # Cells run one after another on one queue: a cell's failures are the growth of this set.
        self.failed_registry_key = self.queue.failed_job_registry.key

    def _close(self) -> None:
        # A second Ctrl-C must not cut the teardown short.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            self._exit.close()
        finally:
            signal.signal(signal.SIGINT, previous)

    def pids(self) -> list[int]:
        return [p for p in (self.provider.pid, *self.supervisor.pids()) if p]


def _connect(url: str) -> redis_lib.Redis:
    try:
        client = redis_lib.Redis.from_url(url, socket_connect_timeout=3, health_check_interval=30)
        client.ping()
    except (redis_lib.RedisError, ValueError) as exc:
        raise SetupError(f"cannot reach Redis at {url}: {exc}") from None
    return client


def delete_keys(redis: redis_lib.Redis, pattern: str) -> None:
    """Only what this run wrote: every key under its prefix."""
    batch = []
    for key in redis.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            redis.unlink(*batch)
            batch.clear()
    if batch:
        redis.unlink(*batch)


def check_rq_prefix(prefix: str) -> None:
    """RQ reads its key prefix once, at import: the CLI sets it first."""
    import rq.defaults

    if prefix != rq.defaults.RQ_KEY_PREFIX:
        raise RunFailure(f"rq was imported with key prefix {rq.defaults.RQ_KEY_PREFIX!r}, not {prefix!r}")


class CellRunner:
    def __init__(self, stack: Stack, progress: Callable[[str], None]) -> None:
        self.stack = stack
        self.options = stack.options
        self.progress = progress
        self.controller = Controller(
            stack.bus, stack.redis, stack.supervisor, stack.admin, QUEUE, stack.options.recovery
        )

    def run(self, index: int, cell: Cell) -> Row:
        s, o = self.stack, self.options
        cell_id = f"c{index:03d}"
        keys = s.keys.cell(cell_id)
        ledger = f"{s.run_id}.{cell_id}"
        scenario = SCENARIOS[cell.scenario]
        plan = plans.EveryNth(o.every, cell.boundary, cell.fault)
        s.admin.put_ledger(ledger, scenario.contract)
        started = time.monotonic()
        self._store_intents(keys, plan, scenario.declines_faulted_ops)
        self.controller.begin(cell_id, ledger, plan, scenario, keys)
        spec = JobSpec(
            prefix=s.keys.prefix,
            cell=cell_id,
            strategy=cell.strategy,
            ledger=ledger,
            provider=s.provider.url,
            read_path=scenario.read_path.value,
            client_timeout=o.client_timeout,
            max_waits=int(INFLIGHT_WAIT / POLL_INTERVAL),
            poll_interval=POLL_INTERVAL,
        )
        self._enqueue(cell_id, spec)
        failed = self._drain(cell, cell_id, keys)
        seen = self.controller.finish()
        wall = time.monotonic() - started
        result = tally(op_facts(s.redis, keys, s.log, ledger, cell_id, o.ops, failed))
        expected = Expected.from_prediction(predict(cell, plan, o.ops, o.retries))
        override = o.overrides.get((cell.strategy, cell.boundary.value if cell.boundary else "none"))
        if override:
            expected = expected.override(override)
        return self._row(cell, result, seen, wall, expected)

    def _row(self, cell: Cell, result: Tally, seen: CellObservations, wall: float, expected: Expected) -> Row:
        latencies = [k.replay_latency_ms for k in seen.kills if k.replay_latency_ms is not None]
        return Row(
            cell=cell,
            counts=result.counts,
            kills=len(seen.kills),
            faults=seen.faults,
            workers=self.options.workers,
            wall_seconds=wall,
            expected=expected,
            held=result.held,
            replay_latency_ms=latency_stats(latencies),
            anomalies=seen.anomalies,
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
            self.stack.queue.enqueue_many(jobs)

    def _drain(self, cell: Cell, cell_id: str, keys: CellKeys) -> set[str]:
        """Feed the controller until every job has returned or been given up by RQ."""
        s, o = self.stack, self.options
        failed_key = s.failed_registry_key
        failed_before = s.redis.zcard(failed_key)
        deadline = time.monotonic() + o.cell_timeout
        next_check = 0.0
        while True:
            message = s.bus.next(timeout=0.1)
            if message is not None:
                self.controller.handle(message)
            if time.monotonic() < next_check:
                continue
            next_check = time.monotonic() + 0.05
            with s.redis.pipeline(transaction=False) as pipe:
                pipe.get(keys.ended)
                pipe.zcard(failed_key)
                ended, failed_now = pipe.execute()
            over = int(ended or 0) + failed_now - failed_before
            if over >= o.ops:
                while (message := s.bus.next(timeout=0.01)) is not None:
                    self.controller.handle(message)
                return failed_jobs(s.redis, QUEUE, cell_id) if failed_now > failed_before else set()
            s.supervisor.check()
            if time.monotonic() > deadline:
                late = f"{cell.label} did not finish within {o.cell_timeout:.0f} s"
                raise RunFailure(f"{late} ({over}/{o.ops} jobs over)")


def _chunks(ops: int, size: int = 1000) -> Iterator[range]:
    for start in range(1, ops + 1, size):
        yield range(start, min(ops, start + size - 1) + 1)


def run_cells(
    stack: Stack, cells: list[Cell], progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr)
) -> list[Row]:
    runner = CellRunner(stack, progress)
    rows = []
    width = len(str(len(cells)))
    for index, cell in enumerate(cells, 1):
        row = runner.run(index, cell)
        rows.append(row)
        c = row.counts
        verdict = "as expected" if row.passed else "DIFFERS"
        progress(
            f"[{index:>{width}}/{len(cells)}] {cell.label:<56} {c.effects:>4} / {c.missing_operations:<4}"
            f" {verdict:<11} {row.wall_seconds:5.2f} s"
        )
    return rows
