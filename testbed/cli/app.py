"""The command line: validates input, then hands over to a session.

Exit codes: 0 every cell as expected; 1 a cell differs from its expectation
(or, under load, breaks an invariant); 2 bad input or an environment the run
cannot start in; 3 the stack failed during the run; 130 interrupted.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from typer import Argument, Option

from labcore.boundaries import ORDER, parse_boundary
from labcore.credentials import TOKEN_ENV, is_loopback
from labcore.faults import Fault, parse_fault
from labcore.plan import EveryNth, Random
from labcore.procs import port_in_use
from testbed.cli import hosts
from testbed.cli.options import (
    Boundaries,
    CellTimeout,
    ClientTimeout,
    ResultsPath,
    Retries,
    Seed,
    StackArgs,
    StoreArgs,
    Strategies,
    run_options,
)
from testbed.errors import Interrupted, RunFailure, SetupError, UsageError
from testbed.experiment.matrix import Cell
from testbed.experiment.scenarios import parse_scenario
from testbed.experiment.selection import at_least, parse_all, parse_expect, parse_kill_fault, select_cells
from testbed.infra.stack import StackOptions
from testbed.infra.supervisor import WorkerSettings
from testbed.lab.store import REPORT, RESULTS, RunStore, read_history
from workers.strategies import STRATEGIES, parse_strategy

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="A crash-test lab for the side effects of agent tool calls and queue jobs.",
)


def _stack(args: StackArgs) -> tuple[StackOptions, str]:
    at_least("--workers", args.workers)
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


@dataclass(frozen=True, slots=True)
class Output:
    """Where a run's results go, and what they say about the run besides its rows."""

    command: str
    json_path: Path
    meta: dict[str, Any]
    seed: int
    store: StoreArgs

    def document(self, ran: Any) -> dict[str, Any]:
        from testbed.report import tables as report

        meta = self.meta | ({"peakRssMb": report.peak_rss_mb()} if self.command == "load" else {})
        return report.results({"command": self.command} | ran.meta(meta, self.seed), ran.rows)


def _run(
    stack: StackOptions, mode: str, cells: list[Cell], ops: int, cell_timeout: float | None, out: Output, **fields: Any
) -> Any:
    """A session with `RunOptions(...)`: the runner (and with it rq) is
    imported only once the run's key prefix is set. If a part of the stack
    failed, the cells judged before are written, marked incomplete, and the
    failure ends the command (exit 3)."""
    from testbed.lab import session
    from testbed.report import tables as report

    tick = fields.pop("tick", None)
    hosts.refuse_remote(stack, cells)
    timeout = _cell_timeout(cell_timeout, ops, cells, mode, stack.settings)

    def options() -> Any:
        from testbed.lab.runner import RunOptions
        from testbed.nemesis.recovery import Recovery

        return RunOptions(cells=cells, ops=ops, cell_timeout=timeout, recovery=Recovery(mode), **fields)

    def judged(index: int, total: int, row: Any) -> None:
        print(report.progress_line(index, total, row), file=sys.stderr)

    store = None if out.store.no_store else RunStore(out.store.store)
    ran = session.execute(stack, options, judged, tick, store)
    document = out.document(ran)
    report.write_json(out.json_path, document)
    if ran.stored is not None:
        report.write_json(ran.stored.path / RESULTS, document)
        assert store is not None
        store.mark_latest(ran.run_id)
    if ran.failure:
        if tick is not None:
            tick.clear()
        done = f"{len(ran.rows)} cell(s) judged, {len(ran.not_run)} not run, written to {out.json_path}"
        raise RunFailure(f"{ran.failure} ({done})")
    return ran


def _finish(ran: Any, out: Output) -> int:
    """The summary line, and what else the user asked for: JUnit XML, the report page."""
    passed = sum(r.passed for r in ran.rows)
    total = len(ran.rows)
    print(f"{passed}/{total} cells as expected; wall {ran.wall:.1f} s; results in {out.json_path}")
    if out.store.junit is not None or out.store.report:
        from testbed.report import junit

        document = out.document(ran)
        if out.store.junit is not None:
            junit.write_junit(out.store.junit, document)
            print(f"JUnit XML in {out.store.junit}")
        if out.store.report and ran.stored is not None:
            print(f"report in {_write_report(ran.stored.path)}")
    if ran.stored is not None:
        print(f"stored in {ran.stored.path}")
    return 0 if passed == total else 1


