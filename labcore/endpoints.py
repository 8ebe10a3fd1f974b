"""How the lab's own processes address a provider on this host over a unix socket.

`http+unix://<percent-encoded socket path>`: the worker's client connects to
the socket and speaks plain HTTP on it; any other URL is TCP as before.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import quote, unquote

UNIX_SCHEME = "http+unix"
_PREFIX = f"{UNIX_SCHEME}://"


def unix_url(path: Path | str) -> str:
    return f"{_PREFIX}{quote(str(path), safe='')}"


def unix_path(url: str) -> str | None:
    """The socket path of a unix-socket URL; None for any other URL."""
    if not url.startswith(_PREFIX):
        return None
    netloc = url[len(_PREFIX) :].partition("/")[0]
    # Each work-horse asks once, in a fresh fork, where urllib's unquote is costly
    # (its first use builds its tables): a path whose only escapes are its
    # slashes (every path the lab makes) is read with a replace instead.
    plain = netloc.replace("%2F", "/")
    return plain if "%" not in plain else unquote(netloc)


def unix_socket(path: Path) -> socket.socket:
    """A unix socket bound at `path` that only its owner may connect to (not listening yet)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    os.chmod(path, 0o600)
    return sock
