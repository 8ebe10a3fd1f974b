"""A Pydantic AI agent made durable on Temporal (examples/pydantic_ai_durable.py) through the
pytest plugin: its workflow and tool activity registered on the lab's Temporal worker with
Pydantic AI's plugin, the worker process running the tool's call killed after its effect.
Unlike the same agent on RQ (tests/e2e/test_agent_frameworks.py), recovery does not ask the
planner again: Temporal retries the tool's activity, and the workflow replays the planner's
decision from its history."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from examples.planner import LOG_ENV
from testbed.judge.scorecard import Row
from testbed.plugin import Lab

pytestmark = pytest.mark.e2e

ROOT = str(Path(__file__).resolve().parents[2])
DURABLE = "examples.pydantic_ai_durable"
OPS = 6


def counts(row: Row) -> tuple[int, int, int, int]:
    return row.counts.effects, row.counts.duplicate_effects, row.counts.missing_operations, row.counts.jobs_failed


def test_the_tool_activity_is_retried_without_asking_the_planner_again(
    lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no key the retried tool activity sends again; keyed by the workflow's id and the
    activity's it sends once. Each op's planner decides the call once, the killed ops' too."""
    decisions = tmp_path / "decisions"
    # In the Temporal workers' environment (they start with the run): the model's activities run there.
    monkeypatch.setenv(LOG_ENV, str(decisions))

    def run(workflow: str, tool: str) -> list[tuple[int, int, int, int]]:
        rows = lab.run(
            f"{DURABLE}:{tool}",
            temporal_workflow=f"{DURABLE}:{workflow}",
            temporal_plugins=[f"{DURABLE}:plugin"],
            boundaries=["after-effect"],
            ops=OPS,
            every=3,
            paths=[ROOT],
        )
        return [counts(row) for row in rows]

    assert run("Naive", "naive_tool") == [(OPS + 2, 2, 0, 0)]
    assert run("Keyed", "keyed_tool") == [(OPS, 0, 0, 0)]
    decided = Counter(decisions.read_text().split())
    assert len(decided) == 2 * OPS and set(decided.values()) == {1}, decided
