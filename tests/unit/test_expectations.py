"""The expectations model against tables derived by hand from the strategies' definitions.

100 ops, the first attempt of every 10th op faulted, one retry. Each entry is
(effects, missing) or (effects, missing, unresolved, conflicts, failed by provider).
"""

import pytest

from labcore.boundaries import Boundary
from labcore.faults import Fault
from labcore.plan import EveryNth
from testbed.experiment.matrix import Cell, article, full
from testbed.experiment.scenarios import SCENARIOS
from testbed.judge.model import Prediction, predict

B = Boundary
KILL_TABLE = {
    #                  job-start  before-request before-effect after-effect after-receipt after-record
    "retry-only": [(100, 0), (100, 0), (100, 0), (110, 0), (110, 0), (110, 0)],
    "record-after": [(100, 0), (100, 0), (100, 0), (110, 0), (110, 0), (100, 0)],
    "record-before": [(100, 0), (90, 10), (90, 10), (100, 0), (100, 0), (100, 0)],
    "provider-key": [(100, 0)] * 6,
    "reconcile": [(100, 0)] * 6,
    "naive-reconcile": [(100, 0)] * 6,
    "fresh-key": [(100, 0), (100, 0), (100, 0), (110, 0), (110, 0), (100, 0)],
}

ARTICLE = {
    ("retry-only", None): (100, 0),
    ("retry-only", B.BEFORE_EFFECT): (100, 0),
    ("retry-only", B.AFTER_EFFECT): (110, 0),
    ("record-after", None): (100, 0),
    ("record-after", B.BEFORE_EFFECT): (100, 0),
    ("record-after", B.AFTER_EFFECT): (110, 0),
    ("record-before", None): (100, 0),
    ("record-before", B.BEFORE_EFFECT): (90, 10),
    ("record-before", B.AFTER_EFFECT): (100, 0),
    ("provider-key", None): (100, 0),
    ("provider-key", B.BEFORE_EFFECT): (100, 0),
    ("provider-key", B.AFTER_EFFECT): (100, 0),
}


def expect(cell: Cell, ops: int = 100, retries: int = 1) -> Prediction:
    return predict(cell, EveryNth(10, cell.boundary, cell.fault), ops, retries)


def shown(prediction: Prediction) -> tuple[int, int, int, int, int]:
    c = prediction.tally.counts
    return (c.effects, c.missing_operations, c.unresolved, c.conflicts, c.failed_by_provider)


def test_the_articles_table() -> None:
    cells = article()
    assert len(cells) == 12
    for cell in cells:
        c = expect(cell).tally.counts
        assert (c.effects, c.missing_operations) == ARTICLE[(cell.strategy, cell.boundary)], cell.label


@pytest.mark.parametrize("strategy", list(KILL_TABLE))
@pytest.mark.parametrize("index", range(6))
def test_kill_at_every_boundary(strategy: str, index: int) -> None:
    boundary = list(Boundary)[index]
    prediction = expect(Cell(strategy, boundary, Fault.KILL))
    effects, missing = KILL_TABLE[strategy][index]
    assert shown(prediction) == (effects, missing, 0, 0, 0)
    assert prediction.kills == 10
    assert prediction.tally.counts.replays == 10
    # Losing work silently is exactly record-before's pre-written marker.
    assert prediction.tally.counts.false_completions == missing


def test_reconcile_pays_one_lookup_per_recovered_op() -> None:
    c = expect(Cell("reconcile", B.AFTER_EFFECT)).tally.counts
    assert (c.lookups, c.requests) == (10, 100)


@pytest.mark.parametrize(
    ("strategy", "boundary", "fault", "shown_"),
    [
        ("retry-only", B.AFTER_EFFECT, Fault.TIMEOUT, (110, 0, 0, 0, 0)),  # a timeout is an after-effect crash
        ("record-before", B.BEFORE_EFFECT, Fault.TIMEOUT, (90, 10, 0, 0, 0)),
        ("provider-key", B.AFTER_EFFECT, Fault.TIMEOUT, (100, 0, 0, 0, 0)),
        ("record-after", B.BEFORE_EFFECT, Fault.LATE, (110, 0, 0, 0, 0)),  # the late request lands too
        ("record-before", B.BEFORE_EFFECT, Fault.LATE, (100, 0, 0, 0, 0)),
        ("provider-key", B.BEFORE_EFFECT, Fault.LATE, (100, 0, 0, 0, 0)),  # 409, wait, replay
        ("reconcile", B.BEFORE_EFFECT, Fault.LATE, (100, 0, 0, 0, 0)),
        ("fresh-key", B.BEFORE_EFFECT, Fault.LATE, (110, 0, 0, 0, 0)),
    ],
)
def test_timeout_and_late(
    strategy: str, boundary: Boundary, fault: Fault, shown_: tuple[int, int, int, int, int]
) -> None:
    prediction = expect(Cell(strategy, boundary, fault))
    assert shown(prediction) == shown_
    assert prediction.kills == 0 and prediction.faults == 10


