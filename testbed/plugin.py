"""pytest plugin: your own job under the crash matrix, in your own test suite.

Registered through the `pytest11` entry point as `testbed`. The session-scoped
`lab` fixture starts the stack once (a private Redis, the provider process,
real RQ workers) and stops it, and everything it started, at the end:

    def test_send_is_exactly_once(lab):
        rows = lab.run("myapp.jobs:send", boundaries=["before-effect", "after-effect"])
        rows.assert_exactly_once()

A failing assertion names every op that breaks the promise and what happened
to it. `lab.explore("myapp.jobs:send", budget=100, seed=1)` searches random
crash schedules instead (`testbed explore`), and fails with the smallest one
that breaks the promise. RQ reads its key prefix once, when it is first imported: the plugin
sets the lab's prefix (`RQ_KEY_PREFIX`) as pytest starts, before the tests
import anything.

The session's workers start before any handler is known, so they preload no library of
a handler's: each work-horse imports what its handler needs. For a heavy one (an agent
runtime), `started_lab` gives a module-scoped fixture a lab of its own whose workers
preload it, as `testbed chaos --handler`'s do:

    @pytest.fixture(scope="module")
    def lab():
        with started_lab(preload=["myapp.agent:send"]) as lab:
            yield lab

Processes a job leaves running are stopped and counted as `testbed chaos` counts them: those
left in a work-horse's process group in `rows.leftovers` (each row's own in `row.leftovers`),
with a `LeftoverProcesses` warning; those that left the group as the lab stops, with another.

On Celery (`pip install 'testbed[celery]'`), the same calls take the engine: the job under
Celery's delivery settings, or a task of the user's own app under its own options:

    rows = lab.run("myapp.jobs:send", engine="celery", delivery=["early-ack", "reject-on-lost"])
    rows = lab.run("myapp.tasks:send", celery_app="myapp.celery:app")
    lab.explore("myapp.jobs:send", engine="celery", delivery="acks-late", budget=50)

On Temporal, an activity of the user's own workflow, registered with it on the lab's worker:

    rows = lab.run("myapp.activities:send", temporal_workflow="myapp.workflows:Send")

A lab's workers are RQ's: its first run on Celery starts a stack of its own with Celery's
workers (one per Celery configuration), kept for its later runs and stopped with the lab.
Nothing of Celery is imported until then.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pytest

from labcore.keys import new_run_id, rq_prefix, run_prefix

if TYPE_CHECKING:
    from testbed.explore.search import Exploration
    from testbed.judge.promises import Promise
    from testbed.judge.scorecard import Row
    from testbed.usecases.runs import Jobs

_run_id: str | None = None
_labs = itertools.count(1)  # the labs of the session, numbered as they start


def _claim_rq_prefix() -> str:
    """The session's run id; its RQ key prefix goes into the environment before rq is imported."""
    global _run_id
    if _run_id is None:
        _run_id = new_run_id()
        os.environ["RQ_KEY_PREFIX"] = rq_prefix(run_prefix(_run_id))
    return _run_id


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    _claim_rq_prefix()


def pytest_configure(config: pytest.Config) -> None:
    _claim_rq_prefix()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("testbed", "testbed: your job under the crash matrix")
    group.addoption("--testbed-workers", type=int, default=4, help="RQ worker processes of the lab (default 4).")


class LeftoverProcesses(UserWarning):
    """The jobs left processes running after their attempts (the lab stopped them), as
    `testbed chaos` says on stderr; `-W error::testbed.plugin.LeftoverProcesses` fails the test."""


