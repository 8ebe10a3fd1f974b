"""The workload: the intended operations, each with a stable identity and a payload."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from labcore.ids import op_id
from labcore.intent import OpIntent
from testbed.experiment.scenarios import DECLINE_DOMAIN

_MESSAGES = (
    "Your order #{n} has shipped.",
    "Reminder: invoice {n} is due tomorrow.",
    "Your support ticket {n} was answered.",
    "A new sign-in to account {n} was detected.",
)


@dataclass(frozen=True, slots=True)
class Op:
    seq: int
    id: str
    intent: str  # the logical action; differs from `id` only when the planner re-mints an op
    payload: dict[str, Any]

    def encode(self) -> str:
        """As the cell's `ops` hash keeps it (labcore.intent)."""
        return OpIntent(self.seq, self.intent, self.payload).encode()


def make_op(seq: int, seed: int, declined: bool = False) -> Op:
    template = random.Random(f"{seed}:{seq}").choice(_MESSAGES)
    domain = DECLINE_DOMAIN if declined else "example.test"
    payload = {"recipient": f"user-{seq}@{domain}", "message": template.format(n=seq)}
    return Op(seq, op_id(seq), op_id(seq), payload)


def replanned(payload: dict[str, Any]) -> dict[str, Any]:
    """The same op, re-planned with different arguments."""
    return {**payload, "message": payload["message"] + " (re-planned)"}
