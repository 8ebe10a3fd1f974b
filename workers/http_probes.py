"""Boundaries inside the user's HTTP client: httpx, requests and urllib3, instrumented
in the work-horse the way OpenTelemetry's instrumentations do it, by wrapping
each library's transport-level send.

For the calls of the current attempt to its scoped base URL (workers.scope):
- the attempt's first effect call passes `before-request` just before it is sent
  and `after-receipt` once its response is in hand (whatever its status);
- a timed-out effect call is reported at once, so the controller can let a
  held request go while the client is still alive;
- any call that times out, breaks (refused, reset) or gets a 5xx is reported as
  a failed call: the controller judges whether the plan made it;
- the provider's first answer to the attempt is reported (a `late` request is
  applied once the next attempt has heard from the provider).
For the calls of the attempt to its real destination (`workers.scope.Proxied`), the
job's own SDK's: an effect by the user's rules (judged on the request as the client
sends it, with the provider's code) passes `before-request` and `after-receipt` the
same way, if it is the attempt's first, before the provider ever sees it and once its
answer is back in the work-horse, before the SDK has it. Nothing else is reported of
them: the proxy logs every one, and a destination's 5xx is its own answer, not the
lab's failure. A body the client streams (a file, a generator) is not read here, so
only the method, path, query and headers can make such a request an effect.

Calls to anywhere else pass through untouched. requests sends through urllib3:
a call is counted by the outermost instrumented layer only.
"""

from __future__ import annotations

import contextvars
import functools
import importlib.util
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from labcore.answers import CallFailure, provider_failed
from labcore.boundaries import Boundary
from workers import scope

# How a library's exception reads as a failed call, or None: not one (the job's own error).
Classify = Callable[[BaseException], CallFailure | None]
# A header's name and value as a library holds them.
Header = tuple[str | bytes, str | bytes]

_inside: contextvars.ContextVar[bool] = contextvars.ContextVar("testbed_http_probe", default=False)
_MARK = "__testbed_probe__"


@dataclass(frozen=True, slots=True)
class Sent:
    """A request as a library is about to send it: its headers and body as the library holds
    them, read only for a call to the attempt's destination."""

    method: str
    url: str
    headers: Iterable[Header] = ()
    body: object = None


def _observe(describe: Callable[..., Sent], args: Any, kwargs: Any, classify: Classify) -> _Call | None:
    attempt = scope.current()
    if attempt is None or _inside.get():
        return None
    sent = describe(*args, **kwargs)
    if attempt.is_call(sent.url):
        return _Call(attempt, attempt.is_effect(sent.method, sent.url), classify, reported=True)
    to = attempt.destination
    if to is None or not to.is_call(sent.url):
        return None
    if not to.is_effect(sent.method, sent.url, _fields(sent.headers), _body(sent.body)):
        return None  # a read: not a boundary
    return _Call(attempt, True, classify, reported=False)


def _fields(headers: Iterable[Header]) -> dict[bytes, bytes]:
    """By lower-case name, the first of a repeated one: as the provider's `Fields` reads them."""
    fields: dict[bytes, bytes] = {}
    for name, value in headers:
        key = (name if isinstance(name, bytes) else name.encode("latin-1")).lower()
        fields.setdefault(key, value if isinstance(value, bytes) else value.encode("latin-1"))
    return fields


def _body(body: object) -> bytes:
    """The body if the library holds it whole (urllib3 sends a str as UTF-8); a stream's is not read."""
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    return body.encode() if isinstance(body, str) else b""


class _Call:
    """One call of the attempt, to the provider or to its destination through it, from
    before it is sent to its response; `reported`: its answers and failures are reported
    (the provider's own calls)."""

    def __init__(self, attempt: scope.Attempt, effect: bool, classify: Classify, reported: bool) -> None:
        self.attempt = attempt
        self.first = effect and attempt.first_effect()
        self.effect = effect
        self.classify = classify
        self.reported = reported
        self.token = _inside.set(True)

    def before(self) -> None:
        if self.first:
            self.attempt.at(Boundary.BEFORE_REQUEST)

    def failed(self, exc: BaseException) -> None:
        _inside.reset(self.token)
        failure = self.classify(exc) if self.reported else None
        if failure is None:
            return
        if self.effect and failure is CallFailure.TIMEOUT:
            self.attempt.call_timed_out()
        self.attempt.failed(failure, f"{type(exc).__name__}: {exc}")

    def answered(self, status: int) -> None:
        _inside.reset(self.token)
        if self.reported:
            self.attempt.answered(str(status))
            if provider_failed(status):
                self.attempt.failed(CallFailure.STATUS, str(status))
        if self.first:
            self.attempt.at(Boundary.AFTER_RECEIPT)


