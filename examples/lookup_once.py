"""A reconciling job that remembers what the provider said: explore's worked example.

Like `examples.reconciling`, it keeps its state in its own database and looks
the op up at the provider (`GET {TESTBED_PROVIDER_URL}/effects`) rather than
send blind. It looks before its first send too: a 404 says the op never
happened, and that the provider offers the lookup; where it does not (501),
the job sends under the op's Idempotency-Key instead. A retry that finds the op
in progress asks again: found, it records the receipt; never happened, it sends.
A request the provider turned away (503) or never received (it was restarting)
goes again at once; one whose answer was lost as the connection dropped is
looked up first. A timeout is raised: the job fails, and its retry asks.

One change makes it cheaper, and wrong: a retry that has heard "never happened"
records it ("absent"), so that a later retry sends without asking again. The
answer goes stale the moment the send it allowed reaches the provider. If that
recovery attempt is itself killed after its effect, the next retry trusts
"absent" and sends a second time.

It passes every cell of `testbed chaos --matrix full --handler examples.lookup_once:send`:
the matrix strikes the first attempt only, and the retry after it asks. Two
faults on one op break it, the second striking the recovery attempt:

    testbed explore --handler examples.lookup_once:send --seed 2

State in SQLite (EXAMPLES_DB, or a file in the temp dir), or in PostgreSQL
when DATABASE_URL is set (`examples.store`).
"""

from __future__ import annotations

import os
import time

import requests
from urllib3.exceptions import NewConnectionError

from examples.reconciling import Unresolved
from examples.store import Jobs

TIMEOUT = 1.0
WAITS = 200  # for a request still in flight (409), or a provider restarting
PAUSE = 0.05
NO_LOOKUP = "no-lookup"  # the provider offers no lookup by reference (501)


def send(op_id: str, payload: dict) -> str:
    base = os.environ["TESTBED_PROVIDER_URL"]
    jobs = Jobs()
    try:
        known = jobs.get(op_id)
        state = None if known is None else known[0]
        if known is not None and state == "done":
            return known[1] or ""
        key = None
        if state != "absent":  # "absent": an earlier retry asked, and the provider said it never happened
            found = lookup(base, op_id)
            if found == NO_LOOKUP:
                key = op_id  # no way to ask: let the provider deduplicate instead
            elif found is not None:
                jobs.put(op_id, "done", found)
                return found
            if state is None:
                jobs.put(op_id, "in-progress")
            elif found is None:
                # Remembered so that a later retry need not ask again: the bug (stale once we send).
                jobs.put(op_id, "absent")
        receipt = deliver(base, op_id, payload, key)
        jobs.put(op_id, "done", receipt)
        return receipt
    finally:
        jobs.close()


def deliver(base: str, op_id: str, payload: dict, key: str | None) -> str:
    """Send; if the connection drops before the answer, ask before sending again (under a key, just send)."""
    for _ in range(WAITS):
        try:
            return post(base, payload, key)
        except requests.ConnectionError:
            found = None if key else lookup(base, op_id)
            if found is not None:
                return found
    raise Unresolved(f"{op_id}: the provider kept dropping the request")


def lookup(base: str, op_id: str) -> str | None:
    """The receipt of the op's effect, None if the provider says it never happened, or NO_LOOKUP."""
    for _ in range(WAITS):
        response = call("GET", f"{base}/effects")
        if response.status_code == 200:
            return response.json()["id"]
        if response.status_code == 404:
            return None
        if response.status_code == 501:
            return NO_LOOKUP
        if response.status_code != 409:  # 409: a request for it is still in flight
            raise Unresolved(f"{op_id}: the provider answered {response.status_code} to the lookup")
        time.sleep(PAUSE)
    raise Unresolved(f"{op_id}: a request is still in flight at the provider")


def post(base: str, payload: dict, key: str | None) -> str:
    headers = {"Idempotency-Key": key} if key else {}
    for _ in range(WAITS):
        response = call("POST", f"{base}/api/notifications", json=payload, headers=headers)
        if response.status_code != 409:  # 409: the same key is still in flight
            break
        time.sleep(PAUSE)
    response.raise_for_status()
    return response.json()["id"]


def call(method: str, url: str, **kwargs: object) -> requests.Response:
    """A request, sent again while the provider is known not to have processed it: it turned
    it away (503), or the connection was never made (it is restarting); a lookup, whatever
    befell it. Anything else is raised: the job fails, and its retry asks the provider."""
    for _ in range(WAITS):
        try:
            response = requests.request(method, url, timeout=TIMEOUT, **kwargs)  # type: ignore[arg-type]
        except requests.ConnectionError as exc:
            never_sent = isinstance(getattr(exc.args[0], "reason", None), NewConnectionError)
            if method != "GET" and not never_sent:
                raise
        else:
            if response.status_code != 503:
                return response
        time.sleep(PAUSE)
    raise Unresolved(f"{method} {url}: the provider stayed unavailable")
