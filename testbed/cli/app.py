"""The command line: validates input, then hands over to a session.

Exit codes: 0 every cell as expected; 1 a cell differs from its expectation
(or, under load, breaks an invariant); 2 bad input or an environment the run
cannot start in; 3 the stack failed during the run; 130 interrupted.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from typer import Option

from labcore.boundaries import ORDER, parse_boundary
from labcore.faults import Fault, parse_fault
from labcore.plan import EveryNth, Random
from labcore.procs import port_in_use
from testbed.errors import Interrupted, RunFailure, SetupError, UsageError
from testbed.experiment.matrix import Cell
from testbed.experiment.scenarios import parse_scenario
from testbed.experiment.selection import (
    at_least,
    parse_all,
    parse_expect,
    parse_kill_fault,
    select_cells,
    with_handlers,
)
from testbed.infra.stack import StackOptions
from testbed.infra.supervisor import WorkerSettings
from testbed.lab import userjobs
from workers.strategies import STRATEGIES, parse_strategy

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="A crash-test lab for the side effects of agent tool calls and queue jobs.",
)

# Options shared by the commands that run the stack.
Strategies = Annotated[list[str] | None, Option("--strategy", "-s", help="Strategy (repeatable).")]
Boundaries = Annotated[list[str] | None, Option("--boundary", "-b", help="Boundary, or none (repeatable).")]
Workers = Annotated[int, Option("--workers", help="RQ worker processes.")]
Retries = Annotated[int, Option("--retries", help="RQ Retry(max=N) per job.")]
Seed = Annotated[int, Option("--seed", help="Seed for payloads and random plans.")]
RedisUrl = Annotated[
    str | None, Option("--redis-url", envvar="REDIS_URL", help="Use this Redis (the run keeps to its own prefix).")
]
ProviderPort = Annotated[int, Option("--provider-port", help="Provider port (default: a free one).")]
ClientTimeout = Annotated[float, Option("--client-timeout", help="Seconds before a provider call times out.")]
CellTimeout = Annotated[
    float | None, Option("--cell-timeout", help="Give up on a cell after this many seconds (default: from the run).")
]
RecoveryMode = Annotated[str, Option("--recovery", help="How a killed worker's job comes back: forced or rq.")]
WorkerTtl = Annotated[int, Option("--worker-ttl", help="rq worker --worker-ttl.")]
MaintenanceInterval = Annotated[int, Option("--maintenance-interval", help="rq worker --maintenance-interval.")]
MonitoringInterval = Annotated[int, Option("--job-monitoring-interval", help="rq worker --job-monitoring-interval.")]
Keep = Annotated[bool, Option("--keep", help="Keep the temp dir (and the keys on a shared Redis).")]
ResultsPath = Annotated[Path, Option("--json", help="Where to write the results.")]
Handlers = Annotated[
    list[str] | None,
    Option("--handler", help="Your own job MODULE:FUNCTION, called as function(op_id, payload) (repeatable)."),
]
Paths = Annotated[
    list[Path] | None, Option("--path", help="Put DIR on the import path of --handler (repeatable; . is on it).")
]
PromiseOption = Annotated[
    str, Option("--promise", help="What --handler is judged against: exactly-once, at-least-once, at-most-once.")
]


def _stack(
    workers: int,
    redis_url: str | None,
    provider_port: int,
    keep: bool,
    recovery: str,
    worker_ttl: int,
    maintenance_interval: int,
    job_monitoring_interval: int,
) -> tuple[StackOptions, str]:
    at_least("--workers", workers)
    at_least("--worker-ttl", worker_ttl, 2)
    at_least("--maintenance-interval", maintenance_interval)
    at_least("--job-monitoring-interval", job_monitoring_interval)
    if recovery not in ("forced", "rq"):
        raise UsageError(f"unknown recovery {recovery!r} (choose from forced, rq)")
    if not 0 <= provider_port <= 65535:
        raise UsageError(f"--provider-port must be a port number (got {provider_port})")
    if provider_port and port_in_use(provider_port):
        raise SetupError(f"provider port {provider_port} is already in use")
    settings = WorkerSettings(worker_ttl, maintenance_interval, job_monitoring_interval)
    return StackOptions(workers, redis_url, provider_port, settings, keep), recovery


def _cell_timeout(given: float | None, ops: int, cells: list[Cell], recovery: str, settings: WorkerSettings) -> float:
    """Long enough for the slowest honest cell: a few jobs a second, plus RQ's own
    recovery of an abandoned job when it is left to RQ (its entry expires, then a
    worker's maintenance has to come round)."""
    if given is not None:
        at_least("--cell-timeout", given)
        return given
    timeout = 120.0 + ops * 0.05
    if recovery == "rq" and any(c.fault is Fault.KILL_WORKER and c.injected for c in cells):
        s = settings
        timeout += s.job_monitoring_interval + 60 + max(s.maintenance_interval, s.worker_ttl - 15) + 60
    return timeout


def _run(stack: StackOptions, mode: str, cells: list[Cell], ops: int, cell_timeout: float | None, **fields: Any) -> Any:
    """A session with `RunOptions(...)`: the runner (and with it rq) is
    imported only once the run's key prefix is set."""
    from testbed.lab import session

    tick = fields.pop("tick", None)
    timeout = _cell_timeout(cell_timeout, ops, cells, mode, stack.settings)

    def options() -> Any:
        from testbed.lab.runner import RunOptions
        from testbed.nemesis.controller import Recovery

        return RunOptions(cells=cells, ops=ops, cell_timeout=timeout, recovery=Recovery(mode), **fields)

    return session.execute(stack, options, tick)


def _finish(ran: Any, json_path: Path, options: dict[str, Any], seed: int) -> int:
    from testbed.report import tables as report

    report.write_results(json_path, ran.meta(options, seed), ran.rows)
    passed = sum(r.passed for r in ran.rows)
    total = len(ran.rows)
    print(f"{passed}/{total} cells as expected; wall {ran.wall:.1f} s; results in {json_path}")
    return 0 if passed == total else 1


@app.command()
def chaos(
    strategy: Strategies = None,
    boundary: Boundaries = None,
    fault: Annotated[
        list[str] | None,
        Option("--fault", "-f", help="kill, kill-worker, timeout, late; hold with duplicate-enqueue (repeatable)."),
    ] = None,
    scenario: Annotated[list[str] | None, Option("--scenario", help="Provider scenario (repeatable).")] = None,
    matrix: Annotated[str, Option("--matrix", help="article (12 cells) or full (every meaningful cell).")] = "article",
    ops: Annotated[int, Option("--ops", help="Operations per cell.")] = 100,
    every: Annotated[int, Option("--every", help="Fault the first attempt of every N-th op.")] = 10,
    workers: Workers = 4,
    parallel: Annotated[int, Option("--parallel", help="Cells in flight at once.")] = 2,
    retries: Retries = 1,
    seed: Seed = 0,
    json_path: ResultsPath = Path("results.json"),
    redis_url: RedisUrl = None,
    provider_port: ProviderPort = 0,
    client_timeout: ClientTimeout = 0.5,
    expect: Annotated[list[str] | None, Option("--expect", help="Own expectation: STRATEGY@BOUNDARY=E/M.")] = None,
    cell_timeout: CellTimeout = None,
    recovery: RecoveryMode = "forced",
    worker_ttl: WorkerTtl = 420,
    maintenance_interval: MaintenanceInterval = 600,
    job_monitoring_interval: MonitoringInterval = 30,
    keep: Keep = False,
    handler: Handlers = None,
    path: Paths = None,
    promise: PromiseOption = "exactly-once",
) -> int:
    """Run the crash matrix on real Redis, RQ workers and a provider process, and check every cell."""
    names = parse_all(strategy, lambda s: parse_strategy(s).name)
    cells = select_cells(
        matrix,
        names,
        parse_all(boundary, parse_boundary),
        parse_all(fault, parse_fault),
        parse_all(scenario, lambda s: parse_scenario(s).name),
    )
    handlers = handler or []
    if handlers:
        cells = with_handlers(cells, handlers, keep_strategies=names is not None)
    at_least("--ops", ops)
    at_least("--every", every)
    at_least("--parallel", parallel)
    at_least("--retries", retries, 0)
    at_least("--client-timeout", client_timeout, 0.05)
    overrides = parse_expect(expect, handlers)
    stack, mode = _stack(
        workers, redis_url, provider_port, keep, recovery, worker_ttl, maintenance_interval, job_monitoring_interval
    )
    paths = userjobs.prepare(handlers, [str(p) for p in path or []], promise)
    from testbed.report import tables as report

    ran = _run(
        stack,
        mode,
        cells,
        ops,
        cell_timeout,
        plan=lambda cell: EveryNth(every, cell.boundary, cell.fault),
        retries=retries,
        seed=seed,
        client_timeout=client_timeout,
        parallel=parallel,
        overrides=overrides,
        promise=promise,
        paths=paths,
    )
    plural = "retry" if retries == 1 else "retries"
    print(
        report.tables(ran.rows, f"{ops} ops per cell, first attempt of every {every}th op faulted, {retries} {plural}")
    )
    if diffs := report.differences(ran.rows):
        print("\n" + diffs)
    print(f"\n{report.LEGEND}")
    meta = {"matrix": matrix, "ops": ops, "every": every, "workers": workers, "parallel": parallel}
    meta |= {"retries": retries, "clientTimeout": client_timeout, "recovery": mode}
    meta |= {"redis": "shared" if redis_url else "private", "workerSettings": vars_of(stack.settings)}
    meta |= {"handlers": handlers, "promise": promise} if handlers else {}
    return _finish(ran, json_path, meta, seed)


@app.command()
def replay(
    strategy: Annotated[str, Option("--strategy", "-s", help="Strategy.")] = "provider-key",
    boundary: Annotated[str, Option("--boundary", "-b", help="Where the kill strikes.")] = "after-effect",
    fault: Annotated[str, Option("--fault", "-f", help="kill (work-horse) or kill-worker.")] = "kill-worker",
    ops: Annotated[int, Option("--ops", help="Operations.")] = 20,
    every: Annotated[int, Option("--every", help="Kill the first attempt of every N-th op.")] = 5,
    workers: Workers = 4,
    retries: Retries = 1,
    seed: Seed = 0,
    json_path: ResultsPath = Path("replay.json"),
    redis_url: RedisUrl = None,
    provider_port: ProviderPort = 0,
    cell_timeout: CellTimeout = None,
    recovery: RecoveryMode = "forced",
    worker_ttl: WorkerTtl = 420,
    maintenance_interval: MaintenanceInterval = 600,
    job_monitoring_interval: MonitoringInterval = 30,
    keep: Keep = False,
    handler: Annotated[str | None, Option("--handler", help="Your own job MODULE:FUNCTION instead of -s.")] = None,
    path: Paths = None,
    promise: PromiseOption = "exactly-once",
) -> int:
    """Watch killed jobs come back: each killed op's attempts as a timeline, and kill-to-replay latency."""
    chosen = [parse_kill_fault("replay", fault)]
    where = parse_all([boundary], parse_boundary)
    assert where is not None
    if where[0] is None:
        raise UsageError("replay needs a boundary to kill at")
    cells = select_cells("article", parse_all([strategy], lambda s: parse_strategy(s).name), where, chosen, None)
    handlers = [handler] if handler else []
    if handlers:
        cells = with_handlers(cells, handlers, keep_strategies=False)
    at_least("--ops", ops)
    at_least("--every", every)
    at_least("--retries", retries, 1)
    stack, mode = _stack(
        workers, redis_url, provider_port, keep, recovery, worker_ttl, maintenance_interval, job_monitoring_interval
    )
    paths = userjobs.prepare(handlers, [str(p) for p in path or []], promise)
    from testbed.report import timeline

    plan = lambda cell: EveryNth(every, cell.boundary, cell.fault)  # noqa: E731
    ran = _run(
        stack, mode, cells, ops, cell_timeout, plan=plan, retries=retries, seed=seed, promise=promise, paths=paths
    )
    row = ran.rows[0]
    print(timeline.render(row.extra.get("history", {})))
    print(f"\n{row.cell.label}, recovery {mode}: {timeline.summary(row.replay_latency_ms, row.kills)}")
    c = row.counts
    print(f"effects / missing: {c.effects} / {c.missing_operations}; replays: {c.replays}")
    for problem in row.problems:
        print(f"DIFFERS  {problem}")
    meta = {"ops": ops, "every": every, "workers": workers, "retries": retries, "recovery": mode}
    meta |= {"workerSettings": vars_of(stack.settings)}
    return _finish(ran, json_path, meta, seed)


@app.command()
def load(
    strategy: Strategies = None,
    boundary: Annotated[
        list[str] | None, Option("--boundary", "-b", help="Boundaries the kills are drawn from (default: all).")
    ] = None,
    fault: Annotated[str, Option("--fault", "-f", help="kill or kill-worker.")] = "kill",
    kill_rate: Annotated[float, Option("--kill-rate", help="Chance that an attempt (not the last) is killed.")] = 0.1,
    ops: Annotated[int, Option("--ops", help="Operations per strategy.")] = 1000,
    workers: Workers = 4,
    retries: Retries = 1,
    seed: Seed = 0,
    window: Annotated[int, Option("--window", help="Jobs enqueued ahead of the workers at most.")] = 2000,
    json_path: ResultsPath = Path("load.json"),
    redis_url: RedisUrl = None,
    provider_port: ProviderPort = 0,
    client_timeout: ClientTimeout = 2.0,
    cell_timeout: CellTimeout = None,
    recovery: RecoveryMode = "forced",
    worker_ttl: WorkerTtl = 420,
    maintenance_interval: MaintenanceInterval = 600,
    job_monitoring_interval: MonitoringInterval = 30,
    keep: Keep = False,
    handler: Handlers = None,
    path: Paths = None,
    promise: PromiseOption = "exactly-once",
) -> int:
    """Many workers, seeded random kills: check each strategy's invariants (and the model) under load."""
    handlers = handler or []
    names = parse_all(strategy, lambda s: parse_strategy(s).name) or ([] if handlers else list(STRATEGIES))
    where = parse_all(boundary, parse_boundary) or list(ORDER)
    if None in where:
        raise UsageError("load kills at boundaries: `none` is not one (use --kill-rate 0 for no kills)")
    chosen = [parse_kill_fault("load", fault)]
    if not 0 <= kill_rate <= 1:
        raise UsageError(f"--kill-rate must be between 0 and 1 (got {kill_rate:g})")
    at_least("--ops", ops)
    at_least("--retries", retries, 1 if kill_rate else 0)
    at_least("--window", window, 100)
    at_least("--client-timeout", client_timeout, 0.05)
    stack, mode = _stack(
        workers, redis_url, provider_port, keep, recovery, worker_ttl, maintenance_interval, job_monitoring_interval
    )
    paths = userjobs.prepare(handlers, [str(p) for p in path or []], promise)
    boundaries = tuple(b for b in where if b is not None)
    cells = [Cell(name, None, chosen[0], spread=kill_rate > 0) for name in names]
    cells += [Cell(h, None, chosen[0], spread=kill_rate > 0, handler=h) for h in handlers]
    from testbed.judge import invariants
    from testbed.report import live
    from testbed.report import tables as report

    line = live.LiveLine()
    ran = _run(
        stack,
        mode,
        cells,
        ops,
        cell_timeout,
        tick=line,
        plan=lambda cell: Random(kill_rate, boundaries, cell.fault, retries, seed),
        retries=retries,
        seed=seed,
        client_timeout=client_timeout,
        parallel=1,
        window=window,
        history=False,
        promise=promise,
        paths=paths,
    )
    line.clear()
    for row in ran.rows:
        if row.cell.handler is None:  # a user's job is judged by its promise (in the run)
            row.broken = invariants.broken(row.cell.strategy, row.counts)
            row.extra["invariants"] = invariants.promises(row.cell.strategy)
    print(
        report.load_table(ran.rows, f"{ops} ops per strategy, {workers} workers, kill rate {kill_rate:g}, seed {seed}")
    )
    if diffs := report.differences(ran.rows):
        print("\n" + diffs)
    meta = {"ops": ops, "workers": workers, "killRate": kill_rate, "boundaries": [b.value for b in boundaries]}
    meta |= {"fault": fault, "retries": retries, "window": window, "recovery": mode}
    meta |= {"peakRssMb": report.peak_rss_mb()}
    return _finish(ran, json_path, meta, seed)


@app.command()
def provider(
    db: Annotated[Path, Option("--db", help="SQLite file of the effect log (created if missing).")],
    port: Annotated[int, Option("--port", help="Port to listen on.")] = 8080,
    host: Annotated[str, Option("--host", help="Interface to bind (loopback by default).")] = "127.0.0.1",
) -> int:
    """Run the provider on its own: an HTTP service with a durable effect log."""
    if port_in_use(port, host):
        raise SetupError(f"provider port {port} is already in use")
    if not db.parent.is_dir():
        raise SetupError(f"directory {db.parent} does not exist")
    from provider.server import serve

    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal.
    with contextlib.suppress(KeyboardInterrupt):
        serve(port, db, host=host)
    return 0


def vars_of(settings: WorkerSettings) -> dict[str, int]:
    return {
        "workerTtl": settings.worker_ttl,
        "maintenanceInterval": settings.maintenance_interval,
        "jobMonitoringInterval": settings.job_monitoring_interval,
    }


def _fail(message: str, code: int) -> NoReturn:
    print(f"testbed: error: {message}", file=sys.stderr)
    sys.exit(code)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    signal.signal(signal.SIGTERM, _interrupt)
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="testbed", standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (Interrupted, KeyboardInterrupt, typer.Abort):
        _fail("interrupted; everything the run started has been stopped", 130)
    except typer.TyperException as exc:  # the parser's own usage errors
        _fail(exc.format_message().replace("\n", " "), exc.exit_code)
    except SetupError as exc:
        _fail(str(exc), 2)
    except RunFailure as exc:
        _fail(str(exc), 3)
    sys.exit(code if isinstance(code, int) else 0)
