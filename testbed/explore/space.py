"""The space explore draws its trials from, as Hypothesis strategies ordered so
that shrinking simplifies a trial the way a reader would: fewer ops, fewer
faulted attempts, earlier attempts, simpler faults, the plainer scenario, the
first target named.

- A trial is a target (a strategy or a handler) and a schedule, under the
  first scenario named for half the trials, one of the others for the rest.
- An op is a list of its attempts' strikes, attempt 1 first, each clean or one
  strike: shrinking drops attempts (a fault moves to an earlier attempt),
  turns strikes clean (`one_of` shrinks to its first branch), and moves a
  strike down the list of strikes, ordered simplest first (kill at job-start
  first, then later boundaries, then the other faults).
- Faults strike attempts 1 to `retries` only: the last attempt runs clean, so
  every op can still finish, and a job that runs out of retries is never what
  a trial finds.
- One trial in ten may crash the provider, or, across worker hosts, cut a host
  off from it: such a trial runs alone (its fault reaches past its own
  requests), and a trial that runs alone throttles the search. A schedule that
  crashes the provider faults one op only and holds no late request, and one
  that cuts a host off is one op (`testbed.experiment.schedules`), so drawn
  schedules are made to fit (`fitted`).
- Across worker hosts the provider is not the run's to crash: `partition`
  takes `provider-crash`'s place (`faults_for`).
- On Celery, trials run under one delivery setting, which may run no attempt
  after a fault (early acknowledgement): an op's strikes stop before the
  first attempt the setting never runs (`reachable`), so the search does not
  try one trial under many names. No whole worker is killed: a Celery worker
  killed with a message unacknowledged (its task's, or one it had reserved
  for another op) leaves it to the broker's restore, after the visibility
  timeout (an hour by default), longer than any trial (`faults_for`). Under a
  setting that acknowledges a task as it starts, no op is held for its
  duplicate by default (`scenarios_for`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from labcore.boundaries import ORDER, Boundary
from labcore.delivery import acks_late
from labcore.faults import RULES, Fault, cause_of
from labcore.plan import Armed
from labcore.redelivery import Cause, Redelivery
from labcore.schedule import Schedule
from testbed.experiment.scenarios import SCENARIOS, Nemesis
from testbed.experiment.schedules import HELD_FOR_DUPLICATE, legal

# Simplest first: what shrinking moves a strike towards. `hold` is duplicate-enqueue's own.
FAULTS = (Fault.KILL, Fault.TIMEOUT, Fault.KILL_WORKER, Fault.LATE, Fault.PROVIDER_CRASH)
# On worker hosts (--hosts): a provider the run did not start cannot be crashed; a host can be cut off.
HOST_FAULTS = (Fault.KILL, Fault.TIMEOUT, Fault.KILL_WORKER, Fault.LATE, Fault.PARTITION)
ALONE_SHARE = 10  # one trial in this many may strike with a fault that makes it run alone


def faults_for(hosts: bool, whole_workers: bool = True) -> tuple[Fault, ...]:
    """What may strike: on worker hosts a partition for the provider's crash; a whole worker
    killed only on an engine whose killed workers' jobs come back within a trial."""
    faults = HOST_FAULTS if hosts else FAULTS
    return faults if whole_workers else tuple(f for f in faults if f is not Fault.KILL_WORKER)


DEFAULT_SCENARIOS = ("none", "duplicate-enqueue")


def scenarios_for(asked: Sequence[str], delivery: str | None) -> tuple[str, ...]:
    """The scenarios trials are drawn under: those asked for (the engine refuses what it cannot
    run: `Engine.refused`), else the default ones the engine can run. Under a setting that may
    acknowledge a task as it starts, a worker whose op is held takes the next message meanwhile,
    which may be a held op's duplicate: duplicate-enqueue only where asked for."""
    if delivery is None or acks_late(delivery):
        return tuple(asked) or DEFAULT_SCENARIOS
    return tuple(asked) or tuple(s for s in DEFAULT_SCENARIOS if SCENARIOS[s].nemesis is not Nemesis.DUPLICATE)


def reachable(strikes: tuple[Armed, ...], policy: Redelivery) -> tuple[Armed, ...]:
    """An op's strikes up to the first on an attempt the queue never runs: one after an attempt
    that a strike ended and the `policy` does not run again, or after an attempt left clean, which
    ends the op unless it raised (and an error is retried only as the policy says)."""
    causes: list[Cause] = []  # how each attempt before the strike ended, at best
    for n, a in enumerate(strikes):
        causes += [Cause.ERROR] * (a.attempt - 1 - len(causes))
        if not policy.again(causes):
            return strikes[:n]
        causes.append(cause_of(a.fault))
    return strikes


