"""One verdict for every row, chaos or load: the observed facts next to the
model's, op by op; the user's own expectations; the strategy's promises.

The observed facts stream in chunks (a 100,000-op load row never holds them
all); the model predicts the same ops in the same order, so both tallies and
the per-op comparison are made in one pass, and a row that differs names the
ops that differ.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from labcore.plan import Plan
from testbed.experiment.matrix import Cell
from testbed.judge import invariants, promises
from testbed.judge.checker import OpFacts, Tally
from testbed.judge.model import inexact_facts, inexact_fields, predict_ops
from testbed.judge.observer import CellObservations
from testbed.judge.promises import Promise
from testbed.judge.scorecard import Expected, Row, latency_stats

# Enough to see a pattern; the counts say how many there are in all.
MAX_NAMED_OPS = 10

# What an op's facts are compared on, where the model is exact (`inexact_facts`).
_FACTS = ("attempts", "effects", "withdrawn", "declined", "outcome", "job_failed", "sends", "lookups")


@dataclass(frozen=True, slots=True)
class OpMismatch:
    """One op whose facts differ from the model's: what was planned, expected and seen."""

    op: str
    plan: list[dict[str, Any]]
    expected: dict[str, Any]
    observed: dict[str, Any]
    events: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Judgement:
    cell: Cell
    plan: Plan
    ops: int
    retries: int
    overrides: dict[str, int] | None = None  # the user's own expectation for this cell
    promises: bool = False  # also check what the strategy promises whatever the faults (load)
    ledger: str = ""
    promise: str = Promise.EXACTLY_ONCE  # what a user's job (a cell with a handler) is judged against
    source: str | None = None  # where the effects are counted: None, the provider's log; else a destination


def judge(
    j: Judgement, observed: Iterable[Sequence[OpFacts]], seen: CellObservations, workers: int, wall: float
) -> Row:
    if j.cell.schedule is not None:
        # A trial has a few ops: what happened to each is kept, for its account in words.
        kept: list[Sequence[OpFacts]] = []
        row = _judge(j, _keeping(observed, kept), seen, workers, wall)
        row.op_facts = [{"op": facts[0].op, **_summary(facts)} for facts in kept]
        return row
    return _judge(j, observed, seen, workers, wall)


def _keeping(observed: Iterable[Sequence[OpFacts]], kept: list[Sequence[OpFacts]]) -> Iterator[Sequence[OpFacts]]:
    for facts in observed:
        kept.append(facts)
        yield facts


def _judge(
    j: Judgement, observed: Iterable[Sequence[OpFacts]], seen: CellObservations, workers: int, wall: float
) -> Row:
    if j.cell.handler is not None:
        return _judge_by_promise(j, observed, seen, workers, wall)
    fields = [f for f in _FACTS if f not in inexact_facts(j.cell.faults)]
    real, model = Tally(), Tally()
    kills = faults = 0
    differing: list[tuple[int, Sequence[OpFacts], list[OpFacts]]] = []
    ops_differing = 0
    # A trial of explore is held to the promise too: a loss the model predicts is still a loss.
    by_promise = (
        promises.judge_for(j.promise, j.ledger, j.plan, None, j.source) if j.cell.schedule is not None else None
    )
    if by_promise is not None:
        observed = by_promise.watch(observed)
    for (seq, predicted, op_kills, op_faults), facts in zip(
        predict_ops(j.cell, j.plan, j.ops, j.retries), observed, strict=True
    ):
        real.add(facts)
        model.add(predicted)
        kills += op_kills
        faults += op_faults
        if _view(facts, fields) != _view(predicted, fields):
            ops_differing += 1
            if len(differing) < MAX_NAMED_OPS:
                differing.append((seq, facts, predicted))
    expected = Expected.from_tally(model, kills, faults, inexact_fields(j.cell.faults))
    if j.overrides:
        expected = expected.override(j.overrides)
    row = _row(j, real, expected, seen, workers, wall)
    armed = promises.armed_ops(j.plan, j.ops)
    if j.cell.injected and armed and not seen.faults:
        row.broken.append(promises.not_tested(armed))
    if j.promises:
        row.broken += invariants.broken(j.cell.strategy, real.counts)
        row.invariants = invariants.promises(j.cell.strategy)
    if ops_differing and not row.differences and not j.overrides:
        # Totals can agree while ops differ (one op's effect where another's was due).
        row.broken.append(f"{ops_differing} op{'s' * (ops_differing != 1)} differ from the model")
    if by_promise is not None:
        broken, row.promise = promises.verdict(by_promise, j.plan, j.ops, seen.faults)
        row.broken += broken
    if not row.passed:
        row.op_differences = [_difference(j, seq, facts, predicted, seen) for seq, facts, predicted in differing]
    return row


def _judge_by_promise(
    j: Judgement, observed: Iterable[Sequence[OpFacts]], seen: CellObservations, workers: int, wall: float
) -> Row:
    """A user's job has no model: the facts are checked against its promise instead."""
    history = seen.history_json() if seen.keep_history else None
    by_promise = promises.judge_for(j.promise, j.ledger, j.plan, history, j.source)
    real = Tally()
    for facts in by_promise.watch(observed):
        real.add(facts)
    expected = Expected({})
    if j.overrides:
        expected = expected.override(j.overrides)
    row = _row(j, real, expected, seen, workers, wall)
    row.broken, row.promise = promises.verdict(by_promise, j.plan, j.ops, seen.faults)
    return row


def _row(j: Judgement, real: Tally, expected: Expected, seen: CellObservations, workers: int, wall: float) -> Row:
    row = Row(
        cell=j.cell,
        counts=real.counts,
        kills=seen.kill_count,
        faults=seen.faults,
        workers=workers,
        wall_seconds=wall,
        expected=expected,
        held=real.held,
        replay_latency_ms=latency_stats(list(seen.replay_latencies_ms)),
        anomalies=seen.anomalies,
    )
    if seen.keep_history:
        row.history = seen.history_json()
    return row


def _view(ops: Sequence[OpFacts], fields: Sequence[str]) -> list[dict[str, Any]]:
    return [{"op": o.op, **{f: getattr(o, f) for f in fields}} for o in ops]


def _difference(
    j: Judgement, seq: int, facts: Sequence[OpFacts], predicted: Sequence[OpFacts], seen: CellObservations
) -> OpMismatch:
    op = facts[0].intent
    events = [e.to_json() for o in facts for e in seen.history.get(o.op, [])]
    plan = [{"attempt": a.attempt, "boundary": a.boundary.value, "fault": a.fault.value} for a in j.plan.armed(seq)]
    return OpMismatch(op, plan, _summary(predicted), _summary(facts), sorted(events, key=lambda e: e["at"]))


def _summary(ops: Sequence[OpFacts]) -> dict[str, Any]:
    """What happened to the op, as a reader follows it; the facts of an op the
    planner made for it (a re-minted identity) are named after that op."""
    out: dict[str, Any] = {}
    for n, o in enumerate(ops):
        facts = {
            "attempts": o.attempts,
            "effects": o.effects,
            "withdrawn": o.withdrawn,
            "declined": o.declined,
            "sends": o.sends,
            "lookups": o.lookups,
            "outcome": o.outcome.value if o.outcome else None,
            "jobFailed": o.job_failed,
        }
        out |= {(f"{o.op} {k}" if n else k): v for k, v in facts.items()}
    return out
