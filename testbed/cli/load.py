"""`testbed load`: many workers and seeded random kills, each strategy's promises (and the
model) checked under load; a user's job's against its promise."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from typer import Option

from labcore.boundaries import ORDER, parse_boundary
from labcore.destination import MAIL_CLIENT_SIDE, is_mail_url, mail_refused
from labcore.plan import Random
from testbed.cli import checks, output
from testbed.cli.base import app, examples
from testbed.cli.chaos import MAX_OPS
from testbed.cli.options import (
    CellTimeout,
    ClientTimeout,
    DestinationArgs,
    JobArgs,
    ResultsPath,
    Retries,
    Seed,
    StackArgs,
    StoreArgs,
    Strategies,
    Yes,
    run_options,
)
from testbed.cli.output import Output
from testbed.cli.stack import destination_meta, shared_meta, stack_options
from testbed.errors import UsageError
from testbed.experiment.matrix import Cell
from testbed.experiment.selection import parse_all, parse_kill_fault
from testbed.usecases.runs import RunRequest
from workers.strategies import STRATEGIES, parse_strategy


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
    job_args: JobArgs,
    destination_args: DestinationArgs,
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
) -> int:
    """Many workers, seeded random kills: check each strategy's invariants (and the model) under load;
    your own job's (--handler) against its promise."""
    handlers = job_args.handlers
    names = parse_all(strategy, lambda s: parse_strategy(s).name) or ([] if handlers else list(STRATEGIES))
    mail = is_mail_url(destination_args.destination)
    # At an smtp:// destination the job's own client's boundaries never strike: not drawn, and refused if named.
    where = parse_all(boundary, parse_boundary) or [b for b in ORDER if not (mail and b in MAIL_CLIENT_SIDE)]
    if mail and (refused := mail_refused(where)):
        raise UsageError(refused)
    if None in where:
        raise UsageError("load kills at boundaries: `none` is not one (use --kill-rate 0 for no kills)")
    chosen = [parse_kill_fault("load", fault)]
    checks.finite("--kill-rate", kill_rate, 0, 1)
    checks.finite("--ops", ops, 1, MAX_OPS)
    checks.finite("--retries", retries, 1 if kill_rate else 0, 10)
    checks.finite("--window", window, 100, 1_000_000)
    checks.finite("--client-timeout", client_timeout, 0.05, 3600)
    checks.cell_timeout(cell_timeout)
    stack, mode = stack_options(stack_args)
    boundaries = tuple(b for b in where if b is not None)
    cells = [Cell(name, None, chosen[0], spread=kill_rate > 0) for name in names]
    cells += [Cell(h, None, chosen[0], spread=kill_rate > 0, handler=h) for h in handlers]
    request = RunRequest(
        cells,
        lambda cell: Random(kill_rate, boundaries, cell.fault, retries, seed),
        ops,
        job_args.jobs(destination=destination_args),
        stack_args.engine_choice(),
        retries=retries,
        seed=seed,
        client_timeout=client_timeout,
        cell_timeout=cell_timeout,
        parallel=1,
        window=window,
        history=False,
        promises=True,
        recovery=mode,
    )
    prepared = request.prepare(stack)
    from testbed.report import tables as report

    meta = {"ops": ops, "killRate": kill_rate, **shared_meta(stack_args, prepared.stack)}
    meta |= {"boundaries": [b.value for b in boundaries], "fault": fault, "retries": retries, "window": window}
    meta |= {"recovery": mode, **destination_meta(prepared.options.reader)}
    out = Output("load", json_path, meta, seed, store_args)
    cells = prepared.options.cells
    estimate = checks.Estimate.of(len(cells), ops, kill_rate, retries, stack_args.workers, min(ops, window) + ops // 4)
    ran = output.run(prepared, out, estimate, yes)
    note = f"{ops} ops per strategy, {stack_args.workers} workers, kill rate {kill_rate:g}, seed {seed}"
    print(report.load_table(ran.rows, note))
    return output.finish(ran, out)
