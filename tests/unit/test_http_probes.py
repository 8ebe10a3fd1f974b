"""The boundaries inside users' HTTP clients: httpx (sync and async), requests and urllib3,
each sending real requests to a real server on loopback."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import requests
import urllib3

from testbed import boundary
from workers import http_probes, scope


class _Provider(BaseHTTPRequestHandler):
    def _answer(self, status: int, body: dict[str, object]) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if "/slow" in self.path:
            time.sleep(0.5)
        if "/broken" in self.path:
            self._answer(503, {"error": "the provider failed"})
            return
        self._answer(201, {"id": "eff_1"})

    do_PUT = do_POST

    def do_GET(self) -> None:
        self._answer(404, {"found": False})

    def log_message(self, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        # A client that timed out on /slow has gone when its answer is written: that is the test.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    http_probes.install()
    httpd = _Server(("127.0.0.1", 0), _Provider)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def seen(server: str) -> Iterator[tuple[str, list[str]]]:
    events: list[str] = []
    attempt = scope.Attempt(
        f"{server}/s/token",
        reach=lambda b: events.append(b.value),
        timed_out=lambda: events.append("timed out"),
        answered=lambda status: events.append(f"answer {status}"),
        failed=lambda failure, _: events.append(f"failed {failure}"),
    )
    with scope.running(attempt):
        yield attempt.base, events


def _httpx(method: str, url: str, timeout: float) -> None:
    with httpx.Client(timeout=timeout) as client:
        client.request(method, url, json={"a": 1})


def _httpx_async(method: str, url: str, timeout: float) -> None:
    async def call() -> None:
        async with httpx.AsyncClient(timeout=timeout) as client:
            await client.request(method, url, json={"a": 1})

    asyncio.run(call())


def _requests(method: str, url: str, timeout: float) -> None:
    requests.request(method, url, json={"a": 1}, timeout=timeout)


def _urllib3(method: str, url: str, timeout: float) -> None:
    urllib3.request(method, url, json={"a": 1}, timeout=timeout, retries=False)


CLIENTS: dict[str, Callable[[str, str, float], None]] = {
    "httpx": _httpx,
    "httpx-async": _httpx_async,
    "requests": _requests,
    "urllib3": _urllib3,
}
TIMEOUTS: dict[str, type[Exception]] = {"httpx": httpx.TimeoutException, "httpx-async": httpx.TimeoutException}
TIMEOUTS |= {"requests": requests.Timeout, "urllib3": urllib3.exceptions.TimeoutError}


@pytest.mark.parametrize("client", CLIENTS)
def test_the_first_effect_call_passes_both_boundaries(seen: tuple[str, list[str]], client: str) -> None:
    base, events = seen
    call = CLIENTS[client]
    call("GET", f"{base}/effects", 2.0)  # a lookup: answered, not an effect
    call("POST", f"{base}/api/charges", 2.0)
    call("PUT", f"{base}/api/charges/1", 2.0)  # not the first effect call
    assert events == ["answer 404", "before-request", "answer 201", "after-receipt", "answer 201"]


@pytest.mark.parametrize("client", CLIENTS)
def test_calls_elsewhere_pass_untouched(seen: tuple[str, list[str]], server: str, client: str) -> None:
    _, events = seen
    CLIENTS[client]("POST", f"{server}/api/charges", 2.0)  # the provider, but not this attempt's scope
    assert events == []


@pytest.mark.parametrize("client", CLIENTS)
def test_a_timed_out_effect_call_is_reported_at_once(seen: tuple[str, list[str]], client: str) -> None:
    base, events = seen
    with pytest.raises(TIMEOUTS[client]):
        CLIENTS[client]("POST", f"{base}/api/slow", 0.1)
    assert events == ["before-request", "timed out", "failed timeout"]


@pytest.mark.parametrize("client", CLIENTS)
def test_a_5xx_from_the_provider_is_a_failed_call(seen: tuple[str, list[str]], client: str) -> None:
    base, events = seen
    CLIENTS[client]("POST", f"{base}/api/broken", 2.0)
    assert events == ["before-request", "answer 503", "failed status", "after-receipt"]


@pytest.mark.parametrize("client", CLIENTS)
def test_a_refused_connect_is_a_failed_call_not_a_timeout(client: str) -> None:
    events: list[str] = []
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        base = f"http://127.0.0.1:{unused.getsockname()[1]}/s/token"  # bound, not listening: refused
        attempt = scope.Attempt(
            base, lambda b: None, lambda: events.append("timed out"), lambda _: None, lambda f, _: events.append(f)
        )
        with scope.running(attempt), pytest.raises(Exception):  # noqa: B017  (each library's own)
            CLIENTS[client]("POST", f"{base}/api/charges", 2.0)
    assert events == ["connection"]


def test_outside_an_attempt_nothing_is_observed(server: str) -> None:
    assert requests.post(f"{server}/s/token/api/charges", json={}, timeout=2).status_code == 201
    boundary("before-request")  # a no-op outside the lab


def test_the_users_own_boundary_counts_once_per_attempt(seen: tuple[str, list[str]]) -> None:
    base, events = seen
    boundary("before-request")
    requests.post(f"{base}/api/charges", json={}, timeout=2)
    boundary("after-receipt")
    assert events == ["before-request", "answer 201", "after-receipt"]


@pytest.mark.parametrize(("name", "message"), [("middle", "unknown boundary"), ("after-effect", "in the provider")])
def test_boundary_names_are_checked(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        boundary(name)
