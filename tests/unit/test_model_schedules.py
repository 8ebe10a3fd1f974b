"""The model beyond the matrix: several faults on one op, on any attempt, mixed, striking
recovery attempts too; each prediction derived by hand from the strategy's definition."""

import pytest

from labcore.boundaries import Boundary
from labcore.faults import Fault
from labcore.plan import Armed
from labcore.schedule import Schedule
from testbed.experiment.matrix import Cell
from testbed.judge.model import inexact_facts, inexact_fields, predict_ops

B, F = Boundary, Fault


def one_op(
    strategy: str, *strikes: Armed, retries: int = 3, scenario: str = "none"
) -> tuple[tuple[int, int, int, int, str | None, bool], int, int]:
    """The op's facts, kills and faults hit, as the model predicts them."""
    schedule = Schedule((strikes,), scenario, retries)
    ((_, facts, kills, faults),) = predict_ops(Cell.trial(strategy, schedule, False), schedule, 1, retries)
    (op,) = facts
    outcome = op.outcome.value if op.outcome else None
    return (op.attempts, op.effects, op.sends, op.lookups, outcome, op.job_failed), kills, faults


@pytest.mark.parametrize(
    ("strategy", "strikes", "facts", "kills", "faults"),
    [
        # The recovery attempt killed after its resend's effect: the third looks it up.
        ("reconcile", (Armed(1, B.BEFORE_EFFECT, F.KILL), Armed(2, B.AFTER_EFFECT, F.KILL)),
         (3, 1, 2, 2, "reconciled", False), 2, 2),
        # Killed after the effect, then timed out after the effect of its resend: three effects.
        ("retry-only", (Armed(1, B.AFTER_EFFECT, F.KILL), Armed(2, B.AFTER_EFFECT, F.TIMEOUT)),
         (3, 3, 3, 0, "completed", False), 1, 2),
        ("provider-key", (Armed(1, B.AFTER_EFFECT, F.KILL), Armed(2, B.AFTER_EFFECT, F.TIMEOUT)),
         (2, 1, 2, 0, "completed", False), 1, 1),  # the resend is a replay: it never reaches after-effect
        # A late request lands once a later attempt ends, here by its own timeout.
        ("retry-only", (Armed(1, B.BEFORE_EFFECT, F.LATE), Armed(2, B.BEFORE_EFFECT, F.TIMEOUT)),
         (3, 2, 3, 0, "completed", False), 0, 2),
        # The pre-written marker read back as done, after a kill on the second attempt.
        ("record-before", (Armed(1, B.JOB_START, F.KILL), Armed(2, B.BEFORE_EFFECT, F.KILL)),
         (3, 0, 1, 0, "skipped", False), 2, 2),
        # A fault armed where the attempt never goes is not hit: record-before's retry skips.
        ("record-before", (Armed(1, B.BEFORE_EFFECT, F.KILL), Armed(2, B.AFTER_RECORD, F.KILL)),
         (2, 0, 1, 0, "skipped", False), 1, 1),
        # A worker killed whole after the effect, then the provider crashed holding the resend,
        # which dies with it unlogged: two effects from the two sends it logged.
        ("fresh-key", (Armed(1, B.AFTER_EFFECT, F.KILL_WORKER), Armed(2, B.BEFORE_EFFECT, F.PROVIDER_CRASH)),
         (3, 2, 2, 0, "completed", False), 2, 2),
    ],
)  # fmt: skip
def test_several_faults_on_one_op(
    strategy: str,
    strikes: tuple[Armed, ...],
    facts: tuple[int, int, int, int, str | None, bool],
    kills: int,
    faults: int,
) -> None:
    assert one_op(strategy, *strikes) == (facts, kills, faults)


def test_a_job_out_of_retries_fails_with_nothing_sent_through() -> None:
    strikes = (Armed(1, B.BEFORE_EFFECT, F.KILL), Armed(2, B.BEFORE_EFFECT, F.KILL))
    assert one_op("retry-only", *strikes, retries=1) == ((2, 0, 2, 0, None, True), 2, 2)


def test_every_fault_after_the_first_changes_the_world_again() -> None:
    # Each settle withdraws the op's effects: both attempts' effects end withdrawn, the third is unresolved.
    strikes = (Armed(1, B.AFTER_EFFECT, F.KILL), Armed(2, B.AFTER_EFFECT, F.KILL))
    schedule = Schedule((strikes,), "withdrawn", 3)
    ((_, (op,), _, _),) = predict_ops(Cell.trial("retry-only", schedule, False), schedule, 1, 3)
    assert (op.effects, op.withdrawn, op.attempts) == (3, 2, 3)


def test_what_timing_leaves_open_is_reported_not_compared() -> None:
    assert inexact_facts([F.KILL, F.TIMEOUT]) == frozenset()
    assert inexact_facts([F.KILL, F.LATE]) == {"sends", "lookups"}
    # A held job and its duplicate end at once: which conclusion lands last is timing.
    assert inexact_facts([F.HOLD]) == {"sends", "lookups", "outcome"}
    assert inexact_fields([F.HOLD]) == {"requests", "lookups"}
