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


def test_what_a_task_leaves_is_its_rows_once_its_pool_child_has_counted_it(lab: Lab, tmp_path: Path) -> None:
    """Counted by the pool child as each task returns: the row has it as the run's cells end,
    with the workers still up (the worker busy until it has counted)."""
    from testbed.plugin import LeftoverProcesses
    from tests.support.helpers import left_alive

    (pids := tmp_path / "pids").mkdir()
    job = "tests.support.userjobs:leaves_a_process"
    with pytest.warns(LeftoverProcesses, match=rf"stopped \(acks-late: {job} @ none: 8\)"):
        rows = lab.run(
            job, engine="celery", delivery=["acks-late"], boundaries=["none"], ops=4, env={"LEFTOVER_PIDS": str(pids)}
        )
    # Two per op: one in the worker's group, one its pool child's own child out of it.
    assert (rows.leftovers, rows.row().leftovers) == (8, 8)
    assert len(list(pids.iterdir())) == 8 and left_alive(pids) == []
