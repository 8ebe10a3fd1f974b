"""The boundaries inside users' HTTP clients: httpx (sync and async), requests and urllib3,
each sending real requests to a real server on loopback; and the same for a job's own SDK
(boto3, stripe) calling its real destination through the lab, by the destination's rules."""

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

from labcore.destination import Effects
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
        if self.headers.get("X-Amz-Target") == "AmazonSQS.SendMessage":
            self._answer(200, {"MessageId": "m-1"})
            return
        if "/v1/payment_intents" in self.path:
            self._answer(200, {"id": "pi_1", "object": "payment_intent"})
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


def _recording(server: str, events: list[str], destination: scope.Proxied | None = None) -> scope.Attempt:
    """An attempt that notes what it reports in `events`."""
    return scope.Attempt(
        f"{server}/s/token",
        reach=lambda b: events.append(b.value),
        timed_out=lambda: events.append("timed out"),
        answered=lambda status: events.append(f"answer {status}"),
        failed=lambda failure, _: events.append(f"failed {failure}"),
        destination=destination,
    )


@pytest.fixture
def seen(server: str) -> Iterator[tuple[str, list[str]]]:
    events: list[str] = []
    with scope.running(_recording(server, events)) as attempt:
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


SQS_SEND = "X-Amz-Target: AmazonSQS.SendMessage"


@pytest.fixture
def destined(server: str) -> Iterator[tuple[str, list[str]]]:
    """An attempt of a run with a real destination: its base URL there, and what it reported."""
    events: list[str] = []
    effects = Effects.parse([SQS_SEND, "POST /v1/payment_intents*", "Action=SendMessage"])
    with scope.running(_recording(server, events, scope.Proxied(f"{server}/d/token", effects))):
        yield f"{server}/d/token", events


def _form(method: str, url: str, timeout: float) -> None:
    """A form body with an effect's field, as an SDK on the query protocol sends it."""
    with httpx.Client(timeout=timeout) as client:
        client.request(method, url, data={"Action": "SendMessage", "QueueUrl": "q"})


@pytest.mark.parametrize("client", CLIENTS)
def test_at_a_destination_only_an_effect_by_its_rules_passes_the_boundaries(
    destined: tuple[str, list[str]], client: str
) -> None:
    base, events = destined
    call = CLIENTS[client]
    call("POST", f"{base}/", 2.0)  # a POST, but no rule's: a read (GetQueueUrl's kind)
    call("GET", f"{base}/v1/payment_intents", 2.0)  # a listing: a read
    assert events == []
    call("POST", f"{base}/v1/payment_intents", 2.0)
    call("POST", f"{base}/v1/payment_intents", 2.0)  # the attempt's second effect: no boundary again
    # Nothing else of a destination's call is reported: the proxy logs each, and its answers are its own.
    assert events == ["before-request", "after-receipt"]


def test_at_a_destination_a_form_fields_rule_reads_the_body(destined: tuple[str, list[str]]) -> None:
    base, events = destined
    _form("POST", f"{base}/", 2.0)
    assert events == ["before-request", "after-receipt"]


def test_at_a_destination_a_5xx_or_a_timeout_is_not_the_labs_failure(destined: tuple[str, list[str]]) -> None:
    base, events = destined
    with pytest.raises(httpx.TimeoutException), httpx.Client(timeout=0.1) as client:
        client.post(f"{base}/v1/payment_intents/slow")
    requests.post(f"{base}/v1/payment_intents/broken", timeout=2)
    assert events == ["before-request"]  # the first effect never had its answer: no after-receipt


def test_boto3_passes_the_boundaries_at_its_send_message_only(destined: tuple[str, list[str]]) -> None:
    from examples.sqs_fifo import client  # boto3's, as the worked example makes it

    base, events = destined
    sqs = client(base)
    sqs.get_queue_url(QueueName="q.fifo")  # a POST the rules do not name (the server answers it 201)
    assert events == []
    sent = sqs.send_message(QueueUrl=f"{base}/1/q.fifo", MessageBody="b", MessageGroupId="g")
    assert sent["MessageId"] == "m-1" and events == ["before-request", "after-receipt"]


def test_the_stripe_sdk_passes_the_boundaries_at_its_create(destined: tuple[str, list[str]]) -> None:
    import stripe

    base, events = destined
    client = stripe.StripeClient("sk_test_testbed", base_addresses={"api": base}, max_network_retries=0)
    made = client.v1.payment_intents.create(params={"amount": 1000, "currency": "usd"})
    assert made.id == "pi_1" and events == ["before-request", "after-receipt"]


def test_a_destinations_request_is_an_effect_as_the_provider_sees_it() -> None:
    to = scope.Proxied("http://lab/d/tok", Effects.parse(["POST /v1/*", "Action=SendMessage"]))
    assert to.is_call("http://lab/d/tok") and to.is_call("http://lab/d/tok/v1") and to.is_call("http://lab/d/tok?a")
    assert not to.is_call("http://lab/d/tokX/v1") and not to.is_call("http://lab/s/tok/api/x")
    assert to.is_effect("post", "http://lab/d/tok/v1/charges?expand=x", {}, b"")  # the path after the base
    assert not to.is_effect("POST", "http://lab/d/tok/v2/charges", {}, b"")
    assert to.is_effect("GET", "http://lab/d/tok?Action=SendMessage", {}, b"")  # the query, the base itself
