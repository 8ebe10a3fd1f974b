"""A reconciling job whose recovery trusts a timeout: the bench's second handler.

Like `examples.lookup_once`, it keeps its state in its own database. Its first
attempt records the op as in progress and sends; a failure is raised, and the
retry after it looks the op up at the provider (`GET {TESTBED_PROVIDER_URL}/effects`)
before it sends again: found, it records the receipt; never happened, it sends.

One shortcut makes it wrong: a recovery attempt whose send times out, having just
heard that the op never happened, takes the timeout for a send that went
through and records the op as done. A request the provider dropped is then
lost, and the job reports success: a false completion. It takes two faults on
one op, the second a timeout striking the recovery attempt before the effect:

    testbed explore --handler examples.timeout_trust:send --path .

State in SQLite (EXAMPLES_DB, or a file in the temp dir), or in PostgreSQL
when DATABASE_URL is set (`examples.store`).
"""

from __future__ import annotations

import os

import requests

from examples.lookup_once import lookup, post
from examples.store import Jobs

ASSUMED = "assumed"  # the receipt recorded for a send taken to have gone through


def send(op_id: str, payload: dict) -> str:
    base = os.environ["TESTBED_PROVIDER_URL"]
    jobs = Jobs()
    try:
        known = jobs.get(op_id)
        if known is not None and known[0] == "done":
            return known[1] or ""
        if known is None:
            jobs.put(op_id, "in-progress")
            receipt = post(base, payload, op_id)
        elif (found := lookup(base, op_id)) is not None:
            receipt = found
        else:
            try:
                receipt = post(base, payload, op_id)
            except requests.Timeout:
                receipt = ASSUMED  # the bug: a timeout says nothing of whether the request landed
        jobs.put(op_id, "done", receipt)
        return receipt
    finally:
        jobs.close()
