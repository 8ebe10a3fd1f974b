"""The one way the lab runs: a stack started and made ready (`started_stack`),
cells run on it (`run_cells`), the stack stopped. A command makes one run on a
stack of its own (`execute`, with the metadata results.json carries); the
pytest plugin starts one stack for a test session and runs cells on it for
each test."""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from labcore.keys import new_run_id, rq_prefix, run_prefix
from testbed.errors import Interrupted, RunFailure
from testbed.infra.stack import RunStack, Stack, StackOptions
from testbed.lab.options import RunOptions
from testbed.store.files import Unwritable
from testbed.store.runs import RunDir, RunStore

if TYPE_CHECKING:
    from testbed.judge.scorecard import Row
    from testbed.lab.runner import Progress

_VERSIONED = ("testbed", "rq", "redis", "psutil", "typer", "pydantic", "httptools", "httpx")


@dataclass(frozen=True, slots=True)
class Session:
    run_id: str
    rows: list[Row]
    started: float
    wall: float
    versions: dict[str, str]
    # Set when a part of the stack failed: the rows are those judged before it.
    failure: str | None = None
    not_run: list[str] = field(default_factory=list)
    stored: RunDir | None = None
    leftovers: int = 0  # processes the jobs left behind, stopped

    def meta(self, options: dict[str, Any], seed: int | None) -> dict[str, Any]:
        incomplete = {"incomplete": True, "failure": self.failure, "notRun": self.not_run} if self.failure else {}
        return incomplete | {
            "testbed": self.versions["testbed"],
            "run": self.run_id,
            "startedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "wallSeconds": round(self.wall, 3),
            "seed": seed,
            "options": options,
            "versions": self.versions,
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
            "leftoverProcesses": self.leftovers,
        }


def execute(
    stack_options: StackOptions,
    options: RunOptions,
    judged: Callable[[int, int, Row], None],
    tick: Callable[[list[Progress]], None] | None = None,
    store: RunStore | None = None,
) -> Session:
    """One run on a stack of its own: started, the cells run, everything stopped.
    With a store, the run's history, provider log and process logs are kept there."""

    def work(stack: RunStack, run_dir: RunDir | None) -> Ran:
        print(
            f"testbed run {stack.run_id}: {len(options.cells)} cell(s), {options.ops} ops each,"
            f" {stack.options.workers} workers; {client_timeouts(options)}",
            file=sys.stderr,
        )
        return withheld(run_cells(stack, options, judged, tick, run_dir))

    return execute_on_stack(stack_options, work, store)


def client_timeouts(options: RunOptions) -> str:
    """The bounds a job's calls to the provider have, as a run's first line says them: where the
    fault is the client's own timeout, --client-timeout; elsewhere the built-in strategies wait
    as long as a hold may last, and a user's job keeps its own client's. A timeout the plan did
    not make withholds its cell (exit 3): the line says which bound to raise."""
    from labcore.bus import HOLD_TIMEOUT

    said = f"client timeout {options.client_timeout:g} s where a fault is armed to time out (--client-timeout)"
    said += f", {HOLD_TIMEOUT:.0f} s elsewhere"
    if any(cell.handler is not None for cell in options.cells):
        said += "; a user's job's client keeps its own timeout (raise it there)"
    return said


def execute_on_stack(
    stack_options: StackOptions, work: Callable[[RunStack, RunDir | None], Ran], store: RunStore | None = None
) -> Session:
    """A run whose cells `work` chooses as it goes (explore), on a stack of its own:
    started, `work` done, everything stopped; kept in the store as `execute` keeps a run."""
    run_id = new_run_id()
    os.environ["RQ_KEY_PREFIX"] = rq_prefix(run_prefix(run_id))
    started = time.time()
    run_dir = store.create(run_id) if store is not None else None
    try:
        with redis_failures(), started_stack(run_id, stack_options) as stack:
            ran = work(stack, run_dir)
            versions = _versions(stack.redis, stack_options.engine.versions)
            if run_dir is not None:
                ran = _kept(ran, stack, run_dir)
            stack.stop_services()  # if `_kept` has not: what the jobs left is all counted once the workers are gone
            count_leftovers(ran.rows, stack.leftovers_by_cell())
            leftovers = stack.leftover_processes()
            if stack_options.keep:
                print(f"kept {stack.workdir}", file=sys.stderr)
    except KeyboardInterrupt:
        if run_dir is not None:
            run_dir.discard()
        raise Interrupted from None
    wall = time.time() - started
    if leftovers:
        print(f"testbed: {leftovers_said(leftovers)}", file=sys.stderr)
    return Session(run_id, ran.rows, started, wall, versions, ran.failure, ran.not_run, run_dir, leftovers)


def count_leftovers(rows: list[Row], by_cell: dict[str, int]) -> int:
    """Each row given what its cell's work-horses left (`RunStack.leftovers_by_cell`, read once
    the workers have counted it all: the count of a cell's last job lands after the cell was
    judged); the rows' sum."""
    for row in rows:
        row.leftovers = by_cell.get(row.cell_id or "", 0)
    return sum(row.leftovers for row in rows)


