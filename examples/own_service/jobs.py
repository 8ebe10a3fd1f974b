"""Two jobs that place an op's order with the orders service (`examples.own_service.service`)
over plain `httpx`, and the service's own table as their judge:

    DATABASE_URL=postgresql://... python -m examples.own_service.service --port 8430 &
    DATABASE_URL=postgresql://... testbed chaos \\
        --handler examples.own_service.jobs:keyed --handler examples.own_service.jobs:naive \\
        --destination http://127.0.0.1:8430 --evidence examples.own_service.jobs:effects

The jobs' code is what it would be in production but for the service's URL, which the
lab gives them in `TESTBED_DESTINATION_URL`. `keyed` sends the op's identity as the
`Idempotency-Key`: the service's `UNIQUE` constraint keeps one order for it, however
often it is sent. `naive` sends a fresh key per attempt, as a client that makes its key
up when it sends does: a retry after the service took the order is a second order.

Each order carries its op's id as its `reference`, which is how the reader tells them
apart; the reader queries the table itself, at the same `DATABASE_URL`.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from typing import Any

import httpx
import psycopg

AMOUNT = 1000  # the same on every attempt: a key sent again with another amount is refused
TIMEOUT = 30.0  # seconds: the service answers in milliseconds; the lab holds an answer, never this long
ORDERS_OF = "SELECT reference, id FROM orders WHERE reference = ANY(%s) ORDER BY id"
# One client for the process, made at import, as a service's client usually is: making one
# loads the TLS trust store (a tenth of a second here), which per attempt would be most of
# the job's time. Each attempt's base URL is its own (it names the attempt): not the client's.
_HTTP = httpx.Client(timeout=TIMEOUT)


def _key(op_id: str) -> str:
    """The op's operation key: one fixed length, whatever the op's id."""
    return hashlib.sha256(op_id.encode()).hexdigest()


def _order(op_id: str, key: str) -> str:
    url = f"{os.environ['TESTBED_DESTINATION_URL']}/orders"
    answer = _HTTP.post(url, json={"reference": op_id, "amount": AMOUNT}, headers={"Idempotency-Key": key})
    answer.raise_for_status()
    return str(answer.json()["id"])


def keyed(op_id: str, payload: dict[str, Any]) -> str:
    """The op's identity as the key: the constraint keeps one order per op."""
    return _order(op_id, _key(op_id))


def naive(op_id: str, payload: dict[str, Any]) -> str:
    """A fresh key per attempt: the constraint never meets the same key twice."""
    return _order(op_id, uuid.uuid4().hex)


def effects(destination_url: str, op_ids: list[str]) -> dict[str, list[str]]:
    """The evidence: the orders the table holds for each op, by their primary keys. The
    service's URL is not needed: its records are read where it keeps them."""
    found: dict[str, list[str]] = {}
    with psycopg.connect(os.environ["DATABASE_URL"]) as db:
        for reference, order_id in db.execute(ORDERS_OF, (op_ids,)):
            found.setdefault(reference, []).append(str(order_id))
    return found
