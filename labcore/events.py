"""What the parts of a run tell each other and what the run keeps: typed
records, written and parsed in this module only.

A *hit* is an armed boundary reached by a work-horse or the provider; an
*event* is something an attempt of a watched op reports (it started, got its
first answer, timed out, ended), or what any attempt or worker reports that a
plan may not have made (a failed call, a work-horse dead of a signal). The controller adds what it did itself
(kills, restarts, recoveries, world changes) to each op's history.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from labcore.boundaries import Boundary
from labcore.faults import Fault


class EventKind(StrEnum):
    # Reported by an attempt.
    ATTEMPT_START = "attempt-start"
    CONTACT = "contact"  # the first answer the provider gave the attempt
    CALL_TIMEOUT = "call-timeout"
    ATTEMPT_END = "attempt-end"
    # Reported whether the op is watched or not: the controller judges whether the plan made it.
    CALL_FAILED = "call-failed"  # a call to the provider timed out, broke, or got a 5xx
    HORSE_DIED = "horse-died"  # by its worker: its work-horse died of a signal
    # By an engine's worker: the engine ran an attempt again, or gave it up, on a timeout of its own
    # (Temporal's start-to-close or heartbeat timeout), which a live attempt meets on a slow machine.
    OVERTAKEN = "overtaken"
    # Noted by the controller.
    HIT = "hit"
    KILLED = "killed"
    WORKER_RESTARTED = "worker-restarted"
    RECOVERED = "recovered"
    NEMESIS = "nemesis"
    PARTITIONED = "partitioned"  # the hit worker's host cut off from the provider
    HEALED = "healed"
    ANOMALY = "anomaly"  # something the controller did not plan for


class Side(StrEnum):
    """Who holds an armed boundary."""

    WORKER = "worker"
    PROVIDER = "provider"


@dataclass(frozen=True, slots=True)
class Hit:
    hit: str  # labcore.ids.HitId
    cell: str
    op: str
    attempt: int
    boundary: Boundary
    fault: Fault
    pid: int
    worker: str
    side: Side = Side.WORKER
    ts: float = 0.0
    holder: int = 0  # the provider process holding it (provider side)
    bus: str = ""  # the run's key prefix: where a provider serving many runs reports it

    def header(self) -> str:
        """The hit as the worker hands it to the provider with an armed request."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_header(cls, text: str) -> Hit:
        """ValueError for anything that is not a hit."""
        try:
            fields = json.loads(text)
            return cls._of(fields)
        except (TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"not a hit: {type(exc).__name__}") from None

    @classmethod
    def _of(cls, f: dict[str, Any]) -> Hit:
        return cls(
            str(f["hit"]),
            str(f["cell"]),
            str(f["op"]),
            _int(f["attempt"]),
            Boundary(f["boundary"]),
            Fault(f["fault"]),
            _int(f["pid"]),
            str(f["worker"]),
            Side(f.get("side", Side.WORKER)),
            float(f.get("ts", 0.0)),
            _int(f.get("holder", 0)),
            str(f.get("bus", "")),
        )


@dataclass(frozen=True, slots=True)
class Event:
    kind: EventKind
    cell: str
    op: str
    attempt: int
    pid: int
    worker: str
    ts: float
    data: dict[str, Any] = field(default_factory=dict)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("not an integer")
    return value


_HIT, _EVENT = "hit", "event"


def encode(message: Hit | Event) -> str:
    return json.dumps({"type": _HIT if isinstance(message, Hit) else _EVENT, **asdict(message)})


def decode(raw: str | bytes) -> Hit | Event:
    message = json.loads(raw)
    if message.pop("type") == _HIT:
        return Hit._of(message)
    return Event(EventKind(message.pop("kind")), **message)


@dataclass(frozen=True, slots=True)
class Noted:
    """One entry of an op's history, as results.json carries it."""

    kind: EventKind
    at: float
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"event": self.kind.value, "at": self.at, **self.data}

    @classmethod
    def from_json(cls, entry: dict[str, Any]) -> Noted:
        data = dict(entry)
        return cls(EventKind(data.pop("event")), float(data.pop("at")), data)