def _write_report(run: Path) -> Path:
    from testbed.report import html

    page = html.render(json.loads((run / RESULTS).read_text()), read_history(run))
    (run / REPORT).write_text(page)
    return run / REPORT


@app.command()
@run_options
def chaos(
    stack_args: StackArgs,
    store_args: StoreArgs,
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
    parallel: Annotated[int, Option("--parallel", help="Cells in flight at once.")] = 2,
    retries: Retries = 1,
    seed: Seed = 0,
    json_path: ResultsPath = Path("results.json"),
    client_timeout: ClientTimeout = 0.5,
    expect: Annotated[list[str] | None, Option("--expect", help="Own expectation: STRATEGY@BOUNDARY=E/M.")] = None,
    cell_timeout: CellTimeout = None,
) -> int:
    """Run the crash matrix on real Redis, RQ workers and a provider process, and check every cell."""
    cells = select_cells(
        matrix,
        parse_all(strategy, lambda s: parse_strategy(s).name),
        parse_all(boundary, parse_boundary),
        parse_all(fault, parse_fault),
        parse_all(scenario, lambda s: parse_scenario(s).name),
    )
    at_least("--ops", ops)
    at_least("--every", every)
    at_least("--parallel", parallel)
    at_least("--retries", retries, 0)
    at_least("--client-timeout", client_timeout, 0.05)
    overrides = parse_expect(expect)
    stack, mode = _stack(stack_args)
    from testbed.report import tables as report

    meta = {"matrix": matrix, "ops": ops, "every": every, "workers": stack_args.workers, "parallel": parallel}
    meta |= {"retries": retries, "clientTimeout": client_timeout, "recovery": mode}
    meta |= {"redis": "shared" if stack_args.redis_url else "private", "workerSettings": vars_of(stack.settings)}
    out = Output("chaos", json_path, meta, seed, store_args)
    ran = _run(
        stack,
        mode,
        cells,
        ops,
        cell_timeout,
        out,
        plan=lambda cell: EveryNth(every, cell.boundary, cell.fault),
        retries=retries,
        seed=seed,
        client_timeout=client_timeout,
        parallel=parallel,
        overrides=overrides,
    )
    plural = "retry" if retries == 1 else "retries"
    print(
        report.tables(ran.rows, f"{ops} ops per cell, first attempt of every {every}th op faulted, {retries} {plural}")
    )
    if diffs := report.differences(ran.rows):
        print("\n" + diffs)
    print(f"\n{report.LEGEND}")
    return _finish(ran, out)


@app.command()
@run_options
def replay(
    stack_args: StackArgs,
    store_args: StoreArgs,
    strategy: Annotated[str, Option("--strategy", "-s", help="Strategy.")] = "provider-key",
    boundary: Annotated[str, Option("--boundary", "-b", help="Where the kill strikes.")] = "after-effect",
    fault: Annotated[str, Option("--fault", "-f", help="kill (work-horse) or kill-worker.")] = "kill-worker",
    ops: Annotated[int, Option("--ops", help="Operations.")] = 20,
    every: Annotated[int, Option("--every", help="Kill the first attempt of every N-th op.")] = 5,
    retries: Retries = 1,
    seed: Seed = 0,
    json_path: ResultsPath = Path("replay.json"),
    cell_timeout: CellTimeout = None,
) -> int:
    """Watch killed jobs come back: each killed op's attempts as a timeline, and kill-to-replay latency."""
    chosen = [parse_kill_fault("replay", fault)]
    where = parse_all([boundary], parse_boundary)
    assert where is not None
    if where[0] is None:
        raise UsageError("replay needs a boundary to kill at")
    cells = select_cells("article", parse_all([strategy], lambda s: parse_strategy(s).name), where, chosen, None)
    at_least("--ops", ops)
    at_least("--every", every)
    at_least("--retries", retries, 1)
    stack, mode = _stack(stack_args)
    from testbed.report import timeline

    meta = {"ops": ops, "every": every, "workers": stack_args.workers, "retries": retries, "recovery": mode}
    out = Output("replay", json_path, meta | {"workerSettings": vars_of(stack.settings)}, seed, store_args)
    plan = lambda cell: EveryNth(every, cell.boundary, cell.fault)  # noqa: E731
    ran = _run(stack, mode, cells, ops, cell_timeout, out, plan=plan, retries=retries, seed=seed)
    row = ran.rows[0]
    print(timeline.render(row.extra.get("history", {})))
    print(f"\n{row.cell.label}, recovery {mode}: {timeline.summary(row.replay_latency_ms, row.kills)}")
    c = row.counts
    print(f"effects / missing: {c.effects} / {c.missing_operations}; replays: {c.replays}")
    for problem in row.problems:
        print(f"DIFFERS  {problem}")
    return _finish(ran, out)


