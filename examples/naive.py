"""A naive job: send the notification, then mark the op done in SQLite.

On a retry it skips an op marked done. What it cannot see is an effect that
happened while its work-horse died before the mark: it sends again.
"""

from __future__ import annotations

import os
import time

import requests

from examples.store import Jobs

TIMEOUT = 1.0  # seconds: the client gives up on the provider after this


def send(op_id: str, payload: dict) -> str:
    return deliver(op_id, payload, idempotency_key=None)


def deliver(op_id: str, payload: dict, idempotency_key: str | None) -> str:
    jobs = Jobs()
    try:
        known = jobs.get(op_id)
        if known is not None and known[0] == "done":
            return known[1] or ""
        receipt = post(payload, idempotency_key)
        jobs.put(op_id, "done", receipt)
        return receipt
    finally:
        jobs.close()


def post(payload: dict, idempotency_key: str | None, waits: int = 100) -> str:
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    url = f"{os.environ['TESTBED_PROVIDER_URL']}/api/notifications"
    for _ in range(waits):
        response = requests.post(url, json=payload, headers=headers, timeout=TIMEOUT)
        if response.status_code != 409:  # 409: the same key is still in flight: not done, not failed
            break
        time.sleep(0.05)
    response.raise_for_status()
    return response.json()["id"]
