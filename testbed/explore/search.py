"""The search: the bounded space smallest first, then (if asked) Hypothesis's random
draws past it; or random draws only, the first failure shrunk on the real stack.

A failure is a trial that breaks the promise (not with `model_only`), or one
where the lab disagrees with itself: a built-in strategy's run differs from
the model's prediction, or the controller saw something it did not plan.

Smallest first (`SMALLEST`, the default): every schedule of up to `depth` faults,
in order of size (`bounded`), each once, `parallel` at a time. The first that
fails is a smallest one: nothing to shrink. Built-ins run on the real stack only
a seeded sample of the space and the first schedule the model says breaks the
promise (each checks the model: a disagreement is the lab's failure); the model
predicts the rest. A user's job skips a schedule equivalent to one run
(`pruning`). What was tried, and how, is counted (`bounded.Tried`). Past the
bound, the random search runs only if asked for (`past_bound`: a budget or a
time given), with what is left of them.

At random (`RANDOM`, and past the bound): Hypothesis's `find` is the engine: it
generates batches (`space.batches`), keeps the first that fails, shrinks it
(dropping the trials it does not need, then simplifying the one left) and
returns the smallest. A seed makes the search the same every time; without one,
Hypothesis's example database, when given, replays the last counterexample of
the same search first (a seeded search uses none: that is Hypothesis's `seed`).
A search without a failure ends when its budget of trials or its time is spent
(`_Spent` leaves Hypothesis's loop: it is no exception Hypothesis catches), or
when Hypothesis has no new batch to try; shrinking keeps Hypothesis's own bounds
(500 successful shrinks, 5 minutes).

The counterexample is then run again `confirm` times, fresh, to say how often it
reproduces: one that fails in none of them is unconfirmed (a flake of the
machine, or a job that breaks only sometimes), never reported as a
counterexample, its schedule kept to replay all the same.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import random
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labcore.delivery import policy_of
from labcore.faults import Fault
from testbed.errors import RunFailure
from testbed.explore.accounts import trial_lines
from testbed.explore.bounded import Tried, schedules, size_of
from testbed.explore.coverage import Coverage
from testbed.explore.predicted import predicted
from testbed.explore.pruning import Equivalents, traces
from testbed.explore.space import FAULTS, Target, Trial, batches, trials
from testbed.explore.trials import Found, TrialResult, Trials, TrialSettings, sought

# Hypothesis's count of examples, unbounded: the budget counts trials run (`_Spent`).
NO_BUDGET = 10**6
SMALLEST, RANDOM = "smallest", "random"  # how a search goes: the bounded space first, or at random only
STALE_BATCHES = 500  # drawn in well under a second when none of them is run


@dataclass(frozen=True, slots=True)
class Search:
    targets: tuple[Target, ...]
    scenarios: tuple[str, ...] = ("none",)
    max_ops: int = 3
    budget: int | None = 100  # trials, before a failure is found
    seconds: float | None = None
    # Hypothesis's seed: the same trials for the same seed. Without one, its example
    # database (if given) replays the last counterexample of the same search first.
    seed: int | None = None
    parallel: int = 4  # trials in flight at once
    model_only: bool = False  # built-ins: look for disagreements with the model only
    confirm: int = 3
    database: Path | None = None
    faults: tuple[Fault, ...] = FAULTS  # what may strike (space.faults_for: on worker hosts, partition)
    strategy: str = "smallest"  # SMALLEST: the bounded space first; RANDOM: Hypothesis's search only
    depth: int = 2  # faults a schedule of the bounded space holds at most
    sample: int = 12  # a built-in's schedules run to check the model (the model predicts the rest)
    past_bound: bool = False  # after the bounded space, search at random past it (the budget or time left)

    def key(self, settings: TrialSettings) -> bytes:
        """The database's key: a search for the same thing replays its last counterexample first."""
        what = [[(t.name, t.handler) for t in self.targets], self.scenarios, self.max_ops, settings.retries]
        what += [settings.promise, self.model_only, self.faults]
        what += [settings.delivery] if settings.delivery is not None else []  # a search on Celery
        return hashlib.sha256(json.dumps(what).encode()).digest()


class _Spent(BaseException):
    """The search's budget or time is spent: ends Hypothesis's run, which catches Exceptions only."""


class _Aborted(BaseException):
    """The lab failed under a trial: never a failure for Hypothesis to shrink."""

    def __init__(self, cause: RunFailure) -> None:
        super().__init__(str(cause))
        self.cause = cause


