"""`python -m provider`: how a run starts its provider (no CLI framework to import).

Users start one with `testbed provider`; both end in `provider.server.serve`,
and both refuse to listen beyond loopback without a token, say where they serve
and log each request on stdout (but a run's own provider, `--quiet`: the run
counts its requests from the log). The bus URL (it holds the Redis password) and
the bearer token come from the environment (TESTBED_BUS_URL,
TESTBED_PROVIDER_TOKEN): a command line is visible to every local user.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
from pathlib import Path

from labcore.collector import uncollected
from labcore.credentials import BUS_URL_ENV, TOKEN_ENV, is_loopback

PROG = "python -m provider"


def main() -> None:
    with uncollected():  # the server's imports (serve() builds its app the same way)
        from provider.server import serve

    parser = argparse.ArgumentParser(prog=PROG)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", type=int)
    # The lab binds the sockets and keeps them across the provider's restarts: a
    # connection made while a crashed provider is restarting waits in the socket's
    # backlog for the next one, instead of being refused (a fault nobody planned).
    where.add_argument("--fd", type=int, action="append", help="serve on this inherited listening socket")
    parser.add_argument("--mail-fd", type=int, help="relay SMTP on this inherited listening socket (provider.mail)")
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--bus-prefix")
    parser.add_argument("--parent-pid", type=int)
    parser.add_argument("--uds", type=Path, help="also serve on this unix socket (the run's own work-horses)")
    parser.add_argument("--quiet", action="store_true", help="no access log (a run's own provider)")
    args = parser.parse_args()
    bus_url, token = os.environ.get(BUS_URL_ENV) or None, os.environ.get(TOKEN_ENV, "").strip() or None
    if token is None and not is_loopback(args.host):
        parser.exit(2, f"{PROG}: error: refusing to serve on {args.host} without a token: set ${TOKEN_ENV}\n")
    if token is None:
        print(f"{PROG}: warning: no token (${TOKEN_ENV}): every local user can call this provider", file=sys.stderr)
    # The server stops on SIGINT/SIGTERM, then raises the signal again (provider.server).
    with contextlib.suppress(KeyboardInterrupt):
        sockets = [socket.socket(fileno=fd) for fd in args.fd or ()]
        port, host = args.port or 0, args.host
        serve(
            port,
            args.db,
            host,
            bus_url,
            args.bus_prefix,
            args.parent_pid,
            token,
            sockets=sockets,
            access_log=not args.quiet,
            uds=args.uds,
            announce=PROG,
            mail=None if args.mail_fd is None else socket.socket(fileno=args.mail_fd),
        )


if __name__ == "__main__":
    main()
