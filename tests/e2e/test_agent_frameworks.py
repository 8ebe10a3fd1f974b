"""Agents whose scripted planner calls the tool, under the lab's kills and timeouts through the
pytest plugin: a Pydantic AI agent (FunctionModel) and an OpenAI Agents SDK agent (a Model of
the example's own), each run by RQ with no record of its own (examples/)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples.planner import LOG_ENV
from testbed.judge.scorecard import Row
from testbed.plugin import Lab, started_lab

pytestmark = pytest.mark.e2e

ROOT = str(Path(__file__).resolve().parents[2])
AGENTS = ["examples.pydantic_ai_agent", "examples.openai_agents_agent"]
OPS = 6


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    """Workers that preload both frameworks, as `testbed chaos --handler`'s do (the SDK's import
    takes a second or more: not once a job)."""
    with started_lab(preload=[f"{agent}:send" for agent in AGENTS], paths=[ROOT], workers=2) as started:
        yield started


def counts(row: Row) -> tuple[int, int, int, int]:
    return row.counts.effects, row.counts.duplicate_effects, row.counts.missing_operations, row.counts.jobs_failed


@pytest.mark.parametrize("agent", AGENTS)
def test_the_planner_sends_again_unless_the_key_is_the_runtimes(lab: Lab, agent: str, tmp_path: Path) -> None:
    """Killed after the effect, RQ reruns the agent and its planner calls the tool again: sent twice
    with no key. Timed out after the effect, the planner, told so, calls it again in the same attempt:
    with a new operation id of its own making (fresh-key) that is sent twice too, where the key the
    runtime gave the tool (the op's identity) is sent once in every cell. Either way the planner
    decides the call again for each faulted op (unlike the durable agent, tests/e2e/test_agent_durable.py)."""
    naive, keyed, fresh = f"{agent}:send", f"{agent}:send_keyed", f"{agent}:send_fresh_key"
    decisions = tmp_path / "decisions"
    rows = lab.run(
        [naive, keyed, fresh],
        boundaries=["after-effect"],
        faults=["kill", "timeout"],
        ops=OPS,
        every=3,
        paths=[ROOT],
        env={LOG_ENV: str(decisions)},
    )
    twice, once = (OPS + 2, 2, 0, 0), (OPS, 0, 0, 0)
    assert counts(rows.row("after-effect", "kill", handler=naive)) == twice
    assert counts(rows.row("after-effect", "timeout", handler=naive)) == twice
    # The rerun's planner starts from the prompt again, and passes the op's identity as the key once more.
    assert counts(rows.row("after-effect", "kill", handler=fresh)) == once
    assert counts(rows.row("after-effect", "timeout", handler=fresh)) == twice
    assert counts(rows.row("after-effect", "kill", handler=keyed)) == once
    assert counts(rows.row("after-effect", "timeout", handler=keyed)) == once
    with pytest.raises(AssertionError) as failed:
        rows.assert_exactly_once()
    assert f"{fresh} @ after-effect (timeout): exactly-once: 2 ops duplicated" in str(failed.value)
    assert f"{keyed} @" not in str(failed.value)
    # Six cells of OPS ops, every 3rd faulted: its call decided twice, the others' once.
    assert Counter(Counter(decisions.read_text().split()).values()) == {1: 6 * (OPS - OPS // 3), 2: 6 * (OPS // 3)}
