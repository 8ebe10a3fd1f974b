"""A job that keeps its state in its own database and never resends blind.

Before it sends, it records the op as in progress (committed). A retry that
finds the op in progress asks the provider first, with a strongly consistent
lookup of this op (`GET {TESTBED_PROVIDER_URL}/effects`):

- 200: the effect happened: record its receipt, done;
- 404: it never happened and nothing is in flight: send;
- 409: a request for it is still in flight: wait, ask again;
- anything else (410 withdrawn, 501 no lookup offered): the outcome cannot be
  established: raise, so the job fails and someone looks, rather than guess.

The state lives in SQLite (EXAMPLES_DB, or a file in the temp dir), or in
PostgreSQL when DATABASE_URL is set (psycopg).
"""

from __future__ import annotations

import os
import time

import requests

from examples.store import Jobs

TIMEOUT = 1.0
IN_FLIGHT_WAITS = 200
IN_FLIGHT_PAUSE = 0.05


class Unresolved(Exception):
    """The provider cannot say whether the op's effect happened."""


def send(op_id: str, payload: dict) -> str:
    base = os.environ["TESTBED_PROVIDER_URL"]
    jobs = Jobs()
    try:
        known = jobs.get(op_id)
        if known is not None and known[0] == "done":
            return known[1] or ""
        if known is None:
            jobs.put(op_id, "in-progress")
        else:  # an earlier attempt may have sent it
            receipt = reconcile(base, op_id)
            if receipt is not None:
                jobs.put(op_id, "done", receipt)
                return receipt
        response = requests.post(f"{base}/api/notifications", json=payload, timeout=TIMEOUT)
        response.raise_for_status()
        receipt = response.json()["id"]
        jobs.put(op_id, "done", receipt)
        return receipt
    finally:
        jobs.close()


def reconcile(base: str, op_id: str) -> str | None:
    """The receipt of the op's effect, or None when the provider says it never happened."""
    for _ in range(IN_FLIGHT_WAITS):
        response = requests.get(f"{base}/effects", timeout=TIMEOUT)
        if response.status_code == 200:
            return response.json()["id"]
        if response.status_code == 404:
            return None
        if response.status_code != 409:
            raise Unresolved(f"{op_id}: the provider answered {response.status_code} to the lookup")
        time.sleep(IN_FLIGHT_PAUSE)
    raise Unresolved(f"{op_id}: a request is still in flight at the provider")
