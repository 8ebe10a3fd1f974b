"""The commands that run the stack: chaos, replay, load. Each checks its whole
input first, then one shared path runs it, keeps it and reports it."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

from typer import Option

from labcore.boundaries import ORDER, parse_boundary
from labcore.delivery import Engine
from labcore.faults import Fault
from labcore.plan import Random
from labcore.procs import port_in_use
from testbed.cli import checks, hosts
from testbed.cli.base import app, examples
from testbed.cli.options import (
    FAULT_NAMES,
    SCENARIO_NAMES,
    Boundaries,
    CellTimeout,
    ClientTimeout,
    Expect,
    Handlers,
    ImportTimeout,
    Paths,
    PromiseOption,
    ResultsPath,
    Retries,
    Seed,
    StackArgs,
    StoreArgs,
    Strategies,
    Yes,
    run_options,
)
from testbed.errors import RunFailure, SetupError, UsageError
from testbed.experiment.matrix import Cell
from testbed.experiment.selection import (
    at_least,
    parse_all,
    parse_expect,
    parse_kill_fault,
    select_cells,
    with_handlers,
)
from testbed.infra.stack import StackOptions
from testbed.infra.supervisor import CELERY_RESTORE_SWEEP, CELERY_VISIBILITY, CeleryWorkers, WorkerSettings
from testbed.lab import engine, userjobs
from testbed.lab.options import (
    RunOptions,
    every_nth,
    load_schedule,
    matrix_cells,
    refuse_untested,
    schedule_cells,
    scheduled,
)
from testbed.nemesis.recovery import Recovery
from testbed.store.files import replaced
from testbed.store.layout import REPORT, RESULTS
from testbed.store.runs import RunStore
from workers.strategies import STRATEGIES, parse_strategy

MAX_OPS = 10_000_000
MAX_WORKERS = 64


def stack_options(args: StackArgs) -> tuple[StackOptions, str]:
    checks.finite("--workers", args.workers, 1, MAX_WORKERS)
    at_least("--worker-ttl", args.worker_ttl, 2)
    at_least("--maintenance-interval", args.maintenance_interval)
    at_least("--job-monitoring-interval", args.job_monitoring_interval)
    if args.recovery not in ("forced", "rq"):
        raise UsageError(f"unknown recovery {args.recovery!r} (choose from forced, rq)")
    port = args.provider_port
    if not 0 <= port <= 65535:
        raise UsageError(f"--provider-port must be a port number (got {port})")
    if port and port_in_use(port):
        raise SetupError(f"provider port {port} is already in use")
    settings = WorkerSettings(args.worker_ttl, args.maintenance_interval, args.job_monitoring_interval)
    remote = hosts.remote_options(args)
    return StackOptions(args.workers, args.redis_url, port, settings, args.keep, remote), args.recovery


def _cell_timeout(
    given: float | None,
    ops: int,
    cells: list[Cell],
    recovery: str,
    settings: WorkerSettings,
    celery: CeleryWorkers | None = None,
) -> float:
    """Long enough for the slowest honest cell: a few jobs a second, plus RQ's own
    recovery of an abandoned job when it is left to RQ (its entry expires, then a
    worker's maintenance has to come round), or Celery's broker's restoring of a
    killed worker's unacknowledged task (after the visibility timeout, at the
    broker's next sweep)."""
    if given is not None:
        checks.finite("--cell-timeout", given, 1, 7 * 86_400)
        return given
    timeout = 120.0 + ops * 0.05
    if any(Fault.KILL_WORKER in c.faults for c in cells):
        if celery is not None:
            given = celery.visibility_timeout
            timeout += (CELERY_VISIBILITY + CELERY_RESTORE_SWEEP if given is None else given) + 20
        elif recovery == "rq":
            timeout += _rq_recovery_seconds(settings)[1] + 60
    return timeout


def on_engine(
    args: StackArgs, stack: StackOptions, cells: list[Cell], retries: int, handlers: list[str], paths: Sequence[str]
) -> tuple[StackOptions, list[Cell]]:
    """The stack and cells for the engine the command line asks for (`testbed.lab.engine`)."""
    return engine.on_engine(args.engine_choice(), stack, cells, retries, handlers, paths, Recovery(args.recovery))


def rq_recovery_note(settings: WorkerSettings) -> str:
    low, high = _rq_recovery_seconds(settings)
    return (
        f"RQ's own recovery brings each killed worker's job back {low} to {high} s after the kill"
        " (--job-monitoring-interval + 60 s, then a worker's maintenance); the run waits for it"
    )


def _rq_recovery_seconds(s: WorkerSettings) -> tuple[int, int]:
    """When RQ's own maintenance brings a dead worker's job back: its started-registry
    entry expires job-monitoring-interval + 60 s after the last heartbeat, then a
    worker's maintenance (every maintenance-interval, not before worker-ttl - 15) requeues it."""
    expires = s.job_monitoring_interval + 60
    return expires, expires + max(s.maintenance_interval, s.worker_ttl - 15)


@dataclass(frozen=True, slots=True)
class Output:
    """Where a run's results go, and what they say about the run besides its rows."""

    command: str
    json_path: Path
    meta: dict[str, Any]
    seed: int | None  # None: explore without --seed
    store: StoreArgs

    def check(self) -> None:
        """Every place the run will write, before it starts."""
        checks.output_file("--json", self.json_path)
        if self.store.junit is not None:
            checks.output_file("--junit", self.store.junit)
        if not self.store.no_store:
            RunStore(self.store.store).check_writable()
        elif self.store.report:
            raise UsageError("--report writes into the stored run: it needs the store (drop --no-store)")

    def document(self, ran: Any, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """The run's results; `extra`: what a command adds of its own (explore's summary)."""
        from testbed.report import tables as report
        from testbed.store import results

        meta = self.meta | ({"peakRssMb": report.peak_rss_mb()} if self.command == "load" else {})
        return results.document({"command": self.command} | ran.meta(meta, self.seed), ran.rows) | (extra or {})

    def deliver(self, ran: Any, extra: dict[str, Any] | None = None, judged: Any = None) -> None:
        """What else the user asked for: JUnit XML, the report page; and where the run is kept.
        `judged`: the run's results as parsed already, if they were."""
        if self.store.junit is not None or self.store.report:
            from testbed.report import junit
            from testbed.store import results

            if self.store.junit is not None:
                junit.write_junit(self.store.junit, judged or results.parse(self.document(ran, extra)))
                print(f"JUnit XML in {self.store.junit}")
            if self.store.report and ran.stored is not None:
                print(f"report in {write_report(ran.stored.path)}")
        if ran.stored is not None:
            print(f"stored in {ran.stored.path}")

    def keep(self, ran: Any, store: RunStore | None, extra: dict[str, Any] | None = None) -> Any:
        """results.json where it can be written: the stored run's first (a store that fails then
        leaves the run incomplete, and --json says so), then --json; if neither, stdout. If a part
        of the stack failed, or a file could not be written, the failure ends the command (exit 3)
        once the cells judged before are written. The run as kept."""
        from testbed.store import results  # at the end: its records are built as it is imported
        from testbed.store.files import Unwritable

        stored, where = ran.stored, "stdout"
        if stored is not None and stored.broken is None:
            assert store is not None
            try:
                stored.keep_results(self.document(ran, extra))
                store.mark_latest(ran.run_id)
                where = str(stored.path / RESULTS)
            except Unwritable as exc:
                ran = replace(ran, failure=ran.failure or str(exc))
        document = self.document(ran, extra)
        failure = ran.failure
        try:
            results.write(self.json_path, document)
            where = str(self.json_path)
        except Unwritable as exc:
            if where == "stdout":
                print(results.text(document), end="")
            failure = "; ".join(filter(None, [ran.failure, str(exc)]))
        if failure:
            done = f"{len(ran.rows)} cell(s) judged, {len(ran.not_run)} not run, written to {where}"
            raise RunFailure(f"{failure} ({done})")
        return ran


def _run(
    stack: StackOptions,
    mode: str,
    cells: list[Cell],
    ops: int,
    cell_timeout: float | None,
    out: Output,
    estimate: checks.Estimate,
    yes: bool,
    **fields: Any,
) -> Any:
    """One run: the stack, the cells with `RunOptions(...)`, the results. If a part of
    the stack failed, the cells judged before are written, marked incomplete, and
    the failure ends the command (exit 3)."""
    from testbed.lab import session
    from testbed.report.live import Live

    stack = hosts.fit_stack(stack, cells)
    out.check()
    timeout = _cell_timeout(cell_timeout, ops, cells, mode, stack.settings, stack.celery)
    if (note := estimate.confirm(yes)) is not None:
        print(f"testbed: {note}", file=sys.stderr)
    options = RunOptions(cells=cells, ops=ops, cell_timeout=timeout, recovery=Recovery(mode), **fields)
    store = None if out.store.no_store else RunStore(out.store.store)
    with Live() as live:
        ran = session.execute(stack, options, live.judged, live.tick, store)
    ran = out.keep(ran, store)
    return ran


def _finish(ran: Any, out: Output) -> int:
    """What the run found, in words (the same as the report's and `testbed check`'s), the
    summary line, and what else the user asked for: JUnit XML, the report page."""
    from testbed.report import findings
    from testbed.store import results

    judged = results.parse(out.document(ran))
    print("\n" + findings.words(judged.rows))
    passed = sum(r.passed for r in ran.rows)
    total = len(ran.rows)
    print(f"{passed}/{total} cells as expected; wall {ran.wall:.1f} s; results in {out.json_path}")
    out.deliver(ran, judged=judged)
    return 0 if passed == total else 1


def write_report(run: Path) -> Path:
    from testbed.report import page

    with replaced(run / REPORT) as out:
        out.write(page.of_run(run).encode())
    return run / REPORT


def vars_of(settings: WorkerSettings) -> dict[str, int]:
    return {
        "workerTtl": settings.worker_ttl,
        "maintenanceInterval": settings.maintenance_interval,
        "jobMonitoringInterval": settings.job_monitoring_interval,
    }


def _expectations(overrides: dict[Cell, dict[str, int]]) -> dict[str, list[int]]:
    """As results.json keeps them, so that `testbed check` judges with them again."""
    return {cell.label: [v["effects"], v["missing_operations"]] for cell, v in overrides.items()}


def shared_meta(stack_args: StackArgs) -> dict[str, Any]:
    redis = "shared" if stack_args.redis_url else "private"
    meta: dict[str, Any] = {"workers": stack_args.workers, "redis": redis}
    if stack_args.engine_choice().celery:
        meta["engine"] = Engine.CELERY.value
        meta |= {"celeryApp": stack_args.celery_app} if stack_args.celery_app else {}
        meta |= {"visibilityTimeout": stack_args.visibility_timeout} if stack_args.visibility_timeout else {}
    return meta


@app.command(
    short_help="The crash matrix: every strategy at every boundary, checked against the model.",
    epilog=examples(
        "testbed chaos                                  # the article's 12 cells",
        "testbed chaos --matrix full                    # every meaningful cell",
        "testbed chaos -f provider-crash -b after-effect -s provider-key",
        "testbed chaos --scenario withdrawn -s reconcile -s naive-reconcile",
        "testbed chaos --expect retry-only@after-effect:kill=110/0 --junit junit.xml",
        "testbed chaos --schedule runs/latest/counterexample.json -s record-before",
    ),
)
@run_options
def chaos(
    stack_args: StackArgs,
    store_args: StoreArgs,
    strategy: Strategies = None,
    boundary: Boundaries = None,
    fault: Annotated[
        list[str] | None,
        Option("--fault", "-f", metavar="FAULT", help=f"Fault (repeatable): {FAULT_NAMES}."),
    ] = None,
    scenario: Annotated[
        list[str] | None, Option("--scenario", metavar="SCENARIO", help=f"Scenario (repeatable): {SCENARIO_NAMES}.")
    ] = None,
    matrix: Annotated[
        str, Option("--matrix", metavar="NAME", help="article (12 cells) or full (every meaningful cell).")
    ] = "article",
    ops: Annotated[int, Option("--ops", metavar="N", help="Operations per cell.")] = 100,
    every: Annotated[int, Option("--every", metavar="N", help="Fault the first attempt of every N-th op.")] = 10,
    parallel: Annotated[int, Option("--parallel", metavar="N", help="Cells in flight at once (1 to 16).")] = 2,
    retries: Retries = 1,
    seed: Seed = 0,
    json_path: ResultsPath = Path("results.json"),
    client_timeout: ClientTimeout = 0.5,
    expect: Expect = None,
    cell_timeout: CellTimeout = None,
    yes: Yes = False,
    handler: Handlers = None,
    path: Paths = None,
    promise: PromiseOption = "exactly-once",
    import_timeout: ImportTimeout = userjobs.IMPORT_TIMEOUT,
    schedule: Annotated[
        Path | None,
        Option(
            "--schedule",
            metavar="FILE",
            help="Run exactly this schedule (testbed explore's trials and counterexamples) for each -s and"
            " --handler: its ops, retries and scenario (not -b, -f, --scenario, --matrix, --every, --ops, --retries).",
        ),
    ] = None,
) -> int:
    """Run the crash matrix on real Redis, RQ workers and a provider process, and check every cell
    (a strategy's against the model; your own job's, with --handler, against its promise)."""
    handlers = handler or []
    plan = every_nth(every)
    if schedule is not None:
        if boundary or fault or scenario:
            raise UsageError("--schedule says where faults strike and the scenario: not with -b, -f or --scenario")
        trial = load_schedule(schedule)
        cells = schedule_cells(trial, strategy, handlers)
        ops, retries, plan = len(trial.ops), trial.retries, scheduled
    else:
        cells = matrix_cells(matrix, strategy, boundary, fault, scenario, handlers)
    checks.finite("--ops", ops, 1, MAX_OPS)
    checks.finite("--every", every, 1, MAX_OPS)
    checks.finite("--parallel", parallel, 1, 16)
    checks.finite("--retries", retries, 0, 10)
    checks.finite("--client-timeout", client_timeout, 0.05, 3600)
    refuse_untested(cells, every_nth(every), ops)
    overrides = parse_expect(expect, cells)
    stack, mode = stack_options(stack_args)
    paths = userjobs.prepare(
        handlers, [str(p) for p in path or []], promise, import_timeout=import_timeout, celery_app=stack_args.celery_app
    )
    stack, cells = on_engine(stack_args, stack, cells, retries, handlers, paths)
    if overrides and stack.celery is not None:
        raise UsageError("--expect names cells of RQ's table: not with --engine celery (one table per setting)")
    from testbed.report import tables as report

    meta: dict[str, Any] = {"matrix": matrix}
    # The selection as given: a narrowed matrix is not the matrix.
    given = {"strategies": strategy, "boundaries": boundary, "faults": fault, "scenarios": scenario}
    meta |= {name: values for name, values in given.items() if values}
    meta |= {"ops": ops, "every": every, "parallel": parallel, **shared_meta(stack_args)}
    meta |= {"handlers": handlers, "promise": promise} if handlers else {}
    meta |= {"retries": retries, "clientTimeout": client_timeout, "recovery": mode}
    meta |= {"workerSettings": vars_of(stack.settings), "expect": _expectations(overrides)}
    meta |= {"schedule": str(schedule)} if schedule is not None else {}
    out = Output("chaos", json_path, meta, seed, store_args)
    estimate = checks.Estimate.of(len(cells), ops, 1 / every, retries, stack_args.workers, parallel * ops)
    ran = _run(
        stack,
        mode,
        cells,
        ops,
        cell_timeout,
        out,
        estimate,
        yes,
        plan=plan,
        retries=retries,
        seed=seed,
        client_timeout=client_timeout,
        parallel=parallel,
        overrides=overrides,
        promise=promise,
        paths=paths,
    )
    if schedule is not None:
        from testbed.explore.words import row_lines

        print("\n\n".join("\n".join(row_lines(row)) for row in ran.rows))
    else:
        caption = report.run_caption(ops, every, retries)
        if stack.celery is not None:
            caption += f"; Celery's visibility timeout {stack.celery.visibility_timeout or CELERY_VISIBILITY} s"
        print(report.tables(ran.rows, caption))
    return _finish(ran, out)


@app.command(
    short_help="Watch killed jobs come back: each killed op's attempts, and kill-to-replay latency.",
    epilog=examples(
        "testbed replay                                  # kill-worker, forced recovery",
        "testbed replay --fault kill -b before-effect",
        "testbed replay --recovery rq --worker-ttl 20 --maintenance-interval 5 --job-monitoring-interval 5",
    ),
)
@run_options
def replay(
    stack_args: StackArgs,
    store_args: StoreArgs,
    strategy: Annotated[
        str, Option("--strategy", "-s", metavar="STRATEGY", help=f"Strategy: {', '.join(STRATEGIES)}.")
    ] = "provider-key",
    boundary: Annotated[
        str, Option("--boundary", "-b", metavar="BOUNDARY", help="Where the kill strikes (not none).")
    ] = "after-effect",
    fault: Annotated[str, Option("--fault", "-f", metavar="FAULT", help="kill (work-horse) or kill-worker.")] = (
        "kill-worker"
    ),
    ops: Annotated[int, Option("--ops", metavar="N", help="Operations.")] = 20,
    every: Annotated[int, Option("--every", metavar="N", help="Kill the first attempt of every N-th op.")] = 5,
    retries: Retries = 1,
    seed: Seed = 0,
    json_path: ResultsPath = Path("replay.json"),
    cell_timeout: CellTimeout = None,
    yes: Yes = False,
    handler: Annotated[
        str | None, Option("--handler", metavar="MODULE:FUNCTION", help="Your own job instead of -s.")
    ] = None,
    path: Paths = None,
    promise: PromiseOption = "exactly-once",
    import_timeout: ImportTimeout = userjobs.IMPORT_TIMEOUT,
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
    checks.finite("--ops", ops, 1, MAX_OPS)
    checks.finite("--every", every, 1, MAX_OPS)
    checks.finite("--retries", retries, 1, 10)
    refuse_untested(cells, every_nth(every), ops)
    stack, mode = stack_options(stack_args)
    paths = userjobs.prepare(
        handlers, [str(p) for p in path or []], promise, import_timeout=import_timeout, celery_app=stack_args.celery_app
    )
    stack, cells = on_engine(stack_args, stack, cells, retries, handlers, paths)
    from testbed.report import timeline

    meta = {"ops": ops, "every": every, "retries": retries, "recovery": mode, **shared_meta(stack_args)}
    out = Output("replay", json_path, meta | {"workerSettings": vars_of(stack.settings)}, seed, store_args)
    if mode == "rq" and chosen[0] is Fault.KILL_WORKER:
        print(f"testbed: note: {rq_recovery_note(stack.settings)}", file=sys.stderr)
    estimate = checks.Estimate.of(1, ops, 1 / every, retries, stack_args.workers, ops)
    ran = _run(
        stack,
        mode,
        cells,
        ops,
        cell_timeout,
        out,
        estimate,
        yes,
        plan=every_nth(every),
        retries=retries,
        seed=seed,
        promise=promise,
        paths=paths,
    )
    recovery = "Celery's" if stack.celery is not None else mode
    for row in ran.rows:  # one per delivery setting on Celery
        print(timeline.render(row.history or {}))
        print(f"\n{row.cell.label}, recovery {recovery}: {timeline.summary(row.replay_latency_ms, row.kills)}")
        c = row.counts
        print(f"effects / missing: {c.effects} / {c.missing_operations}; replays: {c.replays}\n")
    return _finish(ran, out)


@app.command(
    short_help="Many workers, seeded random kills: each strategy's promises (and the model) under load.",
    epilog=examples(
        "testbed load --workers 8 --ops 5000 --kill-rate 0.1 --seed 7",
        "testbed load -s provider-key -b after-effect --fault kill-worker",
        "testbed load --kill-rate 0 --ops 2000                  # throughput, no kills",
    ),
)
@run_options
def load(
    stack_args: StackArgs,
    store_args: StoreArgs,
    strategy: Strategies = None,
    boundary: Annotated[
        list[str] | None,
        Option("--boundary", "-b", metavar="BOUNDARY", help="Boundaries the kills are drawn from (default: all)."),
    ] = None,
    fault: Annotated[str, Option("--fault", "-f", metavar="FAULT", help="kill or kill-worker.")] = "kill",
    kill_rate: Annotated[
        float, Option("--kill-rate", metavar="P", help="Chance (0 to 1) that an attempt (not the last) is killed.")
    ] = 0.1,
    ops: Annotated[int, Option("--ops", metavar="N", help="Operations per strategy.")] = 1000,
    retries: Retries = 1,
    seed: Seed = 0,
    window: Annotated[int, Option("--window", metavar="N", help="Jobs enqueued ahead of the workers at most.")] = 2000,
    json_path: ResultsPath = Path("load.json"),
    client_timeout: ClientTimeout = 2.0,
    cell_timeout: CellTimeout = None,
    yes: Yes = False,
    handler: Handlers = None,
    path: Paths = None,
    promise: PromiseOption = "exactly-once",
    import_timeout: ImportTimeout = userjobs.IMPORT_TIMEOUT,
) -> int:
    """Many workers, seeded random kills: check each strategy's invariants (and the model) under load;
    your own job's (--handler) against its promise."""
    handlers = handler or []
    names = parse_all(strategy, lambda s: parse_strategy(s).name) or ([] if handlers else list(STRATEGIES))
    where = parse_all(boundary, parse_boundary) or list(ORDER)
    if None in where:
        raise UsageError("load kills at boundaries: `none` is not one (use --kill-rate 0 for no kills)")
    chosen = [parse_kill_fault("load", fault)]
    checks.finite("--kill-rate", kill_rate, 0, 1)
    checks.finite("--ops", ops, 1, MAX_OPS)
    checks.finite("--retries", retries, 1 if kill_rate else 0, 10)
    checks.finite("--window", window, 100, 1_000_000)
    checks.finite("--client-timeout", client_timeout, 0.05, 3600)
    stack, mode = stack_options(stack_args)
    paths = userjobs.prepare(
        handlers, [str(p) for p in path or []], promise, import_timeout=import_timeout, celery_app=stack_args.celery_app
    )
    boundaries = tuple(b for b in where if b is not None)
    cells = [Cell(name, None, chosen[0], spread=kill_rate > 0) for name in names]
    cells += [Cell(h, None, chosen[0], spread=kill_rate > 0, handler=h) for h in handlers]
    stack, cells = on_engine(stack_args, stack, cells, retries, handlers, paths)
    from testbed.report import tables as report

    meta = {"ops": ops, "killRate": kill_rate, **shared_meta(stack_args)}
    meta |= {"boundaries": [b.value for b in boundaries], "fault": fault, "retries": retries, "window": window}
    meta |= {"recovery": mode}
    out = Output("load", json_path, meta, seed, store_args)
    estimate = checks.Estimate.of(len(cells), ops, kill_rate, retries, stack_args.workers, min(ops, window) + ops // 4)
    ran = _run(
        stack,
        mode,
        cells,
        ops,
        cell_timeout,
        out,
        estimate,
        yes,
        plan=lambda cell: Random(kill_rate, boundaries, cell.fault, retries, seed),
        retries=retries,
        seed=seed,
        client_timeout=client_timeout,
        parallel=1,
        window=window,
        history=False,
        promises=True,
        promise=promise,
        paths=paths,
    )
    note = f"{ops} ops per strategy, {stack_args.workers} workers, kill rate {kill_rate:g}, seed {seed}"
    print(report.load_table(ran.rows, note))
    return _finish(ran, out)
