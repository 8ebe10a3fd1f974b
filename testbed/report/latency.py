"""How long a killed op took to come back, from its recorded events (pure).

Two spans, both from the confirmed kill:

- requeue: until the job is back in the queue: the `recovered` event of a
  worker kill's recovery, or else the `enqueuedAt` RQ stamped on the next
  attempt (a work-horse kill is requeued by RQ's `Retry`, with no event of
  the lab's own);
- replay: until the next attempt starts in a work-horse.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Event = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ReplayLatency:
    killed_at: float
    requeue_ms: float | None  # None: never back in the queue within the run
    replay_ms: float | None  # None: no later attempt started


def replay_latency(events: Iterable[Event]) -> ReplayLatency | None:
    """The spans of an op's first kill; None when nothing was killed."""
    ordered = sorted(events, key=lambda e: e["at"])
    killed = next((e for e in ordered if e["event"] == "killed"), None)
    if killed is None:
        return None
    at = killed["at"]
    start = next(
        (e for e in ordered if e["event"] == "attempt-start" and e.get("attempt", 0) > killed.get("attempt", 0)),
        None,
    )
    recovered = next((e for e in ordered if e["event"] == "recovered" and e["at"] >= at), None)
    if recovered is not None:
        requeued: float | None = recovered["at"]
    else:
        requeued = start.get("enqueuedAt") if start is not None else None
    return ReplayLatency(
        killed_at=at,
        requeue_ms=None if requeued is None else (requeued - at) * 1000,
        replay_ms=None if start is None else (start["at"] - at) * 1000,
    )


def recovery_mode(fault: str, events: Sequence[Event], default_recovery: str | None) -> str:
    """How a killed op's job came back: RQ's Retry after a work-horse kill, or
    the recovery that requeued a dead worker's job (forced or RQ's own)."""
    if fault == "kill":
        return "kill (work-horse), requeued by RQ's Retry"
    mode = next((e.get("mode") for e in events if e["event"] == "recovered"), None) or default_recovery
    return f"{fault}, {mode} recovery" if mode else fault