@dataclass(slots=True)
class Exploration:
    trials: Trials
    searched: int = 0  # trials run before a failure was found
    stopped: str = ""
    search: str = SMALLEST
    tried: Tried | None = None  # of the bounded space, when it was tried
    counterexample: TrialResult | None = None
    confirmations: list[TrialResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def reproduced(self) -> int:
        found = self.counterexample
        return 0 if found is None else sum(c.found is found.found for c in self.confirmations)

    @property
    def confirmed(self) -> bool:
        """The counterexample failed the same way again in at least one of its fresh runs."""
        return self.reproduced > 0

    def count(self, found: Found) -> int:
        return sum(j.found is found for j in self.trials.judged)

    def coverage(self) -> Coverage:
        out = Coverage()
        for j in self.trials.judged:
            out.add(j.trial.schedule, j.row.history or {})
        return out

    @property
    def per_minute(self) -> float:
        return len(self.trials.judged) / self.seconds * 60 if self.seconds else 0.0

    def to_json(self, replay: str = "") -> dict[str, Any]:
        """As results.json keeps it (`explore`)."""
        judged = self.trials.judged
        confirming = len(self.confirmations)
        out: dict[str, Any] = {
            "trials": len(judged),
            "searched": self.searched,
            "shrinking": len(judged) - self.searched - confirming,
            "confirming": confirming,
            "seconds": round(self.seconds, 3),
            "trialsPerMinute": round(self.per_minute, 1),
            "stopped": self.stopped,
            "breaches": self.count(Found.BREACH),
            "labFailures": self.count(Found.LAB),
            "coverage": self.coverage().to_json(),
            "phases": [
                {"phase": phase, "cells": [j.row.cell_id for j in judged if j.phase == phase]}
                for phase in dict.fromkeys(j.phase for j in judged)
            ],
            "search": self.search,
        }
        if self.tried is not None:
            out["bounded"] = self.tried.to_json()
        found = self.counterexample
        if found is not None:
            row = found.row
            out["counterexample"] = {
                "found": found.found.value,
                "target": found.trial.target.name,
                "handler": found.trial.target.handler,
                "cell": row.cell_id,
                "schedule": found.trial.schedule.to_json(),
                "words": words(found),
                "reproduced": self.reproduced,
                "runs": confirming,
                "confirmed": self.confirmed,
                "replay": replay,
            }
        return out


def explore(run: Trials, search: Search) -> Exploration:
    """Search with `run`'s trials: the bounded space smallest first (`SMALLEST`), then, if asked,
    at random past it; or at random only (`RANDOM`), the first failure shrunk on the stack. The
    counterexample is then confirmed. If the stack fails (RunFailure), the trials run before are
    in `run`."""
    done = Exploration(run, search=search.strategy)
    started = time.monotonic()
    deadline = None if search.seconds is None else started + search.seconds
    try:
        found = _smallest(run, search, done, deadline) if search.strategy == SMALLEST else None
        past = search.past_bound and _spent(run, search, deadline) is None  # what is left of the budget and time
        if found is None and (search.strategy == RANDOM or past):
            found = _random(run, search, done, deadline)
        if found is not None:
            done.counterexample = found
            done.confirmations = run.run([found.trial] * search.confirm, "confirm")
    finally:
        done.seconds = time.monotonic() - started
    return done


def _spent(run: Trials, search: Search, deadline: float | None, pending: int = 0) -> str | None:
    """Why the search stops here, if its budget or its time is spent."""
    if search.budget is not None and len(run.judged) + pending >= search.budget:
        return f"its budget of {search.budget} trials was spent"
    if deadline is not None and time.monotonic() > deadline:
        return f"its {search.seconds:g} s were spent"
    return None


def _outcome(
    run: Trials,
    batch: Sequence[Trial],
    phase: str,
    parallel: int | None = None,
    until: Callable[[TrialResult], bool] | None = None,
) -> list[TrialResult]:
    """The batch's outcomes (the bounded space's: of those run, `run.run`); any failure of the
    lab under it a RunFailure."""
    try:
        return run.outcome(batch, phase) if parallel is None else run.run(batch, phase, parallel, until)
    except RunFailure:
        raise
    except Exception as exc:
        raise RunFailure(f"the lab failed under a trial: {type(exc).__name__}: {exc}") from exc


def bounded_space(run: Trials, search: Search) -> list[Trial]:
    """Every trial of the bounded space, smallest first (targets, then scenarios, in the order
    named within a size)."""
    retries = run.settings.retries
    policy = policy_of(run.settings.delivery, retries)
    held = run.workers - 1  # a worker left to run the held ops' duplicates
    space = [
        Trial(target, schedule)
        for target in search.targets
        for scenario in search.scenarios
        for schedule in schedules(scenario, retries, search.faults, search.depth, search.max_ops, held, policy)
    ]
    return sorted(space, key=lambda t: size_of(t.schedule))


def checking(space: Sequence[Trial], search: Search, promise: str, delivery: str | None) -> set[Trial]:
    """The built-ins' trials run on the real stack, each checking the model: for each target, a
    seeded sample of `search.sample` among those whose every strike the model says strikes (the
    others are, by the model, a smaller schedule), and for each scenario the first the model says
    breaks the promise. The model predicts the rest."""
    chosen: set[Trial] = set()
    pick = random.Random(search.seed or 0)
    for target in (t for t in search.targets if not t.handler):
        said = {t: predicted(target.name, t.schedule, promise, delivery) for t in space if t.target == target}
        whole = [t for t, p in said.items() if p.struck == len(t.schedule.strikes)]
        chosen.update(pick.sample(whole, min(search.sample, len(whole))))
        for scenario in search.scenarios:
            breaking = (t for t, p in said.items() if t.schedule.scenario == scenario and p.breaks)
            chosen.update(itertools.islice(breaking, 1))
    return chosen


def _smallest(run: Trials, search: Search, done: Exploration, deadline: float | None) -> TrialResult | None:
    """The bounded space in order of size, each schedule once, as one stream of cells
    `search.parallel` in flight (each started as one ends): the first failure is a smallest one.
    Built-ins run only what checks the model (`checking`); a user's job skips what is equivalent
    to a schedule run (`pruning`), so its trials of one size wait for the smaller ones'."""
    space = bounded_space(run, search)
    tried = done.tried = Tried(search.depth, len(space))
    settings = run.settings
    checked = checking(space, search, settings.promise, settings.delivery)
    equivalents = {t: Equivalents() for t in search.targets if t.handler}
    pending: list[Trial] = []

    def stops(judged: TrialResult) -> bool:
        return sought(judged.found, search.model_only) or (deadline is not None and time.monotonic() > deadline)

    def flush() -> TrialResult | None:
        outcome = _outcome(run, pending, "enumerate", search.parallel, stops)
        tried.ran += len(outcome)
        tried.sampled += sum(not j.trial.target.handler for j in outcome)
        pending.clear()
        for judged in outcome:
            if judged.trial.target.handler:
                row = judged.row
                equivalents[judged.trial.target].saw(
                    judged.trial.schedule, traces(row.op_facts or [], row.history or {})
                )
        failing = [j for j in outcome if sought(j.found, search.model_only)]
        if not failing:
            return None
        done.searched = len(run.judged)
        done.stopped = f"a failure was found in the bounded space, smallest first (nothing to shrink); {tried.text()}"
        return min(failing, key=lambda j: j.found is not Found.LAB)  # the lab's own bug first, then in order

    def spent(why: str) -> None:
        done.searched = len(run.judged)
        done.stopped = f"{why} in the bounded space: {tried.text()}"

    size = None
    for trial in space:
        # Whether a schedule is pruned depends on the smaller ones' trials: run them first.
        if pending and equivalents and size_of(trial.schedule) != size and (found := flush()) is not None:
            return found
        size = size_of(trial.schedule)
        if (why := _spent(run, search, deadline, len(pending))) is not None:
            if pending and (found := flush()) is not None:
                return found
            spent(why)
            return None
        if not trial.target.handler:
            if trial not in checked:
                tried.predicted += 1
                continue
        elif (same := equivalents[trial.target].reduced(trial.schedule)) != trial.schedule and run.seen(
            Trial(trial.target, same)
        ):
            tried.pruned += 1
            continue
        pending.append(trial)
    if pending and (found := flush()) is not None:
        return found
    if tried.tried < tried.schedules:  # the time ran out in the last stream: some of it never started
        spent(f"its {search.seconds:g} s were spent")
        return None
    done.searched = len(run.judged)
    past = (
        "random search past it follows"
        if search.past_bound
        else "no random search past it (--budget or --time asks for one)"
    )
    done.stopped = f"the bounded space was tried to its end, {past}: {tried.text()}"
    return None


def _random(run: Trials, search: Search, done: Exploration, deadline: float | None) -> TrialResult | None:
    """Hypothesis's random search: the first failing batch, shrunk on the stack to its smallest."""
    from hypothesis import HealthCheck, Phase, Verbosity, find
    from hypothesis import settings as hypothesis_settings
    from hypothesis.database import DirectoryBasedExampleDatabase
    from hypothesis.errors import NoSuchExample

    phase = "search"
    stale = 0  # batches in a row that held no trial not run before
    bounded = done.stopped  # what the bounded space ended with, if it was tried first
    stopped = ""

    def fails(batch: list[Trial]) -> bool:
        nonlocal phase, stale, stopped
        if phase == "search":
            if (why := _spent(run, search, deadline)) is not None:
                stopped = why
                raise _Spent
            # Many draws make one trial (space.fitted), so Hypothesis cannot tell that a
            # small space is spent: it would draw old trials for ever.
            if stale >= STALE_BATCHES:
                stopped = "no new trial was left to try"
                raise _Spent
            left = NO_BUDGET if search.budget is None else search.budget - len(run.judged)
            batch = batch[:left]
        before = len(run.judged)
        try:
            outcome = _outcome(run, batch, phase)
        except RunFailure as exc:  # the lab's own failure: no counterexample to shrink
            raise _Aborted(exc) from exc
        stale = stale + 1 if len(run.judged) == before else 0
        failed = any(sought(j.found, search.model_only) for j in outcome)
        if failed and phase == "search":
            phase, done.searched = "shrink", len(run.judged)
        return failed

    # A seeded search is Hypothesis's reproduction of a run: it uses no database (hypothesis.seed).
    seeded = search.seed is not None
    database = None if seeded or search.database is None else DirectoryBasedExampleDatabase(search.database)
    phases = [Phase.generate, Phase.shrink] if database is None else [Phase.reuse, Phase.generate, Phase.shrink]
    held = run.workers - 1  # a worker left to run the held ops' duplicates
    retries = run.settings.retries
    policy = policy_of(run.settings.delivery, retries)
    trial = trials(search.targets, search.scenarios, search.max_ops, retries, search.faults, held, policy)
    space = batches(trial, search.parallel)
    hypothesis = hypothesis_settings(
        # The budget counts trials run, not Hypothesis's examples (a batch of them, or one seen before).
        max_examples=NO_BUDGET,
        deadline=None,
        database=database,
        phases=phases,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
    )
    try:
        with _hypothesis_home():
            smallest = find(
                space,
                fails,
                settings=hypothesis,
                random=random.Random(search.seed) if seeded else None,
                database_key=search.key(run.settings),
            )
    except NoSuchExample:
        stopped = stopped or "no new trial was left to try"
        smallest = None
    except _Spent:
        smallest = None
    except _Aborted as aborted:
        raise aborted.cause from None
    found = None
    if smallest is None:
        done.searched = len(run.judged)
    else:
        failing = [j for j in run.outcome(smallest, "shrink") if sought(j.found, search.model_only)]
        found = min(failing, key=lambda j: j.found is not Found.LAB)  # the lab's own bug first
        stopped = "a failure was found and shrunk"
    done.stopped = f"{bounded}; then at random past the bound, until {stopped}" if bounded else stopped
    return found


@contextlib.contextmanager
def _hypothesis_home() -> Iterator[None]:
    """Hypothesis's own files (its cache of the constants of the modules it sees) in a temp dir
    of the search's, not in a .hypothesis/ of the working directory: the database, given
    explicitly, is the only thing of Hypothesis's a search keeps (in the store's .hypothesis/)."""
    from hypothesis.configuration import set_hypothesis_home_dir

    with tempfile.TemporaryDirectory(prefix="hypothesis-") as home:
        set_hypothesis_home_dir(home)
        try:
            yield
        finally:
            set_hypothesis_home_dir(None)  # Hypothesis's default again: $HYPOTHESIS_STORAGE_DIRECTORY, or ./.hypothesis


def words(judged: TrialResult) -> list[str]:
    """What happened to each op of a trial, one line each, its breaches named."""
    row = judged.row
    breaking = (row.promise or {}).get("ops", [])
    return trial_lines(judged.trial.schedule, row.op_facts or [], row.history or {}, breaking)


def found_so_far(run: Trials, model_only: bool) -> TrialResult | None:
    """The last failing trial judged (while shrinking, the smallest yet): what a search
    stopped before its end (Ctrl-C) had found."""
    return next((j for j in reversed(run.judged) if sought(j.found, model_only)), None)


def targets_of(strategies: Sequence[str], handlers: Sequence[str]) -> tuple[Target, ...]:
    return tuple(Target(s, False) for s in strategies) + tuple(Target(h, True) for h in handlers)
