"""Celery's delivery settings: each a row of one table (`SETTINGS`), the task options the
lab's workers register its task with and its `Redelivery`, which the expectations model reads
to predict every cell under it.

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

from enum import StrEnum
from typing import Any

from labcore.redelivery import FOR_EVER, Redelivery, Setting

ENGINE = "celery"


class Delivery(StrEnum):
    """A Celery task's delivery settings, as the lab's workers register them."""

    EARLY_ACK = "early-ack"
    ACKS_LATE = "acks-late"
    REJECT_ON_LOST = "reject-on-lost"
    AUTORETRY = "autoretry"


# `options`: the task's (`app.task(**options)`); `max_retries` is the run's --retries where `retried`.
SETTINGS: dict[str, Setting] = {
    Delivery.EARLY_ACK: Setting(
        ENGINE,
        "Celery's default: acknowledged as the task starts",
        {"acks_late": False},
        Redelivery(0, 0, 0),
        acks_at_start=True,
    ),
    Delivery.ACKS_LATE: Setting(
        ENGINE,
        "acks_late=True: acknowledged once the task ends",
        {"acks_late": True},
        Redelivery(0, FOR_EVER, 0),
        acks_at_start=False,
    ),
    Delivery.REJECT_ON_LOST: Setting(
        ENGINE,
        "acks_late=True, reject_on_worker_lost=True: a lost task is requeued",
        {"acks_late": True, "reject_on_worker_lost": True},
        Redelivery(FOR_EVER, FOR_EVER, 0),
        acks_at_start=False,
    ),
    Delivery.AUTORETRY: Setting(
        ENGINE,
        "autoretry_for=(Exception,), max_retries=--retries, no delay",
        {"acks_late": False, "autoretry_for": (Exception,), "default_retry_delay": 0},
        Redelivery(0, 0, 0),
        acks_at_start=True,
        retried=True,
    ),
}

# A user's Celery app (`--celery-app`): its tasks' own options, which the model does not predict.
APP = "app"
APP_SETTING = Setting(ENGINE, "the app's own task options", {}, None)
# The name under which the user's app's task (`--handler`) takes the lab's messages: the lab
# process never imports the user's code, so it cannot know the task's own name.
APP_TASK = "testbed.app-task"


def task_options(delivery: Delivery, retries: int) -> dict[str, Any]:
    """The options a lab's task is registered with under this setting."""
    setting = SETTINGS[delivery]
    return {**setting.options, "max_retries": retries if setting.retried else 0}


def task_name(delivery: Delivery, user: bool = False) -> str:
    """The lab's task under a setting: the built-in job, or (`user`) the wrapper of a user's function."""
    return f"testbed.{'user' if user else 'job'}.{delivery.value}"
