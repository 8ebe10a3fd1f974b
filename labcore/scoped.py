"""Scoped base URLs: how a user's job reaches the provider with any HTTP client.

Each attempt of a user's job gets its own base URL, `{provider}/s/{token}`,
in `TESTBED_PROVIDER_URL`. The token names the cell's ledger, the op (the
provider's reference for it), the attempt, and the fault armed on the
provider's side of that attempt, if any. It is signed (HMAC-SHA256) with the
ledger's secret, which the lab registers with the provider. That secret is
derived from the provider's token (`ledger_secret`), which the workers already
hold in their environment: it is never in a job's arguments, which every client
of the run's Redis can read (with it, one could sign URLs and forge effects).

So any client, even plain urllib, is attributed to its op and carries its
armed fault without a header, and the URL is a capability for that one
attempt: it cannot name another op or ledger, nor reach any other route.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass

# The environment variable a user's job finds its base URL in.
PROVIDER_ENV = "TESTBED_PROVIDER_URL"
ROOT = "/s"
# The same attempt's base URL for a real destination behind the lab (labcore.destination):
# what is sent under it is forwarded there, attributed by the same token.
DESTINATION_ENV = "TESTBED_DESTINATION_URL"
DESTINATION_ROOT = "/d"
# An SMTP destination's: the user name a job's mail client logs in to the lab's relay with, its
# password the token (provider.smtp); the relay takes any user name, the token says who it is.
MAIL_USER = "testbed"
# What the provider takes as an effect, under `{base}/api/`.
EFFECT_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_MAC_BYTES = 16


class BadScope(ValueError):
    """A token that is malformed or not signed by the ledger's secret."""


@dataclass(frozen=True, slots=True)
class Scope:
    ledger: str
    reference: str  # the op, as the provider's log knows it
    attempt: int
    hit: str | None = None  # the armed provider-side hit, as `Hit.header()`


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(secret: str, claims: str) -> str:
    return _b64(hmac.new(secret.encode(), claims.encode(), hashlib.sha256).digest()[:_MAC_BYTES])


def ledger_secret(token: str | None, ledger: str) -> str:
    """The secret a ledger's scoped URLs are signed with: one-way from the provider's token,
    so that the lab and every work-horse (across hosts too) compute it and none sends it.
    Without a token the provider takes every client anyway, and so may the secret be known."""
    return hmac.new((token or "").encode(), f"scope:{ledger}".encode(), hashlib.sha256).hexdigest()


def sign(scope: Scope, secret: str) -> str:
    claims = _b64(json.dumps([scope.ledger, scope.reference, scope.attempt, scope.hit], separators=(",", ":")).encode())
    return f"{claims}.{_mac(secret, claims)}"


def read(token: str) -> Scope:
    """The claims, unverified: the ledger tells the provider which secret to check them with."""
    try:
        claims, _, _ = token.partition(".")
        ledger, reference, attempt, hit = json.loads(_unb64(claims))
        return Scope(str(ledger), str(reference), int(attempt), None if hit is None else str(hit))
    except (ValueError, TypeError) as exc:
        raise BadScope("malformed scope") from exc


def verify(token: str, secret: str) -> Scope:
    scope = read(token)
    claims, _, mac = token.partition(".")
    if not hmac.compare_digest(mac, _mac(secret, claims)):
        raise BadScope("scope not signed for this ledger")
    return scope


def base_url(provider: str, token: str, root: str = ROOT) -> str:
    return f"{provider.rstrip('/')}{root}/{token}"


def user_op_id(ledger: str, reference: str) -> str:
    """The op's identity as a user's job is given it: the same for every attempt,
    unique across cells and runs (the ledger is `<run-id>.<cell>`)."""
    return f"{ledger}:{reference}"