@app.command()
@run_options
def load(
    stack_args: StackArgs,
    store_args: StoreArgs,
    strategy: Strategies = None,
    boundary: Annotated[
        list[str] | None, Option("--boundary", "-b", help="Boundaries the kills are drawn from (default: all).")
    ] = None,
    fault: Annotated[str, Option("--fault", "-f", help="kill or kill-worker.")] = "kill",
    kill_rate: Annotated[float, Option("--kill-rate", help="Chance that an attempt (not the last) is killed.")] = 0.1,
    ops: Annotated[int, Option("--ops", help="Operations per strategy.")] = 1000,
    retries: Retries = 1,
    seed: Seed = 0,
    window: Annotated[int, Option("--window", help="Jobs enqueued ahead of the workers at most.")] = 2000,
    json_path: ResultsPath = Path("load.json"),
    client_timeout: ClientTimeout = 2.0,
    cell_timeout: CellTimeout = None,
) -> int:
    """Many workers, seeded random kills: check each strategy's invariants (and the model) under load."""
    names = parse_all(strategy, lambda s: parse_strategy(s).name) or list(STRATEGIES)
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
    stack, mode = _stack(stack_args)
    boundaries = tuple(b for b in where if b is not None)
    cells = [Cell(name, None, chosen[0], spread=kill_rate > 0) for name in names]
    from testbed.report import live
    from testbed.report import tables as report

    meta = {"ops": ops, "workers": stack_args.workers, "killRate": kill_rate}
    meta |= {"boundaries": [b.value for b in boundaries], "fault": fault, "retries": retries, "window": window}
    meta |= {"recovery": mode}
    out = Output("load", json_path, meta, seed, store_args)
    line = live.LiveLine()
    ran = _run(
        stack,
        mode,
        cells,
        ops,
        cell_timeout,
        out,
        tick=line,
        plan=lambda cell: Random(kill_rate, boundaries, cell.fault, retries, seed),
        retries=retries,
        seed=seed,
        client_timeout=client_timeout,
        parallel=1,
        window=window,
        history=False,
        promises=True,
    )
    line.clear()
    print(
        report.load_table(
            ran.rows, f"{ops} ops per strategy, {stack_args.workers} workers, kill rate {kill_rate:g}, seed {seed}"
        )
    )
    if diffs := report.differences(ran.rows):
        print("\n" + diffs)
    return _finish(ran, out)


StoreDir = Annotated[Path, Option("--store", help="The run store.")]
RunName = Annotated[str, Argument(help="A stored run: its id, `latest`, or its directory.")]


