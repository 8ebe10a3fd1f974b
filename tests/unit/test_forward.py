"""The proxy's wire against a real HTTP server in a thread: a request goes on as it came,
and its answer comes back as it was given (provider.forward)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from labcore.destination import Destination
from provider.forward import DestinationDown, TooLarge, forward
from provider.wire import Fields

seen: list[tuple[str, str, list[tuple[str, str]], bytes]] = []
BIG = b"y" * 4096


class _Destination(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        lines = [(k.lower(), v) for k, v in self.headers.items()]
        seen.append((self.command, self.path, lines, self.rfile.read(length)))
        if self.path.endswith("/big"):
            self.send_response(200)
            self.send_header("content-length", str(len(BIG)))
            self.end_headers()
            self.wfile.write(BIG)
            return
        self.send_response(299, "Odd But Fine")
        self.send_header("x-record", "r-1")
        self.send_header("set-cookie", "a=1")
        self.send_header("set-cookie", "b=2")
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
    headers = [
        (b"x-amz-target", b"AmazonSQS.SendMessage"),
        (b"host", b"lab:1"),
        (b"connection", b"keep-alive"),
        (b"transfer-encoding", b"chunked"),
        (b"content-length", b"999"),
    ]
    answer = forward(destination, "POST", "/q/1", "a=1&b=%20", headers, b'{"x": 1}')
    method, path, lines, body = seen[0]
    sent = dict(lines)
    assert (method, path, body) == ("POST", "/base/q/1?a=1&b=%20", b'{"x": 1}')
    assert sent["x-amz-target"] == "AmazonSQS.SendMessage"
    assert sent["host"] == f"127.0.0.1:{destination.origin[2]}"
    assert sent["content-length"] == "8" and sent["connection"] == "close" and "transfer-encoding" not in sent
    assert (answer.status, answer.reason, answer.body) == (299, "Odd But Fine", b"hello")
    assert (b"x-record", b"r-1") in answer.headers
    wire = answer.encode(keep_alive=True, head_only=False)
    assert wire.startswith(b"HTTP/1.1 299 Odd But Fine\r\n") and wire.endswith(b"content-length: 5\r\n\r\nhello")


def test_repeated_headers_go_on_and_come_back_line_by_line(destination: Destination) -> None:
    """A field sent twice is two lines at the destination, in order; the answer's two Set-Cookie come back both."""
    fields = Fields([(b"accept", b"text/html"), (b"x-tag", b"1"), (b"accept", b"application/json")])
    answer = forward(destination, "GET", "/", "", fields.lines(), b"")
    sent = seen[0][2]
    assert [v for k, v in sent if k == "accept"] == ["text/html", "application/json"] and ("x-tag", "1") in sent
    assert [v for k, v in answer.headers if k == b"set-cookie"] == [b"a=1", b"b=2"]
    assert answer.encode(keep_alive=True, head_only=False).count(b"set-cookie: ") == 2


def test_an_answer_over_the_cap_is_not_passed_back_cut_short(
    destination: Destination, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("provider.forward.MAX_ANSWER", len(BIG) - 1)
    with pytest.raises(TooLarge, match="over 4095 bytes"):
        forward(destination, "GET", "/big", "", [], b"")
    monkeypatch.setattr("provider.forward.MAX_ANSWER", len(BIG))
    assert forward(destination, "GET", "/big", "", [], b"").body == BIG


def test_a_heads_answer_keeps_the_length_it_would_have(destination: Destination) -> None:
    answer = forward(destination, "HEAD", "/", "", [], b"")
    assert answer.body == b"" and answer.length == 5
    assert answer.encode(keep_alive=False, head_only=True).endswith(b"content-length: 5\r\nconnection: close\r\n\r\n")


def test_a_destination_that_is_not_there_raises() -> None:
    with pytest.raises(DestinationDown, match="ConnectionRefusedError"):
        forward(Destination("http://127.0.0.1:1"), "GET", "/", "", [], b"")
