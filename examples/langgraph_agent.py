"""A LangGraph agent whose tool node sends the notification: one thread per op,
checkpointed in SQLite, resumed on retry (`pip install 'testbed[langgraph]'`).

The graph is the shape of a tool-calling agent without the model: `agent` decides
on the call, `tool` makes it at the provider, `reply` reports the receipt. The
thread id is the op's identity, so every attempt of an op works on the same
thread. A retry asks the thread's snapshot, as LangGraph's guides do: no
checkpoint, start from the op's input; nodes left (`next`), resume; none left,
the thread is done and its receipt is returned. `send_resumed` does not ask:
it resumes any thread that has a checkpoint (`invoke(None)` runs what is left,
and nothing on a finished thread).

What the checkpointer cannot do is record a tool call that was made but whose
node never finished: the resume runs the node again. `send_keyed` sends a key
derived from the thread and the node, so the provider applies the call once.
`durability="sync"` writes each step's checkpoint before the next step starts;
the default (`"async"`) writes it while the next step runs.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from typing import Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Durability

from examples.naive import post

TOOL = "tool"  # the node that makes the call


class Thread(TypedDict, total=False):
    payload: dict[str, Any]
    call: dict[str, Any]
    receipt: str
    reply: str


def checkpoints_path() -> str:
    """The checkpointer's database: `LANGGRAPH_DB`, or one file in the temp dir (op ids never repeat)."""
    return os.environ.get("LANGGRAPH_DB") or os.path.join(tempfile.gettempdir(), "testbed-langgraph.sqlite3")


def agent(state: Thread) -> Thread:
    """The model's turn, made deterministic: call the tool with the op's notification."""
    return {"call": dict(state["payload"])}


def reply(state: Thread) -> Thread:
    return {"reply": f"sent {state['receipt']}"}


def naive_tool(state: Thread) -> Thread:
    return {"receipt": post(state["call"], idempotency_key=None)}


def keyed_tool(state: Thread, config: RunnableConfig) -> Thread:
    """The same call, keyed by the thread and the node: every resume of this node sends the same key."""
    key = f"{config['configurable']['thread_id']}:{config['metadata']['langgraph_node']}"
    return {"receipt": post(state["call"], idempotency_key=key)}


def run(
    op_id: str,
    payload: dict[str, Any],
    keyed: bool,
    durability: Durability | None,
    ask_next: bool = True,
) -> str:
    builder: StateGraph[Thread] = StateGraph(Thread)
    builder.add_node("agent", agent)
    if keyed:
        builder.add_node(TOOL, keyed_tool)
    else:
        builder.add_node(TOOL, naive_tool)
    builder.add_node("reply", reply)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", TOOL)
    builder.add_edge(TOOL, "reply")
    builder.add_edge("reply", END)
    # Several work-horses share the file: wait for its lock rather than fail on it.
    conn = sqlite3.connect(checkpoints_path(), timeout=30, check_same_thread=False)
    try:
        graph = builder.compile(checkpointer=SqliteSaver(conn))
        config: Any = {"configurable": {"thread_id": op_id}}
        state = graph.get_state(config)
        if state.created_at is None:  # no checkpoint: a first attempt, or one killed before any
            graph.invoke({"payload": payload}, config, durability=durability)
        elif state.next or not ask_next:  # resume from the last checkpoint
            graph.invoke(None, config, durability=durability)
        done = graph.get_state(config).values
        if "receipt" not in done:
            raise RuntimeError(f"thread {op_id} has no nodes left and no receipt")
        return str(done["receipt"])
    finally:
        conn.close()


def send(op_id: str, payload: dict[str, Any]) -> str:
    """The naive tool, LangGraph's default durability."""
    return run(op_id, payload, False, None)


def send_sync(op_id: str, payload: dict[str, Any]) -> str:
    return run(op_id, payload, False, "sync")


def send_keyed(op_id: str, payload: dict[str, Any]) -> str:
    return run(op_id, payload, True, None)


def send_keyed_sync(op_id: str, payload: dict[str, Any]) -> str:
    return run(op_id, payload, True, "sync")


def send_resumed(op_id: str, payload: dict[str, Any]) -> str:
    """The naive tool, the default durability, and every thread with a checkpoint resumed."""
    return run(op_id, payload, False, None, ask_next=False)
