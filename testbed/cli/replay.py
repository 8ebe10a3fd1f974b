"""`testbed replay`: killed jobs coming back, each killed op's attempts as a timeline, and
kill-to-replay latency."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

from typer import Option

from labcore.boundaries import parse_boundary
from labcore.faults import Fault
from testbed.cli import checks, output
from testbed.cli.base import app, examples
from testbed.cli.chaos import MAX_OPS
from testbed.cli.options import (
    CellTimeout,
    DestinationArgs,
    ImportTimeout,
    Paths,
    PromiseOption,
    ResultsPath,
    Retries,
    Seed,
    StackArgs,
    StoreArgs,
    Yes,
    run_options,
)
from testbed.cli.output import Output
from testbed.cli.stack import destination_meta, shared_meta, stack_options, vars_of
from testbed.engines.rq import recovery_note as rq_recovery_note
from testbed.errors import UsageError
from testbed.experiment.selection import parse_all, parse_kill_fault, select_cells, with_handlers
from testbed.lab.options import every_nth, refuse_untested
from testbed.lab.userjobs import IMPORT_TIMEOUT
from testbed.usecases.runs import Jobs, RunRequest
from workers.strategies import STRATEGIES, parse_strategy


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
    destination_args: DestinationArgs,
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
    import_timeout: ImportTimeout = IMPORT_TIMEOUT,
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
    checks.cell_timeout(cell_timeout)
    refuse_untested(cells, every_nth(every), ops)
    stack, mode = stack_options(stack_args)
    paths = tuple(str(p) for p in path or [])
    jobs = Jobs(tuple(handlers), paths, promise, import_timeout=import_timeout, destination=destination_args.choice())
    request = RunRequest(
        cells,
        every_nth(every),
        ops,
        jobs,
        stack_args.engine_choice(),
        retries,
        seed,
        cell_timeout=cell_timeout,
        recovery=mode,
    )
    prepared = request.prepare(stack)
    stack = prepared.stack
    from testbed.report import replays
    from testbed.report import tables as report

    meta = {"ops": ops, "every": every, "retries": retries, "recovery": mode, **shared_meta(stack_args, stack)}
    meta |= destination_meta(prepared.options.reader)
    out = Output("replay", json_path, meta | {"workerSettings": vars_of(stack.settings)}, seed, store_args)
    if mode == "rq" and chosen[0] is Fault.KILL_WORKER:
        print(f"testbed: note: {rq_recovery_note(stack.settings)}", file=sys.stderr)
    estimate = checks.Estimate.of(1, ops, 1 / every, retries, stack_args.workers, ops)
    ran = output.run(prepared, out, estimate, yes)
    recovery = stack.engine.recovery(mode)
    for row in ran.rows:  # one per delivery setting on Celery
        print(replays.render(row.history or {}))
        print(f"\n{row.cell.label}, recovery {recovery}: {replays.summary(row.replay_latency_ms, row.kills)}")
        c = row.counts
        left = f"; {report.left_said(row.leftovers)}" if row.leftovers else ""
        print(f"effects / missing: {c.effects} / {c.missing_operations}; replays: {c.replays}{left}\n")
    return output.finish(ran, out)
