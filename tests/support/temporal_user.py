"""A user's own Temporal code, as the end-to-end tests run it on the lab's worker
(`--temporal-workflow`): two workflows, each running its activity under its own retry policy
and timeout, the activity sending through the provider the lab gives it."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import requests
from temporalio import activity, workflow
from temporalio.common import RetryPolicy

# The user's own: a killed attempt is retried once its 5 s start-to-close timeout expires.
POLICY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=5)
START_TO_CLOSE = timedelta(seconds=5)


def _send(payload: dict[str, Any], headers: dict[str, str]) -> str:
    url = f"{os.environ['TESTBED_PROVIDER_URL']}/api/messages"
    response = requests.post(url, json=payload, headers=headers, timeout=2)
    response.raise_for_status()
    receipt: str = response.json()["id"]
    return receipt


@activity.defn
def send_naive(payload: dict[str, Any]) -> str:
    """Sends with no key: run again after its effect, it sends again."""
    return _send(payload, {})


@activity.defn
def send_keyed(payload: dict[str, Any]) -> str:
    """Its key from the workflow's id and the activity's, both the same on every retry."""
    info = activity.info()
    return _send(payload, {"Idempotency-Key": f"{info.workflow_id}/{info.activity_id}"})


async def _sends(activity_fn: Callable[[dict[str, Any]], str], payload: dict[str, Any]) -> str:
    return await workflow.execute_activity(
        activity_fn, payload, start_to_close_timeout=START_TO_CLOSE, retry_policy=POLICY
    )


@workflow.defn
class NaiveSend:
    @workflow.run
    async def run(self, payload: dict[str, Any]) -> str:
        return await _sends(send_naive, payload)


@workflow.defn
class KeyedSend:
    @workflow.run
    async def run(self, payload: dict[str, Any]) -> str:
        return await _sends(send_keyed, payload)


def not_an_activity(payload: dict[str, Any]) -> str:
    return "a plain function"
