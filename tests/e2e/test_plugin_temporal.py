"""The pytest plugin on Temporal, as a user's test meets it: a plain function of the test's own
module run as the activity of the lab's workflow, under the kills. The session's lab is RQ's:
its first Temporal run starts a stack of its own (its dev server included), stopped with the lab."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import requests

from testbed.plugin import Lab

pytest.importorskip("temporalio")

pytestmark = pytest.mark.e2e

ROOT = str(Path(__file__).resolve().parents[2])
HERE = __name__


def post(op_id: str, payload: dict[str, Any]) -> str:
    """Sends with no key: an activity retried after its effect sends it again."""
    response = requests.post(f"{os.environ['TESTBED_PROVIDER_URL']}/api/messages", json=payload, timeout=2)
    response.raise_for_status()
    receipt: str = response.json()["id"]
    return receipt


def test_a_function_as_the_activity_is_retried_by_the_default_policy_and_not_with_one_attempt(lab: Lab) -> None:
    rows = lab.run(
        f"{HERE}:post",
        engine="temporal",
        delivery=["retry", "no-retry"],
        boundaries=["after-effect"],
        ops=10,
        every=5,
        paths=[ROOT],
    )
    by_setting = {row.cell.delivery: row.counts for row in rows}
    # Retried once its start-to-close timeout expired: both killed ops sent twice.
    retried = by_setting["retry"]
    assert (retried.effects, retried.duplicate_effects, retried.missing_operations, retried.jobs_failed) == (
        12,
        2,
        0,
        0,
    )
    # maximum_attempts=1: sent once, and the workflow failed.
    once = by_setting["no-retry"]
    assert (once.effects, once.duplicate_effects, once.missing_operations, once.jobs_failed) == (10, 0, 0, 2)
    with pytest.raises(AssertionError, match=r"retry: .*:post @ after-effect \(kill\): exactly-once: 2 ops duplicated"):
        rows.assert_exactly_once()


def test_an_activity_of_the_users_own_workflow_runs_under_its_own_retry_policy(lab: Lab) -> None:
    rows = lab.run(
        "tests.support.temporal_user:send_naive",
        temporal_workflow="tests.support.temporal_user:NaiveSend",
        boundaries=["after-effect"],
        ops=4,
        every=2,
        paths=[ROOT],
    )
    (row,) = rows
    # Retried by the workflow's own policy once its 5 s timeout expired: both killed ops sent twice.
    assert row.cell.delivery == "workflow"
    assert (row.counts.effects, row.counts.duplicate_effects, row.counts.missing_operations) == (6, 2, 0)
