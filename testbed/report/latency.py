"""Replay latency for the report, from stored events: the spans themselves
are computed by `testbed.judge.observer.replay_latency`, here only read from
results.json's dicts; and the recovery mode a killed op came back by."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from labcore.delivery import named
from testbed.judge import observer
from testbed.judge.observer import ReplayLatency
from testbed.store.formats import StoredEvent

Event = StoredEvent


def replay_latency(events: Iterable[Event]) -> ReplayLatency | None:
    """The spans of an op's first kill, from stored events; None when nothing was killed."""
    return observer.replay_latency(e.noted() for e in events)


def recovery_mode(
    fault: str, events: Sequence[Event], default_recovery: str | None, delivery: str | None = None
) -> str:
    """How a killed op's job came back: RQ's Retry after a work-horse kill, or
    the recovery that requeued a dead worker's job (forced or RQ's own); on
    Celery, as the task's delivery setting says."""
    if delivery:
        return f"{fault}{' (pool child)' * (fault == 'kill')}, {named(delivery)}"
    if fault == "kill":
        return "kill (work-horse), requeued by RQ's Retry"
    mode = next((e.get("mode") for e in events if e.event == "recovered"), None) or default_recovery
    return f"{fault}, {mode} recovery" if mode else fault
