"""An OpenAI Agents SDK agent whose planner sends the notification with a `send_email`
tool, run by the plain `Runner` as the RQ job (`pip install 'testbed[openai-agents]'`).

The planner is a `Model` of this module's own (`Planner`): no LLM and no network, the rule
of examples/planner.py over the run's input items. A call that timed out goes back to it
as the tool's output (as a tool reports an error the model may recover from), and it calls
the tool again, once. Tracing is off (`set_tracing_disabled`): on, the SDK exports every
run's spans to OpenAI's servers.

The `Runner` keeps nothing of the run: a job retried by RQ runs the agent from its start,
and the planner calls the tool again. The handlers differ in where the Idempotency-Key
comes from, as in `examples/pydantic_ai_agent.py`:

- `send`: none;
- `send_keyed`: the op's identity the runtime gave the agent (its context), the same on
  every call of every attempt;
- `send_fresh_key`: the planner's own `operation_id` argument: the op's identity from the
  prompt at first, a new one made up once told the call timed out (the `fresh-key`
  anti-pattern).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import requests
from agents import (
    Agent,
    FunctionTool,
    Model,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    RunContextWrapper,
    Runner,
    Tool,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import TResponseInputItem, TResponseStreamEvent
from agents.testing import assistant_message, function_call
from openai.types.responses.response_prompt_param import ResponsePromptParam

from examples.naive import post
from examples.planner import KEY_ARGUMENT, TOOL, Op, Reply, next_step, noted, prompt, receipt

TIMED_OUT = "timed out"  # how the tool's output tells the planner

set_tracing_disabled(True)


class Planner(Model):
    """examples/planner.py's rule as the SDK's model, with or without a fresh key on a retry."""

    def __init__(self, fresh_on_retry: bool) -> None:
        self.fresh_on_retry = fresh_on_retry

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        items: list[Any] = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        outputs = [str(item["output"]) for item in items if item.get("type") == "function_call_output"]
        answers = [None if output.startswith(TIMED_OUT) else output for output in outputs]
        keyed_by_planner = any(
            isinstance(tool, FunctionTool) and KEY_ARGUMENT in tool.params_json_schema["properties"] for tool in tools
        )
        task = str(items[0]["content"])
        step = noted(task, next_step(task, answers, keyed_by_planner, self.fresh_on_retry))
        output = (
            assistant_message(step.text)
            if isinstance(step, Reply)
            else function_call(TOOL, step.arguments, call_id=f"call_{len(answers) + 1}")
        )
        return ModelResponse(output=[output], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the scripted planner is run with Runner.run_sync, not streamed")


def sent(recipient: str, message: str, idempotency_key: str | None) -> str:
    """The call; a timeout goes back to the planner as the tool's output (any other error fails the run)."""
    try:
        return post({"recipient": recipient, "message": message}, idempotency_key)
    except requests.Timeout as timed_out:
        return f"{TIMED_OUT}: {timed_out}"


@function_tool(name_override=TOOL, failure_error_function=None)
def send_unkeyed(recipient: str, message: str) -> str:
    return sent(recipient, message, None)


@function_tool(name_override=TOOL, failure_error_function=None)
def send_with_the_ops_key(ctx: RunContextWrapper[Op], recipient: str, message: str) -> str:
    """Keyed by the op's identity the runtime gave the agent: not the planner's to choose."""
    return sent(recipient, message, f"{ctx.context.op_id}:{TOOL}")


@function_tool(name_override=TOOL, failure_error_function=None)
def send_with_the_planners_key(recipient: str, message: str, operation_id: str) -> str:
    """Keyed by whatever operation id the planner passes."""
    return sent(recipient, message, operation_id)


naive: Agent[Op] = Agent(name="notifier", model=Planner(fresh_on_retry=False), tools=[send_unkeyed])
keyed: Agent[Op] = Agent(name="notifier", model=Planner(fresh_on_retry=False), tools=[send_with_the_ops_key])
fresh_key: Agent[Op] = Agent(name="notifier", model=Planner(fresh_on_retry=True), tools=[send_with_the_planners_key])


def run(agent: Agent[Op], op_id: str, payload: dict[str, Any]) -> str:
    result = Runner.run_sync(agent, prompt(op_id, payload), context=Op(op_id))
    return receipt(op_id, str(result.final_output))


def send(op_id: str, payload: dict[str, Any]) -> str:
    return run(naive, op_id, payload)


def send_keyed(op_id: str, payload: dict[str, Any]) -> str:
    return run(keyed, op_id, payload)


def send_fresh_key(op_id: str, payload: dict[str, Any]) -> str:
    return run(fresh_key, op_id, payload)
