"""A Pydantic AI agent whose planner sends the notification with a `send_email` tool,
run as the RQ job (`pip install 'testbed[pydantic-ai]'`).

The planner is a `FunctionModel`: no LLM and no network, the rule of examples/planner.py
over the conversation. A call that timed out goes back to it as a retry (the tool raises
`ModelRetry`, as a tool does for an error the model may recover from), and it calls the
tool again, once (the agent's default retries).

Nothing of the run is recorded: a job retried by RQ runs the agent from its start, and
the planner calls the tool again. The handlers differ in where the Idempotency-Key comes
from:

- `send`: none;
- `send_keyed`: the op's identity the runtime gave the agent (its deps), the same on
  every call of every attempt;
- `send_fresh_key`: the planner's own `operation_id` argument: the op's identity from the
  prompt at first, a new one made up once told the call timed out (the `fresh-key`
  anti-pattern inside a real framework).
"""

from __future__ import annotations

from typing import Any

import requests
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from examples.naive import post
from examples.planner import KEY_ARGUMENT, TOOL, Op, Reply, next_step, noted, prompt, receipt


def planner(messages: list[ModelMessage], info: AgentInfo, fresh_on_retry: bool) -> ModelResponse:
    asked = [message for message in messages if isinstance(message, ModelRequest)]
    returns = [
        part
        for request in asked
        for part in request.parts
        if isinstance(part, ToolReturnPart) and part.tool_name == TOOL
    ]
    answers = [str(part.content) if part.outcome == "success" else None for part in returns]
    keyed_by_planner = any(KEY_ARGUMENT in tool.parameters_json_schema["properties"] for tool in info.function_tools)
    task = next(part for request in asked for part in request.parts if isinstance(part, UserPromptPart))
    step = noted(str(task.content), next_step(str(task.content), answers, keyed_by_planner, fresh_on_retry))
    if isinstance(step, Reply):
        return ModelResponse(parts=[TextPart(step.text)])
    return ModelResponse(parts=[ToolCallPart(TOOL, step.arguments)])


def plain_planner(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return planner(messages, info, fresh_on_retry=False)


def fresh_key_planner(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return planner(messages, info, fresh_on_retry=True)


def sent(recipient: str, message: str, idempotency_key: str | None) -> str:
    """The call; a timeout goes back to the planner as a retry."""
    try:
        return post({"recipient": recipient, "message": message}, idempotency_key)
    except requests.Timeout as timed_out:
        raise ModelRetry(f"{TOOL} timed out: {timed_out}") from timed_out


naive = Agent(FunctionModel(plain_planner), deps_type=Op)
keyed = Agent(FunctionModel(plain_planner), deps_type=Op)
fresh_key = Agent(FunctionModel(fresh_key_planner), deps_type=Op)


@naive.tool(name=TOOL)
def send_unkeyed(ctx: RunContext[Op], recipient: str, message: str) -> str:
    return sent(recipient, message, None)


@keyed.tool(name=TOOL)
def send_with_the_ops_key(ctx: RunContext[Op], recipient: str, message: str) -> str:
    """Keyed by the op's identity the runtime gave the agent: not the planner's to choose."""
    return sent(recipient, message, f"{ctx.deps.op_id}:{TOOL}")


@fresh_key.tool(name=TOOL)
def send_with_the_planners_key(ctx: RunContext[Op], recipient: str, message: str, operation_id: str) -> str:
    """Keyed by whatever operation id the planner passes."""
    return sent(recipient, message, operation_id)


def run(agent: Agent[Op, str], op_id: str, payload: dict[str, Any]) -> str:
    return receipt(op_id, agent.run_sync(prompt(op_id, payload), deps=Op(op_id)).output)


def send(op_id: str, payload: dict[str, Any]) -> str:
    return run(naive, op_id, payload)


def send_keyed(op_id: str, payload: dict[str, Any]) -> str:
    return run(keyed, op_id, payload)


def send_fresh_key(op_id: str, payload: dict[str, Any]) -> str:
    return run(fresh_key, op_id, payload)
