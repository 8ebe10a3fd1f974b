"""What a scenario changes in the world after a fault, before the op's next attempt."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

from redis import Redis

from labcore.ids import JobKind, reminted_id
from labcore.intent import OpIntent
from labcore.keys import CellKeys
from testbed.experiment.scenarios import Nemesis, Scenario
from testbed.experiment.workload import replanned
from testbed.infra.provider_process import ProviderAdmin

# (cell id, op sequence number, op id, kind of job, at the front of the queue)
Enqueue = Callable[[str, int, str, str, bool], None]


class ScenarioChanges:
    def __init__(self, redis: Redis, admin: ProviderAdmin, enqueue: Enqueue) -> None:
        self._redis = redis
        self._admin = admin
        self._enqueue = enqueue

    def change(self, scenario: Scenario, cell: str, keys: CellKeys, ledger: str, op: str, seq: int) -> None:
        nemesis = scenario.nemesis
        if nemesis is Nemesis.CHANGE_PAYLOAD:
            raw = self._redis.hget(keys.ops, op)
            assert raw is not None  # stored before the op's first job
            intent = OpIntent.decode(raw)
            self._redis.hset(keys.ops, op, replace(intent, payload=replanned(intent.payload)).encode())
        elif nemesis is Nemesis.EXPIRE_KEYS:
            self._admin.advance_clock(ledger, scenario.contract.retention_seconds + 1)
        elif nemesis is Nemesis.WITHDRAW:
            self._admin.withdraw(ledger, op)
        elif nemesis is Nemesis.DUPLICATE:
            # At the front: it races the held request now, not after the whole backlog.
            self._enqueue(cell, seq, op, JobKind.DUPLICATE, True)
        elif nemesis is Nemesis.REMINT:
            # Same logical action and payload, a new identity: nothing links it to the first.
            fresh = reminted_id(op)
            with self._redis.pipeline(transaction=False) as pipe:
                pipe.hset(keys.ops, fresh, self._redis.hget(keys.ops, op))
                pipe.hset(keys.remints, op, json.dumps([fresh]))
                pipe.execute()
            self._enqueue(cell, seq, fresh, JobKind.REMINT, False)