def _wrap(
    original: Callable[..., Any],
    describe: Callable[..., Sent],
    status: Callable[[Any], int],
    classify: Classify,
) -> Callable[..., Any]:
    @functools.wraps(original)
    def send(*args: Any, **kwargs: Any) -> Any:
        call = _observe(describe, args, kwargs, classify)
        if call is None:
            return original(*args, **kwargs)
        try:
            call.before()
            response = original(*args, **kwargs)
        except BaseException as exc:
            call.failed(exc)
            raise
        call.answered(status(response))
        return response

    setattr(send, _MARK, True)
    return send


def _wrap_async(
    original: Callable[..., Awaitable[Any]],
    describe: Callable[..., Sent],
    status: Callable[[Any], int],
    classify: Classify,
) -> Callable[..., Any]:
    @functools.wraps(original)
    async def send(*args: Any, **kwargs: Any) -> Any:
        call = _observe(describe, args, kwargs, classify)
        if call is None:
            return await original(*args, **kwargs)
        try:
            call.before()  # blocking at an armed boundary is fine: the work-horse is about to die
            response = await original(*args, **kwargs)
        except BaseException as exc:
            call.failed(exc)
            raise
        call.answered(status(response))
        return response

    setattr(send, _MARK, True)
    return send


def _patch(owner: type, name: str, wrapper: Callable[..., Any]) -> None:
    if not getattr(getattr(owner, name), _MARK, False):
        setattr(owner, name, wrapper)


def _httpx() -> None:
    import httpx

    def describe(transport: Any, request: httpx.Request, *_: Any, **__: Any) -> Sent:
        try:
            body = request.content
        except httpx.RequestNotRead:  # a stream's: not read here
            body = b""
        return Sent(request.method, str(request.url), request.headers.raw, body)

    def classify(exc: BaseException) -> CallFailure | None:
        if isinstance(exc, httpx.TimeoutException):
            return CallFailure.TIMEOUT
        return CallFailure.CONNECTION if isinstance(exc, httpx.TransportError) else None

    def status(response: httpx.Response) -> int:
        return response.status_code

    original = httpx.HTTPTransport.handle_request
    _patch(httpx.HTTPTransport, "handle_request", _wrap(original, describe, status, classify))
    original_async = httpx.AsyncHTTPTransport.handle_async_request
    wrapped = _wrap_async(original_async, describe, status, classify)
    _patch(httpx.AsyncHTTPTransport, "handle_async_request", wrapped)


def _requests() -> None:
    import netrc  # noqa: F401  (requests imports it on every call: once here, not in each work-horse)

    import requests
    import requests.adapters

    def describe(adapter: Any, request: requests.PreparedRequest, *_: Any, **__: Any) -> Sent:
        return Sent(str(request.method), str(request.url), request.headers.items(), request.body)

    def classify(exc: BaseException) -> CallFailure | None:
        if isinstance(exc, requests.Timeout):  # before ConnectionError: a connect timeout is both
            return CallFailure.TIMEOUT
        return CallFailure.CONNECTION if isinstance(exc, requests.ConnectionError) else None

    def status(response: requests.Response) -> int:
        return response.status_code

    adapter = requests.adapters.HTTPAdapter
    _patch(adapter, "send", _wrap(adapter.send, describe, status, classify))


def _urllib3() -> None:
    import urllib3
    from urllib3.connectionpool import HTTPConnectionPool
    from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError
    from urllib3.exceptions import TimeoutError as Urllib3Timeout

    def describe(
        pool: HTTPConnectionPool, method: str, url: str, body: object = None, headers: Any = None, *_: Any, **__: Any
    ) -> Sent:
        if url.startswith("/"):
            port = f":{pool.port}" if pool.port else ""
            url = f"{pool.scheme}://{pool.host}{port}{url}"
        return Sent(method, url, (pool.headers if headers is None else headers).items(), body)

    def classify(exc: BaseException) -> CallFailure | None:
        if isinstance(exc, MaxRetryError):
            exc = exc.reason or exc
        if isinstance(exc, NewConnectionError | ProtocolError):  # a refused connect is a timeout's subclass
            return CallFailure.CONNECTION
        return CallFailure.TIMEOUT if isinstance(exc, Urllib3Timeout) else None

    def status(response: urllib3.BaseHTTPResponse) -> int:
        return response.status

    _patch(HTTPConnectionPool, "urlopen", _wrap(HTTPConnectionPool.urlopen, describe, status, classify))


_LIBRARIES: dict[str, Callable[[], None]] = {"httpx": _httpx, "requests": _requests, "urllib3": _urllib3}


def install() -> list[str]:
    """Instrument each of the libraries that is installed; the names instrumented."""
    done = []
    for name, instrument in _LIBRARIES.items():
        if importlib.util.find_spec(name) is not None:
            instrument()
            done.append(name)
    return done
