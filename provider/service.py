"""The provider's one request path: a request read once against the route table, decided with
the ledger's state machine through the store, and answered.

Sans-IO as far as HTTP goes: a server hands `Service.handle` a whole `Request`
and writes the `Response` it gets back; the service's only I/O is the store's.
A request is refused before the store is touched, so a refused request changes
nothing and holds no key; in this order:

1. a job's request while the gate is closed: 503 with Retry-After, nothing done (`provider.gate`);
2. without the run's bearer token (all but the open routes): 401 with WWW-Authenticate;
3. a body over MAX_BODY: 413 (the server has stopped reading it);
4. no such path: 404; no such method at that path: 405 with Allow;
5. a malformed path, query, header or body: 400 naming which, never what.

What is left is a command (`provider.commands`), carried out. An armed send is
admitted and claimed here, and held at its boundaries in a thread of its own
(`HeldSend`, which the server runs): it blocks until the lab releases it.

What the provider fails at on its own (a log it cannot write, a connection of its
own user it has no descriptor for) is no answer of its contract: it is counted and
named on `/health` (`Failures`), so that a lab scores no cell it touched.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from http import HTTPStatus
from typing import Any, TypeVar, assert_never
from urllib.parse import unquote

from labcore.answers import RETRY_AFTER, UNPROCESSED
from labcore.boundaries import Boundary
from labcore.credentials import matches
from labcore.destination import Destination
from labcore.events import Hit
from labcore.faults import Release
from labcore.payloads import fingerprint
from labcore.receipts import receipt
from labcore.scoped import DESTINATION_ROOT, ROOT, BadScope
from provider import commands, forward
from provider.gate import Gate
from provider.holds import Holds
from provider.ledger import Answer, SendTicket
from provider.limits import MAX_HEAD, MAX_HEADERS
from provider.routes import ROUTES, Resource, read
from provider.scopes import Scopes
from provider.smtp import Mail, Reply
from provider.store import Forwarded, LogReader, Store, UnknownLedger
from provider.wire import MAX_BODY, MAX_FORWARDED_BODY, Fields

_Sent = TypeVar("_Sent")  # what a destination's answer is, by protocol

# Request and Response: plain dataclasses, made for every request (see provider.commands); never changed.


@dataclass(slots=True)
class Request:
    method: str
    path: str  # as sent: percent-encoded
    query: str = ""
    headers: Fields = field(default_factory=Fields)
    body: bytes = b""
    oversized: bool = (
        False  # the body ran past its cap (`Service.body_cap`): `body` is not all of it, and is not read on
    )


@dataclass(slots=True)
class Response:
    status: int
    body: dict[str, Any]  # JSON
    replayed: bool = False  # a stored answer given again: the replay header says so
    headers: tuple[tuple[bytes, bytes], ...] = ()
    close: bool = False  # the connection ends with this answer


@dataclass(frozen=True, slots=True)
class HeldSend:
    """An armed send, admitted and claimed, or a request forwarded to a destination: `run`, in a
    thread (it blocks at the hit's boundaries, or on the destination), makes its answer; `done`
    once that answer is written."""

    run: Callable[[], Response | forward.Passed]
    done: Callable[[], None]


def malformed(where: list[str]) -> Response:
    """The parts of the request that were wrong: never their values."""
    return Response(400, {"error": f"malformed request ({', '.join(sorted(set(where))) or 'request'})"})


# Not a request at all (the server's parser gave up on it): the connection ends with the answer.
BAD_REQUEST = Response(400, malformed([]).body, close=True)
HEAD_TOO_LARGE = Response(431, {"error": f"request head over {MAX_HEAD} bytes or {MAX_HEADERS} headers"}, close=True)
# A client holding all the connections it may (provider.limits): the new one is answered and closed.
TOO_MANY_CONNECTIONS = Response(
    503, {"error": "too many connections from this client"}, headers=((RETRY_AFTER.encode(), b"1"),), close=True
)
UNAUTHORIZED = Response(
    401, {"error": "missing or wrong bearer token"}, headers=((b"www-authenticate", b"Bearer"),), close=True
)
TOO_LARGE = Response(413, {"error": f"request body over {MAX_BODY} bytes"}, close=True)
_FORWARD_TOO_LARGE = (
    f"a request to the destination over {MAX_FORWARDED_BODY} bytes, which the lab's proxy does not pass on"
)
FORWARD_TOO_LARGE = Response(413, {"error": _FORWARD_TOO_LARGE}, close=True)
NOT_FOUND = Response(404, {"error": "not found"})
NO_DESTINATION = Response(404, {"error": "no destination for this ledger"})
NO_MAIL_DESTINATION = Reply(550, "5.7.1 no SMTP destination for this run: the lab relays none")
MAIL_ABANDONED = Reply(451, "4.3.0 message abandoned")
MAIL_TURNED_AWAY = Reply(421, "4.3.2 the provider is restarting; the message was not processed")
UNKNOWN_LEDGER = Response(404, {"error": "unknown ledger"})
NOT_JSON = Response(415, {"error": "an effect's body must be JSON"})
NO_LOOKUP = Response(501, {"error": "this provider offers no lookup by reference"})
ABANDONED = Response(503, {"error": "request abandoned"})
TURNED_AWAY = Response(
    UNPROCESSED,
    {"error": "the provider is restarting; the request was not processed"},
    headers=((RETRY_AFTER.encode(), b"1"),),
)
_SCOPED = f"{ROOT}/"  # under it, a path needs no bearer token, matched or not
_FORWARDED = f"{DESTINATION_ROOT}/"  # nor under it: a job's requests to its destination, matched as sent


class Failures:
    """The provider's own failures since it started: how many, and the last one's cause.
    Noted from the event loop and from held sends' threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0
        self.last: str | None = None

    def note(self, cause: str) -> None:
        with self._lock:
            self.count += 1
            self.last = cause

    def health(self) -> Response:
        status = "failing" if self.count else "ok"
        return Response(200, {"status": status, "failures": self.count, "failure": self.last})


def cause_of(exc: Exception) -> str:
    """A failure's cause in words, for an open route: SQLite's and the system's own
    messages (no request's data is in them), else only the exception's type."""
    if isinstance(exc, sqlite3.Error):
        return f"the provider could not write its log: {exc}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"the provider failed: {exc.strerror}"
    return f"the provider failed: {type(exc).__name__}"


def _decoded(path: str) -> str:
    return unquote(path) if "%" in path else path


def _response(answer: Answer) -> Response:
    return Response(answer.status, answer.body, answer.replayed)


class Service:
    def __init__(self, store: Store, holds: Holds, gate: Gate, token: str | None) -> None:
        """With a token, every route but the open ones requires `Authorization: Bearer <token>`."""
        self._store = store
        self._holds = holds
        self._gate = gate
        self._token = token
        self._scopes = Scopes(store)
        self._destinations: dict[str, Destination | None] = {}  # by ledger, read through from the store
        self._reader: LogReader | None = None  # the audit's view of the log, opened by the first audit
        self.failures = Failures()
        self._document: dict[str, Any] | None = None

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
        self._store.close()

    def handle(self, request: Request) -> Response | HeldSend:
        # A request for a destination goes on as it came: its path is matched undecoded, and the
        # base URL itself (an SDK's endpoint, as given it) is its destination's root.
        path = _decoded(request.path)
        if request.path.startswith(_FORWARDED):
            path = request.path if request.path.count("/") > 2 else f"{request.path}/"
        found = ROUTES.match(path)
        if found is None:
            return self._refused(request, path.startswith((_SCOPED, _FORWARDED))) or NOT_FOUND
        resource, values = found
        if not resource.gated:
            return self._answer(resource, values, request)
        if not self._gate.enter():
            return TURNED_AWAY
        try:
            answer = self._answer(resource, values, request)
        except BaseException:
            self._gate.leave()
            raise
        if not isinstance(answer, HeldSend):  # a held send leaves the gate once its answer is written
            self._gate.leave()
        return answer

    def failed(self, exc: Exception) -> Response:
        """The answer to a request the provider failed at (500, naming the cause), noted."""
        cause = cause_of(exc)
        self.failures.note(cause)
        return Response(500, {"error": cause})

    def reads_body(self, request: Request) -> bool:
        """Whether the body of a request (its head alone given) is to be read: not when the request
        is refused for want of the token, so that a client without it makes the provider hold no body.
        Only the open routes under the scoped root take a body without the token."""
        if self._authorized(request):
            return True
        return request.path.startswith(_FORWARDED) or _decoded(request.path).startswith(_SCOPED)

    def body_cap(self, request: Request) -> int:
        """The most of a request's body the server reads: a job's own request to its destination
        may carry an SDK's upload; any other, what the provider's API ever takes. Only a request
        its scope's token signs gets the larger cap, so a stranger holds no more than before."""
        return MAX_FORWARDED_BODY if self._scoped_forward(request) else MAX_BODY

    def _scoped_forward(self, request: Request) -> bool:
        if not request.path.startswith(_FORWARDED):
            return False
        try:
            self._scopes.verify(request.path[len(_FORWARDED) :].partition("/")[0])
        except BadScope:
            return False
        return True

    def _authorized(self, request: Request) -> bool:
        if self._token is None:
            return True
        presented = request.headers.get(b"authorization")
        return matches(None if presented is None else presented.decode("latin-1"), self._token)

    def _refused(self, request: Request, open_route: bool) -> Response | None:
        if not open_route and not self._authorized(request):
            return UNAUTHORIZED
        if not request.oversized:
            return None
        if self._scoped_forward(request):  # the job's own request, which the lab cannot pass on: its failure
            self.failures.note(_FORWARD_TOO_LARGE)
            return FORWARD_TOO_LARGE
        return TOO_LARGE

    def _answer(self, resource: Resource, values: tuple[str, ...], request: Request) -> Response | HeldSend:
        refused = self._refused(request, resource.open)
        if refused is not None:
            return refused
        operation = resource.by_method.get(request.method)
        if operation is None:
            return Response(405, {"error": resource.refusal}, headers=((b"allow", resource.allow),))
        command = read(operation, values, request.query, request.headers, request.body)
        if isinstance(command, list):
            return malformed(command)
        try:
            return self._carry_out(command)
        except UnknownLedger:
            return UNKNOWN_LEDGER
        except BadScope as exc:
            return Response(403, {"error": str(exc)})

    def _carry_out(self, command: commands.Command) -> Response | HeldSend:
        store = self._store
        match command:
            case commands.SendEffect(ledger, key, attempt, hit, payload):
                ticket = SendTicket(ledger, payload["reference"], key, fingerprint(payload), attempt)
                if hit is None:
                    sent = store.send(ticket, payload)
                    return Response(sent.status, sent.body, sent.replayed)
                early = store.admit(ticket)
                return self._held(ticket, payload, hit) if early is None else _response(early)
            case commands.CheckHealth():
                return self.failures.health()
            case commands.PutLedger(ledger, contract):
                store.put_ledger(ledger, contract)
                return Response(200, {"ledger": ledger, "contract": contract.to_dict()})
            case commands.LookUpEffect(ledger, reference):
                if not store.contract(ledger).single_lookup:
                    return NO_LOOKUP
                status, effect = store.lookup(ledger, reference)
                if effect is None:
                    return Response(status, {"found": False, "inFlight": status == 409})
                return Response(
                    status, {"found": status == 200, "id": receipt(effect.id), "fingerprint": effect.fingerprint}
                )
            case commands.ListEffects(ledger, reference):
                data = [
                    {"id": receipt(e.id), "reference": reference, "fingerprint": e.fingerprint}
                    for e in store.listing(ledger, reference)
                ]
                return Response(200, {"data": data})
            case commands.ReadLog(ledger, after, limit):
                logged = store.log(ledger, after, limit)
                effects = [
                    {
                        "id": receipt(e.id),
                        "reference": e.reference,
                        "idempotencyKey": e.key,
                        "fingerprint": e.fingerprint,
                        "appliedAt": e.applied_at,
                        "withdrawnAt": e.withdrawn_at,
                    }
                    for e in logged
                ]
                return Response(200, {"effects": effects, "next": logged[-1].id if len(logged) == limit else None})
            case commands.AdvanceClock(ledger, seconds):
                return Response(200, {"offsetSeconds": store.advance_clock(ledger, seconds)})
            case commands.WithdrawEffects(ledger, reference):
                return Response(200, {"withdrawn": store.withdraw(ledger, reference)})
            case commands.PutScope(ledger, secret):
                self._scopes.put(ledger, secret)
                return Response(200, {"ledger": ledger})
            case commands.AuditLedger(ledger, references):
                if self._reader is None:
                    self._reader = LogReader(store.path)
                records = self._reader.records(ledger, references)
                return Response(
                    200,
                    {
                        "effects": self._reader.effect_count(ledger),
                        "records": {r: asdict(counts) for r, counts in records.items()},
                    },
                )
            case commands.GetDocument():
                if self._document is None:
                    from provider.openapi import document  # what builds it is imported by its first reader

                    self._document = document(protected=self._token is not None)
                return Response(200, self._document)
            case commands.PutDestination(ledger, destination):
                store.put_destination(ledger, destination)
                self._destinations[ledger] = destination
                return Response(200, {"ledger": ledger, "destination": destination.to_json()})
            case commands.Forward():
                return self._forward(command)
            case commands.ScopedSend(method, token, path, key, body):
                return self._scoped_send(method, token, path, key, body)
            case commands.ScopedLookUp(token):
                scope = self._scopes.verify(token)
                if not store.contract(scope.ledger).single_lookup:
                    return NO_LOOKUP
                status, found = store.lookup(scope.ledger, scope.reference)
                answer: dict[str, Any] = {"found": status == 200, "inFlight": status == 409}
                if found is not None:
                    answer |= {"id": receipt(found.id), "withdrawn": found.withdrawn}
                return Response(status, answer)
            case commands.ScopedList(token):
                scope = self._scopes.verify(token)
                rows = store.listing(scope.ledger, scope.reference)
                return Response(200, {"data": [{"id": receipt(e.id), "reference": scope.reference} for e in rows]})
            case _:
                assert_never(command)

    def _scoped_send(self, method: str, token: str, path: str, key: str | None, body: bytes) -> Response | HeldSend:
        """An effect of a user's job: its body, any JSON (or none), is what the log keeps, and the
        key's fingerprint covers the method, the path and the body."""
        scope = self._scopes.verify(token)
        try:
            parsed = json.loads(body) if body.strip() else None
        except (ValueError, RecursionError):
            return NOT_JSON
        payload = parsed if isinstance(parsed, dict) else {"body": parsed}
        identity = fingerprint({"method": method, "path": f"/api/{path}", "body": parsed})
        ticket = SendTicket(scope.ledger, scope.reference, key, identity, scope.attempt)
        if scope.hit is None:
            return _response(self._store.send(ticket, payload))
        early = self._store.admit(ticket)
        if early is not None:
            return _response(early)
        hit = self._scopes.first_use(scope)  # only an admitted effect uses the armed hit up
        return _response(self._store.apply(ticket, payload)) if hit is None else self._held(ticket, payload, hit)

    def _destination(self, ledger: str) -> Destination | None:
        if ledger not in self._destinations:
            self._destinations[ledger] = self._store.destination(ledger)
        return self._destinations[ledger]

    def _forward(self, request: commands.Forward) -> Response | HeldSend:
        """A job's request to its destination: forwarded in a thread (the destination takes its
        time), and, if it is an effect and its scope is armed, held at its boundaries there."""
        scope = self._scopes.verify(request.token)
        destination = self._destination(scope.ledger)
        if destination is None or destination.is_mail:
            return NO_DESTINATION
        path = "/" + request.path
        effect = destination.effects.of(request.method, path, request.query, request.headers, request.body)
        hit = self._scopes.first_use(scope) if effect else None  # only an effect uses the armed hit up
        logged = Forwarded(scope.ledger, scope.reference, scope.attempt, request.method, path, effect, 0)
        return HeldSend(functools.partial(self._pass, destination, request, path, logged, hit), self._gate.leave)

    def _pass(
        self, destination: Destination, request: commands.Forward, path: str, logged: Forwarded, hit: Hit | None
    ) -> Response | forward.Passed:
        """Runs in a thread: the request forwarded through the boundaries (`_through`)."""

        def send() -> tuple[Response | forward.Passed, int]:
            lines = request.headers.lines()
            try:
                answer = forward.forward(destination, request.method, path, request.query, lines, request.body)
            except forward.TooLarge as exc:  # not the destination's doing, nor the job's: the lab's
                self.failures.note(str(exc))
                return forward.failed(HTTPStatus.BAD_GATEWAY, str(exc)), 0
            except forward.DestinationDown as exc:
                return forward.failed(HTTPStatus.BAD_GATEWAY, f"the destination did not answer: {exc}"), 0
            return answer, answer.status

        dropped: Response | forward.Passed = ABANDONED
        return self._through(logged, hit, send, dropped)

    def _through(
        self, logged: Forwarded, hit: Hit | None, send: Callable[[], tuple[_Sent, int]], dropped: _Sent
    ) -> _Sent:
        """An effect on its way to a destination, over any protocol, in a thread of its own: held
        before it goes on (`before-effect`: the destination never sees a dropped one, answered
        `dropped`), sent (`send` gives the answer and the status the log keeps, 0 for none), and
        its answer held (`after-effect`: the destination has applied it, the job has no answer yet)."""
        holds = self._holds
        if hit is not None and holds.at(Boundary.BEFORE_EFFECT, hit) is Release.DROP:
            self._store.record_forward(logged)
            holds.done(Boundary.BEFORE_EFFECT, hit)
            return dropped
        answer, status = send()
        self._store.record_forward(replace(logged, status=status))
        if hit is not None:
            holds.done(Boundary.BEFORE_EFFECT, hit)
            holds.at(Boundary.AFTER_EFFECT, hit)
            holds.done(Boundary.AFTER_EFFECT, hit)
        return answer

    def mail_scoped(self, credential: str) -> bool:
        """Whether a mail client's AUTH password is an attempt's token (`provider.smtp`)."""
        try:
            self._scopes.verify(credential)
        except BadScope:
            return False
        return True

    def relay_mail(self, mail: Mail, deliver: Callable[[Destination, Mail], Reply]) -> Reply:
        """A job's message to its SMTP destination, whole, through the boundaries (`_through`), in a
        thread of its own (`provider.mail`); every message is an effect. Its connection's token says
        its op and attempt, and may carry the attempt's armed fault, as a forwarded request's does."""
        scope = self._scopes.verify(mail.credential)
        destination = self._destination(scope.ledger)
        if destination is None or not destination.is_mail:
            return NO_MAIL_DESTINATION
        if not self._gate.enter():
            return MAIL_TURNED_AWAY
        try:
            hit = self._scopes.first_use(scope)
            logged = Forwarded(scope.ledger, scope.reference, scope.attempt, "DATA", mail.message_id, True, 0)

            def send() -> tuple[Reply, int]:
                try:
                    reply = deliver(destination, mail)
                except forward.DestinationDown as exc:
                    return Reply(451, f"4.4.1 the destination did not answer: {exc}"), 0
                return reply, reply.code

            return self._through(logged, hit, send, MAIL_ABANDONED)
        finally:
            self._gate.leave()

    def _held(self, ticket: SendTicket, payload: dict[str, Any], hit: Hit) -> HeldSend:
        return HeldSend(functools.partial(self._hold, ticket, payload, hit), self._gate.leave)

    def _hold(self, ticket: SendTicket, payload: dict[str, Any], hit: Hit) -> Response:
        """An admitted armed send, held at its boundaries. Runs in a thread, which owns the
        claimed key until the send is applied or dropped."""
        store, holds = self._store, self._holds
        settled = False  # store.apply and store.drop each release the claim exactly once
        try:
            if holds.at(Boundary.BEFORE_EFFECT, hit) is Release.DROP:
                settled = True
                store.drop(ticket)
                holds.done(Boundary.BEFORE_EFFECT, hit)
                return ABANDONED
            settled = True
            answer = store.apply(ticket, payload)
            holds.done(Boundary.BEFORE_EFFECT, hit)
            holds.at(Boundary.AFTER_EFFECT, hit)
            holds.done(Boundary.AFTER_EFFECT, hit)
            return _response(answer)
        finally:
            if not settled:  # the hold itself failed (the bus is gone): the key must not stay in flight
                store.drop(ticket)
