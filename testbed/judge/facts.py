"""Gather each op's facts after a cell: the provider's log (authoritative for
effects), the application's outcomes and attempt counts, and RQ's verdict on
jobs it gave up on. Streams in chunks, so memory does not grow with the run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import fields, replace
from typing import Protocol

from redis import Redis

from labcore import records
from labcore.ids import JobId, JobKind, op_id
from labcore.keys import CellKeys
from provider.store import ReferenceRecord
from testbed.judge.checker import OpFacts
from workers.flow import Outcome

CHUNK = 1000
_RECORDED = tuple(f.name for f in fields(ReferenceRecord))  # the provider's side of an op's facts


class ProviderRecords(Protocol):
    """What a provider recorded of some references: its log (provider.store.LogReader),
    its audit over HTTP (testbed.infra.hosts.RemoteLog), or what that audit said, as a
    stored run kept it (testbed.store.runs.StoredRecords)."""

    def records(self, ledger: str, references: list[str]) -> dict[str, ReferenceRecord]: ...


def op_facts(
    redis: Redis, keys: CellKeys, log: ProviderRecords, ledger: str, cell_id: str, ops: int, failed: set[str]
) -> Iterator[list[OpFacts]]:
    """Per logical action, the facts of every op (identity) created for it."""
    failed_jobs = {(job.seq, job.kind) for job in map(JobId.parse, failed) if job is not None}
    for start in range(1, ops + 1, CHUNK):
        seqs = range(start, min(ops, start + CHUNK - 1) + 1)
        ids = [op_id(seq) for seq in seqs]
        reminted = {op: json.loads(raw) for op, raw in zip(ids, redis.hmget(keys.remints, ids), strict=True) if raw}
        every = ids + [r for rs in reminted.values() for r in rs]
        with redis.pipeline(transaction=False) as pipe:
            pipe.hmget(keys.outcomes, every)
            pipe.hmget(keys.attempts, every)
            outcomes, attempts = pipe.execute()
        local = dict(zip(every, zip(outcomes, attempts, strict=True), strict=True))
        records = log.records(ledger, every)
        for seq, op in zip(seqs, ids, strict=True):
            made = [(op, (seq, JobKind.FIRST) in failed_jobs or (seq, JobKind.DUPLICATE) in failed_jobs)]
            made += [(again, (seq, JobKind.REMINT) in failed_jobs) for again in reminted.get(op, [])]
            yield [_facts(name, op, local[name], records.get(name, ReferenceRecord()), lost) for name, lost in made]


def _facts(
    op: str, intent: str, local: tuple[bytes | None, bytes | None], record: ReferenceRecord, job_failed: bool
) -> OpFacts:
    # Built whole, not through with_record: it runs for every op of a run, and replace() costs 2 to 3 times more.
    outcome, tries = local
    state, detail = records.decode(outcome) or ("", "")
    return OpFacts(
        op=op,
        intent=intent,
        attempts=int(tries or 0),
        effects=record.effects,
        withdrawn=record.withdrawn,
        declined=record.declined,
        sends=record.sends,
        lookups=record.lookups,
        outcome=Outcome(state) if state else None,
        detail=detail,
        job_failed=job_failed,
    )


def with_record(local: OpFacts, record: ReferenceRecord) -> OpFacts:
    """An op's local facts joined with what the provider recorded of it."""
    return replace(local, **{name: getattr(record, name) for name in _RECORDED})


def record_of(facts: OpFacts) -> ReferenceRecord:
    """What the provider had recorded of an op, as its facts hold it."""
    return ReferenceRecord(**{name: getattr(facts, name) for name in _RECORDED})
