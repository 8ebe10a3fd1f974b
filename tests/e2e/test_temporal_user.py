"""`--temporal-workflow`: a user's own Temporal workflow and activity (tests.support.temporal_user),
registered on the lab's worker as the user's worker would, under the workflow's own retry policy:
a naive activity sends again after a kill past its effect; one keyed from the workflow's id and
the activity's is exactly-once in every cell. Bad input is refused before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.helpers import assert_left_nothing, run_testbed

pytestmark = pytest.mark.e2e

USER = "tests.support.temporal_user"


def _users(workflow: str, activity: str) -> list[str]:
    return ["--temporal-workflow", f"{USER}:{workflow}", "--handler", f"{USER}:{activity}"]


def test_a_naive_activity_of_the_users_workflow_is_duplicated_after_its_effect(workdir: Path) -> None:
    ran = run_testbed([*_users("NaiveSend", "send_naive"), "-b", "after-effect", "--ops", "4", "--every", "2"], workdir)
    assert ran.code == 1, ran.stderr
    assert "sets the server address (its dev server's), the task queue (the run's) and the namespace" in ran.stderr
    (row,) = ran.json["rows"]
    assert row["delivery"] == "workflow"
    # Both killed ops retried by the workflow's own policy once its 5 s timeout expired: each sent twice.
    assert (row["effects"], row["duplicateEffects"], row["missingOperations"]) == (6, 2, 0)
    assert ran.json["options"]["temporalWorkflow"] == f"{USER}:NaiveSend"
    assert_left_nothing(ran)


def test_an_activity_keyed_from_the_workflow_and_activity_ids_is_exactly_once_in_every_cell(workdir: Path) -> None:
    ran = run_testbed([*_users("KeyedSend", "send_keyed"), "--ops", "4", "--every", "2"], workdir)
    assert ran.code == 0, ran.stderr
    rows = ran.json["rows"]
    assert {r["boundary"] for r in rows} == {"none", "before-effect", "after-effect"}
    assert all((r["effects"], r["duplicateEffects"], r["missingOperations"]) == (4, 0, 0) for r in rows)
    assert all(r["verdict"] == "pass" for r in rows)
    assert_left_nothing(ran)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (_users("send_naive", "send_naive"), f"--temporal-workflow {USER}:send_naive: not a Temporal workflow"),
        (_users("NaiveSend", "not_an_activity"), f"handler {USER}:not_an_activity: not a Temporal activity"),
        (
            [*_users("NaiveSend", "send_naive"), "--temporal-plugin", f"{USER}:POLICY"],
            f"--temporal-plugin {USER}:POLICY: not a Temporal client plugin",
        ),
        (["--temporal-workflow", "no_such:W", "--handler", f"{USER}:send_naive"], "cannot import no_such"),
        ([*_users("NaiveSend", "send_naive"), "--delivery", "retry"], "under its own retry policy and timeouts"),
        ([*_users("NaiveSend", "send_naive"), "-s", "retry-only"], "and no built-in strategy (-s)"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_any_work(workdir: Path, given: list[str], said: str) -> None:
    ran = run_testbed([*given, "--no-store"], workdir)
    assert ran.code == 2, ran.stderr
    assert said in ran.stderr and len(ran.stderr.strip().splitlines()) == 1, ran.stderr