class Rows(list["Row"]):
    """The rows of one `lab.run`, as `testbed chaos` prints them, with the promise checks;
    `leftovers`: the processes its jobs left in their work-horses' groups (each row's own in
    `row.leftovers`), stopped. Those that left their groups are found as the lab stops."""

    def __init__(self, rows: Iterable[Row], note: str = "", leftovers: int = 0) -> None:
        super().__init__(rows)
        self.note = note
        self.leftovers = leftovers

    def row(self, boundary: str = "none", fault: str = "kill", handler: str | None = None) -> Row:
        for row in self:
            c = row.cell
            if c.where == boundary and (boundary == "none" or c.fault == fault) and handler in (None, c.handler):
                return row
        raise KeyError(f"no row at {boundary} ({fault}){f' for {handler}' if handler else ''}")

    def table(self) -> str:
        from testbed.report.tables import tables

        return tables(self, self.note)

    def assert_exactly_once(self) -> None:
        __tracebackhide__ = True
        self._assert("exactly-once")

    def assert_at_least_once(self) -> None:
        __tracebackhide__ = True
        self._assert("at-least-once")

    def assert_at_most_once(self) -> None:
        __tracebackhide__ = True
        self._assert("at-most-once")

    def _assert(self, name: str) -> None:
        __tracebackhide__ = True
        from testbed.judge.promises import breaches, broken, counts_of, parse_promise, unreached_faults
        from testbed.report import findings
        from testbed.store import results

        promise: Promise = parse_promise(name)
        lines = []
        for row in self:
            stored = row.promise
            if stored is None:  # a built-in strategy, run for comparison
                continue
            problems = broken(promise, counts_of(stored)) + unreached_faults(stored) + row.anomalies
            if problems:
                lines.append(f"{row.cell.label}: {'; '.join(problems)}")
                lines += [f"    {report}" for report in breaches(stored, promise)]
                # Ops held unresolved, in the words the terminal and the report use.
                held = findings.cell_findings(results.parse_row(results.row_json(row))).ops
                lines += [
                    f"    {op.text}" for op in held if op.kind in (findings.Kind.UNRESOLVED, findings.Kind.CONFLICT)
                ]
        if lines:
            raise AssertionError("\n".join([f"{promise} does not hold:", *lines, "", self.table()]))


