"""A search of crash schedules, as `testbed explore` and the plugin's `lab.explore` ask for it
(`SearchRequest`), and what the lab runs for it (`PreparedSearch`): the stack the trials need,
the search, and what every trial shares."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from testbed.engines import engine_of
from testbed.engines.base import EngineChoice, RunShape
from testbed.errors import UsageError
from testbed.experiment.scenarios import parse_scenario
from testbed.experiment.selection import parse_all
from testbed.explore.search import SMALLEST, Exploration, Search, targets_of
from testbed.explore.space import faults_for, scenarios_for
from testbed.explore.trials import TrialResult, TrialSettings
from testbed.infra.stack import StackOptions
from testbed.usecases.engines import engine_flags, engine_stack, one_delivery
from testbed.usecases.runs import Jobs, fit_faults
from workers.strategies import parse_strategy


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """Crash schedules for each strategy and handler: the bounded space of up to `depth` faults
    smallest first, or (`search` RANDOM, or past the bound) random ones, up to `budget` trials
    (or `seconds`) of up to `ops` ops, every attempt but the last possibly struck, under
    `scenarios` (none named: the engine's defaults). `needs`: what an empty target list is
    refused with, in the front end's words."""

    strategies: Sequence[str]
    jobs: Jobs
    needs: str
    engine: EngineChoice = field(default_factory=EngineChoice)
    budget: int | None = 100
    seconds: float | None = None
    seed: int | None = None
    ops: int = 3
    retries: int = 3
    scenarios: Sequence[str] = ()
    parallel: int = 4
    model_only: bool = False
    confirm: int = 3
    client_timeout: float = 0.5
    cell_timeout: float = 120.0
    database: Path | None = None  # Hypothesis's examples: the last counterexample of a search is tried first
    search: str = SMALLEST  # the bounded space smallest first (then at random if `past_bound`), or RANDOM only
    depth: int = 2  # faults a schedule of the bounded space holds at most
    sample: int = 12  # a built-in's schedules of the bounded space run to check the model
    past_bound: bool = False  # search at random past the bounded space with the budget or time left

    def prepare(self, stack: StackOptions) -> PreparedSearch:
        """The targets, scenarios and faults checked, the jobs checked, the stack on the engine."""
        if self.jobs.destination is not None and self.jobs.destination.is_mail:
            # Its space draws every boundary, and the job's mail client's two never strike.
            raise UsageError("explore at an smtp:// destination: not in this version (chaos, replay and load run it)")
        names = parse_all(list(self.strategies), lambda s: parse_strategy(s).name) or []
        if not names and not self.jobs.handlers:
            raise UsageError(self.needs)
        setting = one_delivery(self.engine)
        asked = parse_all(list(self.scenarios), lambda s: parse_scenario(s).name) or []
        for name in asked:
            if (refused := engine_of(self.engine).refused(parse_scenario(name), setting, scheduled=True)) is not None:
                raise UsageError(refused)
        scenarios = scenarios_for(asked, setting)
        faults = faults_for(stack.remote is not None, whole_workers=engine_of(self.engine).recovers_by_force)
        stack = fit_faults(stack, faults)
        paths = self.jobs.prepare(self.engine)
        reader = self.jobs.reader(paths)
        stack = engine_stack(
            self.engine, self.jobs.with_sandbox(stack), RunShape(self.retries, self.jobs.handlers, paths, bool(names))
        )
        search = Search(
            targets_of(names, self.jobs.handlers),
            scenarios,
            self.ops,
            self.budget,
            self.seconds,
            self.seed,
            self.parallel,
            self.model_only,
            self.confirm,
            self.database,
            faults,
            self.search,
            self.depth,
            self.sample,
            self.past_bound,
        )
        settings = TrialSettings(
            self.retries,
            self.seed or 0,
            self.jobs.promise,
            self.client_timeout,
            self.cell_timeout,
            paths,
            dict(self.jobs.env),
            setting,
            reader,
        )
        return PreparedSearch(stack, search, settings, self.engine)


@dataclass(frozen=True, slots=True)
class PreparedSearch:
    stack: StackOptions
    search: Search
    settings: TrialSettings
    engine: EngineChoice

    @property
    def delivery(self) -> str | None:
        """The one delivery setting the trials run under (None: on RQ)."""
        return self.settings.delivery

    def replay_flags(self, found: TrialResult) -> str:
        """The options that run the counterexample again on the same engine and setting, and
        against the same destination."""
        flags = engine_flags(self.engine, found.row.cell.delivery)
        reader = self.settings.reader
        if reader is not None:
            flags += f" --destination {reader.destination.url} --evidence {reader.spec}"
            flags += "".join(
                f" --destination-effect {shlex.quote(rule)}" for rule in reader.destination.effects.spelled()
            )
            if self.stack.sandbox is not None:
                flags += f" --destination-command {shlex.quote(self.stack.sandbox.spelled)}"
        return flags


def failure_lines(done: Exploration, prepared: PreparedSearch) -> list[str]:
    """A search's counterexample as a test's failure says it: what broke, the smallest schedule
    found, how often it reproduced (unconfirmed: in none of its fresh runs), what happened to
    each op, and the schedule file."""
    found = done.counterexample
    assert found is not None
    promise = prepared.settings.promise
    what = "the model and the run disagree" if found.found.value == "lab" else f"{promise} does not hold"
    summary = done.to_json()["counterexample"]
    name, runs = found.trial.target.name, len(done.confirmations)
    head = (
        f"{what} for {name}: the smallest schedule found (reproduced {done.reproduced} of {runs} fresh runs):"
        if done.confirmed
        else f"unconfirmed: {what} for {name} in one trial and in none of its {runs} fresh runs"
        " (a flake of the machine, or a job that breaks only sometimes); the smallest schedule found:"
    )
    return [
        head,
        *(f"    {line}" for line in summary["words"]),
        f"as a schedule file (testbed chaos --schedule FILE{prepared.replay_flags(found)}):",
        found.trial.schedule.encode().rstrip(),
    ]
