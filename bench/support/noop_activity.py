"""Raw Temporal's worker (`raw_temporal.py`): a workflow that runs one no-op activity, served
by a plain `temporalio.worker.Worker` with the lab's worker options (one activity slot, no
workflow sandbox, no workflow cache: `workers/engines/temporal.py`).

    python -m bench.support.noop_activity ADDRESS TASK_QUEUE
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

WORKFLOW = "noop"


@activity.defn(name="noop")
async def noop() -> None:
    """Nothing: what Temporal costs per activity, and nothing else."""


@workflow.defn(name=WORKFLOW)
class Noop:
    @workflow.run
    async def run(self) -> None:
        await workflow.execute_activity("noop", start_to_close_timeout=timedelta(seconds=5))


async def serve(address: str, queue: str) -> None:
    client = await Client.connect(address)
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[Noop],
        activities=[noop],
        max_concurrent_activities=1,
        workflow_runner=UnsandboxedWorkflowRunner(),
        max_cached_workflows=0,
    )
    await worker.run()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2]))
