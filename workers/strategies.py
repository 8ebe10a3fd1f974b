"""Recovery strategies as data, and the decisions they make as pure functions.

A strategy answers three questions for the tool handler:
- at the start of an attempt, given the local marker: skip, hold, look the op
  up at the provider first, or send;
- after a lookup at the provider: complete from its receipt, send, wait, or
  hold the op unresolved;
- after a send: done, wait (the provider says the first request is still in
  flight), conflict, or a permanent failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from labcore import records
from labcore.answers import Lookup, Reply, Seen
from labcore.choices import pick


class State(StrEnum):
    """What the local ledger holds for an op."""

    IN_PROGRESS = "in-progress"  # an attempt may have sent; outcome unknown
    CLAIMED = "claimed"  # record-before's pre-written marker
    DONE = "done"  # a receipt is recorded
    UNRESOLVED = "unresolved"
    CONFLICT = "conflict"
    FAILED = "failed"  # the provider gave a permanent error


HELD = frozenset({State.UNRESOLVED, State.CONFLICT, State.FAILED})


@dataclass(frozen=True, slots=True)
class Marker:
    state: State
    detail: str = ""

    def encode(self) -> str:
        return records.encode(self.state, self.detail)

    @classmethod
    def decode(cls, raw: str | bytes | None) -> Marker | None:
        decoded = records.decode(raw)
        return None if decoded is None else cls(State(decoded[0]), decoded[1])


class KeyMode(StrEnum):
    NONE = "none"  # no Idempotency-Key header
    STABLE = "stable"  # the op's persisted identity
    FRESH = "fresh"  # a new key minted by every attempt


class Reader(StrEnum):
    """How a reconciling worker reads what the provider answered."""

    CAREFUL = "careful"  # only an authoritative "never existed" allows a resend
    NAIVE = "naive"  # anything that is not "found" is taken as absence


@dataclass(frozen=True, slots=True)
class Strategy:
    name: str
    ledger: bool  # keeps local markers at all
    pre_marker: State | None  # written before the request
    done_states: frozenset[State]  # markers taken as "the op is complete"
    key: KeyMode
    reader: Reader | None  # set: an in-progress marker triggers a lookup


_DONE = frozenset({State.DONE})

STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("retry-only", False, None, _DONE, KeyMode.NONE, None),
        Strategy("record-after", True, None, _DONE, KeyMode.NONE, None),
        # The article's lab: the pre-written marker is read back as completion.
        Strategy("record-before", True, State.CLAIMED, frozenset({State.CLAIMED, State.DONE}), KeyMode.NONE, None),
        Strategy("provider-key", True, None, _DONE, KeyMode.STABLE, None),
        Strategy("reconcile", True, State.IN_PROGRESS, _DONE, KeyMode.NONE, Reader.CAREFUL),
        Strategy("naive-reconcile", True, State.IN_PROGRESS, _DONE, KeyMode.NONE, Reader.NAIVE),
        Strategy("fresh-key", True, None, _DONE, KeyMode.FRESH, None),
    )
}

ARTICLE_STRATEGIES = ("retry-only", "record-after", "record-before", "provider-key")


def parse_strategy(name: str) -> Strategy:
    return pick("strategy", name, STRATEGIES)


class Start(StrEnum):
    SEND = "send"
    SKIP = "skip"  # the marker says done
    HOLD = "hold"  # an earlier attempt left the op unresolved, conflicting or failed
    RECONCILE = "reconcile"  # ask the provider before deciding


def decide_start(strategy: Strategy, marker: Marker | None) -> Start:
    if not strategy.ledger or marker is None:
        return Start.SEND
    if marker.state in strategy.done_states:
        return Start.SKIP
    if marker.state in HELD:
        return Start.HOLD
    if marker.state is State.IN_PROGRESS and strategy.reader is not None:
        return Start.RECONCILE
    return Start.SEND


class Next(StrEnum):
    COMPLETE = "complete"
    SEND = "send"
    WAIT = "wait"
    UNRESOLVED = "unresolved"
    CONFLICT = "conflict"


def after_lookup(strategy: Strategy, lookup: Lookup) -> Next:
    if lookup.seen is Seen.IN_FLIGHT:
        return Next.WAIT
    if strategy.reader is Reader.NAIVE:
        if lookup.seen is Seen.FOUND:
            return Next.COMPLETE
        return Next.UNRESOLVED if lookup.seen is Seen.UNKNOWN else Next.SEND
    if lookup.seen is Seen.FOUND:
        # The provider holds an effect under this reference with other content:
        # the op was changed after it was sent, which is not the same operation.
        return Next.COMPLETE if lookup.same_payload else Next.CONFLICT
    if lookup.seen is Seen.ABSENT:
        return Next.SEND
    return Next.UNRESOLVED


def unresolved_reason(lookup: Lookup) -> str:
    return {
        Seen.WITHDRAWN: "provider says the effect was withdrawn (410)",
        Seen.EMPTY: "listing is empty, which does not prove absence",
        Seen.UNKNOWN: "lookup gave no authoritative answer",
        Seen.IN_FLIGHT: "request still in flight at the provider",
    }.get(lookup.seen, f"lookup saw {lookup.seen}")


class AfterSend(StrEnum):
    DONE = "done"
    WAIT = "wait"  # 409: the first request is still in flight; never success, never a resend
    CONFLICT = "conflict"  # 422: same key, different payload
    FAILED = "failed"  # a permanent error, possibly replayed from the key's stored response
    RETRY = "retry"  # transient (5xx): let the queue retry the job


def after_send(reply: Reply) -> AfterSend:
    if 200 <= reply.status < 300:
        return AfterSend.DONE
    if reply.status == 409:
        return AfterSend.WAIT
    if reply.status == 422:
        return AfterSend.CONFLICT
    if 400 <= reply.status < 500:
        return AfterSend.FAILED
    return AfterSend.RETRY
