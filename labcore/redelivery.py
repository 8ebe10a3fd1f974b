"""What a queue does with an attempt that did not return: how it ended (`Cause`), how many
more attempts the op gets (`Redelivery`), and one engine's delivery setting that says so
(`Setting`). Whether an op runs again after its attempt died or raised is the queue's
decision: on RQ one retry budget for every cause, on other engines the settings of the
task, most of which users never test (each engine's table: `labcore.engines`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Cause(StrEnum):
    """How an attempt ended without returning."""

    CHILD_LOST = "child-lost"  # the process running it was killed (RQ's work-horse, a pool child)
    WORKER_LOST = "worker-lost"  # its whole worker was killed
    ERROR = "error"  # it raised (a call timed out, the provider was unreachable)


FOR_EVER = None  # a redelivery with no count


@dataclass(frozen=True, slots=True)
class Redelivery:
    """How many more attempts an op gets after attempts that did not return, by cause;
    `shared`: one budget for every cause (RQ's `Retry(max=N)`)."""

    child_lost: int | None
    worker_lost: int | None
    error: int | None
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


@dataclass(frozen=True, slots=True)
class Setting:
    """One delivery setting of an engine: the engine (as captions name it), what it means, the
    task options the workers register it with, and its redelivery (None: a user's app's own
    options, which the model does not predict)."""

    engine: str
    summary: str
    options: dict[str, Any]
    redelivery: Redelivery | None
    acks_at_start: bool | None = None  # the message is acknowledged as the task starts (None: not known)
    retried: bool = False  # its error budget is the run's --retries
