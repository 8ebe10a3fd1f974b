"""What a user's own job promises, checked from facts only (pure).

There is no model of foreign code, so a user's job is judged against a
promise, from the provider's log (the effects of each op) and RQ's final
state of each job (finished: the function returned; failed: RQ gave up):

- `exactly-once`: every op has exactly one effect: none twice, none missing,
  whether its job finished (a false completion) or failed;
- `at-least-once`: no op is missing;
- `at-most-once`: no op has an effect twice.

An op the provider answered with a permanent error is answered, not missing.
Effects are counted per logical action, so an op the planner re-created under
a new identity counts as a duplicate.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from labcore.choices import pick
from labcore.ids import seq_of
from labcore.plan import Armed, EveryNth, Plan
from labcore.scoped import user_op_id
from testbed.judge.checker import OpFacts
from workers.flow import LOCALLY_DONE


class Promise(StrEnum):
    EXACTLY_ONCE = "exactly-once"
    AT_LEAST_ONCE = "at-least-once"
    AT_MOST_ONCE = "at-most-once"


class Breach(StrEnum):
    DUPLICATED = "duplicated"  # more than one effect
    MISSING = "missing"  # no effect, and no permanent error from the provider


BROKEN_BY: dict[Promise, frozenset[Breach]] = {
    Promise.EXACTLY_ONCE: frozenset(Breach),
    Promise.AT_LEAST_ONCE: frozenset({Breach.MISSING}),
    Promise.AT_MOST_ONCE: frozenset({Breach.DUPLICATED}),
}


def parse_promise(text: str) -> Promise:
    return pick("promise", text, {p.value: p for p in Promise})


@dataclass(frozen=True, slots=True)
class OpReport:
    """One op that breaks a promise, with what happened to it."""

    op: str  # as the user's job was given it
    breach: Breach
    effects: int  # in the provider's log (withdrawn ones included)
    withdrawn: int
    requests: int  # effect calls that reached the provider
    attempts: int
    job: str  # finished | failed | not over
    fault: str  # the fault armed on it, and whether it was hit
    source: str | None = None  # where the effects were counted: None, the provider's log; else a destination's words

    def __str__(self) -> str:
        return breaking_words(
            self.op,
            self.breach,
            self.effects,
            self.withdrawn,
            self.requests,
            self.attempts,
            self.job,
            self.fault,
            self.source,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OpReport:
        return cls(**{**data, "breach": Breach(data["breach"])})


def breaking_words(
    op: str,
    breach: str,
    effects: int,
    withdrawn: int,
    requests: int,
    attempts: int,
    job: str,
    fault: str,
    source: str | None = None,
) -> str:
    """An op that breaks a promise, in words: from a live report (OpReport) or a stored one. The
    counts are named by their source: the provider's log, or a destination's own records
    (`source`, `testbed.judge.evidence.counted_at`), its requests those the lab forwarded there."""
    sent = f"{requests} request{'s' * (requests != 1)}"
    if source is None:
        recorded = f"{effects} effect{'s' * (effects != 1)}"
        if withdrawn:
            recorded += f" ({withdrawn} withdrawn)"
        counted = f"the provider recorded {recorded} from {sent}"
    else:
        counted = f"{source} held {effects} record{'s' * (effects != 1)} of it, from {sent} the lab forwarded"
    finished = "job finished: a false completion" if breach == Breach.MISSING and job == "finished" else f"job {job}"
    return f"{op}: {breach}: {counted}; {attempts} attempt{'s' * (attempts != 1)}; {fault}; {finished}"


def _job_state(ops: Sequence[OpFacts]) -> str:
    if any(o.job_failed for o in ops):
        return "failed"
    return "finished" if any(o.outcome in LOCALLY_DONE for o in ops) else "not over"


@dataclass(slots=True)
class PromiseCheck:
    """Classifies each logical action as it streams past; keeps the first `keep` breaking ops."""

    promise: Promise
    op_name: Callable[[str], str]  # the op as the user's job knows it
    fault_of: Callable[[str], str]  # the fault armed on an op's attempts, as text
    keep: int = 200
    source: str | None = None  # where the effects are counted (OpReport.source)
    counts: Counter[Breach] = field(default_factory=Counter)
    reports: list[OpReport] = field(default_factory=list)

    def watch(self, intents: Iterable[Sequence[OpFacts]]) -> Iterator[Sequence[OpFacts]]:
        for ops in intents:
            self.add(ops)
            yield ops

    def add(self, ops: Sequence[OpFacts]) -> None:
        effects = sum(o.effects for o in ops)
        if effects > 1:
            breach = Breach.DUPLICATED
        elif effects == 0 and not any(o.declined for o in ops):
            breach = Breach.MISSING
        else:
            return
        self.counts[breach] += 1
        if len(self.reports) < self.keep:
            first = ops[0]
            self.reports.append(
                OpReport(
                    op=self.op_name(first.op),
                    breach=breach,
                    effects=effects,
                    withdrawn=sum(o.withdrawn for o in ops),
                    requests=sum(o.sends for o in ops),
                    attempts=sum(o.attempts for o in ops),
                    job=_job_state(ops),
                    fault=self.fault_of(first.intent),
                    source=self.source,
                )
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "promise": self.promise.value,
            "kept": not broken(self.promise, self.counts),
            **{b.value: self.counts[b] for b in Breach},
            "ops": [_reported(r) for r in self.reports],
        }


def _reported(report: OpReport) -> dict[str, Any]:
    """A breaking op as a row's verdict stores it (its source only where it is not the provider's log)."""
    stored = {**asdict(report), "breach": report.breach.value}
    if report.source is None:
        del stored["source"]
    return stored


def broken(promise: Promise, counts: Counter[Breach] | dict[Breach, int]) -> list[str]:
    """One line per kind of breach the promise does not allow, e.g. `exactly-once: 10 ops duplicated`."""
    return [
        f"{promise}: {counts[b]} op{'s' * (counts[b] != 1)} {b}"
        for b in Breach
        if b in BROKEN_BY[promise] and counts.get(b, 0)
    ]


def breaches(verdict: dict[str, Any], promise: Promise) -> list[OpReport]:
    """From a row's stored verdict: the listed ops that break `promise`."""
    reports = [OpReport.from_dict(r) for r in verdict.get("ops", [])]
    return [r for r in reports if r.breach in BROKEN_BY[promise]]


