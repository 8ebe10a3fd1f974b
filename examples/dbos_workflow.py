"""A DBOS workflow whose step sends the notification (`pip install 'testbed[dbos]'`).

The workflow id is the op's identity. DBOS records each step's output when the
step returns, and a workflow started again under its id returns its recorded
result (finished) or waits for it (still pending). A pending workflow whose
process died is recovered by the next process launched with the same executor
id: each attempt launches DBOS with the op as its executor id, so a retry is
that op's process restarted, and it recovers the op's workflow. Recovery puts
the workflow on DBOS's internal queue, where any process of the same
application version may run it; the lab counts an effect for the op whose
attempt makes the call, so each op is its own version here, and its workflow
runs in its own process (the work-horses of other ops share the database).

What DBOS cannot do is record a step that was made but never returned: the
recovery runs the step again. `send_keyed` sends a key derived from the
workflow and the step, so the provider applies the step once. A step that
raises (its call timed out) ends the workflow with that error, recorded: the
queue's retry gets the error back. `send_keyed_retried` lets DBOS retry the
step inside the workflow instead.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from dbos import DBOS, SetWorkflowID

from examples.naive import post


def database_url() -> str:
    """DBOS's system database: `DBOS_SYSTEM_DATABASE_URL` (SQLite or PostgreSQL), or one SQLite
    file in the temp dir (op ids never repeat)."""
    default = os.path.join(tempfile.gettempdir(), "testbed-dbos.sqlite3")
    return os.environ.get("DBOS_SYSTEM_DATABASE_URL") or f"sqlite:///{default}"


@DBOS.step()
def notify(payload: dict[str, Any]) -> str:
    return post(payload, idempotency_key=None)


@DBOS.step()
def notify_keyed(payload: dict[str, Any]) -> str:
    """The same call, keyed by the workflow and the step: every run of this step sends the same key."""
    return post(payload, idempotency_key=f"{DBOS.workflow_id}:{DBOS.step_id}")


@DBOS.step(retries_allowed=True, interval_seconds=0.1)
def notify_keyed_retried(payload: dict[str, Any]) -> str:
    """Keyed, and retried by DBOS inside the workflow when the call raises (3 attempts)."""
    return post(payload, idempotency_key=f"{DBOS.workflow_id}:{DBOS.step_id}")


@DBOS.workflow()
def naive_workflow(payload: dict[str, Any]) -> str:
    return notify(payload)


@DBOS.workflow()
def keyed_workflow(payload: dict[str, Any]) -> str:
    return notify_keyed(payload)


@DBOS.workflow()
def keyed_retried_workflow(payload: dict[str, Any]) -> str:
    return notify_keyed_retried(payload)


def run(op_id: str, workflow: Any, payload: dict[str, Any]) -> str:
    DBOS(
        config={
            "name": "testbed-example",
            "system_database_url": database_url(),
            "executor_id": op_id,
            "application_version": op_id,
            # On SQLite DBOS polls for notifications; `destroy` waits out one poll (1 s by default).
            "notification_listener_polling_interval_sec": 0.05,
        }
    )
    DBOS.launch()
    try:
        with SetWorkflowID(op_id):
            return str(workflow(payload))
    finally:
        DBOS.destroy(workflow_completion_timeout_sec=0)


def send(op_id: str, payload: dict[str, Any]) -> str:
    return run(op_id, naive_workflow, payload)


def send_keyed(op_id: str, payload: dict[str, Any]) -> str:
    return run(op_id, keyed_workflow, payload)


def send_keyed_retried(op_id: str, payload: dict[str, Any]) -> str:
    return run(op_id, keyed_retried_workflow, payload)
