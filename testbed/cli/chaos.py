"""`testbed chaos`: the crash matrix (or a schedule), every cell checked against the model
or, for a user's job, against its promise."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from typer import Option

from testbed.cli import checks, output
from testbed.cli.base import app, examples
from testbed.cli.options import (
    FAULT_NAMES,
    SCENARIO_NAMES,
    Boundaries,
    CellTimeout,
    ClientTimeout,
    DestinationArgs,
    Expect,
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
from testbed.cli.stack import destination_meta, shared_meta, stack_options, vars_of
from testbed.errors import UsageError
from testbed.experiment.matrix import Cell
from testbed.experiment.selection import parse_expect
from testbed.lab.options import every_nth, load_schedule, matrix_cells, refuse_untested, schedule_cells, scheduled
from testbed.usecases.runs import RunRequest

MAX_OPS = 10_000_000


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
    job_args: JobArgs,
    destination_args: DestinationArgs,
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
    handlers = job_args.handlers
    plan = every_nth(every)
    cells: list[Cell]
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
    checks.cell_timeout(cell_timeout)
    refuse_untested(cells, every_nth(every), ops)
    overrides = parse_expect(expect, cells)
    stack, mode = stack_options(stack_args)
    request = RunRequest(
        cells,
        plan,
        ops,
        job_args.jobs(destination=destination_args),
        stack_args.engine_choice(),
        retries=retries,
        seed=seed,
        client_timeout=client_timeout,
        cell_timeout=cell_timeout,
        parallel=parallel,
        overrides=overrides,
        recovery=mode,
    )
    prepared = request.prepare(stack)
    from testbed.report import tables as report

    meta: dict[str, Any] = {"matrix": matrix}
    # The selection as given: a narrowed matrix is not the matrix.
    given = {"strategies": strategy, "boundaries": boundary, "faults": fault, "scenarios": scenario}
    meta |= {name: values for name, values in given.items() if values}
    meta |= {"ops": ops, "every": every, "parallel": parallel, **shared_meta(stack_args, prepared.stack)}
    meta |= {"handlers": handlers, "promise": job_args.promise} if handlers else {}
    meta |= destination_meta(prepared.options.reader)
    meta |= {"retries": retries, "clientTimeout": client_timeout, "recovery": mode}
    meta |= {"workerSettings": vars_of(prepared.stack.settings), "expect": _expectations(overrides)}
    meta |= {"schedule": str(schedule)} if schedule is not None else {}
    out = Output("chaos", json_path, meta, seed, store_args)
    cells = prepared.options.cells
    estimate = checks.Estimate.of(len(cells), ops, 1 / every, retries, stack_args.workers, parallel * ops)
    ran = output.run(prepared, out, estimate, yes)
    if schedule is not None:
        from testbed.explore.accounts import row_lines

        accounts = [
            [*row_lines(row), *([f"  {report.left_said(row.leftovers)}"] if row.leftovers else [])] for row in ran.rows
        ]
        print("\n\n".join("\n".join(lines) for lines in accounts))
    else:
        caption = report.run_caption(ops, every, retries) + prepared.stack.engine.caption()
        print(report.tables(ran.rows, caption))
    return output.finish(ran, out)


def _expectations(overrides: dict[Cell, dict[str, int]]) -> dict[str, list[int]]:
    """As results.json keeps them, so that `testbed check` judges with them again."""
    return {cell.label: [v["effects"], v["missing_operations"]] for cell, v in overrides.items()}
