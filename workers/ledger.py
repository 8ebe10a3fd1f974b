"""The application's local ledger in Redis: markers, and each op's last outcome."""

from __future__ import annotations

from redis import Redis

from labcore import records
from labcore.keys import CellKeys
from workers.batch import batch
from workers.flow import Result
from workers.strategies import Marker


class Ledger:
    def __init__(self, redis: Redis, keys: CellKeys) -> None:
        self._redis = redis
        self._keys = keys

    def write(self, op: str, marker: Marker) -> None:
        self._redis.hset(self._keys.ledger, op, marker.encode())

    def finish(self, op: str, result: Result, marker: Marker | None = None) -> None:
        """The job is about to return: record what the application now believes,
        after the attempt's last marker if it is still to be written (one round trip)."""
        last = () if marker is None else (("HSET", self._keys.ledger, op, marker.encode()),)
        outcome = records.encode(result.outcome, result.detail)
        batch(self._redis, *last, ("HSET", self._keys.outcomes, op, outcome), ("INCR", self._keys.ended))
