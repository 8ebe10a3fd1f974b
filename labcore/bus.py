"""The chaos bus: how work-horses and the provider report to the controller.

A party that reaches an armed boundary pushes a *hit* and blocks until the
controller acts (kills it, or releases a held provider request). Attempts of
ops that carry a plan entry also push *events* (attempt started, first answer,
call timed out, attempt ended): the controller needs them for releases that
wait on the retry, and they are the raw material of replay timelines.
Everything is a Redis list under the run prefix.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from enum import Enum
from typing import TYPE_CHECKING, cast

from labcore import events
from labcore.events import Event, Hit
from labcore.faults import Release
from labcore.keys import RunKeys

if TYPE_CHECKING:
    from redis import Redis

# How long a holder waits for the controller before giving up on it.
HOLD_TIMEOUT = 60.0
SETTLE_TIMEOUT = 60.0
_KEY_TTL = 600
_BLOCK = 1.0  # the longest a single blocking command may wait


class Wake(Enum):
    """What `Bus.next` returns for a push to one of the lists it was also given to wait on."""

    DRAINED = "a cell's last job may have returned"


class Bus:
    def __init__(self, redis: Redis, keys: RunKeys) -> None:
        self.redis = redis
        self.keys = keys

    # -- holders (work-horse, provider) ------------------------------------

    def report(self, *hits: Hit) -> None:
        """One transaction for all: a provider about to die holding several armed
        requests must have reported every one of them before the controller, acting
        on the first, kills it (each request's client asks `was_reported`)."""
        now = time.time()
        with self.redis.pipeline(transaction=True) as pipe:
            for hit in hits:
                pipe.set(self.keys.reported(hit.hit), 1, ex=_KEY_TTL)
            pipe.rpush(self.keys.bus, *(events.encode(replace(hit, ts=now)) for hit in hits))
            pipe.execute()

    def was_reported(self, hit: str) -> bool:
        return bool(self.redis.exists(self.keys.reported(hit)))

    def await_release(self, hit: str, timeout: float = HOLD_TIMEOUT) -> Release | None:
        # Short blocking pops: a client's socket timeout (redis-py's default is
        # 5 s, RQ's depends on --worker-ttl) must never cut a long hold short.
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            popped = self.redis.blpop([self.keys.release(hit)], timeout=min(_BLOCK, left))
            if popped is not None:
                return Release(cast(bytes, popped[1]).decode())
        return None

    def acted(self, hit: str) -> None:
        """A holding provider has done what the release told it to."""
        self.redis.set(self.keys.acted(hit), 1, ex=_KEY_TTL)

    def emit(self, event: Event) -> None:
        self.redis.rpush(self.keys.bus, events.encode(event))

    def await_settled(self, hits: list[str], timeout: float = SETTLE_TIMEOUT) -> bool:
        """Block a retry until the controller has finished with the earlier
        faults that were actually hit (an armed boundary may never be reached)."""
        reported = [
            h for h, seen in zip(hits, self.redis.mget([self.keys.reported(h) for h in hits]), strict=True) if seen
        ]
        return _poll(self.redis, [self.keys.settled(h) for h in reported], timeout)

    # -- controller --------------------------------------------------------

    def release(self, hit: str, action: Release) -> None:
        key = self.keys.release(hit)
        with self.redis.pipeline() as pipe:
            pipe.rpush(key, action.value)
            pipe.expire(key, _KEY_TTL)
            pipe.execute()

    def settle(self, hit: str) -> None:
        self.redis.set(self.keys.settled(hit), 1, ex=_KEY_TTL)

    def await_acted(self, hit: str, timeout: float = HOLD_TIMEOUT) -> bool:
        return _poll(self.redis, [self.keys.acted(hit)], timeout)

    def next(self, timeout: float, drained: Sequence[str] = ()) -> Hit | Event | Wake | None:
        """The bus's next message, or a wake from one of the `drained` lists
        (labcore.keys.CellKeys.drained); the bus comes first when both have one."""
        popped = self.redis.blpop([self.keys.bus, *drained], timeout=timeout)
        if popped is None:
            return None
        return events.decode(popped[1]) if cast(bytes, popped[0]).decode() == self.keys.bus else Wake.DRAINED

    def pending(self) -> list[Hit | Event]:
        """What is on the bus now, left there for `next` (a look ahead, read as it is)."""
        return [events.decode(cast(bytes, raw)) for raw in self.redis.lrange(self.keys.bus, 0, -1)]

    def queued(self) -> Iterator[Hit | Event]:
        """What is on the bus now, without waiting: a blocking pop waits out its
        timeout on Redis's clock (100 ms steps at Redis's default hz), however short."""
        while (raw := self.redis.lpop(self.keys.bus)) is not None:
            yield events.decode(cast(bytes, raw))


def _poll(redis: Redis, keys: list[str], timeout: float) -> bool:
    """Wait until all keys exist. The waits are short (a few ms) and rare
    (faulted ops only), so polling beats a blocking protocol here."""
    deadline = time.monotonic() + timeout
    while keys and redis.exists(*keys) < len(keys):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True
