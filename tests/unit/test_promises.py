"""Judging a user's job against its promise, from the provider's log and RQ's final job states."""

from collections import Counter

import pytest

from testbed.judge.checker import OpFacts, tally
from testbed.judge.promises import Breach, Promise, PromiseCheck, breaches, broken, counts_of, parse_promise
from workers.flow import Outcome

DONE = Outcome.COMPLETED


def op(
    n: int,
    effects: int,
    outcome: Outcome | None = DONE,
    failed: bool = False,
    declined: int = 0,
    attempts: int = 1,
    sends: int | None = None,
) -> list[OpFacts]:
    name = f"tenant-demo:notification:{n}"
    sends = effects if sends is None else sends
    return [OpFacts(name, name, attempts, effects, 0, declined, sends, 0, outcome, "", failed)]


def judged(promise: Promise, *intents: list[OpFacts]) -> PromiseCheck:
    judge = PromiseCheck(promise, lambda o: f"run.c001:{o}", lambda intent: f"kill at after-effect ({intent})")
    tally(judge.watch(intents))
    return judge


def test_exactly_once_is_broken_by_duplicates_and_by_missing_ops_whatever_the_job_says() -> None:
    judge = judged(
        Promise.EXACTLY_ONCE,
        op(1, 1),
        op(2, 2, attempts=2),
        op(3, 0),  # the job finished, nothing happened: a false completion
        op(4, 0, outcome=None, failed=True, attempts=2),
        op(5, 0, declined=1),  # a permanent error is an answer, not a loss
        op(6, 1, outcome=None, failed=True),  # failed, but the effect is there
    )
    assert judge.counts == Counter({Breach.DUPLICATED: 1, Breach.MISSING: 2})
    assert broken(Promise.EXACTLY_ONCE, judge.counts) == [
        "exactly-once: 1 op duplicated",
        "exactly-once: 2 ops missing",
    ]
    assert [(r.op, r.breach, r.job) for r in judge.reports] == [
        ("run.c001:tenant-demo:notification:2", Breach.DUPLICATED, "finished"),
        ("run.c001:tenant-demo:notification:3", Breach.MISSING, "finished"),
        ("run.c001:tenant-demo:notification:4", Breach.MISSING, "failed"),
    ]


@pytest.mark.parametrize(
    ("promise", "expected"),
    [
        (Promise.AT_LEAST_ONCE, ["at-least-once: 1 op missing"]),
        (Promise.AT_MOST_ONCE, ["at-most-once: 1 op duplicated"]),
    ],
)
def test_the_weaker_promises_allow_one_kind_each(promise: Promise, expected: list[str]) -> None:
    judge = judged(promise, op(1, 2), op(2, 0))
    assert broken(promise, judge.counts) == expected
    assert [r.breach for r in breaches(judge.to_json(), promise)] == [b for b in Breach if b.value in expected[0]]


def test_a_kept_promise_lists_nothing() -> None:
    judge = judged(Promise.EXACTLY_ONCE, op(1, 1), op(2, 1, attempts=2))
    stored = judge.to_json()
    assert stored["kept"] and stored["ops"] == [] and broken(Promise.EXACTLY_ONCE, counts_of(stored)) == []


def test_each_listed_op_says_what_happened_to_it() -> None:
    (report,) = judged(Promise.EXACTLY_ONCE, op(10, 2, attempts=2)).reports
    assert str(report) == (
        "run.c001:tenant-demo:notification:10: duplicated: the provider recorded 2 effects from 2 requests; "
        "2 attempts; kill at after-effect (tenant-demo:notification:10); job finished"
    )
    (lost,) = judged(Promise.EXACTLY_ONCE, op(3, 0, sends=1)).reports
    assert "missing: the provider recorded 0 effects from 1 request;" in str(lost)
    assert str(lost).endswith("job finished: a false completion")


def test_the_list_is_capped_but_the_counts_are_not() -> None:
    judge = PromiseCheck(Promise.EXACTLY_ONCE, str, str, keep=2)
    for n in range(5):
        judge.add(op(n, 0))
    assert judge.counts[Breach.MISSING] == 5 and len(judge.reports) == 2


def test_promise_names() -> None:
    assert parse_promise("at-most-once") is Promise.AT_MOST_ONCE
    with pytest.raises(ValueError, match="unknown promise 'twice'"):
        parse_promise("twice")
