"""One attempt of the tool handler as a sans-IO generator.

The flow yields steps (pass a boundary, read or write the local marker, send
the request, ask the provider about the op, wait) and receives their results.
`workers.handler` drives it against Redis and the provider; the expectations
model drives the very same flow against an abstract provider. What a strategy
does is therefore written once, and the model predicts what the real
processes must show.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from labcore.boundaries import Boundary
from workers.strategies import (
    HELD,
    AfterSend,
    Marker,
    Next,
    Start,
    State,
    Strategy,
    after_lookup,
    after_send,
    decide_start,
    unresolved_reason,
)


@dataclass(frozen=True, slots=True)
class At:
    boundary: Boundary


@dataclass(frozen=True, slots=True)
class ReadMarker:
    pass


@dataclass(frozen=True, slots=True)
class WriteMarker:
    marker: Marker


@dataclass(frozen=True, slots=True)
class Send:
    """Send the op's payload under the strategy's key mode; answered with a `Reply`."""


@dataclass(frozen=True, slots=True)
class AskProvider:
    """Look the op's reference up on the configured read path; answered with a `Lookup`."""


@dataclass(frozen=True, slots=True)
class Wait:
    """The provider says the op is not done yet: pause before asking again."""


Step = At | ReadMarker | WriteMarker | Send | AskProvider | Wait
Flow = Generator[Step, Any, "Result"]


class Outcome(StrEnum):
    COMPLETED = "completed"  # sent, receipt in hand
    RECONCILED = "reconciled"  # found at the provider, its receipt recorded
    SKIPPED = "skipped"  # the marker was taken as done; nothing sent
    UNRESOLVED = "unresolved"
    CONFLICT = "conflict"
    FAILED = "failed"


# What the application believes is finished.
LOCALLY_DONE = frozenset({Outcome.COMPLETED, Outcome.RECONCILED, Outcome.SKIPPED})


@dataclass(frozen=True, slots=True)
class Result:
    outcome: Outcome
    detail: str = ""


class ProviderUnavailable(Exception):
    """A transient provider error: the attempt fails and the queue retries it."""


STILL_IN_FLIGHT = "request still in flight at the provider"


def attempt(strategy: Strategy, max_waits: int) -> Flow:
    yield At(Boundary.JOB_START)
    marker: Marker | None = (yield ReadMarker()) if strategy.ledger else None
    start = decide_start(strategy, marker)
    if start is Start.SKIP:
        return Result(Outcome.SKIPPED)
    if start is Start.HOLD:
        assert marker is not None and marker.state in HELD
        return Result(Outcome(marker.state.value), marker.detail)
    if start is Start.RECONCILE:
        decided = yield from _reconcile(strategy, max_waits)
        if decided is not None:
            return decided
    elif strategy.pre_marker is not None:
        yield WriteMarker(Marker(strategy.pre_marker))
    yield At(Boundary.BEFORE_REQUEST)
    return (yield from _send(strategy, max_waits))


def _reconcile(strategy: Strategy, max_waits: int) -> Generator[Step, Any, Result | None]:
    """Ask before resending; None means the provider allows one more send."""
    lookup, step = yield from _until_settled(AskProvider(), lambda seen: after_lookup(strategy, seen), max_waits)
    if step is Next.SEND:
        return None
    if step is Next.COMPLETE:
        return (yield from _record(strategy, Outcome.RECONCILED, lookup.receipt))
    if step is Next.CONFLICT:
        return (yield from _hold(strategy, State.CONFLICT, "provider holds a different payload for this op"))
    reason = STILL_IN_FLIGHT if step is Next.WAIT else unresolved_reason(lookup)
    return (yield from _hold(strategy, State.UNRESOLVED, reason))


def _send(strategy: Strategy, max_waits: int) -> Flow:
    reply, answer = yield from _until_settled(Send(), after_send, max_waits)
    if answer is AfterSend.DONE:
        return (yield from _record(strategy, Outcome.COMPLETED, reply.receipt))
    if answer is AfterSend.CONFLICT:
        return (yield from _hold(strategy, State.CONFLICT, "same key, different payload (422)"))
    if answer is AfterSend.FAILED:
        return (yield from _hold(strategy, State.FAILED, f"provider error {reply.status}"))
    if answer is AfterSend.WAIT:
        return (yield from _hold(strategy, State.UNRESOLVED, STILL_IN_FLIGHT))
    raise ProviderUnavailable(f"provider answered {reply.status}")


def _until_settled(step: Step, judge: Any, max_waits: int) -> Generator[Step, Any, tuple[Any, Any]]:
    """Repeat a request while the provider says "not done yet", up to `max_waits` pauses."""
    waits = 0
    while True:
        answer = yield step
        verdict = judge(answer)
        if verdict != "wait" or waits == max_waits:
            return answer, verdict
        waits += 1
        yield Wait()


def _record(strategy: Strategy, outcome: Outcome, receipt: str) -> Flow:
    yield At(Boundary.AFTER_RECEIPT)
    if strategy.ledger:
        yield WriteMarker(Marker(State.DONE, receipt))
    yield At(Boundary.AFTER_RECORD)
    return Result(outcome, receipt)


def _hold(strategy: Strategy, state: State, reason: str) -> Flow:
    if strategy.ledger:
        yield WriteMarker(Marker(state, reason))
    return Result(Outcome(state.value), reason)


def drive(flow: Flow, do: Any) -> Result:
    """Run a flow to its result, answering each step with `do(step)`."""
    value = None
    while True:
        try:
            step = flow.send(value)
        except StopIteration as done:
            result: Result = done.value
            return result
        value = do(step)