def leftovers_said(count: int) -> str:
    return f"the jobs left {count} process(es) running after their attempts: stopped"


@contextlib.contextmanager
def started_stack(run_id: str, options: StackOptions) -> Iterator[RunStack]:
    """The stack the options ask for, started and ready; stopped, with all it started, on leaving.
    The run's RQ key prefix must be in the environment already: rq reads it once, at import."""
    with _open_stack(run_id, options) as stack:
        # rq is imported while the workers and the provider boot.
        from testbed.lab import runner

        runner.check_rq_prefix(os.environ["RQ_KEY_PREFIX"])
        stack.wait_ready()
        yield stack


@contextlib.contextmanager
def redis_failures() -> Iterator[None]:
    """A Redis that stops answering is the lab's failure (exit 3), never a traceback."""
    try:
        yield
    except Exception as exc:
        # Looked up, not imported: the run's start does not wait for redis-py's import,
        # and no Redis error can be raised before something imported it.
        errors = sys.modules.get("redis.exceptions")
        if errors is None or not isinstance(exc, errors.RedisError):
            raise
        from labcore.bounds import PAUSE_BOUND

        raise RunFailure(
            f"the run's Redis did not answer ({exc}): gone, or paused or overloaded for over {PAUSE_BOUND:.0f} s"
        ) from None


@dataclass(frozen=True, slots=True)
class Ran:
    """The cells judged; if a part of the stack failed, why, and the cells not run."""

    rows: list[Row]
    failure: str | None = None
    not_run: list[str] = field(default_factory=list)


def run_cells(
    stack: RunStack,
    options: RunOptions,
    judged: Callable[[int, int, Row], None],
    tick: Callable[[list[Progress]], None] | None = None,
    run_dir: RunDir | None = None,
) -> Ran:
    """The options' cells on a started stack. A failure of the stack ends the cells, and the
    rows judged before it are kept. `judged(index, total, row)` hears of each cell as it is judged."""
    from testbed.lab import runner

    cells_runner = runner.CellRunner(stack, options, judged, tick, run_dir)
    try:
        return Ran(cells_runner.run(options.cells))  # a failed call of its own is a RunFailure
    except RunFailure as exc:
        rows = [cells_runner.rows[i] for i in sorted(cells_runner.rows)]
        not_run = [c.label for i, c in enumerate(options.cells, 1) if i not in cells_runner.rows]
        return Ran(rows, str(exc), not_run)


def withheld(ran: Ran) -> Ran:
    """A cell that saw what its plan did not make has its verdict withheld, and the run
    ends as the lab's failure (exit 3), naming the first cell and its first anomaly."""
    cells = [row for row in ran.rows if row.withheld]
    if ran.failure is not None or not cells:
        return ran
    first = cells[0]
    said = f"{len(cells)} cell(s) withheld; {first.cell.label}: {first.anomalies[0]}"
    return Ran(ran.rows, f"verdict withheld, the lab saw what the plan did not make: {said}", ran.not_run)


def _kept(ran: Ran, stack: RunStack, run_dir: RunDir) -> Ran:
    """The run's history closed, its provider's log and its processes' logs kept: a store
    that could not be written, now or during the cells, ends the run as the lab's failure."""
    try:
        run_dir.close()
        stack.stop_services()  # the provider's log is copied whole, once nothing writes to it
        if stack.provider.db is not None:  # a remote provider's records were kept as judged
            run_dir.keep_provider_log(stack.provider.db)
        run_dir.keep_logs(stack.workdir)
    except Unwritable as exc:
        return Ran(ran.rows, ran.failure or str(exc), ran.not_run)
    return ran


def _open_stack(run_id: str, options: StackOptions) -> RunStack:
    """A stack this run starts, or the one of the worker hosts (--hosts)."""
    if options.remote is None:
        return Stack(run_id, options)
    from testbed.infra.hosts import HostStack

    return HostStack(run_id, options)


def package_version(name: str) -> str:
    """The installed version of a distribution, or "unknown"."""
    # Imported here: importlib.metadata (with the email package) would come before a
    # run's launch, and only a run's end and --version ask for a version.
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "unknown"


def _versions(redis: Any, engine: tuple[str, ...] = ()) -> dict[str, str]:
    """`engine`: the distributions of the engine the run's jobs ran on, whose releases the run names too."""
    from redis.exceptions import RedisError  # imported by then: not at the command line's start

    versions = {name: package_version(name) for name in (*_VERSIONED, *engine)}
    versions["python"] = platform.python_version()
    try:
        versions["redis-server"] = str(redis.info("server").get("redis_version", "unknown"))
    except RedisError:  # the run lost its Redis: say so elsewhere, not here
        versions["redis-server"] = "unknown"
    return versions
