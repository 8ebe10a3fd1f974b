"""What the model predicts of a built-in strategy's schedule: whether it breaks the
promise (pure). The run judges a trial's facts with the same checker
(`judge.promises`), so a prediction that it breaks is one the run checks."""

from __future__ import annotations

from labcore.schedule import Schedule
from testbed.experiment.matrix import Cell
from testbed.judge.model import predict_ops
from testbed.judge.promises import PromiseCheck, broken, parse_promise


def breaks(strategy: str, schedule: Schedule, promise: str, delivery: str | None = None) -> bool:
    """The model's word: this schedule, run by the built-in, breaks the promise."""
    cell = Cell.trial(strategy, schedule, False, delivery)
    check = PromiseCheck(parse_promise(promise), lambda op: op, lambda intent: "")
    for _, facts, _, _ in predict_ops(cell, schedule, len(schedule.ops), schedule.retries):
        check.add(facts)
    return bool(broken(check.promise, check.counts))
