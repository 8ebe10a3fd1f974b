"""The chaos bus of a provider that serves many runs.

A provider a run starts reports to that run's bus (`--bus-prefix`). One
started on its own host for runs to come (`testbed chaos --hosts`) is given
only the Redis URL: each armed request names its run's key prefix in its hit,
and the provider reports there. A prefix that is not a run's is ignored (the
request is then not held), so a caller cannot have it write elsewhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from labcore.bus import Bus
from labcore.events import Hit
from labcore.keys import RUN_PREFIX, RunKeys

if TYPE_CHECKING:
    from redis import Redis

_KEEP = 64  # buses of recent runs; older ones are made again if needed


class RunBuses:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._buses: dict[str, Bus] = {}

    def of(self, hit: Hit) -> Bus | None:
        if not RUN_PREFIX.fullmatch(hit.bus):
            return None
        bus = self._buses.get(hit.bus)
        if bus is None:
            if len(self._buses) >= _KEEP:
                self._buses.pop(next(iter(self._buses)))
            bus = self._buses[hit.bus] = Bus(self._redis, RunKeys(hit.bus))
        return bus
