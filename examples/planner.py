"""The scripted planner of the agent examples (examples/pydantic_ai_agent.py,
examples/openai_agents_agent.py): what a model decides, made deterministic, one rule for
both frameworks, each of which only turns its messages into the tool's answers so far.

Told the op in the prompt, the planner calls `send_email` with the notification; handed
the receipt, it replies; told the call timed out, it calls again, once, then gives up.
Where the tool takes an `operation_id` from the planner, its first call passes the op's
identity from the prompt, and a planner `fresh_on_retry` makes up a new one for the call
after a timeout, as a model asked to "try again" may.

With `EXAMPLES_PLANNER_LOG` set (a file's path), each time the planner decides to call the
tool, it notes the op's id there, one line per decision: whether a run's recovery asks the
model to decide the call again, or replays its decision.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

TOOL = "send_email"
KEY_ARGUMENT = "operation_id"  # the argument of a tool that lets the planner choose its key
CALLS = 2  # the first call and one more after a timeout
LOG_ENV = "EXAMPLES_PLANNER_LOG"


@dataclass(frozen=True)
class Op:
    """What the runtime gives the agent (its deps, its context): the op's identity."""

    op_id: str


@dataclass(frozen=True)
class Call:
    arguments: dict[str, str]


@dataclass(frozen=True)
class Reply:
    text: str


def prompt(op_id: str, payload: dict[str, Any]) -> str:
    return json.dumps({"task": "send this notification", KEY_ARGUMENT: op_id, **payload})


def next_step(task: str, answers: Sequence[str | None], keyed_by_planner: bool, fresh_on_retry: bool) -> Call | Reply:
    """`answers`: the tool's so far, oldest first, None for a call that timed out."""
    if answers and answers[-1] is not None:
        return Reply(f"sent {answers[-1]}")
    if len(answers) >= CALLS:
        return Reply("gave up: send_email timed out")
    told = json.loads(task)
    arguments = {"recipient": told["recipient"], "message": told["message"]}
    if keyed_by_planner:
        retried = bool(answers) and fresh_on_retry
        arguments[KEY_ARGUMENT] = f"{told[KEY_ARGUMENT]}:{uuid.uuid4().hex}" if retried else told[KEY_ARGUMENT]
    return Call(arguments)


def noted(task: str, step: Call | Reply) -> Call | Reply:
    """The step, a decision to call the tool noted where `LOG_ENV` says (if it says)."""
    log = os.environ.get(LOG_ENV)
    if log and isinstance(step, Call):
        # One short line in append mode: whole, even from processes writing at once.
        with open(log, "a") as decisions:
            decisions.write(f"{json.loads(task)[KEY_ARGUMENT]}\n")
    return step


def receipt(op_id: str, reply: str) -> str:
    """The agent's reply as the job's result: a run that did not send fails the job."""
    if not reply.startswith("sent "):
        raise RuntimeError(f"the agent did not send op {op_id}: {reply}")
    return reply.removeprefix("sent ")
