"""`testbed explore`: crash schedules on one stack, smallest first up to a bound (or at
random, the first failure shrunk to the smallest that still fails), the first failure
confirmed and kept to replay."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from typer import Option

from labcore.schedule import MAX_RETRIES
from testbed.cli import checks
from testbed.cli.base import EXIT_UNCONFIRMED, app, examples
from testbed.cli.options import (
    SCENARIO_NAMES,
    CellTimeout,
    ClientTimeout,
    DestinationArgs,
    JobArgs,
    ResultsPath,
    StackArgs,
    StoreArgs,
    Strategies,
    run_options,
)
from testbed.cli.output import Output
from testbed.cli.stack import destination_meta, shared_meta, stack_options, vars_of
from testbed.errors import UsageError
from testbed.store.layout import COUNTEREXAMPLE
from testbed.store.runs import RunStore

if TYPE_CHECKING:
    from testbed.explore.trials import TrialResult
    from testbed.usecases.searches import PreparedSearch

MAX_TRIAL_OPS = 10
SMALLEST, RANDOM = "smallest", "random"  # as testbed.explore.search names them (not imported at the start)
NEEDS = "explore needs -s STRATEGY or --handler MODULE:FUNCTION (repeatable)"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h)?$")
_UNIT = {None: 1, "s": 1, "m": 60, "h": 3600}


def parse_duration(text: str) -> float:
    """`90`, `90s`, `5m`, `1h`: seconds."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise UsageError(f"--time {text!r}: expected a duration such as 90s, 5m or 1h")
    seconds = float(match.group(1)) * _UNIT[match.group(2)]
    checks.finite("--time", seconds, 1, 7 * 86_400)
    return seconds


