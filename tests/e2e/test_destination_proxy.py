"""The provider's proxy over real sockets: a provider process, a destination in a thread, and
a job's request through `/d/{token}/...` as an SDK would send it: a repeated header, an
upload over the provider's own body cap, one past the proxy's, and an answer's Set-Cookie."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from labcore.scoped import Scope, sign
from provider.wire import MAX_BODY, MAX_FORWARDED_BODY
from tests.support.standalone import Standalone

pytestmark = pytest.mark.e2e

SECRET = "s" * 32
UPLOAD = 8 * 1024 * 1024  # one part of boto3's S3 upload: over MAX_BODY, under the proxy's cap
received: list[tuple[str, str, list[tuple[str, str]], int]] = []  # method, path, headers, body's length


class _Destination(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length)
        received.append((self.command, self.path, [(k.lower(), v) for k, v in self.headers.items()], len(body)))
        self.send_response(200)
        self.send_header("set-cookie", "a=1")
        self.send_header("set-cookie", "b=2")
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    do_GET = do_PUT = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def destination() -> Iterator[str]:
    """The destination's URL: a server in a thread of the test."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Destination)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    received.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxied(tmp_path: Path, destination: str) -> Iterator[tuple[Standalone, str]]:
    """A provider whose ledger `l` has the destination; the base URL an attempt of it is given."""
    provider = Standalone(tmp_path / "log.sqlite3").start()
    try:
        with provider.client() as admin:
            assert admin.put("/ledgers/l", json={}).status_code == 200
            assert admin.put("/ledgers/l/scope", json={"secret": SECRET}).status_code == 200
            assert admin.put("/ledgers/l/destination", json={"url": destination}).status_code == 200
        yield provider, f"{provider.url}/d/{sign(Scope('l', 'op-1', 1), SECRET)}"
    finally:
        provider.stop()


def test_a_repeated_header_reaches_the_destination_whole_and_its_set_cookies_come_back(
    proxied: tuple[Standalone, str],
) -> None:
    _, base = proxied
    with httpx.Client(trust_env=False, timeout=30) as job:
        answer = job.get(f"{base}/items", headers=[("X-Tag", "one"), ("X-Tag", "two"), ("Accept", "*/*")])
    assert answer.status_code == 200 and answer.headers.get_list("set-cookie") == ["a=1", "b=2"]
    ((_, _, headers, _),) = received
    assert [v for k, v in headers if k == "x-tag"] == ["one", "two"]


def test_an_upload_goes_on_whole_and_one_past_the_proxys_cap_is_the_labs_failure(
    proxied: tuple[Standalone, str],
) -> None:
    provider, base = proxied
    assert UPLOAD > MAX_BODY
    with httpx.Client(trust_env=False, timeout=60) as job:
        assert job.put(f"{base}/bucket/key", content=b"x" * UPLOAD).status_code == 200
        assert (received[-1][0], received[-1][3]) == ("PUT", UPLOAD)
        refused = job.put(f"{base}/bucket/key", content=b"x" * (MAX_FORWARDED_BODY + 1))
    assert refused.status_code == 413 and str(MAX_FORWARDED_BODY) in refused.json()["error"]
    assert len(received) == 1  # the destination never saw it
    with provider.client() as admin:
        health = admin.get("/health").json()
    assert health["failures"] == 1 and "does not pass on" in health["failure"]
