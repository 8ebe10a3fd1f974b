"""The built-in `provider-key` strategy's wire behaviour as a user's job: one POST with the op's
identity as Idempotency-Key, over plain http.client (the built-in's own client). Measured
against `-s provider-key`, it isolates what the user-job path costs: the job wrapper, the
scoped URL at the provider, and the boundaries marked by hand (http.client is not instrumented).

    testbed load --kill-rate 0 --handler bench.support.wire_job:send    # from the project's root
"""

from __future__ import annotations

import http.client
import json
import os
from typing import Any
from urllib.parse import urlsplit

import testbed


def send(op_id: str, payload: dict[str, Any]) -> str:
    base = urlsplit(os.environ["TESTBED_PROVIDER_URL"])
    connection = http.client.HTTPConnection(base.hostname or "127.0.0.1", base.port, timeout=2.0)
    headers = {"Content-Type": "application/json", "Idempotency-Key": op_id}
    testbed.boundary("before-request")
    connection.request("POST", f"{base.path}/api/notifications", body=json.dumps(payload), headers=headers)
    response = connection.getresponse()
    body = json.loads(response.read())
    if response.status >= 300:
        raise RuntimeError(f"provider answered {response.status}: {body}")
    testbed.boundary("after-receipt")
    return str(body["id"])