@app.command(
    short_help="Crash schedules smallest first (or at random), the first failure kept to replay.",
    epilog=examples(
        "testbed explore -s record-before --seed 1          # finds the article's silent loss",
        "testbed explore --handler myapp.jobs:send --time 5m",
        "testbed explore -s provider-key --budget 200 --ops 5   # the bounded space, then random past it",
        "testbed explore --handler examples.lookup_once:send --search random --seed 2",
        "testbed explore -s reconcile -s provider-key --model-only --budget 300",
        "testbed explore --hosts -s provider-key --budget 200   # trials on every worker host, partition too",
        "testbed explore -s provider-key --engine celery --delivery early-ack --budget 20",
        "testbed chaos --schedule runs/latest/counterexample.json -s record-before",
    ),
)
@run_options
def explore(
    stack_args: StackArgs,
    store_args: StoreArgs,
    job_args: JobArgs,
    destination_args: DestinationArgs,
    strategy: Strategies = None,
    budget: Annotated[
        int | None,
        Option(
            "--budget",
            metavar="N",
            help="Trials to run before giving up the search (at random: default 100, or --time); with the"
            " bounded space, random ones past it until it is spent.",
        ),
    ] = None,
    time_limit: Annotated[
        str | None, Option("--time", metavar="DURATION", help="How long to search: 90s, 5m, 1h (with or for --budget).")
    ] = None,
    seed: Annotated[
        int | None,
        Option(
            "--seed",
            metavar="N",
            help="The same trials for the same seed. Without it, each search differs, and the last"
            " counterexample of the same search (kept in the store's .hypothesis/) is tried first.",
        ),
    ] = None,
    ops: Annotated[int, Option("--ops", metavar="N", help="Ops per trial at most (1 to 10).")] = 3,
    retries: Annotated[
        int,
        Option(
            "--retries",
            metavar="N",
            help="RQ retries per job (1 to 10; on Celery, autoretry's max_retries); faults strike all attempts"
            " but the last (on Celery, those its delivery setting runs).",
        ),
    ] = 3,
    scenario: Annotated[
        list[str] | None,
        Option(
            "--scenario",
            metavar="SCENARIO",
            help=f"Scenario trials are drawn under (repeatable; the first for half of them): {SCENARIO_NAMES}."
            " Default: none and duplicate-enqueue (on Celery, none only, but under acks-late or reject-on-lost).",
        ),
    ] = None,
    parallel: Annotated[int, Option("--parallel", metavar="N", help="Trials in flight at once (1 to 16).")] = 4,
    model_only: Annotated[
        bool,
        Option("--model-only", help="Built-ins: look only for runs the model does not predict (a bug of the lab)."),
    ] = False,
    confirm: Annotated[
        int,
        Option(
            "--confirm",
            metavar="N",
            help="Fresh runs of the counterexample that say if it reproduces (1 to 10); one that fails in none"
            " of them is unconfirmed (exit 4).",
        ),
    ] = 3,
    how: Annotated[
        str,
        Option(
            "--search",
            metavar="HOW",
            help="smallest: every schedule of up to --depth faults, smallest first, then (with --budget or"
            " --time) random ones past them; random: random schedules only, the first failure shrunk.",
        ),
    ] = "smallest",
    depth: Annotated[
        int, Option("--depth", metavar="N", help="Faults a schedule of the bounded space holds at most (1 to 4).")
    ] = 2,
    sample: Annotated[
        int,
        Option(
            "--sample",
            metavar="N",
            help="Built-ins: schedules of the bounded space run a strategy to check the model (0 to 10000);"
            " the model predicts the rest.",
        ),
    ] = 12,
    json_path: ResultsPath = Path("explore.json"),
    client_timeout: ClientTimeout = 0.5,
    cell_timeout: CellTimeout = None,
) -> int:
    """Search crash schedules on the real stack: trials of a few ops, each attempt clean or struck by a
    fault (recovery attempts too), under a scenario. By default every schedule of up to --depth faults,
    smallest first, each once (built-ins: a --sample of them run to check the model, which predicts the
    rest; a job: schedules equivalent to one run skipped), then, with --budget or --time, random ones past
    them. The first trial that breaks the promise (a built-in also: that the model does not predict) is a
    smallest one (at random: shrunk to the smallest that still does), run again to confirm it, printed in
    words, and kept as counterexample.json for `testbed chaos --schedule`.
    One that fails in none of its --confirm runs is reported as unconfirmed (exit 4), not as a
    counterexample: a flake of the machine, or a job that breaks only sometimes."""
    # Imported here: the search's space is Hypothesis's, whose import the command line's start does without.
    from testbed.usecases.searches import SearchRequest

    handlers = job_args.handlers
    if not strategy and not handlers:
        raise UsageError(NEEDS)
    if model_only and handlers:
        raise UsageError("--model-only checks the model of the built-in strategies: not with --handler")
    if how not in (SMALLEST, RANDOM):
        raise UsageError(f"--search {how!r}: choose smallest or random")
    seconds = None if time_limit is None else parse_duration(time_limit)
    past_bound = budget is not None or seconds is not None  # random schedules past the bound: asked for
    if how == RANDOM and not past_bound:
        budget = 100
    if budget is not None:
        checks.finite("--budget", budget, 1, 1_000_000)
    checks.finite("--ops", ops, 1, MAX_TRIAL_OPS)
    checks.finite("--retries", retries, 1, MAX_RETRIES)
    checks.finite("--parallel", parallel, 1, 16)
    checks.finite("--confirm", confirm, 1, 10)
    checks.finite("--depth", depth, 1, 4)
    checks.finite("--sample", sample, 0, 10_000)
    checks.finite("--client-timeout", client_timeout, 0.05, 3600)
    timeout = 120.0 if cell_timeout is None else cell_timeout
    checks.cell_timeout(timeout)
    stack, mode = stack_options(stack_args)
    if mode != "forced":
        raise UsageError("explore brings back a killed worker's job at once: --recovery forced")
    store = None if store_args.no_store else RunStore(store_args.store)
    request = SearchRequest(
        strategy or [],
        job_args.jobs(destination=destination_args),
        NEEDS,
        stack_args.engine_choice(),
        budget,
        seconds,
        seed,
        ops,
        retries,
        scenario or [],
        parallel,
        model_only,
        confirm,
        client_timeout,
        timeout,
        None if store is None else store_args.store / ".hypothesis",
        how,
        depth,
        sample,
        past_bound,
    )
    prepared = request.prepare(stack)
    search, stack = prepared.search, prepared.stack
    names = [t.name for t in search.targets if not t.handler]
    meta: dict[str, Any] = {"strategies": names, "handlers": handlers, "promise": job_args.promise, "ops": ops}
    meta |= {"retries": retries, "scenarios": list(search.scenarios), "parallel": parallel, "modelOnly": model_only}
    meta |= {"search": how, "depth": depth, "sample": sample}
    meta |= {"budget": budget, "seconds": seconds, "clientTimeout": client_timeout, **shared_meta(stack_args, stack)}
    meta |= {"delivery": prepared.delivery} if prepared.delivery is not None else {}
    meta |= {"recovery": mode, "faults": list(search.faults), "workerSettings": vars_of(stack.settings)}
    meta |= destination_meta(prepared.settings.reader)
    out = Output("explore", json_path, meta, seed, store_args)
    out.check()
    return _explore(prepared, out, store, list(job_args.path or []))


