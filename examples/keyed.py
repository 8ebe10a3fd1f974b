"""The naive job with one change: the op's identity goes along as the Idempotency-Key.

The provider then applies each op once, however often the job sends it, and
replays the first answer to every resend.
"""

from __future__ import annotations

from examples.naive import deliver


def send(op_id: str, payload: dict) -> str:
    return deliver(op_id, payload, idempotency_key=op_id)
