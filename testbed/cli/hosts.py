"""The lab across hosts, on the command line: `testbed host`, `testbed redis`,
and the `--hosts` / `--provider-url` stack options of chaos, replay, load and explore."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from typer import Option

from labcore.credentials import TOKEN_ENV
from testbed.cli import checks
from testbed.cli.base import examples
from testbed.cli.options import PRIVATE_HELP, StackArgs
from testbed.errors import SetupError, UsageError
from testbed.experiment.selection import at_least
from testbed.infra.stack import PRIVATE_FLAG, RemoteOptions, require_password


def remote_options(args: StackArgs) -> RemoteOptions | None:
    if not args.hosts:
        if args.provider_url:
            raise UsageError("--provider-url needs --hosts (the workers must be where the provider is reachable)")
        return None
    if not args.provider_url:
        raise UsageError("--hosts needs --provider-url (or $TESTBED_PROVIDER_URL): the provider the hosts reach")
    if not args.provider_url.startswith(("http://", "https://")):
        raise UsageError(f"--provider-url must be an http(s) URL (got {args.provider_url!r})")
    if not args.redis_url:
        raise UsageError("--hosts needs --redis-url (or $REDIS_URL): the Redis the hosts are registered with")
    if args.provider_port:
        raise UsageError("--provider-port starts a provider: not with --hosts")
    return RemoteOptions(args.provider_url, checks.token("--provider-token-file", args.provider_token_file))


def host(
    redis_url: Annotated[
        str | None,
        Option("--redis-url", metavar="URL", envvar="REDIS_URL", help="The Redis the runs use (password included)."),
    ] = None,
    workers: Annotated[int, Option("--workers", metavar="N", help="RQ worker processes per run.")] = 2,
    name: Annotated[
        str | None,
        Option("--name", metavar="NAME", envvar="TESTBED_HOST_NAME", help="Unique host name (default: host-pid)."),
    ] = None,
    provider_token_file: Annotated[
        Path | None,
        Option(
            "--provider-token-file", metavar="PATH", help=f"The provider's token for the workers (else ${TOKEN_ENV})."
        ),
    ] = None,
    redis_private: Annotated[
        bool,
        Option(PRIVATE_FLAG, help=PRIVATE_HELP),
    ] = False,
) -> int:
    """Run a host daemon: starts and kills RQ workers for the runs that ask (testbed chaos --hosts)."""
    from testbed.host.daemon import default_name, run_host

    if not redis_url:
        raise UsageError("testbed host needs --redis-url (or $REDIS_URL)")
    at_least("--workers", workers)
    if name is not None and not name.replace("-", "").replace("_", "").isalnum():
        raise UsageError(f"--name must be letters, digits, - and _ (got {name!r})")
    token = checks.token("--provider-token-file", provider_token_file)
    if not redis_private:
        require_password(redis_url)
    if token is None:
        print(f"testbed: warning: no provider token (${TOKEN_ENV}): workers send none", file=sys.stderr)
    run_host(redis_url, name or default_name(), workers, token)
    return 0


def redis(
    bind: Annotated[str, Option("--bind", metavar="ADDRESS", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, Option("--port", metavar="PORT", help="Port to listen on.")] = 6379,
    datadir: Annotated[Path, Option("--dir", metavar="DIR", help="redis-server's working directory.")] = Path("."),
) -> int:
    """Run redis-server for a lab across hosts, with the password in $TESTBED_REDIS_PASSWORD."""
    from testbed.infra.redis_host import PASSWORD_ENV, exec_redis

    password = os.environ.get(PASSWORD_ENV, "")
    if len(password) < 16 or any(c.isspace() or c == '"' for c in password):
        raise UsageError(f"${PASSWORD_ENV} must hold a password of 16 or more characters, no spaces or quotes")
    if not 0 < port <= 65535:
        raise UsageError(f"--port must be a port number (got {port})")
    if not datadir.is_dir():
        raise SetupError(f"directory {datadir} does not exist")
    exec_redis(bind, port, password, datadir)


def register(app: typer.Typer) -> None:
    app.command(
        short_help="A host's RQ workers for the runs that ask (a lab across hosts).",
        epilog=examples("REDIS_URL=redis://:secret@redis-host:6379/0 testbed host --workers 2 --name host-a"),
    )(host)
    app.command(
        name="redis",
        short_help="redis-server on the network for a lab across hosts, its password from the environment.",
        epilog=examples("TESTBED_REDIS_PASSWORD=$(openssl rand -hex 24) testbed redis --bind 0.0.0.0 --port 6379"),
    )(redis)
