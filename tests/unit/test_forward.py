"""The proxy's wire against a real HTTP server in a thread: a request goes on as it came,
and its answer comes back as it was given (provider.forward)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from labcore.destination import Destination
from provider.forward import DestinationDown, forward

seen: list[tuple[str, str, dict[str, str], bytes]] = []


class _Destination(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length)))
        self.send_response(299, "Odd But Fine")
        self.send_header("x-record", "r-1")
        self.send_header("content-length", "5")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(b"hello")

    do_GET = do_POST = do_HEAD = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def destination() -> Iterator[Destination]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Destination)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    seen.clear()
    yield Destination(f"http://127.0.0.1:{server.server_address[1]}/base/")
    server.shutdown()
    server.server_close()


def test_a_request_goes_on_as_sent_but_for_the_connection_and_host(destination: Destination) -> None:
    headers = {
        b"x-amz-target": b"AmazonSQS.SendMessage",
        b"host": b"lab:1",
        b"connection": b"keep-alive",
        b"transfer-encoding": b"chunked",
        b"content-length": b"999",
    }
    answer = forward(destination, "POST", "/q/1", "a=1&b=%20", headers, b'{"x": 1}')
    method, path, sent, body = seen[0]
    assert (method, path, body) == ("POST", "/base/q/1?a=1&b=%20", b'{"x": 1}')
    assert sent["x-amz-target"] == "AmazonSQS.SendMessage"
    assert sent["host"] == f"127.0.0.1:{destination.origin[2]}"
    assert sent["content-length"] == "8" and sent["connection"] == "close" and "transfer-encoding" not in sent
    assert (answer.status, answer.reason, answer.body) == (299, "Odd But Fine", b"hello")
    assert (b"x-record", b"r-1") in answer.headers
    wire = answer.encode(keep_alive=True, head_only=False)
    assert wire.startswith(b"HTTP/1.1 299 Odd But Fine\r\n") and wire.endswith(b"content-length: 5\r\n\r\nhello")


def test_a_heads_answer_keeps_the_length_it_would_have(destination: Destination) -> None:
    answer = forward(destination, "HEAD", "/", "", {}, b"")
    assert answer.body == b"" and answer.length == 5
    assert answer.encode(keep_alive=False, head_only=True).endswith(b"content-length: 5\r\nconnection: close\r\n\r\n")


def test_a_destination_that_is_not_there_raises() -> None:
    with pytest.raises(DestinationDown, match="ConnectionRefusedError"):
        forward(Destination("http://127.0.0.1:1"), "GET", "/", "", {}, b"")
