"""The lab's Redis clients: redis-py's own, naming themselves without reading the package's metadata.

Every new connection tells the server who it is (CLIENT SETINFO), and redis-py
takes the version it announces from the installed package's metadata:
`importlib.metadata` finds the distribution and parses its METADATA file again
for each connection, and the first in a process also imports the `email`
package's parser for it. The command line makes its first connection while the
run's provider and workers boot beside it, and every work-horse makes one in a
freshly forked process. redis-py's `__version__` says the same at no cost.

Imported only where a client is made: redis-py's own import waits until then
(testbed.infra.stack).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import redis

from labcore.bounds import PAUSE_BOUND

try:
    from redis import DriverInfo
except ImportError:  # a redis-py without it reads its version once, at import (a default argument)
    DriverInfo = None  # type: ignore[assignment, misc]

# What a connection that names itself is given (DriverInfo resolves what it is not).
_NAMING = frozenset({"driver_info", "lib_name", "lib_version"})


def name(settings: MutableMapping[str, Any]) -> None:
    """Name redis-py and its version in these connection settings (a pool's
    `connection_kwargs`, or `from_url`'s), unless they name their own."""
    if DriverInfo is not None and not _NAMING & settings.keys():
        settings["driver_info"] = DriverInfo(lib_version=redis.__version__)


def from_url(url: str, **settings: Any) -> redis.Redis:
    """`redis.Redis.from_url`, its connections named as `name` does, waiting up to
    PAUSE_BOUND for a reply unless the settings say otherwise: a paused Redis is waited
    out, where redis-py's own default (5 s) would fail the call. A Redis gone for good
    is seen at once, by a closed connection and by the run's watch on its process."""
    name(settings)
    settings.setdefault("socket_timeout", PAUSE_BOUND)
    return redis.Redis.from_url(url, **settings)


def waiting_url(url: str) -> str:
    """`url` asking for PAUSE_BOUND as its socket timeout, unless it names one: for the
    clients the lab does not make itself (rq's command line, which reads its URL)."""
    parts = urlsplit(url)
    if "socket_timeout" in parse_qs(parts.query):
        return url
    extra = urlencode({"socket_timeout": PAUSE_BOUND})
    return parts._replace(query=f"{parts.query}&{extra}" if parts.query else extra).geturl()