class Lab:
    """The started stack; `run` runs cells on it, as `testbed chaos` does. Jobs on Celery run on
    stacks of their own, one per Celery configuration, started as a run first needs one and
    stopped on `engines`' exit."""

    def __init__(self, stack: Any, name: str, engines: contextlib.ExitStack) -> None:
        self.stack = stack
        # Before its cells' ids: the session's labs share its run id, and ops' ids stay unique.
        self.name = name
        self._runs = 0
        self._engines = engines
        self._engine_stacks: dict[Any, Any] = {}  # an engine (with its settings) -> its started stack

    def run(
        self,
        handler: str | Sequence[str] = (),
        *,
        strategies: Iterable[str] = (),
        boundaries: Iterable[str] = ("none", "before-effect", "after-effect"),
        faults: Iterable[str] = ("kill",),
        scenarios: Iterable[str] = ("none",),
        ops: int = 100,
        every: int = 10,
        retries: int = 1,
        promise: str = "exactly-once",
        paths: Sequence[str] = (),
        env: dict[str, str] | None = None,
        client_timeout: float = 0.5,
        cell_timeout: float = 120.0,
        parallel: int = 2,
        engine: str = "rq",
        delivery: Iterable[str] = (),
        celery_app: str | None = None,
        visibility_timeout: int | None = None,
        start_to_close_timeout: float | None = None,
        heartbeat_timeout: float | None = None,
        temporal_workflow: str | None = None,
        temporal_plugins: Sequence[str] = (),
        destination: str | None = None,
        evidence: str | None = None,
        destination_effects: Sequence[str] = (),
        evidence_timeout: float | None = None,
        destination_command: str | None = None,
    ) -> Rows:
        """Each handler (and built-in strategy) at each boundary, fault and scenario: the
        first attempt of every `every`-th op faulted, `retries` RQ retries. `env` is set in
        the handlers' work-horses (the workers are already running). On Celery
        (`engine="celery"`), each cell once per `delivery` setting (all of them if none is
        named), or the handler, a task of `celery_app` (`module:app`), under its own options; on
        Temporal (`engine="temporal"`), once per recovery setting, under the activity's timeouts,
        or the handler an activity of `temporal_workflow` (`module:Workflow`), under its retry policy,
        its client and worker given `temporal_plugins` (`module:plugin`), as `--temporal-plugin` does.
        `destination`: the handlers' real destination (a sandbox), reached through the lab,
        judged by `evidence` (`module:function`), as `testbed chaos --destination` does;
        `destination_command` starts that sandbox for this run and stops it after, as
        `--destination-command` does (`{port}` in it: a free port the lab picks, and
        `destination` may then be left out)."""
        from testbed.engines.base import PLUGIN, EngineChoice
        from testbed.errors import RunFailure, UsageError
        from testbed.lab import session
        from testbed.lab.options import every_nth, matrix_cells, refuse_untested
        from testbed.report.tables import progress_line, run_caption
        from testbed.usecases.runs import RunRequest

        handlers = [handler] if isinstance(handler, str) else list(handler)
        cells = matrix_cells("article", list(strategies), list(boundaries), list(faults), list(scenarios), handlers)
        if not cells:
            raise UsageError("lab.run needs a handler or a strategy")
        refuse_untested(cells, every_nth(every), ops)
        request = RunRequest(
            cells,
            every_nth(every),
            ops,
            _jobs(
                handlers,
                paths,
                promise,
                env,
                Destined(destination, evidence, destination_effects, evidence_timeout, destination_command),
            ),
            EngineChoice(
                engine,
                tuple(delivery),
                celery_app,
                visibility_timeout,
                start_to_close_timeout,
                heartbeat_timeout,
                temporal_workflow,
                tuple(temporal_plugins),
                PLUGIN,
            ),
            retries=retries,
            client_timeout=client_timeout,
            cell_timeout=cell_timeout,
            parallel=parallel,
            cell_prefix=f"{self.name}r{self._runs + 1}c",
        )
        prepared = request.prepare(self.stack.options)
        self._runs += 1

        def judged(index: int, total: int, row: Row) -> None:
            print(progress_line(index, total, row), file=sys.stderr)

        stack = self._on(replace(prepared.stack, sandbox=None))
        with stack.sandboxed(prepared.stack.sandbox):
            ran = session.run_cells(stack, prepared.options, judged)
        if ran.failure is not None:
            raise RunFailure(ran.failure)
        stack.jobs_counted()  # the workers stay up: this run's end is when they have counted its jobs
        left = session.count_leftovers(ran.rows, stack.leftovers_by_cell())
        if left:
            counted = ", ".join(f"{row.cell.label}: {row.leftovers}" for row in ran.rows if row.leftovers)
            _warn_leftovers(f"{session.leftovers_said(left)} ({counted})")
        return Rows(ran.rows, run_caption(ops, every, retries), left)

    def explore(
        self,
        handler: str | Sequence[str] = (),
        *,
        strategies: Iterable[str] = (),
        budget: int | None = 50,
        seconds: float | None = None,
        seed: int | None = 0,
        ops: int = 3,
        retries: int = 3,
        scenarios: Sequence[str] = (),
        promise: str = "exactly-once",
        paths: Sequence[str] = (),
        env: dict[str, str] | None = None,
        parallel: int = 4,
        confirm: int = 3,
        client_timeout: float = 0.5,
        cell_timeout: float = 120.0,
        engine: str = "rq",
        delivery: str | None = None,
        celery_app: str | None = None,
        visibility_timeout: int | None = None,
        start_to_close_timeout: float | None = None,
        heartbeat_timeout: float | None = None,
        temporal_workflow: str | None = None,
        temporal_plugins: Sequence[str] = (),
        destination: str | None = None,
        evidence: str | None = None,
        destination_effects: Sequence[str] = (),
        evidence_timeout: float | None = None,
        destination_command: str | None = None,
        search: str = "smallest",
        depth: int = 2,
        sample: int = 12,
    ) -> Exploration:
        """Crash schedules for each handler (and strategy), as `testbed explore` runs them: every
        schedule of up to `depth` faults, smallest first (a built-in's: a `sample` of them, the
        model predicting the rest), then random ones past them, up to `budget` trials (or
        `seconds`) in all; with `search="random"`, random ones only, the first failure shrunk.
        Trials of up to `ops` ops, every attempt but the last possibly struck, under `scenarios`
        (default: none and duplicate-enqueue). On Celery (`engine="celery"`), under one
        `delivery` setting, or the handler a task of `celery_app`; against a real
        `destination`, judged by `evidence`, as `lab.run`.
        Fails with the smallest schedule found that breaks the promise, in words and as the
        file `testbed chaos --schedule` replays; else returns what it tried."""
        __tracebackhide__ = True
        from testbed.engines.base import PLUGIN, EngineChoice
        from testbed.errors import UsageError
        from testbed.explore.search import RANDOM, SMALLEST, explore
        from testbed.explore.trials import Trials
        from testbed.usecases.searches import SearchRequest, failure_lines

        if search not in (SMALLEST, RANDOM):
            raise UsageError(f"lab.explore(search={search!r}): choose {SMALLEST!r} or {RANDOM!r}")
        if not 1 <= depth <= 4:
            raise UsageError(f"lab.explore(depth={depth!r}): 1 to 4 faults")

        request = SearchRequest(
            list(strategies),
            _jobs(
                [handler] if isinstance(handler, str) else list(handler),
                paths,
                promise,
                env,
                Destined(destination, evidence, destination_effects, evidence_timeout, destination_command),
            ),
            "lab.explore needs a handler or a strategy",
            EngineChoice(
                engine,
                (delivery,) if delivery else (),
                celery_app,
                visibility_timeout,
                start_to_close_timeout,
                heartbeat_timeout,
                temporal_workflow,
                tuple(temporal_plugins),
                PLUGIN,
            ),
            budget,
            seconds,
            seed,
            ops,
            retries,
            scenarios,
            parallel,
            confirm=confirm,
            client_timeout=client_timeout,
            cell_timeout=cell_timeout,
            search=search,
            depth=depth,
            sample=sample,
            # As `testbed explore --budget`: random schedules past the bounded space, until the budget is spent.
            past_bound=budget is not None or seconds is not None,
        )
        prepared = request.prepare(self.stack.options)
        self._runs += 1
        stack = self._on(replace(prepared.stack, sandbox=None))
        with stack.sandboxed(prepared.stack.sandbox):
            done = explore(Trials(stack, prepared.settings, prefix=f"{self.name}x{self._runs}e"), prepared.search)
        if done.counterexample is not None:
            raise AssertionError("\n".join(failure_lines(done, prepared)))
        return done

    def stop(self) -> int:
        """Every stack of the lab stopped: how many processes its jobs left outside their
        work-horses' groups, found as the workers went."""
        stacks = [self.stack, *self._engine_stacks.values()]
        for stack in stacks:
            stack.stop_services()
        return sum(stack.swept() for stack in stacks)

    def _on(self, options: Any) -> Any:
        """The stack these options ask for: the lab's own (RQ's workers), or one with the
        workers of another engine and settings, started on first use (its workers preload
        the handlers' libraries as they are then)."""
        if options.engine == self.stack.options.engine:
            return self.stack
        if options.engine not in self._engine_stacks:
            from testbed.lab import session

            started = session.started_stack(self.stack.run_id, options)
            self._engine_stacks[options.engine] = self._engines.enter_context(started)
        return self._engine_stacks[options.engine]


