"""What a request asks of the provider, once read and checked against its route: one
typed command per operation (`provider.routes` reads them, `provider.service` carries
them out). A command holds only checked values: carrying one out never refuses its input.

Plain (not frozen) dataclasses: one is made for every request, and a frozen one's
`__init__` makes a call per field. Nothing changes one once made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labcore.destination import Destination
from labcore.events import Hit
from provider.contract import Contract
from provider.wire import Fields


@dataclass(slots=True)
class CheckHealth:
    pass


@dataclass(slots=True)
class GetDocument:
    pass


@dataclass(slots=True)
class PutLedger:
    ledger: str
    contract: Contract


@dataclass(slots=True)
class SendEffect:
    ledger: str
    key: str | None
    attempt: int | None
    hit: Hit | None  # the lab's armed fault: the send is held at its boundaries
    payload: dict[str, Any]


@dataclass(slots=True)
class LookUpEffect:
    ledger: str
    reference: str


@dataclass(slots=True)
class ListEffects:
    ledger: str
    reference: str


@dataclass(slots=True)
class ReadLog:
    ledger: str
    after: int
    limit: int


@dataclass(slots=True)
class AdvanceClock:
    ledger: str
    seconds: float


@dataclass(slots=True)
class WithdrawEffects:
    ledger: str
    reference: str


@dataclass(slots=True)
class PutScope:
    ledger: str
    secret: str


@dataclass(slots=True)
class PutDestination:
    ledger: str
    destination: Destination


@dataclass(slots=True)
class AuditLedger:
    ledger: str
    references: list[str]


# A user's job's calls, on its scoped base URL: the token is its credential, checked
# against its ledger's secret when the command is carried out, and so is the body of
# an effect, which may be any JSON (or none).


@dataclass(slots=True)
class ScopedSend:
    method: str
    token: str
    path: str  # under {base}/api/
    key: str | None
    body: bytes


@dataclass(slots=True)
class ScopedLookUp:
    token: str


@dataclass(slots=True)
class ScopedList:
    token: str


@dataclass(slots=True)
class Forward:
    """A user's job's request to its real destination, on its scoped base URL there: passed on whole."""

    method: str
    token: str
    path: str  # after the token, as sent (percent-encoded)
    query: str
    headers: Fields  # every line, a repeated name's too: passed on as sent
    body: bytes


Command = (
    CheckHealth
    | GetDocument
    | PutLedger
    | SendEffect
    | LookUpEffect
    | ListEffects
    | ReadLog
    | AdvanceClock
    | WithdrawEffects
    | PutScope
    | AuditLedger
    | ScopedSend
    | ScopedLookUp
    | ScopedList
    | PutDestination
    | Forward
)
