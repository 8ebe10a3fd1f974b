"""The workload: the intended operations, each with a stable identity and a payload."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from testbed.experiment.scenarios import DECLINE_DOMAIN

_MESSAGES = (
    "Your order #{n} has shipped.",
    "Reminder: invoice {n} is due tomorrow.",
    "Your support ticket {n} was answered.",
    "A new sign-in to account {n} was detected.",
)


def op_id(seq: int) -> str:
    return f"tenant-demo:notification:{seq}"


def seq_of(op: str) -> int:
    """The sequence number in an op id (`op_id`'s inverse)."""
    return int(op.rsplit(":", 1)[1])


@dataclass(frozen=True, slots=True)
class Op:
    seq: int
    id: str
    intent: str  # the logical action; differs from `id` only when the planner re-mints an op
    payload: dict[str, Any]

    def encode(self) -> str:
        return json.dumps({"seq": self.seq, "intent": self.intent, "payload": self.payload})


def make_op(seq: int, seed: int, declined: bool = False) -> Op:
    template = random.Random(f"{seed}:{seq}").choice(_MESSAGES)
    domain = DECLINE_DOMAIN if declined else "example.test"
    payload = {"recipient": f"user-{seq}@{domain}", "message": template.format(n=seq)}
    return Op(seq, op_id(seq), op_id(seq), payload)


def replanned(payload: dict[str, Any]) -> dict[str, Any]:
    """The same op, re-planned with different arguments."""
    return {**payload, "message": payload["message"] + " (re-planned)"}
