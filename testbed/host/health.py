"""`python -m testbed.host.health`: exit 0 when a host daemon of this machine is registered
and beating (a container's health check; compose.yaml's lab waits for it)."""

from __future__ import annotations

import os
import socket
import sys

import redis

from labcore import connections
from labcore import hosts as proto


def main() -> int:
    client = connections.from_url(os.environ["REDIS_URL"], socket_connect_timeout=2, socket_timeout=2)
    try:
        for key in client.scan_iter(match=proto.LIVE_PATTERN, count=100):
            raw = client.get(key)
            if raw is not None and proto.decode(proto.Registration, raw).hostname == socket.gethostname():
                return 0
    except (redis.RedisError, ValueError):
        pass
    return 1


if __name__ == "__main__":
    sys.exit(main())
