"""The application's local record in Redis (the article's local ledger): each op's completion
marker, and its last outcome."""

from __future__ import annotations

from redis import Redis

from labcore import records
from labcore.keys import CellKeys
from workers.batch import batch
from workers.flow import Result
from workers.strategies import Marker


class Markers:
    def __init__(self, redis: Redis, keys: CellKeys) -> None:
        self._redis = redis
        self._keys = keys

    def write(self, op: str, marker: Marker) -> None:
        self._redis.hset(self._keys.markers, op, marker.encode())

    def finish(self, op: str, result: Result, marker: Marker | None = None) -> None:
        """The job is about to return: record what the application now believes,
        after the attempt's last marker if it is still to be written (one round trip).
        The job that may be its cell's last wakes the run's loop (a second round trip,
        once a cell or so), which would otherwise see the cell's end at its next check."""
        k = self._keys
        last = () if marker is None else (("HSET", k.markers, op, marker.encode()),)
        outcome = records.encode(result.outcome, result.detail)
        *_, ended, total = batch(
            self._redis, *last, ("HSET", k.outcomes, op, outcome), ("INCR", k.ended), ("GET", k.total)
        )
        if total is not None and ended >= int(total):
            self._redis.rpush(k.drained, op)
