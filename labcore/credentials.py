"""The run's credentials and how its processes receive them.

Secrets travel in the environment of the processes the lab starts, never on
a command line: any local user can read every process's argv (`ps`), while a
process's environment is readable only by its own user.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from urllib.parse import urlsplit

# The provider's bearer token: the provider requires it, the lab's admin client and the workers send it.
TOKEN_ENV = "TESTBED_PROVIDER_TOKEN"
# The Redis URL (password included) of the provider's chaos bus.
BUS_URL_ENV = "TESTBED_BUS_URL"
# `rq worker --url` reads this one itself.
RQ_URL_ENV = "RQ_REDIS_URL"


def new_secret() -> str:
    """256 random bits, URL- and header-safe."""
    return secrets.token_hex(32)


def bearer(token: str | None) -> dict[str, str]:
    """The header that authenticates a request (none without a token)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def matches(presented: str | None, token: str) -> bool:
    """Compare in constant time, so the answer's timing says nothing about the token."""
    expected = f"Bearer {token}".encode()
    return presented is not None and hmac.compare_digest(presented.encode("latin-1", "replace"), expected)


def redacted(url: str) -> str:
    """A URL fit for a message: its password replaced."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    user = parts.username or ""
    return parts._replace(netloc=parts.netloc.replace(f"{user}:{parts.password}@", f"{user}:***@", 1)).geturl()


def is_loopback(host: str) -> bool:
    """Whether an address to bind is reachable from this host only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name that may resolve anywhere
