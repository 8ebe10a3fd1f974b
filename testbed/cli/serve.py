"""`testbed provider`: the provider on its own, checked before it starts."""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from pathlib import Path
from typing import Annotated

from typer import Option

from labcore.credentials import TOKEN_ENV, is_loopback
from testbed.cli import checks
from testbed.cli.base import app, examples
from testbed.errors import SetupError, UsageError


@app.command(
    short_help="Run the provider on its own: an HTTP service with a durable effect log.",
    epilog=examples(
        "TESTBED_PROVIDER_TOKEN=$(openssl rand -hex 32) testbed provider --db effects.sqlite3",
        "testbed provider --db effects.sqlite3 --port 0          # a free port, printed",
        "testbed provider --host 0.0.0.0 --port 8080 --db /data/effects.sqlite3 --token-file /run/secrets/token",
    ),
)
def provider(
    db: Annotated[Path, Option("--db", metavar="PATH", help="SQLite file of the effect log (created if missing).")],
    port: Annotated[int, Option("--port", metavar="PORT", help="Port to listen on (0: a free one, printed).")] = 8080,
    host: Annotated[str, Option("--host", metavar="ADDR", help="Address to bind (loopback by default).")] = (
        "127.0.0.1"
    ),
    token_file: Annotated[
        Path | None,
        Option("--token-file", metavar="PATH", help=f"File holding the bearer token (else ${TOKEN_ENV})."),
    ] = None,
) -> int:
    """Run the provider on its own: an HTTP service with a durable effect log (its API: docs/reference/http-api.md)."""
    checks.finite("--port", port, 0, 65535)
    _check_db(db)
    token = _provider_token(token_file, host)
    from testbed.infra.provider_process import bind

    sock = bind(host, port)
    if token is None:  # once it serves: a port in use is the one line its refusal says
        print(f"testbed: warning: no token (${TOKEN_ENV}): every local user can call this provider", file=sys.stderr)
    from provider.server import serve

    # The server stops on SIGINT/SIGTERM, then raises the signal again (provider.server).
    with contextlib.suppress(KeyboardInterrupt):
        serve(port, db, host=host, token=token, sockets=[sock], access_log=True, announce="testbed provider")
    return 0


def _check_db(db: Path) -> None:
    checks.output_file("--db", db)
    if db.exists():
        try:
            with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
                conn.execute("PRAGMA schema_version").fetchone()
        except sqlite3.DatabaseError as exc:
            raise UsageError(f"--db {db}: not an effect log ({exc})") from None


def _provider_token(token_file: Path | None, host: str) -> str | None:
    """The standalone provider's token; none is allowed on loopback only (the caller warns)."""
    if token := checks.token("--token-file", token_file):
        return token
    if not is_loopback(host):
        raise SetupError(f"refusing to serve on {host} without a token: set ${TOKEN_ENV} or pass --token-file")
    return None
