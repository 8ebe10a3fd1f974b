"""The pytest plugin on Celery, as a user's test meets it: a Celery app and a plain function of
the test's own module, run by the lab's Celery workers under the kills. The session's lab is
RQ's: its first Celery run starts a stack of its own, stopped with the lab."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import requests

from testbed.judge.scorecard import Row
from testbed.plugin import Lab

celery = pytest.importorskip("celery")

pytestmark = pytest.mark.e2e

ROOT = str(Path(__file__).resolve().parents[2])
HERE = __name__

# The user's app, as in production: a lost task is requeued (the lab sets only where its messages go).
app = celery.Celery("users-app", set_as_current=False)


def post(op_id: str, payload: dict[str, Any]) -> str:
    response = requests.post(f"{os.environ['TESTBED_PROVIDER_URL']}/api/messages", json=payload, timeout=2)
    response.raise_for_status()
    receipt: str = response.json()["id"]
    return receipt


@app.task(acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]  # Celery ships no types
def send(op_id: str, payload: dict[str, Any]) -> str:
    return post(op_id, payload)


def counts(row: Row) -> tuple[int, int, int, int]:
    return row.counts.effects, row.counts.duplicate_effects, row.counts.missing_operations, row.counts.jobs_failed


def test_a_task_of_the_users_app_requeued_when_lost_sends_again(lab: Lab) -> None:
    rows = lab.run(f"{HERE}:send", celery_app=f"{HERE}:app", boundaries=["after-effect"], ops=10, every=5, paths=[ROOT])
    row = rows.row("after-effect")
    assert row.cell.delivery == "app"
    # Both killed ops requeued by Celery, and their requests sent again.
    assert counts(row) == (12, 2, 0, 0)
    with pytest.raises(AssertionError, match=r"app: .*:send @ after-effect \(kill\): exactly-once: 2 ops duplicated"):
        rows.assert_exactly_once()


def test_a_function_on_the_labs_celery_under_each_setting(lab: Lab) -> None:
    rows = lab.run(
        f"{HERE}:post",
        engine="celery",
        delivery=["early-ack", "reject-on-lost"],
        boundaries=["before-effect"],
        ops=5,
        every=5,
        paths=[ROOT],
    )
    by_setting = {row.cell.delivery: counts(row) for row in rows}
    # Acknowledged as it started, the killed task is gone; requeued when lost, it runs again.
    assert by_setting == {"early-ack": (4, 0, 1, 1), "reject-on-lost": (5, 0, 0, 0)}
    with pytest.raises(
        AssertionError, match=r"early-ack: .*:post @ before-effect \(kill\): exactly-once: 1 op missing"
    ):
        rows.assert_exactly_once()
