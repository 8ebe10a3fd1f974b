"""What a run saw of each cell, besides the provider's log: faults hit, kills,
every watched op's history, and how long killed jobs took to come back.

Replay latency (kill to the op's next attempt) is computed here only, by
`ReplayClock`, both as a run goes and afterwards from a stored history.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from labcore.events import Event, EventKind, Noted


@dataclass(slots=True)
class ReplayClock:
    """Kill -> next attempt start, per op; holds only ops killed and not yet replayed."""

    _killed: dict[str, tuple[float, int]] = field(default_factory=dict)

    def killed(self, op: str, at: float, attempt: int) -> None:
        self._killed[op] = (at, attempt)

    def started(self, op: str, at: float, attempt: int) -> float | None:
        """The latency in ms if this attempt replays a killed one."""
        killed = self._killed.get(op)
        if killed is None or killed[1] >= attempt:
            return None
        del self._killed[op]
        return (at - killed[0]) * 1000


@dataclass(frozen=True, slots=True)
class ReplayLatency:
    """An op's first kill, and how long its job took to come back."""

    killed_at: float
    requeue_ms: float | None  # until the job was back in the queue; None: not within the run
    replay_ms: float | None  # until its next attempt started; None: none started


def replay_latency(events: Iterable[Noted]) -> ReplayLatency | None:
    """From one op's stored history; None when nothing was killed. Requeued:
    the `recovered` event of a worker kill's recovery, or else the `enqueuedAt`
    RQ stamped on the next attempt (RQ's Retry leaves no event of the lab's)."""
    ordered = sorted(events, key=lambda e: e.at)
    killed = next((e for e in ordered if e.kind is EventKind.KILLED), None)
    if killed is None:
        return None
    clock = ReplayClock()
    clock.killed("op", killed.at, int(killed.data["attempt"]))
    start, replay_ms = None, None
    for event in ordered:
        if event.kind is EventKind.ATTEMPT_START and event.at >= killed.at:
            replay_ms = clock.started("op", event.at, int(event.data["attempt"]))
            if replay_ms is not None:
                start = event
                break
    recovered = next((e for e in ordered if e.kind is EventKind.RECOVERED and e.at >= killed.at), None)
    requeued = recovered.at if recovered is not None else (start.data.get("enqueuedAt") if start else None)
    return ReplayLatency(killed.at, None if requeued is None else (requeued - killed.at) * 1000, replay_ms)


# Where a cell's observations go as they are made (the run store's history), if anywhere.
Sink = Callable[[str, Noted], None]


@dataclass(slots=True)
class CellObservations:
    """What the run saw during one cell. Without `keep_history` it holds counts
    and latencies only, so a long run's memory does not grow with it; a `sink`
    gets every entry as it is made either way."""

    keep_history: bool = True
    sink: Sink | None = None
    faults: int = 0
    kill_count: int = 0
    replay_latencies_ms: array[float] = field(default_factory=lambda: array("d"))
    history: dict[str, list[Noted]] = field(default_factory=dict)
    anomalies: list[str] = field(default_factory=list)
    _replays: ReplayClock = field(default_factory=ReplayClock)

    def add(self, op: str, entry: Noted) -> None:
        """One entry of an op's history, counted as its kind says. A stored
        history replayed through here gives the counts the run had."""
        if entry.kind is EventKind.HIT:
            self.faults += 1
        elif entry.kind is EventKind.KILLED:
            self.kill_count += 1
            self._replays.killed(op, entry.at, int(entry.data["attempt"]))
        elif entry.kind is EventKind.ATTEMPT_START:
            latency = self._replays.started(op, entry.at, int(entry.data["attempt"]))
            if latency is not None:
                self.replay_latencies_ms.append(latency)
        if self.keep_history:
            self.history.setdefault(op, []).append(entry)
        if self.sink is not None:
            self.sink(op, entry)

    def note(self, op: str, kind: EventKind, at: float, **data: Any) -> None:
        self.add(op, Noted(kind, at, data))

    def event(self, event: Event) -> None:
        """An attempt's own report."""
        who = {"attempt": event.attempt, "pid": event.pid, "worker": event.worker}
        self.note(event.op, event.kind, event.ts, **who, **event.data)

    def anomaly(self, text: str) -> None:
        self.anomalies.append(text)
        if self.sink is not None:
            self.sink("", Noted(EventKind.ANOMALY, 0.0, {"text": text}))

    def history_json(self) -> dict[str, list[dict[str, Any]]]:
        return {op: [e.to_json() for e in events] for op, events in self.history.items()}


def parse_history(history: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, list[Noted]]:
    """A stored history (results.json) back into typed entries."""
    return {op: [Noted.from_json(dict(e)) for e in events] for op, events in history.items()}
