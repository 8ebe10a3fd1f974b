"""Which of a job's requests to its destination are effects: the rules, spelled and matched (pure)."""

from __future__ import annotations

import pytest

from labcore.boundaries import Boundary
from labcore.destination import (
    BadDestination,
    Destination,
    Effects,
    Rule,
    is_mail_url,
    mail_refused,
    parse_rule,
    parse_url,
)

SQS_SEND = {b"x-amz-target": b"AmazonSQS.SendMessage", b"content-type": b"application/x-amz-json-1.0"}
FORM = {b"content-type": b"application/x-www-form-urlencoded; charset=utf-8"}


def test_by_default_the_writing_methods_are_effects() -> None:
    effects = Effects()
    assert [m for m in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE") if effects.of(m, "/", "", {}, b"")] == [
        "POST",
        "PUT",
        "PATCH",
        "DELETE",
    ]


def test_a_header_rule_takes_sqs_sends_and_not_its_lookups() -> None:
    effects = Effects.parse(["X-Amz-Target: AmazonSQS.SendMessage"])
    assert effects.of("POST", "/", "", SQS_SEND, b"{}")
    lookup = {**SQS_SEND, b"x-amz-target": b"AmazonSQS.GetQueueUrl"}
    assert not effects.of("POST", "/", "", lookup, b"{}")
    assert not effects.of("POST", "/", "", {}, b"{}")


def test_a_form_field_rule_reads_the_body_of_a_form_and_the_query() -> None:
    effects = Effects.parse(["Action=SendMessage"])
    assert effects.of("POST", "/", "", FORM, b"Action=SendMessage&QueueUrl=q")
    assert not effects.of("POST", "/", "", FORM, b"Action=GetQueueUrl")
    assert not effects.of("POST", "/", "", {b"content-type": b"application/json"}, b"Action=SendMessage")
    assert effects.of("GET", "/", "Action=SendMessage", {}, b"")


def test_a_method_and_path_rule() -> None:
    effects = Effects.parse(["POST /v1/payment_intents*"])
    assert effects.of("POST", "/v1/payment_intents", "", {}, b"")
    assert effects.of("POST", "/v1/payment_intents/pi_1/confirm", "", {}, b"")
    assert not effects.of("GET", "/v1/payment_intents", "", {}, b"")
    assert not effects.of("POST", "/v1/customers", "", {}, b"")


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("POST", Rule(method="POST")),
        ("DELETE /items/*", Rule(method="DELETE", path="/items/*")),
        ("X-Amz-Target: AmazonSQS.SendMessage", Rule(header="x-amz-target", value="AmazonSQS.SendMessage")),
        ("Action=SendMessage", Rule(field="Action", value="SendMessage")),
    ],
)
def test_each_rule_is_read_as_it_is_spelled(text: str, rule: Rule) -> None:
    assert parse_rule(text) == rule
    assert parse_rule(rule.spelled()) == rule


@pytest.mark.parametrize("text", ["", "post", "POST items", "two words: x y z=", "GET  no-slash"])
def test_a_rule_that_is_none_of_them_is_refused(text: str) -> None:
    with pytest.raises(BadDestination, match="must be a METHOD"):
        parse_rule(text)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://host/",
        "http://",
        "http://host/?q=1",
        "http://user:pw@host/",
        "http://host:99999/",
        "x" * 2001,
        "smtp://host:25/mail",
        "smtp://user:pw@host:25",
    ],
)
def test_a_destination_url_must_be_plain_http_or_smtp(url: str) -> None:
    with pytest.raises(BadDestination):
        parse_url(url)


def test_a_destination_is_reached_at_its_origin_under_its_path() -> None:
    d = Destination(parse_url("https://sandbox.example:8443/api/"))
    assert d.origin == ("https", "sandbox.example", 8443)
    assert d.base_path == "/api"
    assert Destination("http://127.0.0.1").origin == ("http", "127.0.0.1", 80)
    assert d.to_json() == {"url": "https://sandbox.example:8443/api/", "effects": ["DELETE", "PATCH", "POST", "PUT"]}
    assert not d.is_mail


def test_an_smtp_destination_is_mail_at_its_host_and_port() -> None:
    assert Destination(parse_url("smtp://127.0.0.1:2525")).origin == ("smtp", "127.0.0.1", 2525)
    assert Destination(parse_url("smtp://mail.example")).origin == ("smtp", "mail.example", 25)
    assert Destination("smtp://mail.example").is_mail


def test_an_smtp_destination_refuses_the_job_clients_boundaries_only() -> None:
    assert is_mail_url("smtp://127.0.0.1:2525") and not is_mail_url("http://127.0.0.1:2525") and not is_mail_url(None)
    assert mail_refused([None, Boundary.BEFORE_EFFECT, Boundary.AFTER_EFFECT, Boundary.JOB_START]) is None
    refused = mail_refused([Boundary.AFTER_RECEIPT, Boundary.BEFORE_REQUEST])
    assert refused is not None and refused.startswith("before-request and after-receipt at an smtp:// destination")


def test_the_mail_refusal_reads_a_generator_of_boundaries_once() -> None:
    refused = mail_refused(b for b in [Boundary.JOB_START, Boundary.AFTER_RECEIPT])
    assert refused is not None and refused.startswith("after-receipt at an smtp:// destination")
