"""What each fault does, as a table the controller, the provider hook and the
expectations model all read.

A fault is armed on one (op, attempt, boundary). When the attempt reaches the
boundary, the party holding it (work-horse or provider) reports a *hit* and
waits. The controller then acts, and tells a holding provider what to do with
the request (`Release`). The *settle* point is when the controller lets the
op's next attempt begin: kills settle once the death is confirmed and
recorded; a late completion settles at once, because the whole point is that
the retry overlaps the first request.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from labcore.boundaries import ORDER, PROVIDER_SIDE, Boundary
from labcore.choices import pick
from labcore.redelivery import Cause


class Fault(StrEnum):
    KILL = "kill"
    KILL_WORKER = "kill-worker"
    TIMEOUT = "timeout"
    LATE = "late"
    HOLD = "hold"
    PROVIDER_CRASH = "provider-crash"
    PARTITION = "partition"


class Release(StrEnum):
    """What a provider holding a request does once the controller lets it go."""

    DROP = "drop"  # forget the request: no effect, nothing sent
    APPLY = "apply"  # apply it now (after the client gave up)
    RESPOND = "respond"  # the effect is applied; answer (to a client that is gone)
    LOST = "lost"  # the provider died holding it: not applied, not even logged


class Trigger(StrEnum):
    """When the controller releases a held request."""

    KILLED = "killed"  # the holder's work-horse (or the provider) is confirmed dead
    CLIENT_TIMED_OUT = "client-timed-out"  # the worker reported its call timed out
    NEXT_CONTACT = "next-contact"  # the op's next attempt got its first answer, or ended


class Settle(StrEnum):
    """When the op's next attempt may start."""

    AT_HIT = "at-hit"
    AT_RELEASE = "at-release"


@dataclass(frozen=True, slots=True)
class FaultRule:
    boundaries: tuple[Boundary, ...]
    kills_horse: bool
    kills_worker: bool
    trigger: Trigger
    settle: Settle
    # What the provider does with a held request, per provider-side boundary.
    release: dict[Boundary, Release]
    # The client stops waiting (its call times out) while the provider holds it.
    client_gives_up: bool = True
    # The provider process is SIGKILLed at the boundary and restarted on its log.
    kills_provider: bool = False
    # The hit worker's host is cut off from the provider (by its host daemon) until the trigger heals it.
    cuts_network: bool = False

    @property
    def kills(self) -> bool:
        """The fault ends a process: whoever holds the boundary waits for that."""
        return self.kills_horse or self.kills_provider

    @property
    def alone(self) -> bool:
        """The fault reaches past its own cell's requests (every request the provider holds,
        every request of the cut host): a cell with it runs alone."""
        return self.kills_provider or self.cuts_network


# What becomes of a request whose client is gone: the provider's default too,
# when the controller never answers a hold.
ABANDONED = {Boundary.BEFORE_EFFECT: Release.DROP, Boundary.AFTER_EFFECT: Release.RESPOND}

# The provider holds the request until the client gives up, then abandons it.
_TIMEOUT = FaultRule(
    tuple(b for b in ORDER if b in PROVIDER_SIDE),
    False,
    False,
    Trigger.CLIENT_TIMED_OUT,
    Settle.AT_RELEASE,
    ABANDONED,
)

RULES: dict[Fault, FaultRule] = {
    Fault.KILL: FaultRule(ORDER, True, False, Trigger.KILLED, Settle.AT_RELEASE, ABANDONED),
    Fault.KILL_WORKER: FaultRule(ORDER, True, True, Trigger.KILLED, Settle.AT_RELEASE, ABANDONED),
    Fault.TIMEOUT: _TIMEOUT,
    Fault.LATE: FaultRule(
        (Boundary.BEFORE_EFFECT,),
        False,
        False,
        Trigger.NEXT_CONTACT,
        Settle.AT_HIT,
        {Boundary.BEFORE_EFFECT: Release.APPLY},
    ),
    # Held, unanswered, while the op's next attempt (a duplicate job) runs; then applied
    # and answered. Only with the duplicate-enqueue scenario.
    Fault.HOLD: FaultRule(
        (Boundary.BEFORE_EFFECT,),
        False,
        False,
        Trigger.NEXT_CONTACT,
        Settle.AT_HIT,
        {Boundary.BEFORE_EFFECT: Release.APPLY},
        client_gives_up=False,
    ),
    # The provider dies holding the request: before the effect it is lost with
    # its process, after it the effect is in the log and no answer goes out.
    Fault.PROVIDER_CRASH: FaultRule(
        tuple(b for b in ORDER if b in PROVIDER_SIDE),
        False,
        False,
        Trigger.KILLED,
        Settle.AT_RELEASE,
        {Boundary.BEFORE_EFFECT: Release.LOST, Boundary.AFTER_EFFECT: Release.RESPOND},
        kills_provider=True,
    ),
    # The worker's host is cut off from the provider at the boundary, both ways, by
    # the daemon on that host; the held request is let go at once, so an answer after
    # the effect is sent into the cut and lost. The client times out, and the cut
    # heals before the op's next attempt: a timeout, with the network doing the losing.
    Fault.PARTITION: replace(_TIMEOUT, cuts_network=True),
}


def parse_fault(text: str) -> Fault:
    return pick("fault", text, {f.value: f for f in Fault})


def cause_of(fault: Fault) -> Cause:
    """How an attempt the fault strikes ends, as its queue sees it."""
    rule = RULES[fault]
    if rule.kills_worker:
        return Cause.WORKER_LOST
    return Cause.CHILD_LOST if rule.kills_horse else Cause.ERROR
