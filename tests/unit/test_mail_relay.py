"""A relayed message through the provider's boundaries (Service.relay_mail): held as an HTTP
effect is, passed on only if released, logged with its Message-ID and the server's reply."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from labcore.boundaries import Boundary
from labcore.destination import Destination
from labcore.events import Hit
from labcore.faults import Fault, Release
from labcore.scoped import Scope, ledger_secret, sign
from provider.contract import Contract
from provider.gate import Gate
from provider.holds import Holds
from provider.service import MAIL_ABANDONED, NO_MAIL_DESTINATION, Service
from provider.smtp import Mail, Reply
from provider.store import Store

DATA = b"Message-ID: <m-1@x.test>\r\nSubject: s\r\n\r\nbody\r\n"


class Releases(Holds):
    """Holds that release each boundary as told, and remember where they held."""

    def __init__(self, gate: Gate, at_before: Release) -> None:
        super().__init__(None, gate)
        self.release, self.held = at_before, list[Boundary]()

    def at(self, boundary: Boundary, hit: Hit | None) -> Release | None:
        self.held.append(boundary)
        return self.release if boundary is Boundary.BEFORE_EFFECT else Release.APPLY

    def done(self, boundary: Boundary, hit: Hit | None) -> None:
        pass


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store(tmp_path / "log.sqlite3")
    yield store
    store.close()


def relay(store: Store, release: Release, url: str = "smtp://127.0.0.1:2525") -> tuple[Reply, list[Mail], Releases]:
    gate = Gate()
    holds = Releases(gate, release)
    service = Service(store, holds, gate, None)
    store.put_ledger("l", Contract())  # as the lab puts a cell's ledger, its secret and its destination
    secret = ledger_secret(None, "l")
    store.put_scope_secret("l", secret)
    store.put_destination("l", Destination(url))
    hit = Hit("h1", "c", "op-1", 1, Boundary.BEFORE_EFFECT, Fault.KILL, 1, "w1").header()
    token = sign(Scope("l", "op-1", 1, hit), secret)
    sent: list[Mail] = []

    def deliver(destination: Destination, mail: Mail) -> Reply:
        sent.append(mail)
        return Reply(250, "2.0.0 queued")

    assert service.mail_scoped(token) and not service.mail_scoped(token + "x")
    mail = Mail(token, "c.example", "a@x.test", (), ("b@x.test",), DATA)
    reply = service.relay_mail(mail, deliver)
    assert gate._active == 0  # out of the gate once replied
    return reply, sent, holds


def forwards(tmp_path: Path) -> list[tuple[str, str, int]]:
    with sqlite3.connect(tmp_path / "log.sqlite3") as db:
        return list(db.execute("SELECT method, path, status FROM forwards"))


def test_a_released_message_is_passed_on_and_its_reply_held_after(store: Store, tmp_path: Path) -> None:
    reply, sent, holds = relay(store, Release.APPLY)
    assert reply == Reply(250, "2.0.0 queued") and len(sent) == 1
    assert holds.held == [Boundary.BEFORE_EFFECT, Boundary.AFTER_EFFECT]
    assert forwards(tmp_path) == [("DATA", "<m-1@x.test>", 250)]


def test_a_message_dropped_before_the_effect_never_reaches_the_server(store: Store, tmp_path: Path) -> None:
    reply, sent, _ = relay(store, Release.DROP)
    assert reply == MAIL_ABANDONED and sent == []
    assert forwards(tmp_path) == [("DATA", "<m-1@x.test>", 0)]


def test_a_run_whose_destination_is_http_relays_no_mail(store: Store, tmp_path: Path) -> None:
    reply, sent, _ = relay(store, Release.APPLY, "http://127.0.0.1:8080")
    assert reply == NO_MAIL_DESTINATION and sent == [] and forwards(tmp_path) == []
