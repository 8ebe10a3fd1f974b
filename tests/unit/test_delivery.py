"""What a queue does with an attempt that did not return (labcore.delivery), and the model's
predictions under each Celery delivery setting."""

from __future__ import annotations

import pytest

from labcore.boundaries import Boundary
from labcore.delivery import redelivery
from labcore.engines.celery import Delivery, task_options
from labcore.faults import Fault, cause_of
from labcore.plan import EveryNth
from labcore.redelivery import FOR_EVER, Cause, Redelivery
from testbed.engines import engine_of
from testbed.engines.base import EngineChoice
from testbed.errors import UsageError
from testbed.experiment.matrix import Cell
from testbed.judge.model import predict
from testbed.usecases.engines import engine_cells

LOST, WORKER, ERROR = Cause.CHILD_LOST, Cause.WORKER_LOST, Cause.ERROR


def test_rqs_retry_is_one_budget_for_every_cause() -> None:
    rq = Redelivery.rq(2)
    assert rq.again([])
    assert rq.again([LOST]) and rq.again([LOST, ERROR])
    assert not rq.again([LOST, ERROR, WORKER])


@pytest.mark.parametrize(
    ("delivery", "lost", "worker", "error"),
    [
        ("early-ack", False, False, False),
        ("acks-late", False, True, False),
        ("reject-on-lost", True, True, False),
        ("autoretry", False, False, True),
        # Temporal: an activity whose process died is retried once it times out, as one that raised.
        ("retry", True, True, True),
        ("heartbeat", True, True, True),
        ("no-retry", False, False, False),
        # Its errors non-retryable: a killed activity times out and is retried; one that raised is not.
        ("non-retryable", True, True, False),
    ],
)
def test_each_setting_says_what_runs_again(delivery: str, lost: bool, worker: bool, error: bool) -> None:
    policy = redelivery(delivery, retries=1)
    assert (policy.again([LOST]), policy.again([WORKER]), policy.again([ERROR])) == (lost, worker, error)


def test_a_requeue_on_a_lost_child_has_no_count_and_autoretry_counts_errors() -> None:
    assert redelivery("reject-on-lost", 1).again([LOST] * 50)
    assert redelivery("reject-on-lost", 1).child_lost is FOR_EVER
    autoretry = redelivery("autoretry", 2)
    assert autoretry.again([ERROR, ERROR]) and not autoretry.again([ERROR, ERROR, ERROR])
    # A dead child between errors is no error: it ends the task.
    assert not autoretry.again([ERROR, LOST])


def test_task_options_follow_the_setting_and_the_runs_retries() -> None:
    assert task_options(Delivery.REJECT_ON_LOST, 3) == {
        "acks_late": True,
        "reject_on_worker_lost": True,
        "max_retries": 0,
    }
    assert task_options(Delivery.AUTORETRY, 3)["max_retries"] == 3
    assert task_options(Delivery.AUTORETRY, 3)["autoretry_for"] == (Exception,)


def test_how_a_fault_ends_an_attempt() -> None:
    assert cause_of(Fault.KILL) is LOST
    assert cause_of(Fault.KILL_WORKER) is WORKER
    assert {cause_of(f) for f in (Fault.TIMEOUT, Fault.LATE, Fault.PROVIDER_CRASH, Fault.PARTITION)} == {ERROR}


def effects_missing(
    strategy: str, boundary: Boundary, delivery: str | None, fault: Fault = Fault.KILL
) -> tuple[int, int, int]:
    cell = Cell(strategy, boundary, fault, delivery=delivery)
    counts = predict(cell, EveryNth(10, boundary, fault), 100, 1).tally.counts
    return counts.effects, counts.missing_operations, counts.jobs_failed


def test_the_model_shows_the_article_only_where_a_lost_task_is_requeued() -> None:
    after, before = Boundary.AFTER_EFFECT, Boundary.BEFORE_EFFECT
    for delivery in (None, "reject-on-lost"):
        assert effects_missing("retry-only", after, delivery) == (110, 0, 0)
        assert effects_missing("record-before", before, delivery) == (90, 10, 0)
        assert effects_missing("provider-key", before, delivery) == (100, 0, 0)
    for delivery in ("early-ack", "acks-late", "autoretry"):
        assert effects_missing("retry-only", after, delivery) == (100, 0, 10)
        assert effects_missing("provider-key", before, delivery) == (90, 10, 10)


def test_a_whole_worker_killed_comes_back_only_when_its_message_was_not_acknowledged() -> None:
    before = Boundary.BEFORE_EFFECT
    assert effects_missing("provider-key", before, "early-ack", Fault.KILL_WORKER) == (90, 10, 10)
    assert effects_missing("provider-key", before, "acks-late", Fault.KILL_WORKER) == (100, 0, 0)
    # A client timeout is an exception: retried by autoretry alone.
    assert effects_missing("provider-key", before, "autoretry", Fault.TIMEOUT)[:2] == (100, 0)
    assert effects_missing("provider-key", before, "reject-on-lost", Fault.TIMEOUT)[1] == 10


def test_cells_run_once_per_setting_and_bad_engine_choices_are_refused() -> None:
    cells = [Cell("retry-only", None), Cell("provider-key", Boundary.AFTER_EFFECT)]
    celery = EngineChoice("celery")
    assert engine_of(celery).name == "celery"
    deliveries = engine_of(celery).settings(celery)
    assert deliveries == [d.value for d in Delivery]
    run = engine_cells(cells, deliveries)
    assert len(run) == 8 and [c.delivery for c in run[:2]] == ["early-ack", "early-ack"]
    assert run[-1].label == "autoretry: provider-key @ after-effect (kill)"
    assert engine_cells(cells, settings(EngineChoice())) == cells
    assert settings(EngineChoice(app="app:app")) == ["app"]
    for choice in (EngineChoice("rq", ("acks-late",)), EngineChoice("celery", ("late",)), EngineChoice("huey")):
        with pytest.raises(UsageError):
            settings(choice)
    with pytest.raises(UsageError, match="not with --delivery"):
        settings(EngineChoice("celery", ("acks-late",), "app:app"))


def test_temporals_settings_are_its_own_and_its_timeouts_are_refused_elsewhere() -> None:
    temporal = EngineChoice("temporal")
    assert settings(temporal) == ["retry", "heartbeat", "no-retry", "non-retryable"]
    assert settings(EngineChoice("temporal", ("no-retry",))) == ["no-retry"]
    # Temporal's default retry policy has no maximum of attempts: a killed activity is retried for ever.
    assert redelivery("retry", 1).again([LOST] * 50) and redelivery("retry", 1).again([ERROR] * 50)
    for choice in (
        EngineChoice("temporal", ("acks-late",)),
        EngineChoice("celery", ("retry",)),
        EngineChoice("rq", start_to_close_timeout=3),
        EngineChoice("celery", heartbeat_timeout=1),
        EngineChoice("temporal", visibility_timeout=3),
    ):
        with pytest.raises(UsageError):
            settings(choice)


def settings(choice: EngineChoice) -> list[str]:
    return engine_of(choice).settings(choice)
