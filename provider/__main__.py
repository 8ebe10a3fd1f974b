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
import sys
from pathlib import Path

from labcore.collector import uncollected
from labcore.credentials import BUS_URL_ENV, TOKEN_ENV, is_loopback

PROG = "python -m provider"


def main() -> None:
    with uncollected():  # the server's imports (serve() builds its app the same way)
        from provider.server import serve

    parser = argparse.ArgumentParser(prog=PROG)
    parser.add_argument("--port", type=int, required=True)
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
        serve(
            args.port,
            args.db,
            args.host,
            bus_url,
            args.bus_prefix,
            args.parent_pid,
            token,
            access_log=not args.quiet,
            uds=args.uds,
            announce=PROG,
        )


if __name__ == "__main__":
    main()
