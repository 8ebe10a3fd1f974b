"""The SQS FIFO example's keyed job calling the destination directly, not through the lab:
the other side of `bench.destination`. Its work-horse points the job's endpoint at moto's
server itself (`BENCH_DIRECT_URL`), so each send costs what it costs the job in production."""

from __future__ import annotations

import os
from typing import Any

from examples import sqs_fifo

DIRECT_ENV = "BENCH_DIRECT_URL"


def keyed(op_id: str, payload: dict[str, Any]) -> str:
    os.environ["TESTBED_DESTINATION_URL"] = os.environ[DIRECT_ENV]
    return sqs_fifo.keyed(op_id, payload)
