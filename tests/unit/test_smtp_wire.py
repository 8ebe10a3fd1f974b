"""The SMTP relay's wire (provider.smtp): a client's session, bytes in, replies and whole
messages out, with no socket."""

from __future__ import annotations

import base64

import pytest

from provider.smtp import MAX_LINE, Mail, Reply, Session

TOKEN = "claims.mac"


def plain(password: str, user: str = "testbed") -> str:
    return base64.b64encode(f"\0{user}\0{password}".encode()).decode()


def session() -> Session:
    return Session(lambda password: password == TOKEN)


def codes(items: list[bytes | Mail]) -> list[int]:
    return [int(item[:3]) for item in items if isinstance(item, bytes)]


def logged_in() -> Session:
    s = session()
    assert codes(s.feed(b"EHLO client.example\r\n")) == [250]
    assert codes(s.feed(f"AUTH PLAIN {plain(TOKEN)}\r\n".encode())) == [235]
    return s


def test_a_message_comes_out_whole_at_the_end_of_its_data_unstuffed() -> None:
    s = logged_in()
    s.feed(b"MAIL FROM:<a@x.test> SIZE=40\r\nRCPT TO:<b@x.test>\r\nRCPT TO:<c@x.test>\r\n")
    assert codes(s.feed(b"DATA\r\n")) == [354]
    out = s.feed(b"Message-ID: <m-1@x.test>\r\nSubject: hi\r\n\r\n..a dot\r\nlast\r\n.\r\nNOOP\r\n")
    assert len(out) == 1 and isinstance(out[0], Mail)  # nothing after it is read until its reply
    mail = out[0]
    assert (mail.credential, mail.helo, mail.sender) == (TOKEN, "client.example", "a@x.test")
    assert mail.options == ("SIZE=40",) and mail.recipients == ("b@x.test", "c@x.test")
    assert mail.data == b"Message-ID: <m-1@x.test>\r\nSubject: hi\r\n\r\n.a dot\r\nlast\r\n"
    assert mail.message_id == "<m-1@x.test>"
    after = s.relayed(Reply(250, "2.0.0 queued as X"))
    assert after[0] == b"250 2.0.0 queued as X\r\n" and codes(after) == [250, 250]  # then the NOOP's


def test_mail_before_auth_is_refused_and_a_token_not_signed_is_not_taken() -> None:
    s = session()
    s.feed(b"EHLO c\r\n")
    assert codes(s.feed(b"MAIL FROM:<a@x.test>\r\n")) == [530]
    assert codes(s.feed(f"AUTH PLAIN {plain('forged')}\r\n".encode())) == [535]
    assert codes(s.feed(b"MAIL FROM:<a@x.test>\r\n")) == [530]
    assert codes(s.feed(b"AUTH LOGIN\r\n")) == [504]


def test_auth_plain_may_come_on_the_next_line() -> None:
    s = session()
    s.feed(b"EHLO c\r\n")
    assert s.feed(b"AUTH PLAIN\r\n") == [b"334 \r\n"]
    assert codes(s.feed(f"{plain(TOKEN)}\r\n".encode())) == [235]
    assert codes(s.feed(b"AUTH PLAIN\r\n")) == [503]  # once only


def test_commands_out_of_order_and_unknown_ones_change_nothing() -> None:
    s = logged_in()
    assert codes(s.feed(b"DATA\r\nRCPT TO:<b@x.test>\r\nFROB\r\nMAIL FROM:a@x.test\r\n")) == [503, 503, 500, 501]
    assert codes(s.feed(b"MAIL FROM:<a@x.test>\r\nRSET\r\nDATA\r\n")) == [250, 250, 503]


def test_a_line_over_the_limit_is_refused_and_a_message_over_its_size_never_comes_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = logged_in()
    assert codes(s.feed(b"NOOP " + b"x" * MAX_LINE + b"\r\n")) == [500]
    monkeypatch.setattr("provider.smtp.MAX_MESSAGE", 10)
    s.feed(b"MAIL FROM:<a@x.test>\r\nRCPT TO:<b@x.test>\r\nDATA\r\n")
    out = s.feed(b"0123456789abcdef\r\n.\r\n")
    assert codes(out) == [552] and not any(isinstance(item, Mail) for item in out)
    s.feed(b"MAIL FROM:<a@x.test>\r\nRCPT TO:<b@x.test>\r\nDATA\r\n")
    assert s.feed(b"x" * 11) == [] and s._buffer == b""  # a line with no end is not kept past the size
    assert codes(s.feed(b"\r\n.\r\n")) == [552]


def test_input_split_anywhere_is_read_the_same() -> None:
    s = logged_in()
    wire = b"MAIL FROM:<a@x.test>\r\nRCPT TO:<b@x.test>\r\nDATA\r\nSubject: s\r\n\r\nbody\r\n.\r\n"
    out: list[bytes | Mail] = []
    for i in range(len(wire)):
        out += s.feed(wire[i : i + 1])
    assert codes(out) == [250, 250, 354] and isinstance(out[-1], Mail) and out[-1].data == b"Subject: s\r\n\r\nbody\r\n"


def test_quit_closes_and_a_reply_of_many_lines_is_continued() -> None:
    s = session()
    assert s.feed(b"QUIT\r\n") == [b"221 2.0.0 Bye\r\n"] and s.closed
    assert Reply(250, "a\nb").encode() == b"250-a\r\n250 b\r\n"