def _explore(prepared: PreparedSearch, out: Output, store: RunStore | None, paths: list[Path]) -> int:
    """The exploration on a stack of its own; its results kept like any run's, its
    counterexample beside them. A stack that fails keeps the trials judged before (exit 3)."""
    from testbed.errors import RunFailure
    from testbed.explore.search import Exploration, explore, found_so_far
    from testbed.explore.trials import Trials
    from testbed.lab import session
    from testbed.lab.session import Ran
    from testbed.report import explore as report
    from testbed.store import results

    stack, search, settings = prepared.stack, prepared.search, prepared.settings
    done: list[Exploration] = []

    def work(started: Any, run_dir: Any) -> Ran:
        names = ", ".join(t.name for t in search.targets)
        print(f"testbed run {started.run_id}: explore {names}, {started.options.workers} workers", file=sys.stderr)
        trials = Trials(started, settings, run_dir, _heard)
        try:
            done.append(explore(trials, search))
        except RunFailure as exc:
            return Ran(trials.rows, str(exc))
        except KeyboardInterrupt:  # the run stops and keeps nothing (exit 130): what it had found is said first
            if (found := found_so_far(trials, search.model_only)) is not None:
                print(_interrupted(found))
            raise
        return Ran(trials.rows)

    ran = session.execute_on_stack(stack, work, store)
    summary: dict[str, Any] = {}
    if done:
        exploration = done[0]
        replay = ""
        found = exploration.counterexample
        if found is not None and ran.stored is not None:
            saved = ran.stored.path / COUNTEREXAMPLE
            saved.write_text(found.trial.schedule.encode())
            replay = _replay_command(saved, found, prepared, paths)
        summary = {"explore": exploration.to_json(replay)}
    out.keep(ran, store, summary)
    document = results.parse(out.document(ran, summary))
    explored = document.explore
    assert explored is not None
    print(report.coverage_text(explored))
    print()
    print(report.figures_text(explored))
    example = explored.counterexample
    if example is not None:  # as the report opens with it
        row = next(r for r in document.rows if r.cell == example.cell)
        print(f"\n{report.counterexample_text(example, row, row.history)}")
    out.deliver(ran, summary)
    if example is None:
        return 0
    return 1 if example.confirmed else EXIT_UNCONFIRMED


def _interrupted(found: TrialResult) -> str:
    """A failing trial a search stopped before its end had found: neither shrunk to its end nor
    confirmed, so no counterexample, but its schedule to replay."""
    from testbed.explore.search import words
    from testbed.explore.trials import Found

    what = "broke the promise" if found.found is Found.BREACH else "showed a failure of the lab"
    lines = [
        f"interrupted after trial {found.row.cell_id} {what}: {found.row.cell.label}"
        " (not shrunk to its end, not confirmed)",
        *(f"  {line}" for line in words(found)),
        "its schedule, to replay with testbed chaos --schedule FILE:",
        found.trial.schedule.encode().rstrip("\n"),
    ]
    return "\n".join(lines)


def _heard(judged: TrialResult, phase: str) -> None:
    row = judged.row
    print(f"[{phase:<9}] {row.cell.label:<58} {judged.found.value:<7} {row.wall_seconds:5.2f} s", file=sys.stderr)


def _replay_command(saved: Path, found: TrialResult, prepared: PreparedSearch, paths: list[Path]) -> str:
    """The command that runs the counterexample again, on the same kind of stack (a partition needs
    the hosts; a trial on Celery, its engine and delivery setting)."""
    target = found.trial.target
    what = f"--handler {target.name}" if target.handler else f"-s {target.name}"
    extra = "".join(f" --path {p}" for p in paths) if target.handler else ""
    extra += " --hosts" if prepared.stack.remote is not None else ""
    promise = prepared.settings.promise
    extra += "" if promise == "exactly-once" else f" --promise {promise}"
    return f"testbed chaos --schedule {saved} {what}{extra}{prepared.replay_flags(found)}"
