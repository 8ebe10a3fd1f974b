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
Calls to anywhere else pass through untouched. requests sends through urllib3:
a call is counted by the outermost instrumented layer only.
"""

from __future__ import annotations

import contextvars
import functools
import importlib.util
from collections.abc import Awaitable, Callable
from typing import Any

from labcore.answers import CallFailure, provider_failed
from labcore.boundaries import Boundary
from workers import scope

# How a library's exception reads as a failed call, or None: not one (the job's own error).
Classify = Callable[[BaseException], CallFailure | None]

_inside: contextvars.ContextVar[bool] = contextvars.ContextVar("testbed_http_probe", default=False)
_MARK = "__testbed_probe__"


def _observe(method: str, url: str, classify: Classify) -> _Call | None:
    attempt = scope.current()
    if attempt is None or _inside.get() or not attempt.is_call(url):
        return None
    return _Call(attempt, attempt.is_effect(method, url), classify)


class _Call:
    """One call of the attempt to the provider, from before it is sent to its response."""

    def __init__(self, attempt: scope.Attempt, effect: bool, classify: Classify) -> None:
        self.attempt = attempt
        self.first = effect and attempt.first_effect()
        self.effect = effect
        self.classify = classify
        self.token = _inside.set(True)

    def before(self) -> None:
        if self.first:
            self.attempt.at(Boundary.BEFORE_REQUEST)

    def failed(self, exc: BaseException) -> None:
        _inside.reset(self.token)
        failure = self.classify(exc)
        if failure is None:
            return
        if self.effect and failure is CallFailure.TIMEOUT:
            self.attempt.call_timed_out()
        self.attempt.failed(failure, f"{type(exc).__name__}: {exc}")

    def answered(self, status: int) -> None:
        _inside.reset(self.token)
        self.attempt.answered(str(status))
        if provider_failed(status):
            self.attempt.failed(CallFailure.STATUS, str(status))
        if self.first:
            self.attempt.at(Boundary.AFTER_RECEIPT)


def _wrap(
    original: Callable[..., Any],
    describe: Callable[..., tuple[str, str]],
    status: Callable[[Any], int],
    classify: Classify,
) -> Callable[..., Any]:
    @functools.wraps(original)
    def send(*args: Any, **kwargs: Any) -> Any:
        call = _observe(*describe(*args, **kwargs), classify)
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
    describe: Callable[..., tuple[str, str]],
    status: Callable[[Any], int],
    classify: Classify,
) -> Callable[..., Any]:
    @functools.wraps(original)
    async def send(*args: Any, **kwargs: Any) -> Any:
        call = _observe(*describe(*args, **kwargs), classify)
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

    def describe(transport: Any, request: httpx.Request, *_: Any, **__: Any) -> tuple[str, str]:
        return request.method, str(request.url)

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

    def describe(adapter: Any, request: requests.PreparedRequest, *_: Any, **__: Any) -> tuple[str, str]:
        return str(request.method), str(request.url)

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

    def describe(pool: HTTPConnectionPool, method: str, url: str, *_: Any, **__: Any) -> tuple[str, str]:
        if url.startswith("/"):
            port = f":{pool.port}" if pool.port else ""
            url = f"{pool.scheme}://{pool.host}{port}{url}"
        return method, url

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
