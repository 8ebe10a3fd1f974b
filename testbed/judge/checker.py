"""The checker: from what the provider recorded about each op, and what the
application concluded, to the counts of a scorecard row. Pure; the facts are
gathered by `testbed.judge.facts` (real run) or `testbed.judge.model` (model).

Effects are counted per logical action (intent), so an op the planner
re-created under a new identity still counts as a duplicate.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Literal

from workers.flow import LOCALLY_DONE, Outcome


@dataclass(frozen=True, slots=True)
class OpFacts:
    op: str
    intent: str
    attempts: int = 0
    effects: int = 0  # in the provider's log, withdrawn ones included
    withdrawn: int = 0
    declined: int = 0  # permanent errors the provider recorded for it
    sends: int = 0  # requests that reached the provider
    lookups: int = 0
    outcome: Outcome | None = None  # what the last returning attempt concluded; None: none returned
    detail: str = ""
    job_failed: bool = False  # RQ gave up on the job (retries exhausted)


@dataclass(slots=True)
class Counts:
    intended: int = 0
    requests: int = 0
    lookups: int = 0
    effects: int = 0
    duplicate_effects: int = 0
    missing_operations: int = 0
    skipped_without_effect: int = 0
    unresolved: int = 0
    conflicts: int = 0
    failed_by_provider: int = 0
    false_completions: int = 0
    unrecorded_effects: int = 0
    withdrawn_effects: int = 0
    jobs_failed: int = 0
    replays: int = 0


COUNT_FIELDS = tuple(f.name for f in fields(Counts))


@dataclass(frozen=True, slots=True)
class HeldOutcome:
    op: str
    state: str  # unresolved | conflict
    reason: str


# What became of a logical action, worst first: the one classification the checker counts and
# the reports tell (timelines, findings, JUnit, `testbed check` through the counts).
ActionOutcome = Literal["duplicated", "missing", "held", "declined", "once"]

# Each outcome in words, as every report says it.
OUTCOME_WORDS: dict[ActionOutcome, str] = {
    "duplicated": "duplicated",
    "missing": "missing",
    "held": "held (unresolved or conflict)",
    "declined": "failed by provider",
    "once": "exactly once",
}

# What an attempt concludes when it holds its op back instead of counting it done.
HELD_OUTCOMES = (Outcome.UNRESOLVED, Outcome.CONFLICT)


@dataclass(frozen=True, slots=True)
class Classified:
    """A logical action, classified: its outcome, and what besides it the counts record of it."""

    outcome: ActionOutcome
    extra_effects: int  # effects past the first: duplicated work
    failed_by_provider: bool  # no effect, and a permanent provider error: an answer, not lost work
    false_completion: bool  # no effect, yet the application concluded it done (silent loss)
    unrecorded_effect: bool  # an effect the application never concluded done


def classify(effects: int, declined: bool, done: bool, held: bool) -> Classified:
    """What became of a logical action, from its effects at the provider (withdrawn ones
    included), whether the provider declined it, whether the application concluded it done,
    and whether an attempt holds it (unresolved, conflict). Pure."""
    if effects > 1:
        outcome: ActionOutcome = "duplicated"
    elif effects == 0 and not declined:
        outcome = "missing"
    elif held:
        outcome = "held"
    else:
        outcome = "declined" if effects == 0 else "once"
    return Classified(
        outcome,
        extra_effects=max(0, effects - 1),
        failed_by_provider=effects == 0 and declined,
        false_completion=effects == 0 and done,
        unrecorded_effect=effects > 0 and not done,
    )


@dataclass(slots=True)
class Tally:
    counts: Counts = field(default_factory=Counts)
    held: list[HeldOutcome] = field(default_factory=list)

    def add(self, ops: Sequence[OpFacts]) -> None:
        """One logical action and every op (identity) created for it."""
        c = self.counts
        c.intended += 1
        effects = sum(o.effects for o in ops)
        done = any(o.outcome in LOCALLY_DONE for o in ops)
        held = any(o.outcome in HELD_OUTCOMES for o in ops)
        k = classify(effects, any(o.declined for o in ops), done, held)
        c.effects += effects
        c.withdrawn_effects += sum(o.withdrawn for o in ops)
        c.requests += sum(o.sends for o in ops)
        c.lookups += sum(o.lookups for o in ops)
        c.replays += sum(max(0, o.attempts - 1) for o in ops)
        c.jobs_failed += sum(o.job_failed for o in ops)
        c.duplicate_effects += k.extra_effects
        c.unrecorded_effects += k.unrecorded_effect
        c.failed_by_provider += k.failed_by_provider
        c.missing_operations += k.outcome == "missing"
        c.false_completions += k.false_completion
        c.skipped_without_effect += not effects and any(o.outcome is Outcome.SKIPPED for o in ops)
        for o in ops:
            if o.outcome in HELD_OUTCOMES:
                c.unresolved += o.outcome is Outcome.UNRESOLVED
                c.conflicts += o.outcome is Outcome.CONFLICT
                self.held.append(HeldOutcome(o.op, o.outcome.value, o.detail))


def tally(intents: Iterable[Sequence[OpFacts]]) -> Tally:
    result = Tally()
    for ops in intents:
        result.add(ops)
    return result