@pytest.mark.parametrize("boundary", [B.BEFORE_EFFECT, B.AFTER_EFFECT])
@pytest.mark.parametrize("strategy", sorted(KILL_TABLE))
def test_a_partition_is_predicted_as_a_timeout(strategy: str, boundary: Boundary) -> None:
    cut = expect(Cell(strategy, boundary, Fault.PARTITION))
    assert cut == expect(Cell(strategy, boundary, Fault.TIMEOUT))
    assert cut.kills == 0 and cut.faults == 10


def test_late_request_counts_are_timing_dependent() -> None:
    assert expect(Cell("provider-key", B.BEFORE_EFFECT, Fault.LATE)).inexact == {"requests", "lookups"}
    assert expect(Cell("provider-key", B.BEFORE_EFFECT, Fault.KILL)).inexact == frozenset()


@pytest.mark.parametrize(
    ("scenario", "strategy", "boundary", "shown_"),
    [
        ("payload-changed", "provider-key", B.AFTER_EFFECT, (100, 0, 0, 10, 0)),
        ("payload-changed", "reconcile", B.AFTER_EFFECT, (100, 0, 0, 10, 0)),
        ("payload-changed", "record-after", B.AFTER_EFFECT, (110, 0, 0, 0, 0)),
        ("key-expired", "provider-key", B.AFTER_EFFECT, (110, 0, 0, 0, 0)),
        ("key-expired", "reconcile", B.AFTER_EFFECT, (100, 0, 0, 0, 0)),
        ("lagging-listing", "naive-reconcile", B.AFTER_EFFECT, (110, 0, 0, 0, 0)),
        ("lagging-listing", "reconcile", B.AFTER_EFFECT, (100, 0, 10, 0, 0)),
        ("lagging-listing", "reconcile", B.BEFORE_EFFECT, (90, 10, 10, 0, 0)),
        ("lagging-listing", "naive-reconcile", B.BEFORE_EFFECT, (100, 0, 0, 0, 0)),
        ("withdrawn", "reconcile", B.AFTER_EFFECT, (100, 0, 10, 0, 0)),
        ("withdrawn", "naive-reconcile", B.AFTER_EFFECT, (110, 0, 0, 0, 0)),
        ("withdrawn", "provider-key", B.AFTER_EFFECT, (100, 0, 0, 0, 0)),
        ("stored-error", "provider-key", B.AFTER_EFFECT, (90, 0, 0, 0, 10)),
        ("stored-error", "retry-only", B.AFTER_EFFECT, (90, 0, 0, 0, 10)),
        ("no-dedup", "provider-key", B.AFTER_EFFECT, (110, 0, 0, 0, 0)),
        ("no-dedup", "reconcile", B.AFTER_EFFECT, (100, 0, 0, 0, 0)),
    ],
)
def test_scenarios(scenario: str, strategy: str, boundary: Boundary, shown_: tuple[int, int, int, int, int]) -> None:
    assert shown(expect(Cell(strategy, boundary, Fault.KILL, scenario))) == shown_


def test_withdrawn_effects_stay_in_the_log() -> None:
    c = expect(Cell("reconcile", B.AFTER_EFFECT, Fault.KILL, "withdrawn")).tally.counts
    assert (c.withdrawn_effects, c.unrecorded_effects) == (10, 10)


def test_no_retry_left_means_the_job_fails() -> None:
    c = expect(Cell("record-after", B.AFTER_EFFECT), retries=0).tally.counts
    assert (c.jobs_failed, c.effects, c.unrecorded_effects, c.replays) == (10, 100, 10, 0)


def test_full_matrix_is_covered_by_the_model() -> None:
    cells = full()
    assert len(cells) == len(set(cells))
    assert {c.scenario for c in cells} == {name for name, s in SCENARIOS.items() if s.in_full_matrix}
    for cell in cells:
        assert expect(cell, ops=20).tally.counts.intended == 20


@pytest.mark.parametrize(
    ("strategy", "effects"),
    [
        ("provider-key", 100),  # the duplicate is told 409, waits, gets the replay
        ("retry-only", 110),
        ("record-after", 110),  # the duplicate starts before the first has recorded anything
        ("record-before", 100),  # the duplicate reads the claim and skips
        ("reconcile", 100),  # the duplicate finds the request in flight, waits, then finds the effect
        ("fresh-key", 110),
    ],
)
def test_duplicate_enqueue(strategy: str, effects: int) -> None:
    prediction = expect(Cell(strategy, B.BEFORE_EFFECT, Fault.HOLD, "duplicate-enqueue"))
    c = prediction.tally.counts
    assert (c.effects, c.missing_operations, c.unresolved, prediction.kills, prediction.faults) == (
        effects,
        0,
        0,
        0,
        10,
    )
    assert prediction.inexact == {"requests", "lookups"}


@pytest.mark.parametrize(("strategy", "effects"), [("provider-key", 110), ("reconcile", 110), ("retry-only", 120)])
def test_remint_makes_a_new_identity_and_so_a_new_effect(strategy: str, effects: int) -> None:
    c = expect(Cell(strategy, B.AFTER_EFFECT, Fault.KILL, "remint")).tally.counts
    assert (c.intended, c.effects, c.duplicate_effects, c.missing_operations) == (100, effects, effects - 100, 0)