@dataclass(frozen=True, slots=True)
class Destined:
    """A run's real destination as `lab.run` and `lab.explore` take it (their keyword arguments)."""

    url: str | None
    evidence: str | None
    effects: Sequence[str]
    evidence_timeout: float | None
    command: str | None


def _jobs(
    handlers: Sequence[str], paths: Sequence[str], promise: str, env: dict[str, str] | None, to: Destined
) -> Jobs:
    """The users' jobs of a run or a search, as `testbed chaos` builds them (`Jobs`)."""
    from testbed.errors import UsageError
    from testbed.lab.destination import EVIDENCE_TIMEOUT
    from testbed.usecases.runs import Jobs, destination_choice

    timeout = EVIDENCE_TIMEOUT if to.evidence_timeout is None else to.evidence_timeout
    choice = destination_choice(to.url, to.evidence, to.effects, timeout, to.command)
    if choice is not None and choice.is_mail:  # its stack is started once, before a run's destination is known
        raise UsageError("destination=smtp://...: the plugin relays no mail yet; run `testbed chaos` for it")
    return Jobs(tuple(handlers), tuple(paths), promise, dict(env or {}), destination=choice)


@contextlib.contextmanager
def started_lab(preload: Sequence[str] = (), paths: Sequence[str] = (), workers: int = 4) -> Iterator[Lab]:
    """A lab of its own (a private Redis, the provider, `workers` RQ workers), stopped, with
    everything it started, on leaving. Its workers preload the installed libraries the
    `preload` handlers import (found as `testbed chaos --handler` finds them, in a process
    of their own; never the handlers' own code)."""
    from testbed.infra import descriptors
    from testbed.infra.stack import StackOptions
    from testbed.lab import session, userjobs
    from workers.specs import USER_JOBS_ENV, jobs_env

    descriptors.ensure(workers)
    run_id = _claim_rq_prefix()
    # What the workers preload as they start: the user-job wrapper and the HTTP clients it
    # instruments, and the libraries the handlers import (prepare checks them and adds those).
    os.environ[USER_JOBS_ENV] = jobs_env([])
    userjobs.prepare(preload, paths)
    number = next(_labs)
    with session.started_stack(run_id, StackOptions(workers=workers)) as stack, contextlib.ExitStack() as engines:
        lab = Lab(stack, "" if number == 1 else f"l{number}", engines)
        yield lab
        swept = lab.stop()
        if swept:
            _warn_leftovers(f"{session.leftovers_said(swept)} (found as the lab stopped: they left their work-horses)")


def _warn_leftovers(text: str) -> None:
    import warnings

    warnings.warn(LeftoverProcesses(text), stacklevel=3)


@pytest.fixture(scope="session")
def lab(pytestconfig: pytest.Config) -> Iterator[Lab]:
    """The lab's stack, started once for the session."""
    with started_lab(workers=pytestconfig.getoption("testbed_workers", default=4)) as started:
        yield started
