"""What the provider's answers mean to a worker: its reply to a send, and what
a lookup by reference established. The HTTP client and the model both read
statuses through `seen`, so the two cannot disagree on what a status means."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class Reply:
    """The provider's answer to a send, as the handler sees it."""

    status: int
    receipt: str = ""
    replayed: bool = False


class Seen(StrEnum):
    """What a lookup at the provider established."""

    FOUND = "found"  # an effect exists for the reference
    ABSENT = "absent"  # strongly consistent: never existed, nothing in flight (404)
    WITHDRAWN = "withdrawn"  # existed and was withdrawn (410)
    IN_FLIGHT = "in-flight"  # a request for it is still being processed (409)
    EMPTY = "empty"  # a listing returned nothing: not proof of absence
    UNKNOWN = "unknown"  # any other answer


@dataclass(frozen=True, slots=True)
class Lookup:
    seen: Seen
    receipt: str = ""
    same_payload: bool = True


# The header on an answer the provider replays for a key it has seen with the same
# payload (the IETF Idempotency-Key draft's name, as Stripe sends it): the stored
# response again, nothing applied. Names are case-insensitive on the wire.
REPLAYED = "Idempotent-Replayed"

# A request the provider turned away without processing it (it is about to
# restart): 503 with Retry-After. Sending it again as it is is safe.
UNPROCESSED = 503
RETRY_AFTER = "retry-after"


def turned_away(status: int, headers: Container[str]) -> bool:
    """The answer says the request was not processed (`headers`: names as sent, any case
    the container ignores, or lower-cased)."""
    return status == UNPROCESSED and RETRY_AFTER in headers


_BY_STATUS = {200: Seen.FOUND, 404: Seen.ABSENT, 410: Seen.WITHDRAWN, 409: Seen.IN_FLIGHT}


def seen(status: int, authoritative: bool = True) -> Seen:
    """The single-item lookup's status read as evidence. A 404 proves absence
    only when the provider says so (not, say, for a ledger it does not know)."""
    if status == 404 and not authoritative:
        return Seen.UNKNOWN
    return _BY_STATUS.get(status, Seen.UNKNOWN)


# An answer that says the provider itself failed (not the job's request): 501 is no
# failure, it is a contract's "no lookup here".
_PROVIDER_FAILED = frozenset({500, 502, 503, 504})


def provider_failed(status: int) -> bool:
    return status in _PROVIDER_FAILED


class CallFailure(StrEnum):
    """How an attempt's call to the provider failed, as the attempt reports it (`call-failed`)."""

    TIMEOUT = "timeout"  # the client gave up waiting
    CONNECTION = "connection"  # refused, reset, cut short
    STATUS = "status"  # a 5xx answer (`provider_failed`)
