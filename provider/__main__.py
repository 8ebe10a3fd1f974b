"""`python -m provider`: how a run starts its provider (no CLI framework to import).

Users start one with `testbed provider`; both end in `provider.server.serve`.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from provider.server import serve


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m provider")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--bus-url")
    parser.add_argument("--bus-prefix")
    parser.add_argument("--parent-pid", type=int)
    args = parser.parse_args()
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal.
    with contextlib.suppress(KeyboardInterrupt):
        serve(args.port, args.db, args.host, args.bus_url, args.bus_prefix, args.parent_pid)


if __name__ == "__main__":
    main()
