"""Gather each op's facts after a cell: the provider's log (authoritative for
effects), the application's outcomes and attempt counts, and RQ's verdict on
jobs it gave up on. Streams in chunks, so memory does not grow with the run."""

from __future__ import annotations

from collections.abc import Iterator

from redis import Redis

from provider.store import LogReader, ReferenceRecord
from testbed.checker import OpFacts
from testbed.keys import CellKeys
from testbed.workload import op_id
from workers.flow import Outcome

CHUNK = 1000


def job_id(cell_id: str, seq: int) -> str:
    return f"{cell_id}-{seq}"


def op_facts(
    redis: Redis, keys: CellKeys, log: LogReader, ledger: str, cell_id: str, ops: int, failed: set[str]
) -> Iterator[list[OpFacts]]:
    """Per logical action, the facts of every op created for it."""
    for start in range(1, ops + 1, CHUNK):
        seqs = range(start, min(ops, start + CHUNK - 1) + 1)
        ids = [op_id(seq) for seq in seqs]
        with redis.pipeline(transaction=False) as pipe:
            pipe.hmget(keys.outcomes, ids)
            pipe.hmget(keys.attempts, ids)
            outcomes, attempts = pipe.execute()
        records = log.records(ledger, ids)
        for seq, op, outcome, tries in zip(seqs, ids, outcomes, attempts, strict=True):
            record = records.get(op, ReferenceRecord())
            state, _, detail = (outcome or b"").decode().partition("|")
            yield [
                OpFacts(
                    op=op,
                    intent=op,
                    attempts=int(tries or 0),
                    effects=record.effects,
                    withdrawn=record.withdrawn,
                    declined=record.declined,
                    sends=record.sends,
                    lookups=record.lookups,
                    outcome=Outcome(state) if state else None,
                    detail=detail,
                    job_failed=job_id(cell_id, seq) in failed,
                )
            ]
