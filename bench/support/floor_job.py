"""The floor under the lab's cost: a job that does the I/O every one of the lab's attempts must do, and nothing else.

Each attempt of `testbed load -s provider-key` counts itself and reads its
op's intent, plan and marker in one round trip to Redis, sends its request
on the connection its worker keeps to the provider, and records its outcome
and the cell's count of ended jobs in a second round trip. `attempt` does
that I/O with the lab's own round trips (`workers.batch`) and client
(`workers.client`), on the same keys' shapes and an intent stored as the run
stores it, against a bare server (`bare_server.FLOOR_SERVER`, on uvloop as
the provider is) that answers every request with a fixed 201. Left out: the
flow, the probe, the death signal, the provider's checks and its durable
log. What raw RQ pays for these jobs on top of no-op jobs is what the lab
could not cost less than, whatever it did; `job_profile.py --floor` sets it
between raw RQ and the lab.
"""

from __future__ import annotations

import json
from typing import Any

from redis import Redis
from rq import Queue, Retry, get_current_job
from rq.queue import EnqueueData

from bench.support.timed_worker import TimedWorker
from labcore.keys import RunKeys
from workers import client
from workers.batch import batch

FUNCTION = f"{__name__}.attempt"
LEDGER = "floor"  # the ledger's name in the request's URL: the bare server reads no URL
KEYS = RunKeys("floor").cell("floor")  # the hashes and counters a run keeps for a cell


def store(redis: Redis, first: int, count: int) -> list[str]:
    """Ops `first` to `first + count - 1`, their intents stored as the run stores them: their ids."""
    from testbed.experiment.workload import make_op  # the enqueuer's: not in every worker's memory

    ops = [make_op(seq, 0) for seq in range(first, first + count)]
    with redis.pipeline(transaction=False) as pipe:
        if first == 1:
            pipe.set(KEYS.total, 0)  # never reached: `attempt` reads it as the lab's last job of a cell does
        for op in ops:
            pipe.hset(KEYS.ops, op.id, op.encode())
        pipe.execute()
    return [op.id for op in ops]


def prepared(base: str, op: str) -> EnqueueData:
    """An op's job, of the lab's job's shape (its retry: testbed.lab.runner; its timeout is RQ's
    default, as the lab's is), its result kept as raw RQ's are (`raw_rq.raw_rq` counts the
    finished registry)."""
    return Queue.prepare_data(FUNCTION, (base, op), result_ttl=3600, retry=Retry(max=1))


def attempt(base: str, op: str) -> str:
    job = get_current_job()
    assert job is not None
    redis = job.connection
    number, _, raw_intent, _ = batch(
        redis,
        ("HINCRBY", KEYS.attempts, op, 1),
        ("HGET", KEYS.plan, op),
        ("HGET", KEYS.ops, op),
        ("HGET", KEYS.markers, op),
    )
    payload = {"reference": op, **json.loads(raw_intent)["payload"]}
    reply = client.send(base, LEDGER, payload, key=op, attempt=number, chaos=None, timeout=10.0)
    batch(redis, ("HSET", KEYS.outcomes, op, str(reply.status)), ("INCR", KEYS.ended), ("GET", KEYS.total))
    return "ok"


def check(redis: Redis, ops: int) -> None:
    """Every op sent once and answered 201, or the run says it did not do what it was for."""
    answers = redis.hvals(KEYS.outcomes)
    if len(answers) != ops or set(answers) != {b"201"} or int(redis.get(KEYS.ended) or 0) != ops:
        raise SystemExit(f"the floor's {ops} jobs did not each send once, answered 201: {len(answers)} outcomes")


class FloorWorker(TimedWorker):
    """Keeps its work-horses' connection to the server open between jobs, as the lab's worker does."""

    @staticmethod
    def kept_for(job: Any) -> str | None:
        return job.args[0] if job.func_name == FUNCTION else TimedWorker.kept_for(job)
