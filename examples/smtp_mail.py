"""E-mail under the kills: a job sends an op's notice over SMTP with the standard library's
smtplib, through the lab's relay, to maildev (npm; `npm ci` at the project's root), a
mailbox that lists what it received over HTTP.

The job's code is what it is in production but for its server: TESTBED_DESTINATION_URL
is `smtp://USER:PASSWORD@host:port`, the lab's relay, and the job logs in with it as it
would to its provider's relay (the password names the attempt to the lab).

- `naive` gives each message a fresh Message-ID (`email.utils.make_msgid`), as most
  senders do: a retry's copy is a new message to anyone who reads the mailbox;
- `keyed` derives the Message-ID from the op's id: a retry's copy is the same message
  again, which a reader can tell and drop.

Neither is exactly-once: an SMTP server does not deduplicate by Message-ID, so a retry
after the server took the message (`after-effect`) delivers a second copy either way.
Both put the op's id in a header, `X-Op-Id`, which is how the readers find each op's
messages:

- `effects`: the copies the mailbox holds, by maildev's id of each (the destination's
  own records: a copy is a message someone receives);
- `messages`: the distinct Message-IDs among them (what a reader that drops a
  Message-ID it has already seen is left with).

maildev's HTTP API is at MAILDEV_URL (default http://127.0.0.1:1080), beside its SMTP port.
"""

from __future__ import annotations

import hashlib
import json
import os
import smtplib
import urllib.request
from email.message import EmailMessage
from email.utils import make_msgid
from typing import Any
from urllib.parse import urlsplit

OP_HEADER = "X-Op-Id"
DOMAIN = "testbed.example"
TIMEOUT = 10.0


def naive(op_id: str, payload: dict[str, Any]) -> str:
    return _send(op_id, payload, make_msgid(domain=DOMAIN))


def keyed(op_id: str, payload: dict[str, Any]) -> str:
    return _send(op_id, payload, keyed_message_id(op_id))


def keyed_message_id(op_id: str) -> str:
    """The op's own Message-ID: the same for every attempt (RFC 5322's msg-id: no ':' in it)."""
    return f"<{hashlib.sha256(op_id.encode()).hexdigest()[:32]}@{DOMAIN}>"


def _send(op_id: str, payload: dict[str, Any], message_id: str) -> str:
    server = urlsplit(os.environ["TESTBED_DESTINATION_URL"])
    message = EmailMessage()
    message["From"] = "notices@testbed.example"
    message["To"] = f"{payload.get('tenant', 'tenant')}@testbed.example"
    message["Subject"] = f"Notice {payload.get('sequence', '')}"
    message["Message-ID"] = message_id
    message[OP_HEADER] = op_id
    message.set_content(json.dumps(payload, sort_keys=True))
    with smtplib.SMTP(server.hostname or "", server.port or 25, timeout=TIMEOUT) as client:
        client.login(server.username or "", server.password or "")
        client.send_message(message)
    return message_id


def _inbox() -> list[dict[str, Any]]:
    url = os.environ.get("MAILDEV_URL", "http://127.0.0.1:1080").rstrip("/")
    with urllib.request.urlopen(f"{url}/api/email", timeout=30) as answer:  # the whole inbox, in order
        listed: list[dict[str, Any]] = json.load(answer)
    return listed


def _by_op(op_ids: list[str], record: str) -> dict[str, list[str]]:
    wanted, held = set(op_ids), {}
    for mail in _inbox():
        headers = mail.get("headers", {})
        op = headers.get(OP_HEADER.lower())
        if op in wanted:
            held.setdefault(op, []).append(str(mail["id"] if record == "id" else headers.get("message-id", "")))
    return held


def effects(destination_url: str, op_ids: list[str]) -> dict[str, list[str]]:
    """Each op's copies in the mailbox, by maildev's id of each."""
    return _by_op(op_ids, "id")


def messages(destination_url: str, op_ids: list[str]) -> dict[str, list[str]]:
    """Each op's distinct Message-IDs in the mailbox."""
    return {op: sorted(set(ids)) for op, ids in _by_op(op_ids, "message-id").items()}