def _stored(store: Path, name: str) -> tuple[Path, dict[str, Any]]:
    run = RunStore(store).resolve(name)
    try:
        return run, json.loads((run / RESULTS).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {run / RESULTS}: {exc}") from None


@app.command()
def runs(store: StoreDir = Path("runs")) -> int:
    """List the stored runs: id, command, when, cells, verdict, size on disk."""
    found = list(RunStore(store).runs())
    if not found:
        print(f"no stored runs in {store}")
        return 0
    grid = [["run", "command", "started", "cells", "verdict", "size"]]
    grid += [[r.id, r.command, r.started, str(r.cells), r.verdict, f"{r.bytes / 1e6:.1f} MB"] for r in found]
    from testbed.report import tables

    print("\n".join(tables.aligned(grid)))
    return 0


@app.command()
def report(run: RunName = "latest", store: StoreDir = Path("runs")) -> int:
    """Write a stored run's report.html (self-contained: opens from disk) and print its path."""
    path, _ = _stored(store, run)
    print(_write_report(path))
    return 0


@app.command()
def check(
    run: RunName = "latest",
    store: StoreDir = Path("runs"),
    expect: Annotated[list[str] | None, Option("--expect", help="Own expectation: STRATEGY@BOUNDARY=E/M.")] = None,
    junit_path: Annotated[Path | None, Option("--junit", help="Also write JUnit XML here.")] = None,
) -> int:
    """Judge a stored run again from its history and provider log alone (no Redis, no workers)."""
    path, results = _stored(store, run)
    overrides = parse_expect(expect) if expect else None
    from testbed.lab.recheck import recheck
    from testbed.report import tables as report

    rows = recheck(path, results, overrides)
    if diffs := report.differences(rows):
        print(diffs)
    document = report.results({k: v for k, v in results.items() if k not in ("rows", "verdict")}, rows)
    if junit_path is not None:
        from testbed.report import junit

        junit.write_junit(junit_path, document)
    passed = sum(r.passed for r in rows)
    was = results.get("verdict")
    print(f"{passed}/{len(rows)} cells as expected, checked from {path} (the run said: {was})")
    return 0 if passed == len(rows) else 1


@app.command()
def compare(
    run_a: Annotated[str, Argument(help="A stored run (id, latest, or directory).")],
    run_b: Annotated[str, Argument(help="Another stored run.")],
    store: StoreDir = Path("runs"),
) -> int:
    """Print the cells whose counts or verdicts differ between two stored runs, and their latency changes."""
    from testbed.report import compare as comparing

    (a_path, a), (b_path, b) = _stored(store, run_a), _stored(store, run_b)
    print(comparing.render_text(comparing.compare(a, b), a_path.name, b_path.name))
    return 0


@app.command()
def provider(
    db: Annotated[Path, Option("--db", help="SQLite file of the effect log (created if missing).")],
    port: Annotated[int, Option("--port", help="Port to listen on.")] = 8080,
    host: Annotated[str, Option("--host", help="Interface to bind (loopback by default).")] = "127.0.0.1",
    token_file: Annotated[
        Path | None, Option("--token-file", help=f"File holding the bearer token (else ${TOKEN_ENV}).")
    ] = None,
) -> int:
    """Run the provider on its own: an HTTP service with a durable effect log."""
    if port_in_use(port, host):
        raise SetupError(f"provider port {port} is already in use")
    if not db.parent.is_dir():
        raise SetupError(f"directory {db.parent} does not exist")
    token = _provider_token(token_file, host)
    from provider.server import serve

    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal.
    with contextlib.suppress(KeyboardInterrupt):
        serve(port, db, host=host, token=token)
    return 0


def _provider_token(token_file: Path | None, host: str) -> str | None:
    """The standalone provider's token; none is allowed on loopback only (with a warning)."""
    try:
        token = token_file.read_text().strip() if token_file else os.environ.get(TOKEN_ENV, "").strip()
    except OSError as exc:
        raise SetupError(f"cannot read --token-file: {exc.strerror}") from None
    if token:
        return token
    if not is_loopback(host):
        raise SetupError(f"refusing to serve on {host} without a token: set ${TOKEN_ENV} or pass --token-file")
    print(f"testbed: warning: no token (${TOKEN_ENV}): every local user can call this provider", file=sys.stderr)
    return None


def vars_of(settings: WorkerSettings) -> dict[str, int]:
    return {
        "workerTtl": settings.worker_ttl,
        "maintenanceInterval": settings.maintenance_interval,
        "jobMonitoringInterval": settings.job_monitoring_interval,
    }


hosts.register(app)  # agent, redis: the lab across hosts


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
