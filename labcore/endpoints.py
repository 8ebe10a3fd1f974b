"""How the lab's own processes address a provider on this host over a unix socket.

`http+unix://<percent-encoded socket path>`: the worker's client connects to
the socket and speaks plain HTTP on it; any other URL is TCP as before.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

UNIX_SCHEME = "http+unix"


def unix_url(path: Path | str) -> str:
    return f"{UNIX_SCHEME}://{quote(str(path), safe='')}"


def unix_path(url: str) -> str | None:
    """The socket path of a unix-socket URL; None for any other URL."""
    parts = urlsplit(url)
    return unquote(parts.netloc) if parts.scheme == UNIX_SCHEME else None
