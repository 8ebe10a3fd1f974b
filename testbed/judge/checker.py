"""The checker: from what the provider recorded about each op, and what the
application concluded, to the counts of a scorecard row. Pure; the facts are
gathered by `testbed.judge.facts` (real run) or `testbed.judge.model` (model).

Effects are counted per logical action (intent), so an op the planner
re-created under a new identity still counts as a duplicate.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields

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
class HeldOp:
    op: str
    state: str  # unresolved | conflict
    reason: str


@dataclass(slots=True)
class Tally:
    counts: Counts = field(default_factory=Counts)
    held: list[HeldOp] = field(default_factory=list)

    def add(self, ops: Sequence[OpFacts]) -> None:
        """One logical action and every op (identity) created for it."""
        c = self.counts
        c.intended += 1
        effects = sum(o.effects for o in ops)
        declined = any(o.declined for o in ops)
        done = any(o.outcome in LOCALLY_DONE for o in ops)
        c.effects += effects
        c.withdrawn_effects += sum(o.withdrawn for o in ops)
        c.requests += sum(o.sends for o in ops)
        c.lookups += sum(o.lookups for o in ops)
        c.replays += sum(max(0, o.attempts - 1) for o in ops)
        c.jobs_failed += sum(o.job_failed for o in ops)
        if effects:
            c.duplicate_effects += effects - 1
            c.unrecorded_effects += not done
        else:
            # A permanent provider error is an answer, not lost work.
            c.failed_by_provider += declined
            c.missing_operations += not declined
            c.false_completions += done
            c.skipped_without_effect += any(o.outcome is Outcome.SKIPPED for o in ops)
        for o in ops:
            if o.outcome in (Outcome.UNRESOLVED, Outcome.CONFLICT):
                c.unresolved += o.outcome is Outcome.UNRESOLVED
                c.conflicts += o.outcome is Outcome.CONFLICT
                self.held.append(HeldOp(o.op, o.outcome.value, o.detail))


def tally(intents: Iterable[Sequence[OpFacts]]) -> Tally:
    result = Tally()
    for ops in intents:
        result.add(ops)
    return result
