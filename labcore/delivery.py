"""Which queue runs a run's jobs, and what it does with an attempt that did not return.

The lab's jobs run on RQ (the reference) or on Celery. Whether an op runs
again after its attempt died or raised is the queue's decision, and on
Celery it is a matter of the task's delivery settings, most of which users
never test. Each setting is a row of one table (`SETTINGS`): the task
options the workers register it with, and its `Redelivery`, which the
expectations model reads to predict every cell under it.

Measured on Celery 5.7 with a Redis broker (the lab's tests hold the model to it):

- early acknowledgement (Celery's default): the message is acknowledged as the
  task starts; a pool child killed mid-task ends the task FAILURE
  (WorkerLostError), an exception ends it FAILURE, and a whole worker killed
  loses it with no state at all;
- `acks_late`: the same for a killed pool child (the message is acknowledged
  as the task fails) and for an exception; a whole worker killed leaves the
  message unacknowledged, and the broker restores it once the visibility
  timeout has passed;
- `acks_late` with `reject_on_worker_lost`: a killed pool child's message is
  requeued at once, with no retry count (a task killed on every attempt is
  requeued for ever);
- a retry policy (`autoretry_for`): only an exception raised in the task is
  retried, up to `max_retries`; a killed process raises nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from labcore.choices import pick


class Engine(StrEnum):
    RQ = "rq"
    CELERY = "celery"


class Cause(StrEnum):
    """How an attempt ended without returning."""

    CHILD_LOST = "child-lost"  # the process running it was killed (RQ's work-horse, Celery's pool child)
    WORKER_LOST = "worker-lost"  # its whole worker was killed
    ERROR = "error"  # it raised (a call timed out, the provider was unreachable)


FOR_EVER = None  # a redelivery with no count


@dataclass(frozen=True, slots=True)
class Redelivery:
    """How many more attempts an op gets after attempts that did not return, by cause;
    `shared`: one budget for every cause (RQ's `Retry(max=N)`)."""

    child_lost: int | None
    worker_lost: int | None
    error: int
    shared: bool = False

    @classmethod
    def rq(cls, retries: int) -> Redelivery:
        return cls(retries, retries, retries, shared=True)

    def again(self, causes: Iterable[Cause]) -> bool:
        """After attempts that ended this way (in order, the last one last), does the op run again?"""
        ended = list(causes)
        if not ended:
            return True
        last = ended[-1]
        budget = {Cause.CHILD_LOST: self.child_lost, Cause.WORKER_LOST: self.worker_lost, Cause.ERROR: self.error}
        allowed = budget[last]
        if allowed is FOR_EVER:
            return True
        used = len(ended) if self.shared else sum(c is last for c in ended)
        return used <= allowed


class Delivery(StrEnum):
    """A Celery task's delivery settings, as the lab's workers register them."""

    EARLY_ACK = "early-ack"
    ACKS_LATE = "acks-late"
    REJECT_ON_LOST = "reject-on-lost"
    AUTORETRY = "autoretry"


@dataclass(frozen=True, slots=True)
class Setting:
    summary: str
    options: dict[str, Any]  # the task's options (`app.task(**options)`); `max_retries` is the run's --retries
    redelivery: Redelivery
    retried: bool = False  # `max_retries` set to the run's --retries


SETTINGS: dict[Delivery, Setting] = {
    Delivery.EARLY_ACK: Setting(
        "Celery's default: acknowledged as the task starts",
        {"acks_late": False},
        Redelivery(0, 0, 0),
    ),
    Delivery.ACKS_LATE: Setting(
        "acks_late=True: acknowledged once the task ends",
        {"acks_late": True},
        Redelivery(0, FOR_EVER, 0),
    ),
    Delivery.REJECT_ON_LOST: Setting(
        "acks_late=True, reject_on_worker_lost=True: a lost task is requeued",
        {"acks_late": True, "reject_on_worker_lost": True},
        Redelivery(FOR_EVER, FOR_EVER, 0),
    ),
    Delivery.AUTORETRY: Setting(
        "autoretry_for=(Exception,), max_retries=--retries, no delay",
        {"acks_late": False, "autoretry_for": (Exception,), "default_retry_delay": 0},
        Redelivery(0, 0, 0),
        retried=True,
    ),
}

# A user's Celery app (`--celery-app`): its tasks' own options, which the model does not predict.
APP = "app"
# The name under which the user's app's task (`--handler`) takes the lab's messages: the lab
# process never imports the user's code, so it cannot know the task's own name.
APP_TASK = "testbed.app-task"


def parse_delivery(name: str) -> Delivery:
    return pick("delivery setting", name, {d.value: d for d in Delivery})


def task_options(delivery: Delivery, retries: int) -> dict[str, Any]:
    """The options a lab's task is registered with under this setting."""
    setting = SETTINGS[delivery]
    return {**setting.options, "max_retries": retries if setting.retried else 0}


def redelivery(delivery: str | None, retries: int) -> Redelivery:
    """What the queue does with an attempt that did not return: RQ's `Retry(max=retries)`
    (no delivery setting) or the Celery setting's."""
    if delivery is None:
        return Redelivery.rq(retries)
    setting = SETTINGS[Delivery(delivery)]
    return replace(setting.redelivery, error=retries) if setting.retried else setting.redelivery


def acks_early(delivery: str | None) -> bool:
    """The setting acknowledges a task's message as it starts (None and `APP`: not known to)."""
    return delivery in SETTINGS and not SETTINGS[Delivery(delivery)].options["acks_late"]


def task_name(delivery: Delivery, user: bool = False) -> str:
    """The lab's task under a setting: the built-in job, or (`user`) the wrapper of a user's function."""
    return f"testbed.{'user' if user else 'job'}.{delivery.value}"
