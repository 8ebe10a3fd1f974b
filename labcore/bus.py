"""The chaos bus: how work-horses and the provider report to the controller.

A party that reaches an armed boundary pushes a *hit* and blocks until the
controller acts (kills it, or releases a held provider request). Attempts of
ops that carry a plan entry also push *events* (attempt started, first answer,
call timed out, attempt ended): the controller needs them for releases that
wait on the retry, and they are the raw material of replay timelines.
Everything is a Redis list under the run prefix.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from redis import Redis

from labcore.keys import RunKeys

HIT = "hit"
EVENT = "event"

# How long a holder waits for the controller before giving up on it.
HOLD_TIMEOUT = 60.0
SETTLE_TIMEOUT = 60.0
_KEY_TTL = 600
_BLOCK = 1.0  # the longest a single blocking command may wait


@dataclass(frozen=True, slots=True)
class Hit:
    hit: str
    cell: str
    op: str
    attempt: int
    boundary: str
    fault: str
    pid: int
    worker: str
    side: str = "worker"
    ts: float = 0.0

    def header(self) -> str:
        """The hit as the worker hands it to the provider with an armed request."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_header(cls, text: str) -> Hit:
        return cls(**json.loads(text))


@dataclass(frozen=True, slots=True)
class Event:
    kind: str  # attempt-start | contact | call-timeout | attempt-end
    cell: str
    op: str
    attempt: int
    pid: int
    worker: str
    ts: float
    data: dict[str, Any] = field(default_factory=dict)


def hit_id(cell: str, seq: int, attempt: int, boundary: str) -> str:
    return f"{cell}:{seq}:{attempt}:{boundary}"


class Bus:
    def __init__(self, redis: Redis, keys: RunKeys) -> None:
        self.redis = redis
        self.keys = keys

    # -- holders (work-horse, provider) ------------------------------------

    def report(self, hit: Hit) -> None:
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(self.keys.reported(hit.hit), 1, ex=_KEY_TTL)
            pipe.rpush(self.keys.bus, json.dumps({"type": HIT, **asdict(hit), "ts": time.time()}))
            pipe.execute()

    def await_release(self, hit: str, timeout: float = HOLD_TIMEOUT) -> str | None:
        # Short blocking pops: a client's socket timeout (redis-py's default is
        # 5 s, RQ's depends on --worker-ttl) must never cut a long hold short.
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            popped = self.redis.blpop([self.keys.release(hit)], timeout=min(_BLOCK, left))
            if popped is not None:
                return popped[1].decode()
        return None

    def acted(self, hit: str) -> None:
        """A holding provider has done what the release told it to."""
        self.redis.set(self.keys.acted(hit), 1, ex=_KEY_TTL)

    def emit(self, event: Event) -> None:
        self.redis.rpush(self.keys.bus, json.dumps({"type": EVENT, **asdict(event)}))

    def await_settled(self, hits: list[str], timeout: float = SETTLE_TIMEOUT) -> bool:
        """Block a retry until the controller has finished with the earlier
        faults that were actually hit (an armed boundary may never be reached)."""
        reported = [
            h for h, seen in zip(hits, self.redis.mget([self.keys.reported(h) for h in hits]), strict=True) if seen
        ]
        return _poll(self.redis, [self.keys.settled(h) for h in reported], timeout)

    # -- controller --------------------------------------------------------

    def release(self, hit: str, action: str) -> None:
        key = self.keys.release(hit)
        with self.redis.pipeline() as pipe:
            pipe.rpush(key, action)
            pipe.expire(key, _KEY_TTL)
            pipe.execute()

    def settle(self, hit: str) -> None:
        self.redis.set(self.keys.settled(hit), 1, ex=_KEY_TTL)

    def await_acted(self, hit: str, timeout: float = HOLD_TIMEOUT) -> bool:
        return _poll(self.redis, [self.keys.acted(hit)], timeout)

    def next(self, timeout: float) -> Hit | Event | None:
        popped = self.redis.blpop([self.keys.bus], timeout=timeout)
        if popped is None:
            return None
        message = json.loads(popped[1])
        kind = message.pop("type")
        return Hit(**message) if kind == HIT else Event(**message)


def _poll(redis: Redis, keys: list[str], timeout: float) -> bool:
    """Wait until all keys exist. The waits are short (a few ms) and rare
    (faulted ops only), so polling beats a blocking protocol here."""
    deadline = time.monotonic() + timeout
    while keys and redis.exists(*keys) < len(keys):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True
