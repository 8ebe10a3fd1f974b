"""Agent runtimes that really run the tool call, under the lab's kills through the pytest plugin:
a LangGraph agent with a SQLite checkpointer, a DBOS workflow on SQLite and PostgreSQL (examples/)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.judge.scorecard import Row
from testbed.plugin import Lab, Rows, started_lab
from tests.support.postgres import private_postgres

pytestmark = pytest.mark.e2e

ROOT = str(Path(__file__).resolve().parents[2])
AGENT = "examples.langgraph_agent"
WORKFLOW = "examples.dbos_workflow"


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    """A lab whose workers preload the runtimes, as `testbed chaos --handler`'s do: a work-horse
    that imported LangGraph or DBOS for every job would take seconds a job. This module's own:
    the session's lab preloads no handler's libraries."""
    with started_lab(preload=[f"{AGENT}:send", f"{WORKFLOW}:send"], paths=[ROOT], workers=2) as started:
        yield started


@pytest.fixture
def stores(tmp_path: Path) -> dict[str, str]:
    """The runtimes' own databases, private to the test."""
    return {
        "LANGGRAPH_DB": str(tmp_path / "checkpoints.sqlite3"),
        "DBOS_SYSTEM_DATABASE_URL": f"sqlite:///{tmp_path / 'dbos.sqlite3'}",
    }


def counts(row: Row) -> tuple[int, int, int, int]:
    return row.counts.effects, row.counts.duplicate_effects, row.counts.missing_operations, row.counts.jobs_failed


def test_a_checkpointed_tool_node_runs_again_after_the_effect_unless_keyed(lab: Lab, stores: dict[str, str]) -> None:
    rows = lab.run(
        [f"{AGENT}:send_sync", f"{AGENT}:send_keyed_sync"],
        boundaries=["before-request", "after-effect"],
        ops=10,
        every=5,
        env=stores,
        paths=[ROOT],
    )
    naive, keyed = f"{AGENT}:send_sync", f"{AGENT}:send_keyed_sync"
    # Killed before the call: the resume runs the tool node once.
    assert counts(rows.row("before-request", handler=naive)) == (10, 0, 0, 0)
    # Killed after the effect: the node never finished, no checkpoint holds its result, the resume sends again.
    assert_the_naive_alone_duplicates(rows, naive, keyed, ops=10)


def test_the_default_durability_leaves_the_snapshot_behind_the_tool_node(lab: Lab, stores: dict[str, str]) -> None:
    """Under the default ("async") durability the checkpoint before the tool node may not be
    written when the node is killed: the snapshot then shows no nodes left. A retry that trusts
    it gives up on the op; one that resumes any checkpointed thread runs the tool."""
    rows = lab.run(
        [f"{AGENT}:send", f"{AGENT}:send_resumed"],
        boundaries=["before-request"],
        ops=10,
        every=5,
        env=stores,
        paths=[ROOT],
    )
    effects, duplicates, missing, failed = counts(rows.row("before-request", handler=f"{AGENT}:send"))
    # How many of the two killed ops lost the race with the checkpoint's write varies; each is a failed job.
    assert (effects + missing, duplicates, missing) == (10, 0, failed)
    assert counts(rows.row("before-request", handler=f"{AGENT}:send_resumed")) == (10, 0, 0, 0)


def dbos_rows(lab: Lab, env: dict[str, str], boundaries: list[str]) -> Rows:
    return lab.run(
        [f"{WORKFLOW}:send", f"{WORKFLOW}:send_keyed"], boundaries=boundaries, ops=6, every=3, env=env, paths=[ROOT]
    )


def assert_the_naive_alone_duplicates(rows: Rows, naive: str, keyed: str, ops: int) -> None:
    """Both killed ops after the effect sent again by the naive handler, none by the keyed one."""
    assert counts(rows.row("after-effect", handler=naive)) == (ops + 2, 2, 0, 0)
    assert counts(rows.row("after-effect", handler=keyed)) == (ops, 0, 0, 0)
    with pytest.raises(AssertionError) as failed:
        rows.assert_exactly_once()
    assert f"{naive} @ after-effect (kill): exactly-once: 2 ops duplicated" in str(failed.value)
    assert f"{keyed} @" not in str(failed.value)


def assert_the_naive_step_alone_duplicates(rows: Rows) -> None:
    """A step whose call took effect but which never returned has no recorded output: recovery
    runs it again. The key derived from the workflow and the step is the same on every run."""
    assert_the_naive_alone_duplicates(rows, f"{WORKFLOW}:send", f"{WORKFLOW}:send_keyed", ops=6)


def test_a_dbos_step_runs_again_after_the_effect_unless_keyed(lab: Lab, stores: dict[str, str]) -> None:
    rows = dbos_rows(lab, stores, ["before-request", "after-effect"])
    # The retry recovers the pending workflow: a step killed before its call runs once.
    assert counts(rows.row("before-request", handler=f"{WORKFLOW}:send")) == (6, 0, 0, 0)
    assert_the_naive_step_alone_duplicates(rows)


def test_dbos_on_postgresql_the_same(lab: Lab) -> None:
    with private_postgres() as url:
        rows = dbos_rows(lab, {"DBOS_SYSTEM_DATABASE_URL": url}, ["after-effect"])
    assert_the_naive_step_alone_duplicates(rows)


def test_a_dbos_step_that_raises_ends_its_workflow_for_good_unless_dbos_retries_it(
    lab: Lab, stores: dict[str, str]
) -> None:
    """The call timed out before the effect: the step raises, DBOS records the workflow's error,
    and the queue's retry gets that error back, key or no key: the op is lost. Retried by DBOS
    inside the workflow, the step sends again with the same key."""
    keyed, retried = f"{WORKFLOW}:send_keyed", f"{WORKFLOW}:send_keyed_retried"
    rows = lab.run(
        [keyed, retried], boundaries=["before-effect"], faults=["timeout"], ops=6, every=3, env=stores, paths=[ROOT]
    )
    assert counts(rows.row("before-effect", "timeout", handler=keyed)) == (4, 0, 2, 2)
    assert counts(rows.row("before-effect", "timeout", handler=retried)) == (6, 0, 0, 0)
