"""The Pydantic AI agent of examples/pydantic_ai_agent.py made durable on Temporal: the same
scripted planner (a `FunctionModel`) and `send_email` tool, the agent given the
`TemporalDurability` capability (`pip install 'testbed[pydantic-ai,temporal]'`), run by a
workflow of this module's under `--temporal-workflow`:

    testbed chaos --temporal-workflow examples.pydantic_ai_durable:Naive \\
        --handler examples.pydantic_ai_durable:naive_tool \\
        --temporal-plugin examples.pydantic_ai_durable:plugin -b after-effect

Inside the workflow each model request and each tool call is an activity: the planner's
decision is kept in the workflow's history, and a killed tool call is retried by Temporal
(its start-to-close timeout, 5 s, then its retry policy's backoff) without the planner being
asked again: on recovery the workflow replays the planner's answer from history. The
handler (`--handler`) is the agent's tool activity, so the lab's kills strike the worker
process running the tool's call. `PydanticAIPlugin` (`--temporal-plugin`) registers the
agents' activities from the workflows' `__pydantic_ai_agents__` and sets Pydantic AI's
payload converter, as on the user's own worker and client.

The agents differ in where the tool's Idempotency-Key comes from:

- `naive`: none: the retried activity sends again;
- `keyed`: the workflow's id and the tool activity's id, which the runtime gives the tool
  and which stay the same on every retry of that activity (not the attempt number, which
  does not).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.durable_exec.temporal import PydanticAIPlugin, PydanticAIWorkflow, TemporalDurability
from pydantic_ai.models.function import FunctionModel
from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityConfig

from examples.planner import TOOL, Op, prompt, receipt
from examples.pydantic_ai_agent import plain_planner, sent

# The activities' own: a killed tool call is retried once its 5 s start-to-close timeout expires.
ACTIVITIES = ActivityConfig(
    start_to_close_timeout=timedelta(seconds=5),
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=5),
)

plugin = PydanticAIPlugin()


def _agent(name: str) -> Agent[Op, str]:
    return Agent(
        FunctionModel(plain_planner),
        name=name,
        deps_type=Op,
        capabilities=[TemporalDurability(activity_config=ACTIVITIES)],
    )


naive, keyed = _agent("naive"), _agent("keyed")


@naive.tool(name=TOOL)
def send_unkeyed(ctx: RunContext[Op], recipient: str, message: str) -> str:
    return sent(recipient, message, None)


@keyed.tool(name=TOOL)
def send_with_the_activitys_key(ctx: RunContext[Op], recipient: str, message: str) -> str:
    """Keyed by the workflow's id and the tool activity's: the same on each of its retries."""
    info = activity.info()
    return sent(recipient, message, f"{info.workflow_id}/{info.activity_id}")


def _tool_activity(agent: Agent[Op, str]) -> Any:
    """The activity that runs the agent's own tools (the handler the lab arms and kills)."""
    (durability,) = (c for c in agent.root_capability.capabilities if isinstance(c, TemporalDurability))
    return next(
        a
        for a in durability.temporal_activities
        if activity._Definition.must_from_callable(a).name.endswith("__call_tool")
    )


naive_tool, keyed_tool = _tool_activity(naive), _tool_activity(keyed)


async def _run(agent: Agent[Op, str], payload: dict[str, Any]) -> str:
    """The op's identity, the workflow's id, given to the agent as its deps."""
    op_id = workflow.info().workflow_id
    result = await agent.run(prompt(op_id, payload), deps=Op(op_id))
    return receipt(op_id, result.output)


@workflow.defn
class Naive(PydanticAIWorkflow):
    __pydantic_ai_agents__ = (naive,)

    @workflow.run
    async def run(self, payload: dict[str, Any]) -> str:
        return await _run(naive, payload)


@workflow.defn
class Keyed(PydanticAIWorkflow):
    __pydantic_ai_agents__ = (keyed,)

    @workflow.run
    async def run(self, payload: dict[str, Any]) -> str:
        return await _run(keyed, payload)
