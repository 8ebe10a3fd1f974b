"""The tool handler: the RQ job function that performs one op's attempt.

It drives the strategy's flow (`workers.flow`) against the real parts: the
local ledger in Redis, the provider over HTTP, and the chaos probes.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from labcore.events import EventKind
from labcore.payloads import fingerprint
from workers import client
from workers.flow import AskProvider, At, ReadMarker, Result, Send, Wait, WriteMarker, attempt, drive
from workers.instrument import Job, open_attempt, rq_job
from workers.markers import Markers
from workers.strategies import STRATEGIES, KeyMode, Marker


@dataclass(frozen=True, slots=True)
class JobSpec:
    prefix: str
    cell: str
    strategy: str
    ledger: str
    provider: str  # base URL
    read_path: str  # "lookup" (single item, strongly consistent) or "listing"
    client_timeout: float
    max_waits: int
    poll_interval: float
    # The cell crashes the provider: it drains before it dies, so a request that dies
    # with it unanswered was never processed, unless it is the armed one and reached
    # its boundary (Probe.died_unprocessed).
    provider_crashes: bool = False


def perform(spec: dict[str, Any], op: str, seq: int) -> str:
    """RQ's job function."""
    return run(rq_job(), spec, op, seq)


def run(job: Job, spec: dict[str, Any], op: str, seq: int) -> str:
    """One attempt of the op, in the queue's job `job`; what the flow concluded."""
    s = JobSpec(**spec)
    opened = open_attempt(job, s.prefix, s.cell, op, seq, with_marker=True)
    number, intent, raw_marker, probe = opened.number, opened.intent, opened.marker, opened.probe
    markers = Markers(opened.redis, opened.cell)
    strategy = STRATEGIES[s.strategy]
    # Only what the attempt uses is computed: in a work-horse every first touch costs.
    key = uuid.uuid4().hex if strategy.key is KeyMode.FRESH else op if strategy.key is KeyMode.STABLE else None
    payload = {"reference": op, **intent.payload}
    read = client.lookup if s.read_path == "lookup" else client.search
    unprocessed = probe.died_unprocessed if s.provider_crashes else client.never

    # A marker the flow wrote, not yet sent: it goes to Redis with the next round trip
    # that can show it to anyone (a kill point, a request, the attempt's end), so the
    # last marker and the attempt's outcome share one round trip. Nothing observes the
    # ledger in between: a boundary that is not armed is no point at all.
    pending: list[Marker] = []

    def flush() -> None:
        if pending:
            markers.write(op, pending.pop())

    def do(step: object) -> Any:
        if isinstance(step, At):
            if probe.stops_at(step.boundary):
                flush()
                probe.at(step.boundary)
            return None
        if isinstance(step, ReadMarker):
            # Read in the job's first round trip, right at its start, where the flow asks for it.
            return Marker.decode(raw_marker)
        elif isinstance(step, WriteMarker):
            flush()
            pending.append(step.marker)
            return None
        flush()
        if isinstance(step, Send):
            try:
                reply = client.send(
                    s.provider,
                    s.ledger,
                    payload,
                    key=key,
                    attempt=number,
                    chaos=probe.provider_hit(),
                    timeout=probe.call_timeout(s.client_timeout),
                    unprocessed=unprocessed,
                    failed=probe.call_failed,
                )
            except client.Timeout:
                probe.event(EventKind.CALL_TIMEOUT)
                raise
            probe.contact(str(reply.status))
            return reply
        elif isinstance(step, AskProvider):
            timeout = probe.call_timeout(s.client_timeout)
            found = read(
                s.provider,
                s.ledger,
                op,
                fingerprint(payload),
                timeout=timeout,
                unprocessed=unprocessed,
                failed=probe.call_failed,
            )
            probe.contact(found.seen.value)
            return found
        elif isinstance(step, Wait):
            time.sleep(s.poll_interval)
        return None

    try:
        result: Result = drive(attempt(strategy, s.max_waits), do)
    except BaseException as exc:
        flush()
        probe.event(EventKind.ATTEMPT_END, outcome="error", error=type(exc).__name__)
        raise
    if probe.watched:  # the marker lands before the attempt's end is reported, as it was written
        flush()
    # Reported before the job counts as ended: the run judges a cell once all its jobs have.
    probe.event(EventKind.ATTEMPT_END, outcome=result.outcome.value, detail=result.detail)
    markers.finish(op, result, pending.pop() if pending else None)
    return result.outcome.value
