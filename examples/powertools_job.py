"""A job made idempotent by AWS Lambda Powertools' idempotency utility, set up as
its documentation shows for any function: `@idempotent_function` with the
Redis persistence layer (`CachePersistenceLayer`), keyed on the op's identity.

The library writes an INPROGRESS record before the function runs, a COMPLETED
record with the result after it returns, and deletes the record when the
function raises. The RQ job hands the library its data as a keyword argument,
as `idempotent_function` requires.

Needs `IDEMPOTENCY_REDIS_URL` (any Redis the job can reach).
"""

from __future__ import annotations

import os

import redis
import requests
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.persistence.cache import CachePersistenceLayer

TIMEOUT = 1.0

persistence = CachePersistenceLayer(
    client=redis.Redis.from_url(os.environ["IDEMPOTENCY_REDIS_URL"], decode_responses=True)
)
config = IdempotencyConfig(event_key_jmespath="op_id")


@idempotent_function(data_keyword_argument="job", config=config, persistence_store=persistence)
def notify(job: dict) -> dict:
    url = f"{os.environ['TESTBED_PROVIDER_URL']}/api/notifications"
    response = requests.post(url, json=job["payload"], timeout=TIMEOUT)
    response.raise_for_status()
    return response.json()


def send(op_id: str, payload: dict) -> dict:
    return notify(job={"op_id": op_id, "payload": payload})
