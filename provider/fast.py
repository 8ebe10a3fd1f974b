"""The requests the server's protocol answers itself, before any of ASGI, the middleware or the framework.

A run sends little else: its health checks, each cell's contract, and its
work-horses' sends, unarmed or armed. Each is answered as its route would
answer it (provider.app): the guard's checks (the token, the body's size),
the route's models and bounds, the same store call, the same answer (the
send's and the contract's made by `send_or_hold` and `put_ledger`, which the
routes call too). Only a request that can be checked whole here and that
the route would accept is taken (one of each header, a JSON body of the
right shape); for anything else, valid or not, the answer is None, and the
request goes on to the app, which answers as before. Without the app on this path its framework is
imported only by the first request the protocol does not take: a default
`testbed chaos` or `testbed load` never imports it (a quarter of a second of
a provider's start).

An armed send is held at its boundaries: its answer is had in a thread
(`Held`), as the app's route has it in its thread pool.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from labcore.boundaries import Boundary
from labcore.credentials import matches
from labcore.events import Hit
from labcore.faults import Release
from labcore.payloads import fingerprint
from provider.contract import Contract
from provider.gate import Gate
from provider.holds import Holds
from provider.ledger import Answer, SendTicket
from provider.store import Store, UnknownLedger
from provider.wire import CHAOS, MAX_ATTEMPT, MAX_BODY, MAX_CHAOS, MAX_KEY, MAX_NAME, ContractBody, SendBody, hit_of

HEALTH = Answer(200, {"status": "ok"})
UNKNOWN_LEDGER = Answer(404, {"error": "unknown ledger"})
METHODS = frozenset({b"GET", b"PUT", b"POST"})  # of the requests answered here


@dataclass(frozen=True, slots=True)
class Held:
    """An armed send admitted and claimed: `run` (in a thread: it blocks at the hit's
    boundaries) makes its answer; `done` once that answer is written."""

    run: Callable[[], Answer]
    done: Callable[[], None]


# A request as the server's parser hands it over (method, URL, headers, body), and what the protocol does with it.
Fast = Callable[[bytes, bytes, list[tuple[bytes, bytes]], bytes], Answer | Held | None]

# A ledger's name in printable ASCII but for "/", "?", "#" and "%": a URL with a query, a
# fragment or an escape the server would unquote goes to the route.
_NAME = rb'[!"$&-.0->@-~]{1,%d}' % MAX_NAME
_LEDGER_URL = re.compile(rb"/ledgers/(%b)" % _NAME)
_SEND_URL = re.compile(rb"/ledgers/(%b)/effects" % _NAME)
_KEY = re.compile(rf"[!-~]{{1,{MAX_KEY}}}")
_CHAOS = CHAOS.encode()


def held_send(store: Store, holds: Holds, ticket: SendTicket, payload: dict[str, Any], hit: Hit) -> Answer:
    """An admitted armed send, held at its boundaries. Runs in a thread, which owns the
    claimed key until the send is applied or dropped."""
    settled = False  # store.apply and store.drop each release the claim exactly once
    try:
        if holds.at(Boundary.BEFORE_EFFECT, hit) is Release.DROP:
            settled = True
            store.drop(ticket)
            holds.done(Boundary.BEFORE_EFFECT, hit)
            return Answer(503, {"error": "request abandoned"})
        settled = True
        answer = store.apply(ticket, payload)
        holds.done(Boundary.BEFORE_EFFECT, hit)
        holds.at(Boundary.AFTER_EFFECT, hit)
        holds.done(Boundary.AFTER_EFFECT, hit)
        return answer
    finally:
        if not settled:  # the hold itself failed (the bus is gone): the key must not stay in flight
            store.drop(ticket)


def send_or_hold(
    store: Store, holds: Holds, ticket: SendTicket, payload: dict[str, Any], hit: Hit | None
) -> Answer | Callable[[], Answer]:
    """A send's answer, or for an armed send admitted and claimed, what makes it (blocking at
    the hit's boundaries: in a thread). The route's and the protocol's alike."""
    if hit is None:
        return store.send(ticket, payload)
    early = store.admit(ticket)
    if early is not None:
        return early
    return functools.partial(held_send, store, holds, ticket, payload, hit)


def put_ledger(store: Store, ledger: str, body: ContractBody) -> Answer:
    """A ledger made, or its contract replaced. The route's and the protocol's alike."""
    contract = Contract(**body.model_dump())
    store.put_ledger(ledger, contract)
    return Answer(200, {"ledger": ledger, "contract": contract.to_dict()})


def answering(store: Store, holds: Holds, gate: Gate, token: str | None) -> Fast:
    """The protocol's answers: GET /health, PUT /ledgers/{ledger}, POST /ledgers/{ledger}/effects."""

    def answer(method: bytes, url: bytes, raw: list[tuple[bytes, bytes]], body: bytes) -> Answer | Held | None:
        headers = dict(raw)
        if len(raw) != len(headers) or len(body) > MAX_BODY:  # a repeated header: the routes' rules decide
            return None
        if method == b"GET":
            return HEALTH if url == b"/health" and not body else None
        presented = headers.get(b"authorization")
        if token is not None and not matches(None if presented is None else presented.decode("latin-1"), token):
            return None
        if headers.get(b"content-type") != b"application/json":
            return None
        if method == b"POST" and (path := _SEND_URL.fullmatch(url)) is not None:
            return _send(store, holds, gate, path.group(1).decode("ascii"), headers, body)
        if method == b"PUT" and (path := _LEDGER_URL.fullmatch(url)) is not None:
            return _put_ledger(store, path.group(1).decode("ascii"), body)
        return None

    return answer


def _put_ledger(store: Store, ledger: str, body: bytes) -> Answer | None:
    try:
        contract = ContractBody.model_validate(json.loads(body))
    except (ValueError, ValidationError):
        return None
    return put_ledger(store, ledger, contract)


def _send(
    store: Store, holds: Holds, gate: Gate, ledger: str, headers: dict[bytes, bytes], body: bytes
) -> Answer | Held | None:
    key = headers.get(b"idempotency-key")
    if key is not None and _KEY.fullmatch(key.decode("latin-1")) is None:
        return None
    attempt = headers.get(b"x-testbed-attempt")
    if attempt is not None and not (attempt.isdigit() and 1 <= int(attempt) <= MAX_ATTEMPT):
        return None
    armed = headers.get(_CHAOS)
    if armed is not None and len(armed) > MAX_CHAOS:
        return None
    try:
        payload = SendBody.model_validate(json.loads(body)).model_dump()
        hit = None if armed is None else hit_of(armed)
    except (ValueError, ValidationError):
        return None
    ticket = SendTicket(
        ledger,
        payload["reference"],
        None if key is None else key.decode("latin-1"),
        fingerprint(payload),
        None if attempt is None else int(attempt),
    )
    # A job's request passes the gate (provider.gate); while it is closed, the app turns it away.
    if not gate.enter():
        return None
    held = False
    try:
        answer = send_or_hold(store, holds, ticket, payload, hit)
        if isinstance(answer, Answer):
            return answer
        held = True  # the gate is left once its answer is written
        return Held(answer, gate.leave)
    except UnknownLedger:
        return UNKNOWN_LEDGER
    finally:
        if not held:
            gate.leave()
