"""What the model predicts of a built-in strategy's schedule (pure): whether it breaks the
promise, and how many of its strikes strike. The run judges a trial's facts with the same
checker (`judge.promises`), so a prediction is one the run checks."""

from __future__ import annotations

from dataclasses import dataclass

from labcore.schedule import Schedule
from testbed.experiment.matrix import Cell
from testbed.judge.model import predict_ops
from testbed.judge.promises import PromiseCheck, broken, parse_promise


@dataclass(frozen=True, slots=True)
class Predicted:
    breaks: bool  # the promise
    struck: int  # strikes that strike (an attempt that never runs, or ends before its boundary, is not struck)


def predicted(strategy: str, schedule: Schedule, promise: str, delivery: str | None = None) -> Predicted:
    """The model's word on this schedule, run by the built-in."""
    cell = Cell.trial(strategy, schedule, False, delivery)
    check = PromiseCheck(parse_promise(promise), lambda op: op, lambda intent: "")
    struck = 0
    for _, facts, _, faults in predict_ops(cell, schedule, len(schedule.ops), schedule.retries):
        check.add(facts)
        struck += faults
    return Predicted(bool(broken(check.promise, check.counts)), struck)
