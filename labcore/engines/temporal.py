"""Temporal's recovery settings: each a row of one table (`SETTINGS`), the retry policy and
timeouts the lab's workflow runs its activity with, and its `Redelivery`, which the
expectations model reads to predict every cell under it.

Measured on temporalio 1.35 with the Temporal CLI 1.9's dev server (the lab's tests hold the
model to it):

- the default retry policy (no maximum of attempts, 1 s backoff doubling): an activity
  whose process dies is not noticed when it dies, but when its start_to_close_timeout
  expires; it is then retried, as is one that raised; an activity runs at least once,
  and again and again until it returns;
- the same with a heartbeat timeout, the activity heartbeating while it runs: a dead
  process's activity is noticed once its heartbeats stop for that long, well before
  the start_to_close_timeout, and retried alike;
- `maximum_attempts=1`: nothing is retried, whatever ended the attempt; the workflow
  fails, once a dead process's activity has timed out;
- the default retry policy with the activity's errors non-retryable (it raises
  `ApplicationError(non_retryable=True)`, as an activity does for an error that another
  try would not mend): an attempt that raised is not retried and the workflow fails, while
  one whose process died is retried once its start_to_close_timeout expires.

The timeouts are the run's (`Timeouts`): short by default, so that a killed activity
comes back in seconds rather than in the minutes production often sets.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from labcore.redelivery import FOR_EVER, Redelivery, Setting

ENGINE = "temporal"


class Recovery(StrEnum):
    """The retry policy and timeouts the lab's workflow runs an attempt's activity with."""

    RETRY = "retry"
    HEARTBEAT = "heartbeat"
    NO_RETRY = "no-retry"
    NON_RETRYABLE = "non-retryable"


# `options`: what the workflow passes beside the run's timeouts (`maximum_attempts`: 0, no limit).
SETTINGS: dict[str, Setting] = {
    Recovery.RETRY: Setting(
        ENGINE,
        "the default retry policy, start_to_close_timeout",
        {"maximum_attempts": 0, "heartbeat": False},
        Redelivery(FOR_EVER, FOR_EVER, FOR_EVER),
    ),
    Recovery.HEARTBEAT: Setting(
        ENGINE,
        "the default retry policy, start_to_close_timeout and heartbeat_timeout",
        {"maximum_attempts": 0, "heartbeat": True},
        Redelivery(FOR_EVER, FOR_EVER, FOR_EVER),
    ),
    Recovery.NO_RETRY: Setting(
        ENGINE,
        "maximum_attempts=1, start_to_close_timeout",
        {"maximum_attempts": 1, "heartbeat": False},
        Redelivery(0, 0, 0),
    ),
    Recovery.NON_RETRYABLE: Setting(
        ENGINE,
        "the default retry policy, start_to_close_timeout; the activity's errors non-retryable",
        {"maximum_attempts": 0, "heartbeat": False, "errors_retried": False},
        Redelivery(FOR_EVER, FOR_EVER, 0),
    ),
}

# A user's own workflow (`--temporal-workflow`): its activity runs under the retry policy and
# timeouts the workflow gives it, which the model does not know.
WORKFLOW_OWN = "workflow"
WORKFLOW_SETTING = Setting(ENGINE, "the workflow's own retry policy and timeouts", {}, None)


@dataclass(frozen=True, slots=True)
class Timeouts:
    """An activity's timeouts, seconds: its start_to_close_timeout, and its heartbeat_timeout
    under the settings that heartbeat."""

    start_to_close: float = 5.0
    heartbeat: float = 1.0

    def said(self) -> str:
        """As the tables' captions say them."""
        return (
            f"start_to_close_timeout {self.start_to_close:g} s, heartbeat_timeout {self.heartbeat:g} s under heartbeat"
        )


def heartbeats(recovery: str) -> bool:
    return bool(SETTINGS[recovery].options["heartbeat"])


def maximum_attempts(recovery: str) -> int:
    return int(SETTINGS[recovery].options["maximum_attempts"])


def activity_name(user: bool) -> str:
    """The lab's activity: the built-in job, or (`user`) the wrapper of a user's function."""
    return f"testbed.{'user' if user else 'job'}"


# The lab's workflow: one per op's job (its id the job's), running the attempt as an activity.
WORKFLOW = "testbed.op"
# The activity a workflow runs once its op's activity failed for good: the workers note it.
GIVEN_UP = "testbed.given-up"


@dataclass(frozen=True, slots=True)
class Attempt:
    """An activity's input: the op's job as the handler takes it (spec, op, seq), and when the
    job was enqueued."""

    spec: dict[str, Any]
    op: str
    seq: int
    enqueued: float
    errors_retried: bool = True  # False: an error the attempt raises is non-retryable (the setting's)

    def encode(self) -> str:
        fields = {"spec": self.spec, "op": self.op, "seq": self.seq, "enqueued": self.enqueued}
        return json.dumps({**fields, "errorsRetried": self.errors_retried})

    @classmethod
    def decode(cls, raw: str | bytes) -> Attempt:
        fields = json.loads(raw)
        return cls(fields["spec"], fields["op"], fields["seq"], fields["enqueued"], fields.get("errorsRetried", True))


@dataclass(frozen=True, slots=True)
class Order:
    """A workflow's input (Temporal's JSON): the activity to run and how it is retried
    (`maximum_attempts` 0: no limit; `heartbeat` None: no heartbeat timeout)."""

    activity: str
    attempt: Attempt
    start_to_close: float
    heartbeat: float | None
    maximum_attempts: int


def order(activity: str, recovery: str, timeouts: Timeouts, attempt: Attempt) -> Order:
    """The workflow input of an op's job under a setting."""
    beat = timeouts.heartbeat if heartbeats(recovery) else None
    retried = bool(SETTINGS[recovery].options.get("errors_retried", True))
    attempt = dataclasses.replace(attempt, errors_retried=retried)
    return Order(activity, attempt, timeouts.start_to_close, beat, maximum_attempts(recovery))