def counts_of(verdict: dict[str, Any]) -> Counter[Breach]:
    return Counter({b: int(verdict.get(b.value, 0)) for b in Breach})


def _fault_text(armed: tuple[Armed, ...], history: list[dict[str, Any]] | None) -> str:
    if not armed:
        return "no fault armed"
    parts = []
    for a in armed:
        text = f"{a.fault} at {a.boundary} on attempt {a.attempt}"
        if history is not None:
            hit = any(
                e["event"] == "hit" and (e.get("attempt"), e.get("boundary")) == (a.attempt, a.boundary)
                for e in history
            )
            text += "" if hit else " (not reached)"
        parts.append(text)
    return ", ".join(parts)


def judge_for(
    promise: str,
    ledger: str,
    plan: Plan,
    history: dict[str, list[dict[str, Any]]] | None,
    source: str | None = None,
) -> PromiseCheck:
    """A cell's judge: ops named as the user's job knew them, each with the faults armed on it;
    `source`: where their effects are counted (None: the provider's log)."""

    def fault_of(intent: str) -> str:
        return _fault_text(plan.armed(seq_of(intent)), None if history is None else history.get(intent, []))

    return PromiseCheck(parse_promise(promise), lambda op: user_op_id(ledger, op), fault_of, source=source)


def armed_ops(plan: Plan, ops: int) -> int:
    """The ops whose armed fault must be reached: under the matrix's plan, every armed (first)
    attempt runs; a load plan's later attempts may never run, so none is counted."""
    if not isinstance(plan, EveryNth) or plan.boundary is None:
        return 0
    return ops // plan.every


def not_tested(unreached: int) -> str:
    """The words for a cell that passes without having tested its boundary: never green."""
    return (
        f"{unreached} armed fault{'s' * (unreached != 1)} never reached: the cell did not test its boundary, not tested"
    )


def verdict(judge: PromiseCheck, plan: Plan, ops: int, faults_hit: int) -> tuple[list[str], dict[str, Any]]:
    """The row's broken promises (and armed faults the job never reached), and its stored verdict."""
    stored = judge.to_json()
    stored["unreached"] = max(0, armed_ops(plan, ops) - faults_hit)
    return broken(judge.promise, judge.counts) + unreached_faults(stored), stored


def unreached_faults(stored: dict[str, Any]) -> list[str]:
    n = stored.get("unreached", 0)
    if not n:
        return []
    return [not_tested(n) + " (with a client the lab does not instrument, call testbed.boundary(...))"]