@dataclass(frozen=True, slots=True)
class Target:
    """What runs the trials: a built-in strategy, or a user's job (`module:function`)."""

    name: str
    handler: bool


@dataclass(frozen=True, slots=True)
class Trial:
    target: Target
    schedule: Schedule


def strikes(faults: Sequence[Fault]) -> list[tuple[Boundary, Fault]]:
    return [(b, f) for f in faults for b in ORDER if b in RULES[f].boundaries]


def _attempts(choices: list[tuple[Boundary, Fault] | None]) -> tuple[Armed, ...]:
    return tuple(Armed(n, *choice) for n, choice in enumerate(choices, 1) if choice is not None)


def op_strikes(
    scenario: str, retries: int, faults: Sequence[Fault], policy: Redelivery | None = None
) -> st.SearchStrategy[tuple[Armed, ...]]:
    """One op's strikes under the scenario; with a `policy`, only those on attempts the queue runs."""
    drawn = _op_strikes(scenario, retries, faults)
    return drawn if policy is None else drawn.map(lambda armed: reachable(armed, policy))


def _op_strikes(scenario: str, retries: int, faults: Sequence[Fault]) -> st.SearchStrategy[tuple[Armed, ...]]:
    nemesis = SCENARIOS[scenario].nemesis
    if nemesis is Nemesis.DUPLICATE:
        return st.booleans().map(lambda held: (HELD_FOR_DUPLICATE,) if held else ())
    strike = st.sampled_from(strikes(faults))
    if nemesis is Nemesis.REMINT:  # one fault per op: each re-mints it
        one = st.tuples(st.integers(1, retries), strike).map(lambda t: (Armed(t[0], *t[1]),))
        return st.one_of(st.just(()), one)
    return st.lists(st.one_of(st.none(), strike), max_size=retries).map(_attempts)


def fitted(schedule: Schedule, max_held: int | None = None) -> Schedule:
    """A drawn schedule as the lab can run it: if it cuts a host off, it is the first op that
    cuts, alone; if it crashes the provider, only the first op it crashes on keeps its faults,
    and no late request is held. At most `max_held` ops are held waiting for their duplicates
    (fewer than the workers: with every worker holding, no duplicate would run)."""
    if max_held is not None and len(schedule.held) > max_held:
        released = set(schedule.held[max_held:])
        ops = tuple(
            tuple(a for a in op if RULES[a.fault].client_gives_up) if n in released else op
            for n, op in enumerate(schedule.ops)
        )
        schedule = legal(Schedule(ops, schedule.scenario, schedule.retries))
    cutting = next((op for op in schedule.ops if any(RULES[a.fault].cuts_network for a in op)), None)
    if cutting is not None:
        return legal(Schedule((cutting,), schedule.scenario, schedule.retries))
    crashing = next((n for n, op in enumerate(schedule.ops) if any(RULES[a.fault].kills_provider for a in op)), None)
    if crashing is None:
        return schedule
    ops = tuple(
        tuple(a for a in op if a.fault is not Fault.LATE) if n == crashing else () for n, op in enumerate(schedule.ops)
    )
    return legal(Schedule(ops, schedule.scenario, schedule.retries))


@st.composite
def _trial(
    draw: st.DrawFn,
    targets: Sequence[Target],
    scenarios: Sequence[str],
    max_ops: int,
    retries: int,
    faults: Sequence[Fault],
    max_held: int | None,
    policy: Redelivery | None,
) -> Trial:
    target = draw(st.sampled_from(targets))
    # The first scenario for half the trials: the others (a narrower space, often) share the rest.
    scenario = draw(st.sampled_from(scenarios[1:])) if len(scenarios) > 1 and draw(st.booleans()) else scenarios[0]
    alone = any(RULES[f].alone for f in faults) and draw(st.integers(1, ALONE_SHARE)) == ALONE_SHARE
    allowed = [f for f in faults if alone or not RULES[f].alone]
    ops = draw(st.lists(op_strikes(scenario, retries, allowed, policy), min_size=1, max_size=max_ops))
    return Trial(target, fitted(Schedule(tuple(ops), scenario, retries), max_held))


def trials(
    targets: Sequence[Target],
    scenarios: Sequence[str],
    max_ops: int,
    retries: int,
    faults: Sequence[Fault] = FAULTS,
    max_held: int | None = None,
    policy: Redelivery | None = None,
) -> st.SearchStrategy[Trial]:
    return _trial(targets, scenarios, max_ops, retries, faults, max_held, policy)


def batches(trial: st.SearchStrategy[Trial], size: int) -> st.SearchStrategy[list[Trial]]:
    """Trials run at once, as parallel cells; shrinking drops the ones a failure does not need."""
    return st.lists(trial, min_size=1, max_size=size)
